"""The DuckDB store: open, version check and migration, one writer at a time, transactions.

The schema lives in one file, collector/store/schema.sql. Its version is SCHEMA_VERSION; an older
database is migrated forward on open (MIGRATIONS), a newer or unknown one is refused with a
message that says what to do. DuckDB itself refuses a second process that opens the same file
for writing; we turn its lock error into one clear line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import duckdb

SCHEMA_VERSION = 5

# Statements that take a database from version N to N + 1, run before schema.sql (whose
# CREATE TABLE IF NOT EXISTS then adds any new table).
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS attempts INTEGER",
        "ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS n_main INTEGER",
        "ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS n_pr INTEGER",
    ],
    2: ["ALTER TABLE sessions ADD COLUMN IF NOT EXISTS seed BIGINT"],
    3: [
        "ALTER TABLE rounds ADD COLUMN IF NOT EXISTS shards INTEGER",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS shard INTEGER DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS gpu_index INTEGER",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS gpu_uuid VARCHAR",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS host VARCHAR",
    ],
    4: [
        "ALTER TABLE rounds ADD COLUMN IF NOT EXISTS sandbox VARCHAR",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS canary_before_s DOUBLE",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS canary_after_s DOUBLE",
        # the primary key gains `side` (a PR session holds both engines' samples): a new table
        "ALTER TABLE samples RENAME TO samples_v4",
        "CREATE TABLE samples (session_id VARCHAR NOT NULL, round_id VARCHAR NOT NULL, "
        "side VARCHAR NOT NULL, pr INTEGER NOT NULL, model VARCHAR NOT NULL, "
        "axis VARCHAR NOT NULL, rep INTEGER NOT NULL, value DOUBLE NOT NULL, "
        "PRIMARY KEY (session_id, side, axis, rep))",
        "INSERT INTO samples SELECT session_id, round_id, side, pr, model, axis, rep, value "
        "FROM samples_v4",
        "DROP TABLE samples_v4",
    ],
}


class StoreError(Exception):
    """A database that cannot be used, described in one line."""


def schema_sql() -> str:
    return resources.files("collector.store").joinpath("schema.sql").read_text(encoding="utf-8")


class Store:
    """One open connection to the database file."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        self.con = con
        self.path = path

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Everything inside commits together or not at all."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def query(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self.con.execute(sql, list(params)).fetchall()

    def query_dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        cur = self.con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as e:
        msg = str(e)
        if "lock" in msg.lower():
            pid = re.search(r"PID (\d+)", msg)
            who = f"process {pid.group(1)}" if pid else "another process"
            raise StoreError(
                f"{path} is in use by {who} (another sparkboard collector?); "
                "only one collector may write a database at a time: wait for it to finish"
            ) from None
        raise StoreError(f"cannot open {path}: {msg.splitlines()[0]}") from None
    except duckdb.Error as e:
        raise StoreError(f"cannot open {path}: {str(e).splitlines()[0]}") from None


def _version(con: duckdb.DuckDBPyConnection) -> int | None:
    tables = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    if "schema_meta" not in tables:
        if tables:
            raise StoreError("not a sparkboard database (no schema_meta table)")
        return None
    row = con.execute("SELECT value FROM schema_meta WHERE key = 'version'").fetchone()
    if row is None:
        raise StoreError("not a sparkboard database (schema_meta has no version)")
    try:
        return int(row[0])
    except ValueError:
        raise StoreError(f"unreadable schema version {row[0]!r}") from None


def open_store(path: str | Path, read_only: bool = False) -> Store:
    """Open (creating or migrating when writable) a sparkboard database."""
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"no database at {path}")
    con = _connect(path, read_only)
    try:
        version = _version(con)
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {version}, newer than this sparkboard's "
                f"{SCHEMA_VERSION}: upgrade sparkboard to read it"
            )
        if version is not None and version < 1:
            raise StoreError(f"{path} has unknown schema version {version}; refusing to touch it")
        if version != SCHEMA_VERSION:
            if read_only:
                raise StoreError(
                    f"{path} has schema version {version}, this sparkboard needs "
                    f"{SCHEMA_VERSION}: open it once for writing (e.g. sparkboard verdict) to migrate"
                )
            _create_or_migrate(con, version)
    except BaseException:
        con.close()
        raise
    return Store(con, path)


def _create_or_migrate(con: duckdb.DuckDBPyConnection, version: int | None) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        if version is not None:
            for v in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[v]:
                    con.execute(stmt)
        con.execute(schema_sql())
        con.execute(
            "INSERT OR REPLACE INTO schema_meta VALUES ('version', ?)", [str(SCHEMA_VERSION)]
        )
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
