"""The verdict of a round: comparisons per axis, the gates, a label per PR, merge-first.

Reads a round's stored evidence (store/evidence.py) and judges it with the policy stored in the
round, so `sparkboard verdict` gives the same answer as the end of `collect`. The rules are
written in collector/README.md ("Verdict rules") and their numbers in policy.toml; the per-axis
tests are rules.py, each gate a module of gates/, and every row is written by store/writer.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

from collector.axes import axis, axis_sort_key, is_memory_axis, parse_axis
from collector.judge.accuracy import AccuracyError, compare_dumps, of_kld
from collector.judge.compare import compare_axis, compare_memory
from collector.judge.gates import (
    BUILD_FAILED,
    NOT_MERGED,
    GateContext,
    GateResult,
    accuracy_gate,
    build_gate,
    floor_gate,
    guard_gate,
    implausible_gate,
    long_context_gate,
    memory_gate,
    merge_gate,
    prefill_path_gate,
    reference_gate,
    run_gate,
)
from collector.judge.gates.long_context import KIND as LONG_CONTEXT
from collector.judge.rules import EPS, gain_shortfall, pct, pct_of
from collector.judge.stats import session_sds
from collector.policy import TIER_NAMES, Policy, ResolvedPolicy, VerdictRules, resolve
from collector.results import AccuracyResult, Comparison, Gate, Verdict
from collector.schedule import CONFIRM_SLOTS, guards_of
from collector.store import Store, lookups, writer
from collector.store.combine import DUMPS_LEFT_OUT
from collector.store.evidence import RoundData


def compare_pr(data: RoundData, pr: int, targets: list[str], guards: list[str]) -> list[Comparison]:
    """Every axis of the PR's targets (full sweeps) and its guards' guard context (guard
    sweeps), each from the pairs of its own sessions (main's engine timed beside the PR's); the
    memory axes of both (role 'memory')."""
    comps: list[Comparison] = []
    session_sd = session_sds(data.pairs)  # kind of axis -> how far one session strays (log ratio)
    for model, role in [(m, "target") for m in targets] + [(m, "guard") for m in guards]:
        shape = "full" if role == "target" else "guard"
        measured = data.axes(pr, model, shape)
        if role == "guard":
            g = data.policy.profile.guard_ctx_for(model)
            speed = {axis("decode", g), axis("prefill", g)} & measured
        else:
            speed = {a for a in measured if not is_memory_axis(a)}
        for ax in sorted(speed, key=axis_sort_key):
            pairs = data.pairs[(pr, model, ax, shape)]
            sd = session_sd.get(parse_axis(ax)[0], 0.0)  # by kind of axis
            comps.append(compare_axis(data.policy, model, role, ax, pairs, sd))
        for ax in sorted((a for a in measured if is_memory_axis(a)), key=axis_sort_key):
            pairs = data.pairs[(pr, model, ax, shape)]
            comps.append(
                compare_memory(
                    data.policy, model, ax, [m for _, m, _ in pairs], [p for _, _, p in pairs]
                )
            )
    return comps


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
    if cand["status"] == BUILD_FAILED:
        gate = build_gate(cand)
        return Verdict(n, commit, "REJECT", gate.reason, gates=[gate])
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
    skipped = [s for s in ctx.sessions if s.status == "skipped"]
    if not skipped:
        return
    why = "not judged: " + (skipped[0].detail or "").removeprefix("not run: ")
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


def main_against_main(data: RoundData) -> dict[str, AccuracyResult]:
    """Main against main for every model main scored twice, or a served engine's main build
    held against itself (stored as the accuracy of pr 0)."""
    import json

    def tie(model: str) -> float:
        return data.policy.accuracy.bars(model).top1_tie_nats

    out = {m: of_kld(d[0], tie(m)) for (side, _, m), d in data.klds.items() if side == "main"}
    for (side, _pr, model), docs in sorted(data.dumps.items()):
        if side == "main" and len(docs) >= 2:
            try:
                out[model] = compare_dumps(json.loads(docs[0]), json.loads(docs[1]), tie(model))
            except AccuracyError:
                continue
    return out


def _require_dumps(store: Store, round_id: str) -> None:
    """A round published without its score dumps cannot be judged again: say so."""
    if lookups.flagged(store, DUMPS_LEFT_OUT + round_id):
        raise LookupError(
            f"{store.path} was published without score dumps (the teacher-forced logits): the "
            f"verdicts of round {round_id} stand as stored; re-judge it in the database its "
            "collector wrote"
        )


def adopt_policy(store: Store, round_id: str, policy: Policy) -> None:
    """Judge a round from now on under `policy` (its profile re-resolved), e.g. once A/A rounds
    have calibrated the gates; the round records the policy it is judged under."""
    profile = lookups.round_profile(store, round_id)
    if profile is None:
        raise LookupError(f"no round {round_id!r} in {store.path}")
    _require_dumps(store, round_id)
    writer.set_round_policy(store, round_id, resolve(policy, profile).model_dump_json())


def decide_round(store: Store, round_id: str) -> list[Verdict]:
    """Judge every PR of a round from its stored evidence and store the judgement. A PR with
    confirmation sessions is judged on all of its round's sessions; any other PR on the planned
    ones, as when confirmation was chosen (main's confirmation sessions never move it)."""
    _require_dumps(store, round_id)
    # each PR judged in its shard's view (main of its own GPU); a PR not yet measured in shard 0's
    shard_of = lookups.pr_shards(store, round_id)
    confirmed = lookups.prs_with_sessions_from(store, round_id, CONFIRM_SLOTS)
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
    writer.write_verdicts(store, round_id, verdicts, main_against_main(data), decided)
    return verdicts


def rests_on_speed(v: Verdict) -> bool:
    """Whether a verdict's label turns on timings alone, which a burst of load can fake: a tier,
    or a REJECT whose every failing gate failed on speed alone (Gate.timed)."""
    if v.label in TIER_NAMES:
        return True
    failing = [g for g in v.gates if g.status == "fail"]
    return v.label == "REJECT" and bool(failing) and all(g.timed for g in failing)


def left_open(v: Verdict, rules: VerdictRules) -> bool:
    """Whether the planned sessions left a verdict of `none` open on speed: a target axis past
    the first gate with its interval above 0, or an axis below the floor with its interval
    below 0, that its noise band (or one session) kept from counting. A session more narrows
    the band (sessions_z: the standard error of the mean of the PR's sessions) and the same
    rules decide, over every session: a small real change is resolved where the box allows,
    and a PR of main's speed must clear the band of all its sessions, as any tier must."""
    if v.label != "none":
        return False
    speed = [c for c in v.comparisons if c.role != "memory" and not c.implausible]
    loss = any(
        1 + c.delta < rules.floor - EPS and c.ci_high < 0 and not c.below_floor for c in speed
    )
    return any(open_gain(c, rules) for c in speed) or loss


def open_gain(c: Comparison, rules: VerdictRules) -> bool:
    """Whether an axis is a plausible target's gain past the first gate with its interval
    above 0 that its noise band (or one session) kept from counting: `left_open`'s gain, and
    what the demo test accepts of a small real gain a box could not resolve."""
    return (
        c.role == "target"
        and not c.implausible
        and c.delta >= rules.gate - EPS
        and c.ci_low > 0
        and not c.significant
    )


def to_confirm(store: Store, round_id: str, shard: int, prs: list[int]) -> dict[int, list[str]]:
    """Those of `prs` (measured in `shard`) whose verdict on the planned sessions rests on speed,
    or that they left open on speed (`left_open`): they get confirmation sessions
    (schedule.plan_confirmation). Each maps to the models whose long-context prefill it fell
    short on: that check is measured again in its confirmation."""
    if not prs:
        return {}
    data = RoundData(store, round_id, shard, planned=True)
    rows = {p["pr"]: p for p in data.prs}
    out = {}
    for n in prs:
        v = decide_pr(data, rows[n])
        if rests_on_speed(v) or left_open(v, data.policy.verdict):
            out[n] = [
                g.gate.split(":", 1)[1]
                for g in v.gates
                if g.status == "fail" and g.gate.startswith(f"{LONG_CONTEXT}:")
            ]
    return out
