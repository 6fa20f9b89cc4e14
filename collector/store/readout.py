"""The read model of a sparkboard database: how a stored round is read, in one place.

    rd = Readout.load("data/sparkboard.duckdb")        # or Readout.from_connection(con)
    rnd = rd.round_by_id["2026-11-30-h200"]            # Round: kind, device, ResolvedPolicy
    ev = rd.evaluation("2026-11-30-h200", 201)         # Evaluation: Verdict, Comparisons, Gates …
    rid = pick_round(con, round_id=None, pr=201)       # which round a command means by default

`show`/`comment` (collector/report/) and every site page read rounds through this module; a
verdict, its comparisons and gates come back as the records the verdict made (results.py).
Each table is fetched once, ordered, and grouped in Python: a thousand PRs are a handful of
queries. Columns added later are ignored; columns not yet written (an older schema) read as
None. Its types live in readout_model.py, the stored policy's reading in stored_policy.py, a
round's rows as files in export.py, all importable from here; beside the rounds it reads the A/A
rounds' pairs (`aa_pairs`) and every round's canary (`canaries`). Rules are never re-derived
here: a round is shown under the `ResolvedPolicy` it was judged under, with the stored
significance and tiers, and its kind from `collector.manifest.round_kind`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from collector.results import AccuracyResult, Pair, SessionRecord, Strike
from collector.store.catalog import (
    connect,
    has_columns,
    newest_time,
    recorded_version,
    schema_tables,
)
from collector.store.cost import SESSIONS_SQL, RoundCost, round_cost
from collector.store.db import schema_sql
from collector.store.evidence import read_pairs
from collector.store.export import FORMATS as EXPORT_FORMATS
from collector.store.export import export_tables
from collector.store.lookups import TIMED_FIRST
from collector.store.readout_model import (
    STATUS_ICONS,
    UNKNOWN_ICON,
    Evaluation,
    PrefillCheck,
    ReadoutError,
    Round,
    Row,
    accuracy_of,
    accuracy_rows,
    as_stored,
    axis_key,
    comparison_of,
    gate_key,
    gate_of,
    real_weights,
    round_of,
    row_of,
    verdict_of,
    verdict_row,
)
from collector.store.stored_policy import prefill_bars, stored_policy
from collector.store.which_round import pick_round

__all__ = [
    "STATUS_ICONS",
    "UNKNOWN_ICON",
    "EXPORT_FORMATS",
    "Evaluation",
    "Pair",
    "PrefillCheck",
    "Readout",
    "ReadoutError",
    "Round",
    "Row",
    "accuracy_rows",
    "as_stored",
    "axis_key",
    "connect",
    "export_tables",
    "gate_key",
    "pick_round",
    "prefill_bars",
    "newest_time",
    "real_weights",
    "row_of",
    "verdict_row",
    "recorded_version",
    "schema_tables",
    "schema_sql",
    "stored_policy",
]

# --- the model (Round and Evaluation: collector/store/readout_model.py) -----------------------------


@dataclass
class Readout:
    rounds: list[Round]  # oldest first
    evaluations: dict[tuple[str, int], Evaluation]
    by_round: dict[str, list[Evaluation]]  # by PR number
    by_pr: dict[int, list[Evaluation]]  # oldest round first
    main_trend: list[Row]  # round_id, model, axis, value (median of main's samples), lo, hi, n
    main_accuracy: dict[str, dict[str, AccuracyResult]]  # round -> model -> main against main
    costs: dict[str, RoundCost]  # round -> device time of its sessions
    # A/A rounds only: (round, PR, model, axis) -> the pairs (slot, main's value, the PR's) of
    # the PR's speed sessions, main's engine timed beside the PR's (one per repetition; the same
    # rep of both sides in one session), the evidence the verdict's noise is computed from
    # (collector.judge.stats.session_spread). A round stored before paired sessions has none.
    aa_pairs: dict[tuple[str, int, str, str], list[Pair]] = field(default_factory=dict)
    # round -> its sessions with a canary (a fixed workload timed right before and after each
    # speed session), by started_at: session_id, side, pr, slot, kind, model, started_at,
    # status, canary_before_s, canary_after_s (seconds). None before the canary was recorded.
    canaries: dict[str, list[Row]] = field(default_factory=dict)
    # rounds on several GPUs only: round -> main's median per GPU (shard, host, gpu_index,
    # gpu_uuid), model and axis, with its n; a calibration figure of the GPUs, never a verdict's
    main_by_gpu: dict[str, list[Row]] = field(default_factory=dict)
    round_by_id: dict[str, Round] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.round_by_id = {r.round_id: r for r in self.rounds}

    @classmethod
    def load(cls, path: str | Path, rounds: list[str] | None = None) -> Readout:
        con = connect(path)
        try:
            return cls.from_connection(con, rounds)
        finally:
            con.close()

    @classmethod
    def from_connection(
        cls, con: duckdb.DuckDBPyConnection, rounds: list[str] | None = None
    ) -> Readout:
        """Read every round (or only `rounds`) through an open connection."""
        return _read(con, rounds)

    def evaluation(self, round_id: str, pr: int) -> Evaluation:
        ev = self.evaluations.get((round_id, pr))
        if ev is None:
            raise ReadoutError(f"no PR #{pr} in round {round_id}")
        return ev

    @property
    def leaderboard_rounds(self) -> list[Round]:
        return [r for r in self.rounds if r.leaderboard]


# --- reading ----------------------------------------------------------------------------------


def _dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[Row]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _fill_devices(con: duckdb.DuckDBPyConnection, rows: list[Row]) -> None:
    """A round whose device was never recorded (its last session cut off before it finished)
    shows the device and driver its sessions recorded, as lookups.round_device picks them."""
    missing = [r["round_id"] for r in rows if not r.get("device_name")]
    if not missing:
        return
    first: dict[str, Row] = {}
    for s in _dicts(
        con,
        f"""
        SELECT round_id, device_name, driver FROM sessions
        WHERE device_name IS NOT NULL AND list_contains(?, round_id)
        ORDER BY round_id, {TIMED_FIRST}
        """,
        [missing],
    ):
        first.setdefault(s["round_id"], s)
    for r in rows:
        seen = first.get(r["round_id"])
        if not r.get("device_name") and seen:
            r["device_name"] = seen["device_name"]
            r["driver"] = r.get("driver") or seen["driver"]


class _Tables:
    """Every query of one read goes through one filter: all rounds, or the rounds asked for."""

    def __init__(self, con: duckdb.DuckDBPyConnection, only: list[str] | None) -> None:
        self.con = con
        self.where = "WHERE list_contains($only, round_id)" if only is not None else "WHERE true"
        self.params = {"only": only} if only is not None else {}

    def rows(self, sql: str, **params: Any) -> list[Row]:
        cur = self.con.execute(sql.format(where=self.where), {**self.params, **params})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _read(con: duckdb.DuckDBPyConnection, only: list[str] | None) -> Readout:
    t = _Tables(con, only)
    rounds, evaluations = _read_rounds(t)
    _attach_evidence(t, evaluations)
    main_by_gpu = _read_gpus(t, evaluations)
    main_trend, main_accuracy, costs = _read_main(t, rounds)
    order = {r.round_id: i for i, r in enumerate(rounds)}
    by_round: dict[str, list[Evaluation]] = defaultdict(list)
    by_pr: dict[int, list[Evaluation]] = defaultdict(list)
    for ev in sorted(evaluations.values(), key=lambda e: (order.get(e.round_id, -1), e.pr)):
        by_round[ev.round_id].append(ev)
        by_pr[ev.pr].append(ev)
    return Readout(
        rounds=rounds,
        evaluations=evaluations,
        by_round=dict(by_round),
        by_pr=dict(sorted(by_pr.items())),
        main_trend=main_trend,
        main_accuracy=main_accuracy,
        costs=costs,
        aa_pairs=_pairs(t, [r.round_id for r in rounds if r.kind == "aa"]),
        canaries=_canaries(t),
        main_by_gpu=main_by_gpu,
    )


def _read_rounds(t: _Tables) -> tuple[list[Round], dict[tuple[str, int], Evaluation]]:
    """The rounds (oldest first) and one empty Evaluation per `prs` row."""
    round_rows = t.rows("SELECT * FROM rounds {where} ORDER BY created_at, round_id")
    _fill_devices(t.con, round_rows)
    infos = t.rows("SELECT * FROM prs {where} ORDER BY round_id, pr")
    labels: dict[str, list[list[str]]] = defaultdict(list)
    for info in infos:
        labels[info["round_id"]].append(list(info.get("labels") or []))
    rounds = [round_of(r, labels[r["round_id"]]) for r in round_rows]
    by_id = {r.round_id: r for r in rounds}
    evaluations: dict[tuple[str, int], Evaluation] = {}
    for info in infos:
        rid = info["round_id"]
        if rid not in by_id:  # a PR row of a round missing from `rounds`: shown, never a round
            by_id[rid] = round_of({"round_id": rid}, labels[rid])
        evaluations[(rid, info["pr"])] = Evaluation(by_id[rid], info["pr"], info)
    return rounds, evaluations


def _attach_evidence(t: _Tables, evaluations: dict[tuple[str, int], Evaluation]) -> None:
    """Each PR's rows of every other table, onto its Evaluation, in a stable order."""

    def attach(sql: str, put: Any) -> None:
        for row in t.rows(sql):
            ev = evaluations.get((row["round_id"], row["pr"]))
            if ev is not None:
                put(ev, row)

    attach("SELECT * FROM candidates {where} ORDER BY round_id, pr", _set("candidate"))
    verdicts: dict[tuple[str, int], Row] = {}
    attach(
        "SELECT * FROM verdicts {where} ORDER BY round_id, pr",
        lambda ev, row: verdicts.update({(ev.round_id, ev.pr): row}),
    )
    attach(
        "SELECT * FROM comparisons {where} ORDER BY round_id, pr",
        _add("comparisons", comparison_of),
    )
    attach("SELECT * FROM gates {where} ORDER BY round_id, pr, gate", _add("gates", gate_of))
    attach(
        "SELECT * FROM accuracy {where} AND pr <> 0 ORDER BY round_id, pr, model",
        lambda ev, row: ev.accuracy.update({row["model"]: accuracy_of(row)}),
    )
    main_prefill = _attach_prefill(t, evaluations)
    attach(
        """
        SELECT round_id, session_id, side, pr, slot, kind, model, status, fault, detail,
               exit_code, log_tail
        FROM sessions {where} AND pr <> 0 AND status NOT IN ('ok', 'skipped')
        ORDER BY round_id, pr, session_id
        """,
        _add("failures", lambda row: SessionRecord(**_without_round(row))),
    )
    attach(
        "SELECT pr, commit, failure_key, round_id, detail FROM strikes {where} "
        "ORDER BY pr, commit, failure_key, round_id",
        _add("strikes", lambda row: Strike(**row)),
    )
    for ev in evaluations.values():
        ev.comparisons.sort(key=lambda c: (c.role != "target", c.model, axis_key(c.axis)))
        ev.gates.sort(key=lambda g: gate_key(g.gate))
        if (row := verdicts.get((ev.round_id, ev.pr))) is not None:
            ev.verdict, ev.decided_at = verdict_of(row, ev), row["decided_at"]
        for model in sorted({p.model for p in ev.prefill}):
            ev.prefill.extend(main_prefill.get((ev.round_id, model), []))


