"""What a database file holds beside its rounds: its tables and their columns, the schema
version it records, the newest time it recorded (the site's data page and build date); opening
one read-only (`connect`) and whether a table has columns an older schema lacks."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb

Row = dict


def schema_tables(con: duckdb.DuckDBPyConnection) -> list[Row]:
    """Every table's columns in order: table_name, column_name, data_type, is_nullable."""
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


def recorded_version(con: duckdb.DuckDBPyConnection) -> str | None:
    """The schema version the file records; None in a file without schema_meta."""
    has = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_meta' "
        "AND schema_name = 'main'"
    ).fetchone()[0]
    if not has:
        return None
    row = con.execute("SELECT value FROM schema_meta WHERE key = 'version'").fetchone()
    return row[0] if row else None


def newest_time(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The newest time any round recorded (created or finished); None: none, or no rounds."""
    try:
        row = con.execute(
            "SELECT max(greatest(created_at, coalesce(finished_at, created_at))) FROM rounds"
        ).fetchone()
    except duckdb.Error:
        return None
    return row[0] if row and row[0] else None


def connect(path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open read-only; a missing file is an error, never a new empty database."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    return duckdb.connect(str(path), read_only=True)


def has_columns(con: duckdb.DuckDBPyConnection, table: str, *columns: str) -> bool:
    """Whether `table` has every one of `columns` (a database of an older schema may not)."""
    have = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
            "AND schema_name = 'main' AND database_name = current_database()",
            [table],
        ).fetchall()
    }
    return set(columns) <= have
