"""Export one round's rows of every table as Parquet, CSV or JSON (one file per table): the one
export, behind `sparkboard export` and the site's data downloads (site/sitegen/build.py)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from collector.store import Store

# Every table with a round_id, in the order a page lists them
TABLES = (
    "rounds",
    "prs",
    "candidates",
    "verdicts",
    "comparisons",
    "gates",
    "accuracy",
    "prefill_checks",
    "sessions",
    "samples",
    "score_dumps",
    "strikes",
)
FORMATS = {
    "parquet": "FORMAT parquet, COMPRESSION zstd",
    "csv": "FORMAT csv, HEADER true",
    "json": "FORMAT json, ARRAY true",
}


def export_tables(
    con: duckdb.DuckDBPyConnection, round_id: str, out_dir: Path, formats: list[str]
) -> dict[str, list[Path]]:
    """Each table's rows of `round_id` in each format, under `out_dir`: {table: [paths]}. Rows
    in a fixed order and one writer thread, so the same rows give the same bytes. A table this
    database lacks (an older schema's) is left out."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format {unknown[0]!r}")
    present = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_columns() WHERE column_name = 'round_id' "
            "AND schema_name = 'main'"
        ).fetchall()
    }
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET threads = 1")
    out_dir.mkdir(parents=True, exist_ok=True)
    lit = "'" + round_id.replace("'", "''") + "'"
    written: dict[str, list[Path]] = {}
    for table in TABLES:
        if table not in present:
            continue
        query = f"SELECT * FROM {table} WHERE round_id = {lit} ORDER BY ALL"
        for fmt in formats:
            path = out_dir / f"{table}.{fmt}"
            # the path is ours (a fixed table name under the chosen folder); quoted for SQL anyway
            target = str(path).replace("'", "''")
            con.execute(f"COPY ({query}) TO '{target}' ({FORMATS[fmt]})")
            written.setdefault(table, []).append(path)
    return written


def export_round(store: Store, round_id: str, fmt: str, out_dir: Path) -> list[Path]:
    """`sparkboard export`: one round in one format."""
    if not store.query("SELECT 1 FROM rounds WHERE round_id = ?", [round_id]):
        raise LookupError(f"no round {round_id!r} in {store.path}")
    return [
        p for paths in export_tables(store.con, round_id, out_dir, [fmt]).values() for p in paths
    ]
