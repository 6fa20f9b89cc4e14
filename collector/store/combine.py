"""Combine the rounds of several sparkboard databases into one (`sparkboard combine`).

A round is written by one collector into one file (one writer per database), so rounds measured
at the same time on different GPUs or boxes land in different files; the published database is
their union. A round already in the destination is refused, never overwritten.

A published database leaves out the score dumps (every position's teacher-forced top-k: the
logits, nearly all of a round's bytes); its accuracy results stay. schema_meta names each round
published so, and those verdicts stand as stored (collector.judge.verdict refuses to re-judge
them without the dumps).
"""

from __future__ import annotations

from pathlib import Path

from collector.store import StoreError, open_store

DUMPS_LEFT_OUT = "score_dumps_left_out:"  # + round id: a schema_meta key of a published round


def combine_rounds(
    dst: str | Path, srcs: list[str | Path], without_dumps: bool = False
) -> list[str]:
    """Copy every row of each source into `dst` (created if missing); returns the round ids added.
    `without_dumps`: leave the score dumps out (a database to publish)."""
    added: list[str] = []
    store = open_store(dst)
    try:
        tables = [
            r[0]
            for r in store.query(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database() AND table_name <> 'schema_meta'"
            )
            if not (without_dumps and r[0] == "score_dumps")
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
                    # a round published without dumps stays so, wherever it is copied
                    con.execute(
                        "INSERT OR REPLACE INTO schema_meta SELECT * FROM src.schema_meta "
                        "WHERE starts_with(key, ?)",
                        [DUMPS_LEFT_OUT],
                    )
                    for r in rounds if without_dumps else []:
                        con.execute(
                            "INSERT OR REPLACE INTO schema_meta VALUES (?, 'yes')",
                            [DUMPS_LEFT_OUT + r],
                        )
            finally:
                store.con.execute("DETACH src")
            added += rounds
    finally:
        store.close()
    return added
