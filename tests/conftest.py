"""Suite-wide pytest set-up.

- One BLAS thread: the suite runs on 2-core machines, usually beside other work; OpenBLAS's
  spinning worker threads then slow NumPy matmuls down several times (measured: the SmolLM2
  batched-decode test took 10 s with 2 threads on a busy box, 2 s with 1). Set before NumPy
  is imported; an explicit OPENBLAS_NUM_THREADS in the environment wins. Subprocesses inherit it.
- Tests marked `gpu` are skipped where CuPy has no usable GPU.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    from engine.backends import gpu_problem

    problem = gpu_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {problem}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
