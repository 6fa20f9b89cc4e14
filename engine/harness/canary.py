"""The box's own speed, right before and right after a session: a fixed workload the timing
parent times with no engine running (no engine process exists yet, or none is left).

A session whose canary moved more than the profile allows was measured on a box that changed
under it (a neighbour's load that lasted, a clock someone set, heat): the collector measures it
again and never judges it. The numbers are only the canary's own: the fastest of its runs (load
only ever slows a run). On the GPU a memory-bound device copy, shaped like a decode step; on the
CPU a small matrix product that stays in the core's own caches, so it follows the core's clock
and the load on it: a copy through memory was no canary on a 2-core VM (2026-12-03: an 8 MiB
copy moved -61%..+197% within one process, the 128 x 128 product -13%..+15%, beside the test
neighbour too; its placement in the host's shared cache is the host's).
"""

from __future__ import annotations

import time

import numpy as np

from engine.harness.protocol import CanaryReport

GPU_REPEATS = 15
GPU_BYTES = 256 * 2**20  # a device copy long enough for events, short beside a session
CPU_REPEATS = 50
CPU_N = 128  # float64 128 x 128: 384 KiB for both operands and the result, ~0.1 ms a product


def _cpu() -> tuple[str, float]:
    a = np.random.default_rng(0).standard_normal((CPU_N, CPU_N))
    out = np.empty_like(a)
    best = float("inf")
    for _ in range(CPU_REPEATS):
        t0 = time.perf_counter()
        np.matmul(a, a, out=out)
        best = min(best, time.perf_counter() - t0)
    return f"numpy {CPU_N} x {CPU_N} matrix product", best


def _gpu() -> tuple[str, float]:
    import cupy  # late: only on a GPU

    src = cupy.arange(GPU_BYTES // 8, dtype=cupy.float64)
    dst = cupy.empty_like(src)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(GPU_REPEATS):
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