def _attach_prefill(
    t: _Tables, evaluations: dict[tuple[str, int], Evaluation]
) -> dict[tuple[str, str], list[PrefillCheck]]:
    """Prefill-path checks, mean over a side's sessions per model and prefix: a PR's onto its
    Evaluation; main's (pr = 0) returned per (round, model), shared by every PR of the round."""
    prefill_sql = """
        SELECT round_id, pr, model, prefix, side, avg(top1) AS top1, avg(kl_mean) AS kl_mean,
               max(kl_max) AS kl_max, count(*) AS runs
        FROM prefill_checks {where} GROUP BY ALL ORDER BY round_id, pr, model, prefix, side
    """
    main_prefill: dict[tuple[str, str], list[PrefillCheck]] = defaultdict(list)
    for row in t.rows(prefill_sql):
        if row["pr"] == 0:
            check = PrefillCheck(**{**_without_round(row), "side": "main"})
            main_prefill[(row["round_id"], row["model"])].append(check)
        elif (ev := evaluations.get((row["round_id"], row["pr"]))) is not None:
            ev.prefill.append(PrefillCheck(**_without_round(row)))
    return main_prefill


def _read_main(
    t: _Tables, rounds: list[Round]
) -> tuple[list[Row], dict[str, dict[str, AccuracyResult]], dict[str, RoundCost]]:
    """Per round: main's trend (median of its samples per model and axis), main against main
    accuracy (pr = 0), and the device time of its sessions."""
    main_trend = t.rows(
        """
        SELECT round_id, model, axis, median(value) AS value, min(value) AS lo,
               max(value) AS hi, count(*) AS n
        FROM samples {where} AND side = 'main' GROUP BY ALL ORDER BY round_id, model, axis
        """
    )
    main_accuracy: dict[str, dict[str, AccuracyResult]] = defaultdict(dict)
    for row in t.rows("SELECT * FROM accuracy {where} AND pr = 0 ORDER BY round_id, model"):
        main_accuracy[row["round_id"]][row["model"]] = accuracy_of(row)
    sessions: dict[str, list[Row]] = defaultdict(list)
    for row in t.rows(SESSIONS_SQL):
        sessions[row["round_id"]].append(row)
    costs = {r.round_id: round_cost(r.round_id, sessions[r.round_id]) for r in rounds}
    return main_trend, dict(main_accuracy), costs


