"""Suite-wide pytest set-up: tests marked `gpu` are skipped where CuPy has no usable GPU."""

from __future__ import annotations

import pytest


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
