"""The plan of a round: main's untimed evidence first and last, each PR's paired sessions between.

A PR's speed session times main's engine beside the PR's, turn by turn (engine/harness/bench.py
with a baseline), so a PR needs no main session around it to be compared with: the plan is one
main slot (scores, the prefill check, the long-context memory check), each PR `pr_sessions`
times round-robin in manifest order (its first session also scores its models and checks its
prefill path), and a last main slot that scores again (main against itself: the accuracy
calibration) and repeats the long-context check.

Confirmation (`plan_confirmation`): once the planned sessions are in, each PR whose verdict
rests on speed alone (a tier, or a REJECT for a loss of speed), or that they left open on speed
(judge.verdict.left_open), is measured again after the plan,
in slots from CONFIRM_SLOTS; collector/README.md ("Verdict rules") says how they count.

Every task has a stable id '<round>/<side>/<pr>/<slot>/<kind>/<model>': a re-run of the same
manifest skips the tasks already finished.

A round over several GPUs is cut into shards (`plan_shards`), one per GPU: each shard is a
set of PRs planned exactly as above with its OWN main slots (a PR's untimed evidence is only
held against main's from its GPU), its ids prefixed '<round>/s<shard>/…'. PRs are dealt out by
expected cost (MODEL_COST), the costliest first, each to the cheapest shard so far.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collector.policy import Profile

# Confirmation sessions (plan_confirmation) have slots from here on: after every planned slot of
# any round, and known as confirmations by their slot alone.
CONFIRM_SLOTS = 10_000

# Device minutes per PR by target model, from `sparkboard cost` of the published H200 round
# (data/demo/gpu/README.md): the 8B's full sweep prefills 16k and 32k tokens three times.
MODEL_COST: dict[str, float] = {"llama-8b:q4_0": 3.7, "llama-1b:f16": 2.6, "smollm2-135m": 2.5}
DEFAULT_COST = 1.0  # any other model (the CPU profile's small ones)


@dataclass(frozen=True)
class Task:
    session_id: str
    side: str  # 'main' | 'pr'
    pr: int  # 0 for main
    slot: int
    kind: str  # 'sweep' | 'concurrent' | 'score' | 'prefill-check' | 'guard' | 'longctx'
    model: str
    shard: int = 0  # the GPU's share of the round this task belongs to


@dataclass(frozen=True)
class Slot:
    index: int
    side: str
    pr: int
    tasks: tuple[Task, ...]


def _ordered(models: set[str], profile: Profile) -> list[str]:
    order = {m: i for i, m in enumerate(profile.models)}
    return sorted(models, key=lambda m: (order.get(m, len(order)), m))


def guards_of(targets: list[str], profile: Profile) -> list[str]:
    return [m for m in profile.models if m not in targets]


def _tasks(
    round_id: str,
    side: str,
    pr: int,
    slot: int,
    full: list[str],
    guards: list[str],
    score: bool,
    prefill: bool,
    long_context: tuple[str, ...] = (),
    shard: int | None = None,
    concurrent: bool = True,
) -> tuple[Task, ...]:
    """A PR slot: per target model its accuracy evidence (`score`, `prefill`: its first
    session), its sweep and concurrent sessions (`concurrent` false: the sweep measures the
    widths too, Profile.concurrent_in_sweep) and its long-context check; per guard model its
    score and guard sweep."""
    out: list[Task] = []

    def add(kind: str, model: str) -> None:
        out.append(_task(round_id, side, pr, slot, kind, model, shard))

    # each model's accuracy evidence before its timed sessions: a PR caught in those (forged,
    # diverged) has its later sessions skipped (policy.failures.stop_after), and its verdict
    # should still say how far that model is from main's
    for m in full:
        if score:
            add("score", m)
        if prefill:
            add("prefill-check", m)
        add("sweep", m)
        if concurrent:
            add("concurrent", m)
        if m in long_context:
            add("longctx", m)
    for m in guards:  # guards are scored too: a PR must not break what it does not target
        if score and m not in full:
            add("score", m)
        add("guard", m)
    return tuple(out)


def pr_cost(targets: list[str]) -> float:
    """A PR's expected device minutes: the sum over its target models."""
    return sum(MODEL_COST.get(m, DEFAULT_COST) for m in targets)


def split_prs(prs: list[tuple[int, list[str]]], n_shards: int) -> list[list[tuple[int, list[str]]]]:
    """The PRs dealt into n_shards by expected cost (costliest first, each to the cheapest
    shard so far, ties to the lower shard), each shard's PRs kept in manifest order.
    Deterministic: the same manifest and shard count give the same shards on every resume."""
    load = [0.0] * n_shards
    where: dict[int, int] = {}
    for i, (_num, targets) in sorted(enumerate(prs), key=lambda e: (-pr_cost(e[1][1]), e[0])):
        k = min(range(n_shards), key=lambda j: (load[j], j))
        where[i] = k
        load[k] += pr_cost(targets)
    return [[p for i, p in enumerate(prs) if where[i] == k] for k in range(n_shards)]


