"""Random weight planes for the kernel benchmarks (gemvbench, phasebench).

The layout the engine's mat-vec kernels read (engine/cuda/geometry.py's WT_* types), with
values of a plausible size; the times do not depend on the values, and a benchmark that
compares two ways of running the kernels runs both over the same planes. Drawn on the device:
the 8B shapes' pools are gigabytes.
"""

from __future__ import annotations

from typing import Any

from engine.cuda.geometry import WT_F16, WT_NAMES, WT_Q4_0, WT_Q4_1, WT_Q8_0


def random_weight(cp: Any, rs: Any, wt: int, rows: int, cols: int) -> tuple[Any, Any]:
    """The (codes or values, scales or None) planes of a [rows, cols] weight of type wt, drawn
    from rs (a cupy.random.RandomState)."""
    if cols % 32:
        raise ValueError(f"weights need columns in multiples of 32, got {cols}")
    blocks = cols // 32
    if wt == WT_F16:
        return (rs.standard_normal((rows, cols), dtype=cp.float32) * 0.02).astype(cp.float16), None
    if wt == WT_Q8_0:
        q = rs.randint(-127, 128, size=(rows, cols), dtype=cp.int8)
        return q, (rs.random_sample((rows, blocks), dtype=cp.float32) * 0.01 / 127 + 1e-5).astype(
            cp.float16
        )
    if wt in (WT_Q4_0, WT_Q4_1):
        q = rs.randint(0, 256, size=(rows, cols // 2), dtype=cp.uint8)
        d = rs.random_sample((rows, blocks), dtype=cp.float32) * 0.01 / 8 + 1e-5
        s = d if wt == WT_Q4_0 else cp.stack([d, -8 * d], axis=-1)  # q4_1: scale, minimum
        return q, s.astype(cp.float16)
    raise ValueError(f"no random planes for weight type {WT_NAMES.get(wt, wt)}")