def _read_gpus(t: _Tables, evaluations: dict[tuple[str, int], Evaluation]) -> dict[str, list[Row]]:
    """Each PR's shard onto its Evaluation (whose main it was compared with) and, for the rounds
    whose sessions ran on more than one GPU (shard, host, gpu_index, gpu_uuid), main's median
    per GPU, model and axis. A round from before shards is shard 0 on no known GPU: one GPU."""
    gpus: dict[str, set[tuple]] = defaultdict(set)
    for r in t.rows(
        "SELECT DISTINCT round_id, pr, coalesce(shard, 0) AS shard, host, gpu_index, gpu_uuid "
        "FROM sessions {where} ORDER BY ALL"
    ):
        gpus[r["round_id"]].add((r["shard"], r["host"], r["gpu_index"], r["gpu_uuid"]))
        if (ev := evaluations.get((r["round_id"], r["pr"]))) is not None and ev.shard is None:
            ev.shard = r["shard"]
    several = sorted(rid for rid, places in gpus.items() if len(places) > 1)
    out: dict[str, list[Row]] = defaultdict(list)
    for row in t.rows(MAIN_BY_GPU_SQL, several=several) if several else []:
        out[row["round_id"]].append(row)
    return dict(out)


MAIN_BY_GPU_SQL = """
    SELECT s.round_id, coalesce(x.shard, 0) AS shard, x.host, x.gpu_index, x.gpu_uuid,
           s.model, s.axis, median(s.value) AS value, count(*) AS n
    FROM (SELECT * FROM samples {where} AND side = 'main' AND list_contains($several, round_id)) s
    JOIN sessions x USING (session_id) GROUP BY ALL ORDER BY ALL
"""


