"""Every write of a round's judgement to the store: one function per kind of record.

The rules (verdict.py, gates/) compute; this module alone turns their results into rows, each
public function one transaction. A round's derived tables (comparisons, gates, verdicts,
accuracy) are replaced whole, so judging a round again leaves no stale row; strikes are kept
across rounds (INSERT OR IGNORE: judging a round twice counts it once).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb

from collector.store import Store

if TYPE_CHECKING:
    from collector.accuracy import AccuracyResult
    from collector.verdict import Comparison, Verdict

Connection = duckdb.DuckDBPyConnection
DERIVED_TABLES = ("comparisons", "gates", "verdicts", "accuracy")


def set_round_policy(store: Store, round_id: str, policy_json: str) -> None:
    """The resolved policy a round is judged under from now on."""
    with store.transaction() as con:
        con.execute("UPDATE rounds SET policy_json = ? WHERE round_id = ?", [policy_json, round_id])


def write_verdicts(
    store: Store,
    round_id: str,
    verdicts: list[Verdict],
    calibration_rows: Iterable[tuple[int, str, AccuracyResult]],
    decided_at: datetime,
) -> None:
    """A round's judgement in one transaction: its derived tables replaced, strikes added.
    `calibration_rows`: (0, model, result) of main scored against itself."""
    with store.transaction() as con:
        for table in DERIVED_TABLES:
            con.execute(f"DELETE FROM {table} WHERE round_id = ?", [round_id])
        for pr, model, acc in [*calibration_rows, *(a for v in verdicts for a in v.accuracy)]:
            _accuracy(con, round_id, pr, model, acc)
        for v in verdicts:
            for c in v.comparisons:
                _comparison(con, round_id, v.pr, c)
            for g in v.gates:
                con.execute(
                    "INSERT INTO gates VALUES (?, ?, ?, ?, ?)",
                    [round_id, v.pr, g.gate, g.status, g.reason],
                )
            _verdict(con, round_id, v, decided_at)
            for s in v.strikes:
                con.execute("INSERT OR IGNORE INTO strikes VALUES (?, ?, ?, ?, ?)", list(s))


def _accuracy(con: Connection, round_id: str, pr: int, model: str, acc: AccuracyResult) -> None:
    con.execute(
        "INSERT INTO accuracy VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [round_id, pr, model, acc.n_tokens, acc.top1, acc.kl, acc.ppl_main, acc.ppl_pr],
    )


COMPARISON_COLUMNS = [
    "model",
    "role",
    "axis",
    "main_value",
    "pr_value",
    "delta",
    "ci_low",
    "ci_high",
    "noise",
    "tier",
    "significant",
    "below_floor",
    "implausible",
    "n_main",
    "n_pr",
]


def _comparison(con: Connection, round_id: str, pr: int, c: Comparison) -> None:
    cols = ", ".join(COMPARISON_COLUMNS)
    marks = ", ".join("?" * (len(COMPARISON_COLUMNS) + 2))
    con.execute(
        f"INSERT INTO comparisons (round_id, pr, {cols}) VALUES ({marks})",
        [round_id, pr, *(getattr(c, col) for col in COMPARISON_COLUMNS)],
    )


def _verdict(con: Connection, round_id: str, v: Verdict, decided_at: datetime) -> None:
    b = v.best
    con.execute(
        "INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            round_id,
            v.pr,
            v.commit,
            v.label,
            b.model if b else None,
            b.axis if b else None,
            b.delta if b else None,
            b.ci_low if b else None,
            b.ci_high if b else None,
            v.reason,
            v.merge_first,
            decided_at,
        ],
    )
