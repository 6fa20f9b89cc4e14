"""The site's extras beside the read model (collector.store.readout): the schema of the database.

Rounds, PRs and evaluations are read by `collector.store.readout.Readout`, the one read model the
CLI reports share; this module only adds what the data page shows (tables, columns, version).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from collector.store.readout import Readout, Row, connect, recorded_version, schema_tables

__all__ = ["SiteData", "connect", "load"]


@dataclass
class SiteData(Readout):
    tables: list[Row] = field(default_factory=list)  # table name, column rows
    schema_version: str | None = None


def load(path: str | Path) -> SiteData:
    con = connect(path)
    try:
        rd = Readout.from_connection(con)
        base = {f.name: getattr(rd, f.name) for f in fields(Readout) if f.name != "round_by_id"}
        return SiteData(**base, tables=schema_tables(con), schema_version=recorded_version(con))
    finally:
        con.close()