def _without_round(row: Row) -> Row:
    return {k: v for k, v in row.items() if k != "round_id"}


def _set(name: str) -> Any:
    return lambda ev, row: setattr(ev, name, row)


def _add(name: str, typed: Any = None) -> Any:
    return lambda ev, row: getattr(ev, name).append(typed(row) if typed else row)


def _pairs(t: _Tables, aa: list[str]) -> dict[tuple[str, int, str, str], list[Pair]]:
    """The pairs of the A/A rounds `aa`, read as the verdict reads them (evidence.read_pairs). A
    PR times a model either in full sweeps (a target) or in guard sweeps (a guard), never both,
    so (round, PR, model, axis) names one shape of run."""

    def query(sql: str, params: list) -> list[tuple]:
        return t.con.execute(sql, params).fetchall()

    out: dict[tuple[str, int, str, str], list[Pair]] = {}
    for rid in aa:
        for (pr, model, axis, _shape), pairs in sorted(read_pairs(query, rid).items()):
            out.setdefault((rid, pr, model, axis), []).extend(pairs)
    return out


def _canaries(t: _Tables) -> dict[str, list[Row]]:
    """Per round, its sessions that timed the canary, in the order they started."""
    if not has_columns(t.con, "sessions", "canary_before_s", "canary_after_s"):
        return {}
    out: dict[str, list[Row]] = defaultdict(list)
    for row in t.rows(
        """
        SELECT round_id, session_id, side, pr, slot, kind, model, started_at, status,
               canary_before_s, canary_after_s
        FROM sessions {where} AND (canary_before_s IS NOT NULL OR canary_after_s IS NOT NULL)
        ORDER BY round_id, started_at, slot, session_id
        """
    ):
        out[row["round_id"]].append(row)
    return dict(out)
