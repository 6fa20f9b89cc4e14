"""The site's extras beside the read model (collector.store.readout): the schema of the database.

Rounds, PRs and evaluations are read by `collector.store.readout.Readout`, the one read model the
CLI reports share; this module only adds what the data page shows (tables, columns, version).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import duckdb

from collector.store.readout import Readout, Row, connect

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
        return SiteData(**base, tables=_tables(con), schema_version=_version(con))
    finally:
        con.close()


def _tables(con: duckdb.DuckDBPyConnection) -> list[Row]:
    cur = con.execute(
        """
        SELECT table_name, column_name, data_type, is_nullable
        FROM duckdb_columns()
        WHERE NOT internal AND schema_name = 'main' AND database_name = current_database()
          AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE NOT internal)
        ORDER BY table_name, column_index
        """
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _version(con: duckdb.DuckDBPyConnection) -> str | None:
    has = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_meta' "
        "AND schema_name = 'main'"
    ).fetchone()[0]
    if not has:
        return None
    row = con.execute("SELECT value FROM schema_meta WHERE key = 'version'").fetchone()
    return row[0] if row else None
