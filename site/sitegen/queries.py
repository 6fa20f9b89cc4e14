"""Read a sparkboard database into plain Python structures, in a few batched queries.

The site only reads. Each table is fetched once (ordered, so the same database gives the same
structures) and grouped in Python; the page builders never touch SQL. Columns the collector
adds later are ignored; columns it has not written yet read as None.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from collector.cost import SESSIONS_SQL, RoundCost, round_cost
from collector.manifest import round_kind

Row = dict[str, Any]


@dataclass
class Evaluation:
    """One PR as seen in one round: what was measured and what was decided."""

    round_id: str
    pr: int
    info: Row  # the prs row
    candidate: Row | None
    verdict: Row | None
    comparisons: list[Row] = field(default_factory=list)
    gates: list[Row] = field(default_factory=list)
    accuracy: list[Row] = field(default_factory=list)
    prefill: list[Row] = field(default_factory=list)  # per model, prefix, side (averaged)
    failures: list[Row] = field(default_factory=list)  # sessions that did not end 'ok'
    strikes: list[Row] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.verdict["label"] if self.verdict else "pending"

    @property
    def commit(self) -> str | None:
        if self.verdict and self.verdict.get("commit"):
            return self.verdict["commit"]
        return self.candidate.get("pr_commit") if self.candidate else None


@dataclass
class SiteData:
    rounds: list[Row]  # oldest first
    evaluations: dict[tuple[str, int], Evaluation]
    by_round: dict[str, list[Evaluation]]
    by_pr: dict[int, list[Evaluation]]  # oldest round first
    main_trend: list[Row]  # round_id, model, axis, value (median of main's samples), n
    main_accuracy: dict[str, list[Row]]  # round -> pr 0 calibration rows
    costs: dict[str, RoundCost]  # round -> device time of its sessions
    # A/A rounds only: (round, model, axis) -> (slot, median) of each of main's sessions, the
    # evidence the verdict's noise is computed from
    main_sessions: dict[tuple[str, str, str], list[tuple[int, float]]]
    tables: list[Row]  # table name, column rows
    schema_version: str | None


def _dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[Row]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main'",
            [table],
        ).fetchone()[0]
    )


def connect(path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open read-only; a missing file is an error, never a new empty database."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    return duckdb.connect(str(path), read_only=True)


def _fill_devices(con: duckdb.DuckDBPyConnection, rounds: list[Row]) -> None:
    """A round whose device was never recorded (its last session cut off before it finished)
    shows the device and driver of its first main session that recorded one."""
    missing = [r for r in rounds if not r.get("device_name")]
    if not missing:
        return
    first: dict[str, Row] = {}
    for row in _dicts(
        con,
        """
        SELECT round_id, device_name, driver FROM sessions
        WHERE side = 'main' AND device_name IS NOT NULL AND list_contains(?, round_id)
        ORDER BY round_id, started_at, slot, session_id
        """,
        [[r["round_id"] for r in missing]],
    ):
        first.setdefault(row["round_id"], row)
    for r in missing:
        seen = first.get(r["round_id"])
        if seen:
            r["device_name"] = seen["device_name"]
            r["driver"] = r.get("driver") or seen["driver"]


def load(path: str | Path) -> SiteData:
    con = connect(path)
    try:
        return _load(con)
    finally:
        con.close()


def _load(con: duckdb.DuckDBPyConnection) -> SiteData:
    rounds = _dicts(con, "SELECT * FROM rounds ORDER BY created_at, round_id")
    for r in rounds:
        try:
            r["policy"] = json.loads(r["policy_json"]) if r.get("policy_json") else {}
        except (TypeError, ValueError):
            r["policy"] = {}
    order = {r["round_id"]: i for i, r in enumerate(rounds)}
    _fill_devices(con, rounds)

    evaluations: dict[tuple[str, int], Evaluation] = {}
    for row in _dicts(con, "SELECT * FROM prs ORDER BY round_id, pr"):
        key = (row["round_id"], row["pr"])
        evaluations[key] = Evaluation(row["round_id"], row["pr"], row, None, None)

    def attach(sql: str, put) -> None:
        for row in _dicts(con, sql):
            ev = evaluations.get((row["round_id"], row["pr"]))
            if ev is not None:
                put(ev, row)

    attach(
        "SELECT * FROM candidates ORDER BY round_id, pr", lambda e, r: setattr(e, "candidate", r)
    )
    attach("SELECT * FROM verdicts ORDER BY round_id, pr", lambda e, r: setattr(e, "verdict", r))
    attach(
        "SELECT * FROM comparisons ORDER BY round_id, pr, role DESC, model, axis",
        lambda e, r: e.comparisons.append(r),
    )
    attach("SELECT * FROM gates ORDER BY round_id, pr, gate", lambda e, r: e.gates.append(r))
    attach(
        "SELECT * FROM accuracy WHERE pr <> 0 ORDER BY round_id, pr, model",
        lambda e, r: e.accuracy.append(r),
    )
    # Prefill-path checks, mean over a side's sessions per model and prefix. Main's checks
    # (pr = 0) are the round's, shared by every PR of it.
    attach(
        """
        SELECT round_id, pr, model, prefix, side, avg(top1) AS top1, avg(kl_mean) AS kl_mean,
               max(kl_max) AS kl_max, count(*) AS runs
        FROM prefill_checks WHERE pr <> 0
        GROUP BY ALL ORDER BY round_id, pr, model, prefix, side
        """,
        lambda e, r: e.prefill.append(r),
    )
    main_prefill: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in _dicts(
        con,
        """
        SELECT round_id, model, prefix, 'main' AS side, avg(top1) AS top1,
               avg(kl_mean) AS kl_mean, max(kl_max) AS kl_max, count(*) AS runs
        FROM prefill_checks WHERE pr = 0
        GROUP BY ALL ORDER BY round_id, model, prefix
        """,
    ):
        main_prefill[(row["round_id"], row["model"])].append(row)
    for ev in evaluations.values():
        models = sorted({p["model"] for p in ev.prefill})
        for model in models:
            ev.prefill.extend(main_prefill.get((ev.round_id, model), []))
    attach(
        """
        SELECT round_id, pr, session_id, kind, model, status, fault, exit_code, detail, log_tail
        FROM sessions WHERE pr <> 0 AND status <> 'ok' ORDER BY round_id, pr, session_id
        """,
        lambda e, r: e.failures.append(r),
    )
    strikes = _dicts(con, "SELECT * FROM strikes ORDER BY pr, commit, failure_key, round_id")
    for s in strikes:
        ev = evaluations.get((s["round_id"], s["pr"]))
        if ev is not None:
            ev.strikes.append(s)

    main_trend = _dicts(
        con,
        """
        SELECT round_id, model, axis, median(value) AS value, min(value) AS lo,
               max(value) AS hi, count(*) AS n
        FROM samples WHERE side = 'main'
        GROUP BY ALL ORDER BY round_id, model, axis
        """,
    )
    main_accuracy: dict[str, list[Row]] = defaultdict(list)
    for row in _dicts(con, "SELECT * FROM accuracy WHERE pr = 0 ORDER BY round_id, model"):
        main_accuracy[row["round_id"]].append(row)

    sessions: dict[str, list[Row]] = defaultdict(list)
    for row in _dicts(con, SESSIONS_SQL.format(where="")):
        sessions[row["round_id"]].append(row)
    costs = {r["round_id"]: round_cost(r["round_id"], sessions[r["round_id"]]) for r in rounds}
    # What each round is for ("round" or "aa", main against itself), from its manifest.
    labels: dict[str, list[list[str]]] = defaultdict(list)
    for ev in evaluations.values():
        labels[ev.round_id].append(list(ev.info.get("labels") or []))
    for r in rounds:
        r["kind"] = round_kind(r.get("manifest_toml"), labels.get(r["round_id"]))
    main_sessions: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    aa = [r["round_id"] for r in rounds if r["kind"] == "aa"]
    if aa:
        # the sessions the verdict reads (collector/verdict.py: RoundData), one median each
        for row in _dicts(
            con,
            """
            SELECT s.round_id, s.model, s.axis, x.slot, median(s.value) AS value
            FROM samples s JOIN sessions x USING (session_id)
            WHERE s.side = 'main' AND x.status IN ('ok', 'implausible', 'incomplete')
              AND list_contains(?, s.round_id)
            GROUP BY s.round_id, s.model, s.axis, s.session_id, x.slot
            ORDER BY s.round_id, s.model, s.axis, x.slot
            """,
            [aa],
        ):
            main_sessions[(row["round_id"], row["model"], row["axis"])].append(
                (row["slot"], row["value"])
            )

    tables = _dicts(
        con,
        """
        SELECT table_name, column_name, data_type, is_nullable
        FROM duckdb_columns()
        WHERE NOT internal AND schema_name = 'main' AND database_name = current_database()
          AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE NOT internal)
        ORDER BY table_name, column_index
        """,
    )
    version = None
    if _has(con, "schema_meta"):
        row = con.execute("SELECT value FROM schema_meta WHERE key = 'version'").fetchone()
        version = row[0] if row else None

    by_round: dict[str, list[Evaluation]] = defaultdict(list)
    by_pr: dict[int, list[Evaluation]] = defaultdict(list)
    for ev in sorted(evaluations.values(), key=lambda e: (order.get(e.round_id, -1), e.pr)):
        by_round[ev.round_id].append(ev)
        by_pr[ev.pr].append(ev)
    return SiteData(
        rounds=rounds,
        evaluations=evaluations,
        by_round=dict(by_round),
        by_pr=dict(sorted(by_pr.items())),
        main_trend=main_trend,
        main_accuracy=dict(main_accuracy),
        costs=costs,
        main_sessions=dict(main_sessions),
        tables=tables,
        schema_version=version,
    )
