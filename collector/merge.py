"""Merge the rounds of several sparkboard databases into one.

A round is written by one collector into one file (one writer per database), so rounds measured
at the same time on different GPUs or boxes land in different files; the published database is
their union. A round already in the destination is refused, never overwritten.
"""

from __future__ import annotations

from pathlib import Path

from collector.store import StoreError, open_store


def merge_rounds(dst: str | Path, srcs: list[str | Path]) -> list[str]:
    """Copy every row of each source into `dst` (created if missing); returns the round ids added."""
    added: list[str] = []
    store = open_store(dst)
    try:
        tables = [
            r[0]
            for r in store.query(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database() AND table_name <> 'schema_meta'"
            )
        ]
        for src in srcs:
            if Path(src).resolve() == Path(dst).resolve():
                raise StoreError(f"{src} is the destination itself")
            open_store(src, read_only=True).close()  # same schema version, or a clear refusal
            quoted = Path(src).as_posix().replace("'", "''")
            store.con.execute(f"ATTACH '{quoted}' AS src (READ_ONLY)")
            try:
                rounds = [r[0] for r in store.query("SELECT round_id FROM src.rounds")]
                clash = store.query(
                    "SELECT round_id FROM rounds WHERE round_id IN (SELECT round_id FROM src.rounds)"
                )
                if clash:
                    raise StoreError(f"{src}: round {clash[0][0]} is already in {dst}")
                with store.transaction() as con:
                    for t in tables:
                        con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM src.{t}")
            finally:
                store.con.execute("DETACH src")
            added += rounds
    finally:
        store.close()
    return added