def plan_shards(
    round_id: str, prs: list[tuple[int, list[str]]], profile: Profile, n_shards: int
) -> list[list[Slot]]:
    """One plan per shard; a single shard keeps the unsharded ids (old rounds resume)."""
    if n_shards <= 1:
        return [plan_round(round_id, prs, profile)]
    return [
        plan_round(round_id, part, profile, shard=k)
        for k, part in enumerate(split_prs(prs, n_shards))
    ]


def plan_round(
    round_id: str, prs: list[tuple[int, list[str]]], profile: Profile, shard: int | None = None
) -> list[Slot]:
    """prs: (number, targets) of every measurable PR, in manifest order. `shard`: this plan is
    one shard of a sharded round (ids '<round>/s<shard>/…')."""
    if not prs:
        return []
    return _plan(round_id, prs, profile.pr_sessions, profile, shard, confirming=False)


def plan_confirmation(
    round_id: str,
    prs: list[tuple[int, list[str]]],
    profile: Profile,
    shard: int | None = None,
    recheck: dict[int, list[str]] | None = None,
) -> list[Slot]:
    """The round's (or shard's) confirmation sessions: `profile.confirm_sessions` more timed
    sessions of each PR in `prs` (those whose planned verdict rests on speed), after every
    planned slot, in slots from CONFIRM_SLOTS; no accuracy or prefill tasks (those are not
    timings). `recheck`: per PR, the models whose long-context prefill it fell short on; its
    first confirmation session runs that check again, main's engine beside it."""
    if not prs or profile.confirm_sessions == 0:
        return []
    return _plan(
        round_id, prs, profile.confirm_sessions, profile, shard, confirming=True, recheck=recheck
    )  # fmt: skip


def is_confirmation(slot: int) -> bool:
    return slot >= CONFIRM_SLOTS


def _plan(
    round_id: str,
    prs: list[tuple[int, list[str]]],
    per_pr: int,
    profile: Profile,
    shard: int | None,
    confirming: bool,
    recheck: dict[int, list[str]] | None = None,
) -> list[Slot]:
    """per_pr sessions of each PR, round-robin in manifest order; planned: a main slot before
    them and one after (main's untimed evidence); confirming: the PRs' sessions alone."""
    all_targets = {m for _, t in prs for m in t}
    main_models = _ordered(all_targets, profile)
    main_guards = _ordered(
        {m for _, t in prs for m in guards_of(t, profile)} - all_targets, profile
    )
    # the long-context memory check (main's engine runs it beside the PR's, in the PR's
    # session): planned, in each PR's first session; confirming, where its prefill fell short
    checked = {
        num: (recheck or {}).get(num, []) if confirming else list(profile.long_context)
        for num, _ in prs
    }
    first_slot = CONFIRM_SLOTS if confirming else 0
    checks_prefill = profile.applies("prefill-path")
    slots: list[Slot] = []

    def add(side: str, pr: int, tasks: Callable[[int], tuple[Task, ...]]) -> None:
        idx = first_slot + len(slots)
        slots.append(Slot(idx, side, pr, tasks(idx)))

    def main_slot(first: bool) -> None:
        add("main", 0, lambda idx: _main_tasks(
            round_id, idx, main_models, main_guards, prefill=first and checks_prefill,
            shard=shard,
        ))  # fmt: skip

    if not confirming:
        main_slot(True)
    for nth in range(per_pr):
        for num, targets in prs:
            first = nth == 0 and not confirming  # a PR's accuracy evidence comes once
            long_context = tuple(checked[num]) if nth == 0 else ()
            add("pr", num, lambda idx, num=num, targets=targets, first=first, lc=long_context: _tasks(
                round_id, "pr", num, idx, list(targets), guards_of(targets, profile),
                score=first, prefill=first and checks_prefill, long_context=lc, shard=shard,
                concurrent=not profile.concurrent_in_sweep,
            ))  # fmt: skip
    if not confirming:
        main_slot(False)
    return slots


def _main_tasks(
    round_id: str,
    slot: int,
    models: list[str],
    guards: list[str],
    prefill: bool,
    shard: int | None,
) -> tuple[Task, ...]:
    """Main's own slot: its untimed evidence (scores of every model a PR targets or guards, the
    prefill check of the targets); main's speed and its long-context check run beside each PR
    in the PR's own sessions."""
    out: list[Task] = []
    for m in models:
        out.append(_task(round_id, "main", 0, slot, "score", m, shard))
        if prefill:
            out.append(_task(round_id, "main", 0, slot, "prefill-check", m, shard))
    out += [_task(round_id, "main", 0, slot, "score", m, shard) for m in guards]
    return tuple(out)


def _task(
    round_id: str, side: str, pr: int, slot: int, kind: str, model: str, shard: int | None
) -> Task:
    prefix = round_id if shard is None else f"{round_id}/s{shard}"
    return Task(
        f"{prefix}/{side}/{pr}/{slot}/{kind}/{model}", side, pr, slot, kind, model, shard or 0
    )
