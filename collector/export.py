"""Export one round's rows of every table as Parquet, CSV or JSON (one file per table)."""

from __future__ import annotations

from pathlib import Path

from collector.store import Store

TABLES = (
    "rounds",
    "prs",
    "candidates",
    "sessions",
    "samples",
    "score_dumps",
    "accuracy",
    "prefill_checks",
    "comparisons",
    "gates",
    "verdicts",
    "strikes",
)
FORMATS = {
    "parquet": "(FORMAT parquet)",
    "csv": "(FORMAT csv, HEADER true)",
    "json": "(FORMAT json, ARRAY true)",
}


def export_round(store: Store, round_id: str, fmt: str, out_dir: Path) -> list[Path]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if not store.query("SELECT 1 FROM rounds WHERE round_id = ?", [round_id]):
        raise LookupError(f"no round {round_id!r} in {store.path}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        path = out_dir / f"{table}.{fmt}"
        # the path is ours (a fixed table name under the chosen folder); quote it for SQL anyway
        target = str(path).replace("'", "''")
        store.con.execute(
            f"COPY (SELECT * FROM {table} WHERE round_id = ?) TO '{target}' {FORMATS[fmt]}",
            [round_id],
        )
        written.append(path)
    return written
