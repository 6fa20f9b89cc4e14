"""The GPU after an engine's turns (collector/judge/forgery.py: device_problem,
shared_device_problem), on readings shaped like the H200's of 2026-12-05: every turn's reading is
the probe's own first launch (0.2-0.3 ms, a little over the probe's idle bound, on both engines
alike), and another process's kernels land in a few turns of either engine."""

from __future__ import annotations

import random

from collector.judge.forgery import device_problem, shared_device_problem
from collector.policy import ForgeryRules
from engine.harness.protocol import IdleReport

RULES = ForgeryRules()
TURNS = 104  # a paired sweep of three contexts and three widths in four legs


def readings(seed: int, extra: float = 0.0, share: float = 1.0, spikes: int = 0) -> list[float]:
    """One engine's readings: the probe's own 0.2-0.3 ms after most turns (0 after some), plus
    `extra` seconds after `share` of them (work it left queued), plus `spikes` turns on which
    another process's kernels ran (6-25 ms)."""
    rng = random.Random(seed)
    out = [0.0 if rng.random() < 0.12 else rng.uniform(2.2e-4, 3.0e-4) for _ in range(TURNS)]
    for i in rng.sample(range(TURNS), round(share * TURNS)):
        out[i] += extra
    for i in rng.sample(range(TURNS), spikes):
        out[i] += rng.uniform(6e-3, 25e-3)
    return out


def idle(busy: list[float]) -> IdleReport:
    n = len(busy)
    return IdleReport(
        after_answer_s=[0.0] * n, while_stopped_s=[0.0] * n, stop_s=[1e-4] * n, device_busy_s=busy
    )


class Doc:  # what the rules read of a paired speed document
    def __init__(self, main: list[float]) -> None:
        self.baseline = type("Baseline", (), {"idle": idle(main)})()


def test_honest_engines_side_by_side_are_clean() -> None:
    """The H200's own readings (0.2-0.3 ms a turn) on both sides."""
    for seed in range(50):
        pr, main = idle(readings(seed)), idle(readings(seed + 1000))
        assert device_problem(pr, main, RULES) is None
        assert shared_device_problem(Doc(main.device_busy_s), RULES) is None


def test_another_processs_kernels_in_one_turn_are_not_the_prs() -> None:
    """The round of 2026-12-05 beside the GPU tests: one of the PR's turns read 20.5 ms, and an
    honest PR was called forged. One such turn of either engine is left out."""
    for seed in range(50):
        pr = idle(readings(seed, spikes=1))
        main = idle(readings(seed + 1000, spikes=1))
        assert device_problem(pr, main, RULES) is None
    pr = readings(7)
    pr[3] = 20.51e-3
    assert device_problem(idle(pr), idle(readings(8)), RULES) is None


def test_work_left_queued_after_most_turns_is_forged() -> None:
    for seed in range(20):
        pr = idle(readings(seed, extra=0.5e-3, share=0.6))
        why = device_problem(pr, idle(readings(seed + 1000)), RULES)
        assert why is not None and "works while it is not its turn" in why


def test_work_left_after_one_turn_of_each_repetition_of_an_axis_is_forged() -> None:
    """An axis of a four-leg session is four repetitions, two of the PR's turns each: work left
    queued after one turn of each (4 of 104 turns, 10 ms each) would make every repetition's
    fastest run a forged one. A spare of a share of the turns (a tenth: 11) hid it."""
    pr = readings(5)
    for i in (10, 36, 62, 88):
        pr[i] += 10e-3
    why = device_problem(idle(pr), idle(readings(6)), RULES)
    assert why is not None and "works while it is not its turn" in why


def test_work_left_queued_hides_neither_behind_spikes_nor_behind_mains_share() -> None:
    """A PR that leaves 2 ms after every turn and puts a long spike on its own readings is still
    read over its sum less one; main's one spike cannot cover it (it is left out too)."""
    pr = idle(readings(1, extra=2e-3, share=1.0, spikes=1))
    main = idle(readings(2, spikes=1))
    assert device_problem(pr, main, RULES) is not None


def test_without_main_beside_it_the_probes_own_time_is_not_counted() -> None:
    assert device_problem(idle(readings(3)), None, RULES) is None
    assert device_problem(idle(readings(3, extra=6e-3, share=0.5)), None, RULES) is not None


def test_a_device_busy_after_several_of_mains_turns_was_shared() -> None:
    """Main's engine is honest by definition and every other engine is stopped and drained
    before its turns: the device busy after more than one of them means something else used
    it. The session is measured again (`infra`), never judged on readings no engine can be
    blamed for. Main's own 1-2 ms now and then (the H200's) are not that."""
    main = readings(4)
    main[20], main[70] = 8e-3, 21e-3
    why = shared_device_problem(Doc(main), RULES)
    assert why is not None and "something beside the two engines" in why
    assert "2 of 104" in why
    main[20], main[70], main[90] = 1.5e-3, 1.71e-3, 2.18e-3
    assert shared_device_problem(Doc(main), RULES) is None
    assert shared_device_problem(Doc(readings(4, spikes=6)), RULES) is not None


def test_documents_without_device_readings_have_no_device_problem() -> None:
    assert device_problem(idle([]), idle([]), RULES) is None
    assert shared_device_problem(Doc([]), RULES) is None
    assert shared_device_problem(object(), RULES) is None


def test_a_session_the_timing_parent_ended_holding_the_gpu_is_the_prs_forgery() -> None:
    """A device held past the wait's deadline ends the session in the timing parent
    (timing.whose_device): its exit code says `forged` for a timed request, where no document
    carries the evidence; from a command the PR's own code ran, the same code is a crash."""
    from datetime import datetime

    from collector.policy import load_policy, resolve
    from collector.run.outcome import judge
    from collector.run.runner import Request, Run
    from collector.schedule import Task
    from engine.cli_common import EXIT_FORGED

    policy = resolve(load_policy(), "gpu")
    line = (
        "error: the engine process left work running on the GPU: the GPU stayed busy 10.0 s "
        "after a turn ended, and it was idle 0.41 s after the engine's processes were killed"
    )
    run = Run(datetime(2026, 12, 5), 30.0, EXIT_FORGED, "loading\n" + line + "\n")
    timed = Request("sweep", "llama-1b:f16", ["x"], 600, contexts=(128,), reps=2, timed=True)
    for side, status, fault in (("pr", "forged", "pr"), ("main", "forged", "infra")):
        task = Task("r/pr/1/1/sweep/m", side, 1, 1, "sweep", "llama-1b:f16")
        got = judge(task, timed, run, policy)
        assert (got.status, got.fault) == (status, fault)
        assert got.detail == line.removeprefix("error: ")
    untimed = Request("score", "llama-1b:f16", ["x"], 600)
    task = Task("r/pr/1/1/score/m", "pr", 1, 1, "score", "llama-1b:f16")
    assert judge(task, untimed, run, policy).status == "crash"
