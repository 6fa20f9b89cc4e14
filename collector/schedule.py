"""The interleaved plan of a round: main, PR, main, PR ... with main's sessions spread evenly.

Main's sessions serve every PR of the round. With n measured PRs each PR gets
max(pr_sessions, ceil((min_main_sessions - 1) / n)) sessions, and there are
max(min_main_sessions, ceil(PR sessions / main_every) + 1) main sessions, the PR sessions split
as evenly as possible between them, so every PR session has a main session on each side.

Every task has a stable id '<round>/<side>/<pr>/<slot>/<kind>/<model>': a re-run of the same
manifest skips the tasks already finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector.policy import Profile

MAIN_SCORE_SESSIONS = 2  # main scores twice: its dump, and main-vs-main calibration


@dataclass(frozen=True)
class Task:
    session_id: str
    side: str  # 'main' | 'pr'
    pr: int  # 0 for main
    slot: int
    kind: str  # 'sweep' | 'concurrent' | 'score' | 'prefill-check' | 'guard' | 'longctx'
    model: str


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
) -> tuple[Task, ...]:
    out: list[Task] = []

    def add(kind: str, model: str) -> None:
        out.append(
            Task(f"{round_id}/{side}/{pr}/{slot}/{kind}/{model}", side, pr, slot, kind, model)
        )

    for m in full:
        add("sweep", m)
        add("concurrent", m)
        if score:
            add("score", m)
        if prefill:
            add("prefill-check", m)
        if m in long_context:
            add("longctx", m)
    for m in guards:
        add("guard", m)
        if (
            score and m not in full
        ):  # guards are scored too: a PR must not break what it does not target
            add("score", m)
    return tuple(out)


def plan_round(round_id: str, prs: list[tuple[int, list[str]]], profile: Profile) -> list[Slot]:
    """prs: (number, targets) of every measurable PR, in manifest order."""
    if not prs:
        return []
    n = len(prs)
    per_pr = max(profile.pr_sessions, math.ceil((profile.min_main_sessions - 1) / n))
    pr_sessions = [(num, targets) for _ in range(per_pr) for num, targets in prs]
    n_main = max(profile.min_main_sessions, math.ceil(len(pr_sessions) / profile.main_every) + 1)
    gaps = n_main - 1
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
    checked = tuple(profile.long_context)  # models with a long-context memory check
    slots: list[Slot] = []
    seen: dict[int, int] = {}
    main_nth = 0

    def main_slot() -> None:
        nonlocal main_nth
        idx = len(slots)
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
                    score=main_nth < MAIN_SCORE_SESSIONS,
                    prefill=main_nth == 0,
                    long_context=checked if main_nth < MAIN_SCORE_SESSIONS else (),
                ),
            )
        )
        main_nth += 1

    main_slot()
    for chunk in chunks:
        for num, targets in chunk:
            idx = len(slots)
            nth = seen.get(num, 0)
            seen[num] = nth + 1
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
                        score=nth == 0,
                        prefill=nth == 0,
                        long_context=checked if nth == 0 else (),
                    ),
                )
            )
        main_slot()
    return slots
