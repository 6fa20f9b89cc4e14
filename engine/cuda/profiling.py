"""Measuring hooks on a CupyRunner (engine/tools/devcheck.py uses them): the time of each
kernel of one eager decode step or one prefill, and graph replays of the step with kernel
groups left out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np


def _kernel_times(launch: Any, issue: Callable[[], None]) -> dict[str, float]:
    """Microseconds per kernel name of what `issue` launches, each launch between two events."""
    launch.trace = []
    try:
        issue()
        launch.stream.synchronize()
        out: dict[str, float] = {}
        for name, a, b in launch.trace:
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b) * 1e3
    finally:
        launch.trace = None
    return out


def profile_step(runner: Any, rows: int = 1) -> dict[str, float]:
    """Microseconds per kernel name for one eager decode step (advances the rows by one): the
    step a decode of rows 0..rows-1 would take at their lengths (the short one where all are
    one attention split, DecodeStep.is_short)."""
    step, launch = runner.ready_step(), runner.launcher
    short = step.is_short(max(runner.seq_len(s) for s in range(rows)) + 1)

    def issue() -> None:
        with launch.stream:
            step.issue(rows, short)

    return _kernel_times(launch, issue)


def profile_prefill(runner: Any, n: int) -> dict[str, float]:
    """Microseconds per kernel name (cuBLAS GEMMs by shape) for one prefill of n random ids
    into a fresh sequence 0, after one untimed prefill of the same length."""
    rng = np.random.default_rng(2)
    runner.reset(1, n + 8)
    runner.prefill(0, rng.integers(0, 1000, n))
    runner.truncate(0, 0)
    runner.synchronize()
    return _kernel_times(runner.launcher, lambda: runner.prefill(0, rng.integers(0, 1000, n)))


def time_graph(
    runner: Any, rows: int, skip: tuple[str, ...] = (), reps: int = 50, short: bool = False
) -> float:
    """Milliseconds per replay of a decode-step graph captured without the `skip` kernels
    (kernel-name prefixes); short: the step of rows that are all one attention split.

    A measuring tool (leave-one-stage-out timings): the results of such a step are wrong,
    and each replay that keeps argmax_advance moves the rows on by one token.
    """
    step, launch = runner.ready_step(), runner.launcher
    stream = launch.stream
    launch.skip = tuple(skip)
    try:
        with stream:
            stream.begin_capture()
            try:
                step.issue(rows, short)
            finally:
                graph = stream.end_capture()
    finally:
        launch.skip = ()
    for _ in range(3):
        graph.launch(stream)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(stream)
    for _ in range(reps):
        graph.launch(stream)
    b.record(stream)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / reps
