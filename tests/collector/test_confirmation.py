"""The confirmation steps of a round (collect.confirm_round): step 0 times again every PR whose
planned verdict rests on speed or was left open on it; each later step, up to the profile's
`open_confirm_sessions`, one session more of the PRs every session so far leaves open, in slots
of its own, chosen from the sessions before it (so a resumed round runs only what it lacks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_guard_shape import _round as stored_round

from collector.judge import verdict as verdict_mod
from collector.policy import load_policy, resolve
from collector.run.collect import confirm_round
from collector.schedule import CONFIRM_SLOTS, Task, confirmation_start, plan_round
from collector.store.evidence import RoundData

POLICY = resolve(load_policy(), "cpu")
PRS = [(1, ["tiny"]), (2, ["tiny"]), (3, ["tiny"])]


class FakeRun:
    """RoundRun's still_to_run over a set of finished session ids, and a `run` that finishes
    what it is given (or leaves `failing` of it to retry)."""

    def __init__(self, failing: int = 0) -> None:
        self.finished: set[str] = set()
        self.runs: list[list[Task]] = []
        self.failing = failing

    def still_to_run(self, plans):  # noqa: ANN001, ANN201
        return [
            [t for s in plan for t in s.tasks if t.session_id not in self.finished]
            for plan in plans
        ]

    def run(self, todo: list[list[Task]]) -> int:
        tasks = [t for shard in todo for t in shard]
        self.runs.append(tasks)
        self.finished |= {t.session_id for t in tasks}
        return self.failing


def chosen_by_step(
    monkeypatch: pytest.MonkeyPatch, by_step: dict[int, dict[int, list[str]]]
) -> list:
    """verdict.to_confirm answering `by_step[step]` (what the stored sessions would say)."""
    asked: list[int] = []

    def to_confirm(store, round_id, shard, prs, step=0):  # noqa: ANN001, ANN202
        asked.append(step)
        return {n: c for n, c in by_step.get(step, {}).items() if n in prs}

    monkeypatch.setattr(verdict_mod, "to_confirm", to_confirm)
    return asked


def confirm(fake: FakeRun, log: list[str]) -> int:
    plans = [plan_round("r", PRS, POLICY.profile)]
    return confirm_round(None, "r", plans, PRS, POLICY, fake, log.append, fake.run)  # type: ignore[arg-type]


def test_a_pr_left_open_is_timed_once_more_a_step_until_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PR 1 held a tier and PR 2 was left open on the planned sessions; after the confirmation,
    PR 2 alone is still open, then resolved: one step more, one session, in its own slots."""
    assert POLICY.profile.open_confirm_sessions == 2
    asked = chosen_by_step(monkeypatch, {0: {1: ["tiny"], 2: []}, 1: {2: []}})
    fake, log = FakeRun(), []
    assert confirm(fake, log) == 0
    assert asked == [0, 1, 2]  # step 2 chose nobody: no more
    step0, step1 = fake.runs
    assert {(t.pr, t.slot) for t in step0} == {(1, CONFIRM_SLOTS), (2, CONFIRM_SLOTS + 1)}
    assert ("longctx", 1) in {(t.kind, t.pr) for t in step0}  # its short prefill, again
    assert {(t.pr, t.slot) for t in step1} == {(2, confirmation_start(1))}
    assert {t.kind for t in step1} == {"sweep", "concurrent", "guard"}
    assert log == [
        "confirming PR #1, #2: verdicts that rest on speed or that it left open",
        "confirming PR #2: still open",
    ]
    # resumed: the same choices from the same sessions, nothing run again
    fake.runs.clear()
    assert confirm(fake, []) == 0 and fake.runs == []


def test_the_steps_stop_at_the_profiles_count_and_at_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    always = {step: {3: []} for step in range(5)}
    chosen_by_step(monkeypatch, always)
    fake = FakeRun()
    assert confirm(fake, []) == 0
    assert [t.slot for run in fake.runs for t in run if t.kind == "sweep"] == [
        confirmation_start(step) for step in range(1 + POLICY.profile.open_confirm_sessions)
    ]
    asked = chosen_by_step(monkeypatch, always)
    failing = FakeRun(failing=1)  # a session left to retry: the next step waits for it
    assert confirm(failing, []) == 1 and asked == [0] and len(failing.runs) == 1


def test_a_step_is_chosen_from_the_sessions_before_its_slots(tmp_path: Path) -> None:
    sessions = [("sweep", 2, slot, "m", 100.0, 106.0) for slot in (1, 3)]
    sessions += [("sweep", 2, CONFIRM_SLOTS + 1, "m", 100.0, 104.0)]
    sessions += [("sweep", 2, confirmation_start(1), "m", 100.0, 107.0)]
    with stored_round(tmp_path / "r.duckdb", sessions) as store:

        def slots(**scope: object) -> list[int]:
            data = RoundData(store, "r", **scope)  # type: ignore[arg-type]
            return sorted({slot for ps in data.pairs.values() for slot, _, _ in ps})

        assert slots(planned=True) == slots(before=confirmation_start(0)) == [1, 3]
        assert slots(before=confirmation_start(1)) == [1, 3, CONFIRM_SLOTS + 1]
        assert slots() == [1, 3, CONFIRM_SLOTS + 1, confirmation_start(1)]
