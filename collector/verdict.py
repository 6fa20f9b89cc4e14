"""The verdict of a round: comparisons per axis, the gates, a label per PR, merge-first.

Reads a round's stored evidence and judges it with the policy stored in the round, so
`sparkboard verdict` gives the same answer as the end of `collect`. The rules are written in
collector/README.md ("Verdict rules") and their numbers in policy.toml; the per-axis tests are
gates/rules.py, each gate a module of gates/, and every row is written by writer.py.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collector import writer
from collector.accuracy import AccuracyError, compare_dumps
from collector.axes import axis, axis_sort_key, is_memory_axis
from collector.compare import Comparison, compare_axis, compare_memory  # noqa: F401 (re-exported)
from collector.gates import (
    NOT_MERGED,
    Gate,
    GateContext,
    GateResult,
    accuracy_gate,
    floor_gate,
    gain_shortfall,
    guard_gate,
    implausible_gate,
    long_context_gate,
    memory_gate,
    merge_gate,
    pct,
    pct_of,
    prefill_path_gate,
    reference_gate,
    run_gate,
)
from collector.gates.long_context import KIND as LONG_CONTEXT
from collector.merge import DUMPS_LEFT_OUT
from collector.policy import TIER_NAMES, Policy, ResolvedPolicy, resolve
from collector.schedule import CONFIRM_SLOTS, guards_of
from collector.stats import (
    median,
)
from collector.store import Store
from engine.harness.protocol import LongContextResult


@dataclass
class Verdict:
    pr: int
    commit: str | None
    label: str
    reason: str
    merge_first: bool = False
    best: Comparison | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    accuracy: list[tuple] = field(default_factory=list)
    strikes: list[tuple] = field(default_factory=list)


OF_SHARD = "(x.side <> 'main' OR x.shard = ?)"


class RoundData:
    """Everything a round's verdict needs, read once; in a sharded round, one shard's view.
    `planned`: the planned sessions only, without the confirmation sessions (what decides which
    PRs are confirmed, and how an unconfirmed PR is judged)."""

    def __init__(self, store: Store, round_id: str, shard: int = 0, planned: bool = False) -> None:
        rows = store.query_dicts("SELECT * FROM rounds WHERE round_id = ?", [round_id])
        if not rows:
            raise LookupError(f"no round {round_id!r} in {store.path}")
        self.round = rows[0]
        self.shard = shard
        scope = OF_SHARD + (f" AND x.slot < {CONFIRM_SLOTS}" if planned else "")
        self.policy = ResolvedPolicy.model_validate_json(self.round["policy_json"])
        self.prs = store.query_dicts("SELECT * FROM prs WHERE round_id = ? ORDER BY pr", [round_id])
        self.candidates = {
            c["pr"]: c
            for c in store.query_dicts("SELECT * FROM candidates WHERE round_id = ?", [round_id])
        }
        self.sessions = store.query_dicts(
            "SELECT session_id, side, pr, slot, kind, model, status, fault, detail, exit_code "
            f"FROM sessions x WHERE round_id = ? AND {scope} ORDER BY slot, session_id",
            [round_id, shard],
        )
        self.slots = {s["session_id"]: s["slot"] for s in self.sessions}
        # keyed by the shape of the run too: a guard sweep (one context in a fresh process) and
        # a full sweep reach the same context in different process states, and are only ever
        # compared like with like
        self.samples: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
        for sid, side, pr, model, ax, kind, val in store.query(
            "SELECT s.session_id, s.side, s.pr, s.model, s.axis, x.kind, s.value FROM samples s "
            f"JOIN sessions x USING (session_id) WHERE s.round_id = ? AND {scope} "
            "AND x.status IN ('ok', 'implausible', 'incomplete') ORDER BY s.session_id, s.axis, s.rep",
            [round_id, shard],
        ):
            shape = "guard" if kind == "guard" else "full"
            self.samples[(side, pr, model, ax, shape)].append((sid, val))
        self.dumps: dict[tuple, list[str]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT d.side, d.pr, d.model, d.document FROM score_dumps d JOIN sessions x "
            f"USING (session_id) WHERE d.round_id = ? AND {scope} ORDER BY x.slot",
            [round_id, shard],
        ):
            self.dumps[(side, pr, model)].append(doc)
        self.checks: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
        for side, pr, model, prefix, top1, kl in store.query(
            "SELECT c.side, c.pr, c.model, c.prefix, c.top1, c.kl_mean FROM prefill_checks c "
            f"JOIN sessions x USING (session_id) WHERE c.round_id = ? AND {scope} "
            "ORDER BY x.slot DESC",
            [round_id, shard],
        ):
            self.checks[(side, pr, model)][prefix] = (top1, kl)  # the earliest session wins
        # the long-context memory checks' documents, in schedule order
        self.longctx: dict[tuple, list[LongContextResult]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT side, pr, model, document FROM sessions x WHERE round_id = ? "
            f"AND kind = 'longctx' AND status = 'ok' AND document IS NOT NULL AND {scope} "
            "ORDER BY slot",
            [round_id, shard],
        ):
            self.longctx[(side, pr, model)].append(LongContextResult.model_validate_json(doc))
        # strikes of earlier rounds: (pr, commit, failure key) -> how many rounds struck it
        self.prior_strikes: dict[tuple[int, str, str], int] = {
            (pr, commit, key): int(n)
            for pr, commit, key, n in store.query(
                "SELECT pr, commit, failure_key, count(DISTINCT round_id) FROM strikes "
                "WHERE round_id <> ? GROUP BY pr, commit, failure_key",
                [round_id],
            )
        }

    def values(self, side: str, pr: int, model: str, ax: str, shape: str = "full") -> list[float]:
        return [v for _, v in self.samples.get((side, pr, model, ax, shape), [])]

    def session_medians(
        self, model: str, ax: str, side: str = "main", pr: int = 0, shape: str = "full"
    ) -> list[tuple[int, float]]:
        """(slot, median) of each session on one axis, in schedule order."""
        by: dict[str, list[float]] = defaultdict(list)
        for sid, v in self.samples.get((side, pr, model, ax, shape), []):
            by[sid].append(v)
        return sorted((self.slots[sid], median(v)) for sid, v in by.items())

    def axes(self, side: str, pr: int, model: str, shape: str = "full") -> set[str]:
        return {
            k[3]
            for k in self.samples
            if k[0] == side and k[1] == pr and k[2] == model and k[4] == shape
        }

    def main_guard_shape(self, model: str, ax: str) -> str:
        """Main's runs to hold a PR's guard sweep against: main's own guard sweeps, or (rounds
        collected before main ran them for models that some PR targets) its full sweeps."""
        return "guard" if self.samples.get(("main", 0, model, ax, "guard")) else "full"


def compare_pr(data: RoundData, pr: int, targets: list[str], guards: list[str]) -> list[Comparison]:
    """Every axis of the PR's targets (full sweeps), and its guards' guard context (guard
    sweeps), each against main's runs of the same shape; the memory axes of both (role
    'memory')."""
    comps: list[Comparison] = []
    for model, role in [(m, "target") for m in targets] + [(m, "guard") for m in guards]:
        pr_shape = "full" if role == "target" else "guard"
        comps += compare_pr_memory(data, pr, model, pr_shape)
        if role == "target":
            shared = data.axes("pr", pr, model) & data.axes("main", 0, model)
            main_shapes = {a: "full" for a in shared if not is_memory_axis(a)}
        else:
            g = data.policy.profile.guard_ctx_for(model)
            wanted = {axis("decode", g), axis("prefill", g)} & data.axes("pr", pr, model, "guard")
            main_shapes = {a: data.main_guard_shape(model, a) for a in wanted}
            main_shapes = {
                a: s for a, s in main_shapes.items() if data.values("main", 0, model, a, s)
            }
        for ax in sorted(main_shapes, key=axis_sort_key):
            main_shape = main_shapes[ax]
            comps.append(
                compare_axis(
                    data.policy,
                    model,
                    role,
                    ax,
                    data.values("main", 0, model, ax, main_shape),
                    data.values("pr", pr, model, ax, pr_shape),
                    data.session_medians(model, ax, shape=main_shape),
                    data.session_medians(model, ax, "pr", pr, pr_shape),
                )
            )
    return comps


def compare_pr_memory(data: RoundData, pr: int, model: str, shape: str) -> list[Comparison]:
    """A model's memory axes, the PR's runs against main's of the same shape only: a target's
    full sweeps, a guard's guard sweeps (one context in a fresh process holds less than a full
    sweep's, so a round without main's guard sweeps compares no guard memory)."""
    shared = data.axes("pr", pr, model, shape) & data.axes("main", 0, model, shape)
    return [
        compare_memory(
            data.policy,
            model,
            ax,
            data.values("main", 0, model, ax, shape),
            data.values("pr", pr, model, ax, shape),
        )
        for ax in sorted(shared, key=axis_sort_key)
        if is_memory_axis(ax)
    ]


# The gates of a measured PR, in the order they are written; a new gate is one line here.
PR_GATES = (
    run_gate,
    floor_gate,
    implausible_gate,
    accuracy_gate,
    reference_gate,
    prefill_path_gate,
    memory_gate,
    long_context_gate,
    guard_gate,
)


def decide_pr(data: RoundData, prow: dict) -> Verdict:
    n = prow["pr"]
    cand = data.candidates.get(n)
    if cand is None:
        return Verdict(n, None, "pending", "Pending — not yet checked out in this round.")
    commit = cand["pr_commit"]
    if cand["status"] in NOT_MERGED:
        gate = merge_gate(cand, data.round["main_commit"])
        return Verdict(n, commit, cand["status"], gate.reason, gates=[gate])
    if cand["status"] != "ready":
        why = cand["detail"] or "checkout failed"
        return Verdict(n, commit, "pending", f"Not measured: {why} (will retry).")

    targets = list(prow["targets"])
    guards = guards_of(targets, data.policy.profile)
    comps = compare_pr(data, n, targets, guards)
    ctx = GateContext(data, n, commit, targets, guards, comps)
    result = GateResult()
    for gate in PR_GATES:
        result.extend(gate(ctx))
    _not_judged_after_stop(ctx, result)
    v = Verdict(n, commit, "none", "", comparisons=comps, gates=result.gates)
    v.accuracy, v.strikes = result.accuracy, result.strikes
    v.label, v.reason, v.best = label(result, [c for c in comps if c.role == "target"], data.policy)
    return v


def _not_judged_after_stop(ctx: GateContext, result: GateResult) -> None:
    """A PR stopped early (policy.failures.stop_after) is a REJECT: the gates its skipped
    sessions left without evidence say so instead of 'pending'."""
    if not result.hard:
        return
    skipped = [s for s in ctx.sessions if s["status"] == "skipped"]
    if not skipped:
        return
    why = "not judged: " + skipped[0]["detail"].removeprefix("not run: ")
    result.gates = [g if g.status != "warn" else Gate(g.gate, "skip", why) for g in result.gates]
    result.soft = []


def label(
    result: GateResult, targets: list[Comparison], policy: ResolvedPolicy
) -> tuple[str, str, Comparison | None]:
    """(label, reason, best axis): REJECT on any hard reason, pending on any soft one, else
    the tier of the strongest significant target axis (gains are never summed), else 'none'."""
    sig = [c for c in targets if c.significant]
    if sig:
        best = max(sig, key=lambda c: (TIER_NAMES.index(c.tier), c.delta))
    else:
        best = max(targets, key=lambda c: c.delta) if targets else None
    if result.hard:
        return "REJECT", "Rejected — " + "; ".join(dict.fromkeys(result.hard)) + ".", best
    if result.soft:
        return "pending", "Pending — " + "; ".join(dict.fromkeys(result.soft)) + ".", best
    rules = policy.verdict
    if best is None:
        return "none", "No target axis was compared; every gate passed.", None
    where = f"{best.axis} on {best.model} {pct(best.delta)}"
    if not sig:
        why = gain_shortfall(best, rules)
        return (
            "none",
            f"No target axis is a significant gain: best {where}, {why}; every gate passed.",
            best,
        )
    return (
        best.tier,
        f"{where} ({pct_of(rules.confidence)} CI {pct(best.ci_low)}..{pct(best.ci_high)}, above 0) clears "
        f"the {best.tier} gate (+{pct_of(rules.tiers[best.tier])}) and its "
        f"{pct(best.band - 1)} noise band, and every PR session clears the "
        f"+{pct_of(rules.gate)} gate; every gate passed.",
        best,
    )


def choose_merge_first(
    verdicts: list[Verdict], prs: dict[int, dict], policy: ResolvedPolicy
) -> int | None:
    """The round's best passing speedup: the highest delta among tiered PRs (REJECT and
    pending never are), never a PR with a blocking label."""
    blocking = {b.lower() for b in policy.verdict.blocking_labels}
    eligible = [
        v
        for v in verdicts
        if v.label in TIER_NAMES
        and v.best is not None
        and not any(lb.lower() in blocking for lb in prs[v.pr]["labels"])
    ]
    if not eligible:
        return None
    return max(eligible, key=lambda v: (v.best.delta, -v.pr)).pr  # type: ignore[union-attr]


def calibration(data: RoundData) -> list[tuple]:
    """Main against main for every model main scored twice: the accuracy row with pr = 0."""
    import json

    out = []
    for (side, _pr, model), docs in sorted(data.dumps.items()):
        if side == "main" and len(docs) >= 2:
            try:
                out.append((0, model, compare_dumps(json.loads(docs[0]), json.loads(docs[1]))))
            except AccuracyError:
                continue
    return out


def _require_dumps(store: Store, round_id: str) -> None:
    """A round published without its score dumps cannot be judged again: say so."""
    if store.query("SELECT 1 FROM schema_meta WHERE key = ?", [DUMPS_LEFT_OUT + round_id]):
        raise LookupError(
            f"{store.path} was published without score dumps (the teacher-forced logits): the "
            f"verdicts of round {round_id} stand as stored; re-judge it in the database its "
            "collector wrote"
        )


def adopt_policy(store: Store, round_id: str, policy: Policy) -> None:
    """Judge a round from now on under `policy` (its profile re-resolved), e.g. once A/A rounds
    have calibrated the gates; the round records the policy it is judged under."""
    rows = store.query("SELECT profile FROM rounds WHERE round_id = ?", [round_id])
    if not rows:
        raise LookupError(f"no round {round_id!r} in {store.path}")
    _require_dumps(store, round_id)
    writer.set_round_policy(store, round_id, resolve(policy, rows[0][0]).model_dump_json())


def decide_round(store: Store, round_id: str) -> list[Verdict]:
    """Judge every PR of a round from its stored evidence and store the judgement. A PR with
    confirmation sessions is judged on all of its round's sessions; any other PR on the planned
    ones, as when confirmation was chosen (main's confirmation sessions never move it)."""
    _require_dumps(store, round_id)
    # each PR judged in its shard's view (main of its own GPU); a PR not yet measured in shard 0's
    shard_of = dict(
        store.query(
            "SELECT pr, min(shard) FROM sessions WHERE round_id = ? AND side = 'pr' GROUP BY pr",
            [round_id],
        )
    )
    confirmed = {
        r[0]
        for r in store.query(
            "SELECT DISTINCT pr FROM sessions WHERE round_id = ? AND side = 'pr' AND slot >= ?",
            [round_id, CONFIRM_SLOTS],
        )
    }
    views: dict[tuple[int, bool], RoundData] = {}

    def view(shard: int, planned: bool) -> RoundData:
        """A shard's view, read when a PR first needs it: a round without confirmation sessions
        reads one view per shard, as before there were any."""
        if (shard, planned) not in views:
            views[(shard, planned)] = RoundData(store, round_id, shard, planned)
        return views[(shard, planned)]

    # the PRs, the policy and main's score dumps are the same in either view (confirmation
    # sessions score nothing)
    data = view(0, planned=True)
    verdicts = [
        decide_pr(view(shard_of.get(p["pr"], 0), p["pr"] not in confirmed), p) for p in data.prs
    ]
    winner = choose_merge_first(verdicts, {p["pr"]: p for p in data.prs}, data.policy)
    for v in verdicts:
        v.merge_first = v.pr == winner
    decided = datetime.now(UTC).replace(tzinfo=None)
    writer.write_verdicts(store, round_id, verdicts, calibration(data), decided)
    return verdicts


def rests_on_speed(v: Verdict) -> bool:
    """Whether a verdict's label turns on timings alone, which a burst of load can fake: a tier,
    or a REJECT whose every failing gate failed on speed alone (Gate.timed)."""
    if v.label in TIER_NAMES:
        return True
    failing = [g for g in v.gates if g.status == "fail"]
    return v.label == "REJECT" and bool(failing) and all(g.timed for g in failing)


def to_confirm(store: Store, round_id: str, shard: int, prs: list[int]) -> dict[int, list[str]]:
    """Those of `prs` (measured in `shard`) whose verdict on the planned sessions rests on speed:
    they get confirmation sessions (schedule.plan_confirmation). Each maps to the models whose
    long-context prefill it fell short on: that check is measured again in its confirmation."""
    if not prs:
        return {}
    data = RoundData(store, round_id, shard, planned=True)
    rows = {p["pr"]: p for p in data.prs}
    out = {}
    for n in prs:
        v = decide_pr(data, rows[n])
        if rests_on_speed(v):
            out[n] = [
                g.gate.split(":", 1)[1]
                for g in v.gates
                if g.status == "fail" and g.gate.startswith(f"{LONG_CONTEXT}:")
            ]
    return out
