"""Which round a command means when it is not told (`show`, `comment`, `cost`, `verdict`):
the newest leaderboard round, or the newest that measured a PR; A/A rounds only by id."""

from __future__ import annotations

from collections import defaultdict

import duckdb

from collector.manifest import round_kind
from collector.store.readout_model import ReadoutError, Row


def _dicts(con: duckdb.DuckDBPyConnection, sql: str) -> list[Row]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def pick_round(
    con: duckdb.DuckDBPyConnection, round_id: str | None = None, pr: int | None = None
) -> str:
    """The round a command means: `round_id` when given (it must exist); else, with a PR, the
    newest round that measured that PR (a leaderboard round before an A/A round); else
    the newest leaderboard round (A/A rounds only when asked for by id, or when there is no
    other round)."""
    rounds = _dicts(con, "SELECT round_id, manifest_toml FROM rounds ORDER BY created_at, round_id")
    if round_id is not None:
        if not any(r["round_id"] == round_id for r in rounds):
            raise ReadoutError(f"no round {round_id!r} in the database")
        return round_id
    if not rounds:
        raise ReadoutError("no rounds in the database")
    labels: dict[str, list[list[str]]] = defaultdict(list)
    has: dict[str, set[int]] = defaultdict(set)
    for row in _dicts(con, "SELECT round_id, pr, labels FROM prs ORDER BY round_id, pr"):
        labels[row["round_id"]].append(list(row["labels"] or []))
        has[row["round_id"]].add(row["pr"])
    candidates = [r for r in rounds if pr is None or pr in has[r["round_id"]]]
    if not candidates:
        raise ReadoutError(f"no round measured PR #{pr}")
    # newest last; a leaderboard round wins over any calibration round
    ranked = sorted(
        enumerate(candidates),
        key=lambda p: (
            round_kind(p[1]["manifest_toml"], labels[p[1]["round_id"]]) == "round",
            p[0],
        ),
    )
    return ranked[-1][1]["round_id"]
