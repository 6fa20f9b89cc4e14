"""Statistics of a comparison: medians, the bootstrap interval of a delta, main's own noise."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def delta_of(main: float, pr: float) -> float:
    """(PR - main) / main."""
    return (pr - main) / main


def seed_for(base_seed: int, *parts: str) -> int:
    """A stable per-comparison seed: the same samples always give the same interval."""
    return (base_seed ^ zlib.crc32("\x1f".join(parts).encode())) & 0xFFFFFFFF


def bootstrap_delta_ci(
    main: Sequence[float],
    pr: Sequence[float],
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Delta of the medians and its percentile-bootstrap interval.

    Main's and the PR's samples are resampled independently (they are independent runs);
    each resample's delta is median(PR*) / median(main*) - 1.
    """
    a = np.asarray(main, dtype=np.float64)
    b = np.asarray(pr, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need samples")
    point = delta_of(float(np.median(a)), float(np.median(b)))
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.size, size=(resamples, a.size))
    ib = rng.integers(0, b.size, size=(resamples, b.size))
    ratios = np.median(b[ib], axis=1) / np.median(a[ia], axis=1) - 1.0
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return point, float(min(lo, point)), float(max(hi, point))


def session_spread(session_medians: Sequence[float]) -> float:
    """Main-vs-main noise on one axis: max / min - 1 of main's per-session medians.

    A ratio, because timing noise is multiplicative (a busy box makes a run k times slower, not
    k tok/s slower); for a small spread it is about (max - min) / median. 0 with fewer than two
    sessions (no spread measured).
    """
    if len(session_medians) < 2:
        return 0.0
    v = np.asarray(session_medians, dtype=np.float64)
    return float(v.max() / v.min() - 1.0)


def is_implausible(main: Sequence[float], pr: Sequence[float], gain: float) -> bool:
    """A gain beyond `gain` x main that no noise explains: the PR's slowest sample is more than
    `gain` times main's fastest (so its median is too). A loaded box can make single runs of
    either side many times slower; only a claim this far outside main's whole range counts."""
    if not main or not pr:
        return False
    return min(pr) > gain * max(main)
