"""The box's own speed, right before and right after a session: a fixed workload the timing
parent times with no engine running (no engine process exists yet, or none is left).

A session whose canary moved more than the profile allows was measured on a box that changed
under it (a neighbour's load that lasted, a clock someone set, heat): the collector measures it
again and never judges it. The numbers are only the canary's own: the fastest of REPEATS runs
(load only ever slows a run), of a workload shaped like the engine's (memory-bound).
"""

from __future__ import annotations

import time

import numpy as np

from engine.harness.protocol import CanaryReport

REPEATS = 15
CPU_BYTES = 8 * 2**20  # a NumPy copy larger than the caches of a small box
GPU_BYTES = 256 * 2**20  # a device copy long enough for events, short beside a session


def _cpu_run(src: np.ndarray, dst: np.ndarray) -> float:
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t0


def _cpu() -> tuple[str, float]:
    src = np.arange(CPU_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = min(_cpu_run(src, dst) for _ in range(REPEATS))
    return f"numpy copy of {CPU_BYTES // 2**20} MiB", best


def _gpu() -> tuple[str, float]:
    import cupy  # late: only on a GPU

    src = cupy.arange(GPU_BYTES // 8, dtype=cupy.float64)
    dst = cupy.empty_like(src)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(REPEATS):
        start.record()
        cupy.copyto(dst, src)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    del src, dst
    cupy.get_default_memory_pool().free_all_blocks()
    return f"device copy of {GPU_BYTES // 2**20} MiB", min(times)


def time_canary(backend: str) -> tuple[str, float]:
    """(what was timed, its fastest run's seconds) on this box now."""
    return _gpu() if backend == "cupy" else _cpu()


class Canary:
    """Timed once at construction (before the engines start) and once by `after()`."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.workload, self.before_s = time_canary(backend)

    def after(self) -> CanaryReport:
        _, after_s = time_canary(self.backend)
        return CanaryReport(workload=self.workload, before_s=self.before_s, after_s=after_s)
