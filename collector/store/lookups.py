"""What the round loop, the verdict and the demo look up in a stored round as it goes: which round
a file holds, what is finished, what stopped a PR, whether main failed beside it, the shards.
Small questions with one query each; the writer records the answers' other side."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from collector.store.db import Store


def round_manifest(store: Store, round_id: str) -> tuple[str, str] | None:
    """(main's commit, the manifest's text) the round was started with; None: no such round."""
    return _round_manifest(store.con, round_id)


def round_manifest_in(path: Path, round_id: str) -> tuple[str, str] | None:
    """The same, of a file opened read-only at whatever schema version it has (a published or
    an earlier local copy the demo may measure into); duckdb.Error when it is no database."""
    with _read_only(path) as con:
        return _round_manifest(con, round_id)


def _round_manifest(con: duckdb.DuckDBPyConnection, round_id: str) -> tuple[str, str] | None:
    row = con.execute(
        "SELECT main_commit, manifest_toml FROM rounds WHERE round_id = ?", [round_id]
    ).fetchone()
    return (row[0], row[1]) if row else None


@contextmanager
def _read_only(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A file opened read-only as it is, without the store's version check or migration."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        yield con
    finally:
        con.close()


def finished_sessions(store: Store, round_id: str, statuses: tuple[str, ...]) -> set[str]:
    """The session ids of the round that ended in one of `statuses` through no fault of the box."""
    rows = store.query(
        "SELECT session_id FROM sessions WHERE round_id = ? AND fault <> 'infra' "
        "AND list_contains(?, status)",
        [round_id, list(statuses)],
    )
    return {r[0] for r in rows}


# the sessions that say where a round was timed first: timed kinds, then main's, then in order
TIMED_FIRST = "kind IN ('score', 'prefill-check'), side <> 'main', started_at, slot, session_id"


def round_device(store: Store, round_id: str) -> tuple[str | None, str | None]:
    """(device name, driver) the round was timed on: its first timed session that ended ok (a
    served engine's scoring tool may run elsewhere than its timed servers), else main's first;
    (None, None) without one."""
    rows = store.query(
        "SELECT device_name, driver FROM sessions WHERE round_id = ? AND status = 'ok' "
        f"AND device_name IS NOT NULL ORDER BY {TIMED_FIRST} LIMIT 1",
        [round_id],
    )
    return (rows[0][0], rows[0][1]) if rows else (None, None)


def stored_shards(store: Store, round_id: str) -> int | None:
    """The shards the round was cut into when it started; None: not fixed yet."""
    rows = store.query("SELECT shards FROM rounds WHERE round_id = ?", [round_id])
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def has_sessions(store: Store, round_id: str) -> bool:
    return bool(store.query("SELECT 1 FROM sessions WHERE round_id = ? LIMIT 1", [round_id]))


def first_stop(
    store: Store, round_id: str, pr: int, statuses: list[str]
) -> tuple[str, str, str] | None:
    """(kind, model, status) of the PR's earliest session that ended in one of `statuses`."""
    rows = store.query(
        "SELECT kind, model, status FROM sessions WHERE round_id = ? AND side = 'pr' AND pr = ? "
        "AND list_contains(?, status) ORDER BY slot, started_at LIMIT 1",
        [round_id, pr, statuses],
    )
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def main_failed(store: Store, round_id: str, shard: int, kind: str, model: str) -> bool:
    """Whether main's own session of this kind and model failed in the shard."""
    return bool(
        store.query(
            "SELECT 1 FROM sessions WHERE round_id = ? AND shard = ? AND side = 'main' "
            "AND kind = ? AND model = ? AND status <> 'ok'",
            [round_id, shard, kind, model],
        )
    )


def status_counts(store: Store, round_id: str) -> dict[str, int]:
    rows = store.query(
        "SELECT status, count(*) FROM sessions WHERE round_id = ? GROUP BY status ORDER BY status",
        [round_id],
    )
    return {str(s): int(n) for s, n in rows}


def round_profile(store: Store, round_id: str) -> str | None:
    rows = store.query("SELECT profile FROM rounds WHERE round_id = ?", [round_id])
    return rows[0][0] if rows else None


def has_round(path: Path, round_id: str) -> bool:
    """Whether the file (opened read-only, any schema version) holds the round; duckdb.Error
    when it is no database."""
    with _read_only(path) as con:
        return bool(con.execute("SELECT 1 FROM rounds WHERE round_id = ?", [round_id]).fetchall())


def pr_shards(store: Store, round_id: str) -> dict[int, int]:
    """Each measured PR's shard (its first, should it have several)."""
    rows = store.query(
        "SELECT pr, min(shard) FROM sessions WHERE round_id = ? AND side = 'pr' GROUP BY pr",
        [round_id],
    )
    return {int(p): int(s) for p, s in rows}


def prs_with_sessions_from(store: Store, round_id: str, slot: int) -> set[int]:
    """The PRs with a session at or after `slot` (the confirmation sessions)."""
    rows = store.query(
        "SELECT DISTINCT pr FROM sessions WHERE round_id = ? AND side = 'pr' AND slot >= ?",
        [round_id, slot],
    )
    return {int(r[0]) for r in rows}


def flagged(store: Store, key: str) -> bool:
    """Whether the file carries the schema_meta flag `key` (e.g. published without dumps)."""
    return bool(store.query("SELECT 1 FROM schema_meta WHERE key = ?", [key]))
