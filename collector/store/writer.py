"""Every write to the store: one function per kind of record, each one transaction.

The collector measures (run/) and the rules judge (judge/verdict.py, judge/gates/); this module alone
turns what they found into rows: a round and its PRs, candidates, each session with its raw
samples, score dump or prefill checks, and a round's judgement. A round's derived tables (comparisons, gates, verdicts,
accuracy) are replaced whole, so judging a round again leaves no stale row; strikes are kept
across rounds (INSERT OR IGNORE: judging a round twice counts it once).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

import duckdb

from collector.samples import samples_of
from collector.store import Store
from engine.harness.protocol import (
    BenchDocument,
    PrefillCheckResult,
    ScoreResult,
    SweepResult,
)

if TYPE_CHECKING:
    from collector.manifest import LoadedManifest
    from collector.policy import ResolvedPolicy
    from collector.results import AccuracyResult, Candidate, Comparison, Verdict
    from collector.schedule import Task

Connection = duckdb.DuckDBPyConnection


# What a session row is written from: a judged session (the run stage's outcome.Outcome), named by
# its fields so that the store imports nothing of the stages above it.
class HarnessRun(Protocol):
    started_at: datetime
    wall_s: float
    exit_code: int | None
    log_tail: str
    attempts: int


class JudgedSession(Protocol):
    status: str
    fault: str  # none | pr | infra
    detail: str

    @property
    def run(self) -> HarnessRun: ...

    @property
    def document(self) -> BenchDocument | None: ...


DERIVED_TABLES = ("comparisons", "gates", "verdicts", "accuracy")


def set_round_policy(store: Store, round_id: str, policy_json: str) -> None:
    """The resolved policy a round is judged under from now on."""
    with store.transaction() as con:
        con.execute("UPDATE rounds SET policy_json = ? WHERE round_id = ?", [policy_json, round_id])


def set_round_shards(store: Store, round_id: str, shards: int) -> None:
    """The shards a round is cut into, fixed once its first session is planned."""
    with store.transaction() as con:
        con.execute("UPDATE rounds SET shards = ? WHERE round_id = ?", [shards, round_id])


def write_verdicts(
    store: Store,
    round_id: str,
    verdicts: list[Verdict],
    main_accuracy: dict[str, AccuracyResult],
    decided_at: datetime,
) -> None:
    """A round's judgement in one transaction: its derived tables replaced, strikes added.
    `main_accuracy`: per model, main scored against itself (its own noise floor), stored as pr 0."""
    with store.transaction() as con:
        for table in DERIVED_TABLES:
            con.execute(f"DELETE FROM {table} WHERE round_id = ?", [round_id])
        for pr, accuracy in [(0, main_accuracy), *((v.pr, v.accuracy) for v in verdicts)]:
            for model, acc in accuracy.items():
                _accuracy(con, round_id, pr, model, acc)
        for v in verdicts:
            for c in v.comparisons:
                _comparison(con, round_id, v.pr, c)
            for g in v.gates:
                con.execute(
                    f"INSERT INTO gates (round_id, pr, {', '.join(GATE_COLUMNS)}) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [round_id, v.pr, *(getattr(g, k) for k in GATE_COLUMNS)],
                )
            _verdict(con, round_id, v, decided_at)
            for s in v.strikes:
                con.execute(
                    "INSERT OR IGNORE INTO strikes VALUES (?, ?, ?, ?, ?)",
                    [s.pr, s.commit, s.failure_key, s.round_id, s.detail],
                )


def _accuracy(con: Connection, round_id: str, pr: int, model: str, acc: AccuracyResult) -> None:
    con.execute(
        "INSERT INTO accuracy VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [round_id, pr, model, acc.n_tokens, acc.top1, acc.kl, acc.ppl_main, acc.ppl_pr],
    )


# The stored columns of a comparison (beside round_id and pr), in order: what `show --json` gives too
GATE_COLUMNS = ("gate", "status", "reason")  # a stored Gate (`timed` is the verdict's alone)
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


# --- sessions: what the collector measured ----------------------------------------------------


@dataclass
class Placement:
    """Where a session ran: the GPU (as CUDA_VISIBLE_DEVICES names it, its UUID where nvidia-smi
    gives one) and the host; collector/run/cluster.py finds it."""

    host: str
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int = 0  # the process that ran the session (a shard's worker)

    def __str__(self) -> str:
        gpu = "no GPU" if self.gpu_index is None else f"GPU {self.gpu_index}"
        return f"{self.host} {gpu}" + (f" ({self.gpu_uuid})" if self.gpu_uuid else "")


def _session_row(
    round_id: str, task: Task, commit: str, o: JudgedSession, placement: Placement | None
) -> list:
    """The sessions row of an outcome (its document stored whole, a score dump without the
    positions, which go to score_dumps)."""
    doc, r = o.document, o.run
    device = driver = vram = doc_json = seed = canary = None
    if doc is not None:
        measured = getattr(doc, "measured", None)
        seed = measured.seed if measured is not None else None
        canary = measured.canary if measured is not None else None
        device, driver = doc.device.name, doc.device.driver
        vram = getattr(doc, "vram", None)
        if isinstance(doc, SweepResult):
            vram = next((c.vram for c in doc.contexts if c.vram is not None), None)
        exclude = {"positions", "tokens"} if isinstance(doc, ScoreResult) else set()
        doc_json = doc.model_dump_json(exclude=exclude)
    here = placement or Placement(host="")
    return [
        task.session_id, round_id, task.side, task.pr, task.slot, task.kind, task.model, commit,
        r.started_at, r.wall_s, r.exit_code, o.status, o.fault, o.detail, r.log_tail, device, driver,
        vram.free_after_load_bytes if vram else None, vram.peak_bytes if vram else None,
        vram.kv_cache_bytes if vram else None, doc_json, r.attempts, seed, task.shard,
        here.gpu_index, here.gpu_uuid, here.host or None,
        canary.before_s if canary else None, canary.after_s if canary else None,
    ]  # fmt: skip


SESSION_COLUMNS = (
    "session_id, round_id, side, pr, slot, kind, model, commit, started_at, wall_s, exit_code, "
    "status, fault, detail, log_tail, device_name, driver, vram_free_after_load, vram_peak, "
    "kv_cache_bytes, document, attempts, seed, shard, gpu_index, gpu_uuid, host, canary_before_s, "
    "canary_after_s"
)


def write_session(
    store: Store,
    round_id: str,
    task: Task,
    commit: str,
    o: JudgedSession,
    placement: Placement | None = None,
) -> None:
    """The session row (its status and fault as outcome.judge gave them), its raw samples, and
    its score dump or prefill checks: one transaction (a session written again replaces every
    row of its earlier attempt)."""
    doc, sid = o.document, task.session_id
    row = _session_row(round_id, task, commit, o, placement)
    ok = o.status in ("ok", "implausible", "incomplete")
    samples = samples_of(doc, task.side, guard=task.kind == "guard") if ok else []
    with store.transaction() as con:
        for table in ("samples", "score_dumps", "prefill_checks", "sessions"):
            con.execute(f"DELETE FROM {table} WHERE session_id = ?", [sid])
        marks = ", ".join("?" * len(row))
        con.execute(f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({marks})", row)
        head = [sid, round_id, task.side, task.pr, task.model]
        if samples:
            con.executemany(
                "INSERT INTO samples (session_id, round_id, pr, model, side, axis, rep, value) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [sid, round_id, task.pr, task.model, side, ax, rep, v]
                    for side, ax, rep, v in samples
                ],  # fmt: skip
            )
        if o.status == "ok" and isinstance(doc, ScoreResult):
            dump = [*head, len(doc.positions), doc.model_dump_json()]
            con.execute("INSERT INTO score_dumps VALUES (?, ?, ?, ?, ?, ?, ?)", dump)
        if o.status == "ok" and isinstance(doc, PrefillCheckResult):
            con.executemany(
                "INSERT INTO prefill_checks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[*head, p.prefix, p.top1, p.kl_mean, p.kl_max] for p in doc.prefixes],
            )


# --- rounds and candidates -------------------------------------------------------------------


def record_round(
    store: Store,
    loaded: LoadedManifest,
    policy: ResolvedPolicy,
    main_commit: str,
    new: bool,
    sandbox: str,
) -> None:
    """The round (when `new`) and its PRs as the manifest states them, verbatim. `sandbox`: what
    seals this run's checkouts ('none' unsandboxed): a round any part of which ran unsealed says
    so for good."""
    m = loaded.manifest
    with store.transaction() as con:
        if new:
            con.execute(
                "INSERT INTO rounds (round_id, created_at, finished_at, engine_repo, base_ref, "
                "main_commit, profile, policy_json, device_name, driver, manifest_toml, sandbox) "
                "VALUES (?, ?, NULL, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
                [m.round, _now(), str(loaded.repo), m.base_ref, main_commit, m.profile,
                 policy.model_dump_json(), loaded.text, sandbox],
            )  # fmt: skip
        elif sandbox == "none":
            con.execute("UPDATE rounds SET sandbox = 'none' WHERE round_id = ?", [m.round])
        for p in m.pr:
            con.execute(
                "INSERT OR REPLACE INTO prs (round_id, pr, title, author, labels, targets, source, "
                "branch, expect) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [m.round, p.number, p.title, p.author, list(p.labels), list(p.targets), p.source,
                 p.branch, p.expect],
            )  # fmt: skip


def record_candidates(store: Store, round_id: str, cands: list[Candidate]) -> None:
    with store.transaction() as con:
        for c in cands:
            con.execute(
                "INSERT OR REPLACE INTO candidates (round_id, pr, pr_commit, main_commit, "
                "merged_commit, status, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [round_id, c.pr, c.pr_commit, c.main_commit, c.merged_commit, c.status, c.detail],
            )


def finish_round(store: Store, round_id: str, device: str | None, driver: str | None) -> None:
    with store.transaction() as con:
        con.execute(
            "UPDATE rounds SET finished_at = ?, device_name = ?, driver = ? WHERE round_id = ?",
            [_now(), device, driver, round_id],
        )


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
