"""The interleaved plan of a round: main, PR, main, PR ... with main's sessions spread evenly.

Main's sessions serve every PR of the round. With n measured PRs each PR gets
max(pr_sessions, ceil((min_main_sessions - 1) / n)) sessions, and there are
max(min_main_sessions, ceil(PR sessions / main_every) + 1) main sessions, the PR sessions split
as evenly as possible between them, so every PR session has a main session on each side. A
round of one PR has a main session between each two of its sessions.

Confirmation (`plan_confirmation`): once the planned sessions are in, each PR whose verdict
rests on speed alone (a tier, or a REJECT for a loss of speed) is measured again, laid out the
same way after the plan, in slots from CONFIRM_SLOTS; collector/README.md ("Verdict rules")
says how they count.

Every task has a stable id '<round>/<side>/<pr>/<slot>/<kind>/<model>': a re-run of the same
manifest skips the tasks already finished.

A round over several GPUs is cut into shards (`plan_shards`), one per GPU: each shard is a
set of PRs planned exactly as above with its OWN main sessions (a PR is only ever compared
with main measured on its GPU), its ids prefixed '<round>/s<shard>/…'. PRs are dealt out by
expected cost (MODEL_COST), the costliest first, each to the cheapest shard so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector.policy import Profile

MAIN_SCORE_SESSIONS = 2  # main scores twice: its dump, and main-vs-main calibration
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
    nth: int,
    score: bool,
    prefill: bool,
    long_context: tuple[str, ...] = (),
    shard: int | None = None,
) -> tuple[Task, ...]:
    out: list[Task] = []
    prefix = round_id if shard is None else f"{round_id}/s{shard}"

    def add(kind: str, model: str) -> None:
        out.append(
            Task(
                f"{prefix}/{side}/{pr}/{slot}/{kind}/{model}",
                side,
                pr,
                slot,
                kind,
                model,
                shard or 0,
            )
        )

    # each model's accuracy evidence before its timed sessions: a PR caught in those (forged,
    # diverged) has its later sessions skipped (policy.failures.stop_after), and its verdict
    # should still say how far that model is from main's
    for m in full:
        if score:
            add("score", m)
        if prefill:
            add("prefill-check", m)
        add("sweep", m)
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
    per_pr = max(profile.pr_sessions, math.ceil((profile.min_main_sessions - 1) / len(prs)))
    return _interleave(round_id, prs, per_pr, profile, shard, confirming=False)


def plan_confirmation(
    round_id: str,
    prs: list[tuple[int, list[str]]],
    profile: Profile,
    shard: int | None = None,
    recheck: dict[int, list[str]] | None = None,
) -> list[Slot]:
    """The round's (or shard's) confirmation sessions: `profile.confirm_sessions` more timed
    sessions of each PR in `prs` (those whose planned verdict rests on speed), after every
    planned slot, each with a main session after it (the plan's last main is before it). Slots
    from CONFIRM_SLOTS on; no accuracy or prefill tasks (those are not timings). `recheck`: per
    PR, the models whose long-context prefill it fell short on; its first confirmation session
    runs that check again, and so does the main session after it."""
    if not prs or profile.confirm_sessions == 0:
        return []
    return _interleave(
        round_id, prs, profile.confirm_sessions, profile, shard, confirming=True, recheck=recheck
    )  # fmt: skip


def is_confirmation(slot: int) -> bool:
    return slot >= CONFIRM_SLOTS


def _interleave(
    round_id: str,
    prs: list[tuple[int, list[str]]],
    per_pr: int,
    profile: Profile,
    shard: int | None,
    confirming: bool,
    recheck: dict[int, list[str]] | None = None,
) -> list[Slot]:
    """per_pr sessions of each PR, round-robin in manifest order, cut into even chunks of at
    most main_every with a main session after each (and, planned, one before the first)."""
    # one PR alone would run back to back: a burst of load on the box then hits all of its
    # sessions and none of main's, so it gets a main session between each two
    every = profile.main_every if len(prs) > 1 else 1
    pr_sessions = [(num, targets) for _ in range(per_pr) for num, targets in prs]
    gaps = math.ceil(len(pr_sessions) / every)
    if not confirming:
        gaps = max(profile.min_main_sessions - 1, gaps)
    base, extra = divmod(len(pr_sessions), gaps)
    chunks = []
    i = 0
    for g in range(gaps):
        size = base + (1 if g < extra else 0)
        chunks.append(pr_sessions[i : i + size])
        i += size

    all_targets = {m for _, t in prs for m in t}
    main_full = _ordered(all_targets, profile)
    # main runs every guard-shaped sweep a PR runs, also on models another PR targets: a guard
    # sweep is held against main's guard sweeps only (one context in a fresh process is not the
    # same measurement as that context inside a full sweep)
    main_guards = _ordered({m for _, t in prs for m in guards_of(t, profile)}, profile)
    # the long-context memory check: planned, in each PR's first session and main's scored ones;
    # confirming, where a PR's long-context prefill fell short, and in main's session after it
    checked = {
        num: (recheck or {}).get(num, []) if confirming else profile.long_context for num, _ in prs
    }
    first_slot = CONFIRM_SLOTS if confirming else 0
    slots: list[Slot] = []
    seen: dict[int, int] = {}
    main_nth = MAIN_SCORE_SESSIONS if confirming else 0  # confirmations score nothing

    def main_slot(rechecked: set[str]) -> None:
        nonlocal main_nth
        idx = first_slot + len(slots)
        scored = main_nth < MAIN_SCORE_SESSIONS
        slots.append(
            Slot(
                idx,
                "main",
                0,
                _tasks(
                    round_id,
                    "main",
                    0,
                    idx,
                    main_full,
                    main_guards,
                    main_nth,
                    score=scored,
                    prefill=main_nth == 0,
                    long_context=tuple(profile.long_context) if scored else tuple(rechecked),
                    shard=shard,
                ),
            )
        )
        main_nth += 1

    if not confirming:
        main_slot(set())
    for chunk in chunks:
        rechecked: set[str] = set()
        for num, targets in chunk:
            idx = first_slot + len(slots)
            nth = seen.get(num, 0)
            seen[num] = nth + 1
            first = nth == 0 and not confirming  # a PR's accuracy evidence comes once
            long_context = tuple(checked[num]) if nth == 0 else ()
            if confirming:
                rechecked |= set(long_context)
            slots.append(
                Slot(
                    idx,
                    "pr",
                    num,
                    _tasks(
                        round_id,
                        "pr",
                        num,
                        idx,
                        list(targets),
                        guards_of(targets, profile),
                        nth,
                        score=first,
                        prefill=first,
                        long_context=long_context,
                        shard=shard,
                    ),
                )
            )
        main_slot(rechecked)
    return slots
