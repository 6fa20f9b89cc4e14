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


Slotted = Sequence[tuple[int, float]]  # (slot in the round's schedule, a session's median)


def _neighbour_level(sessions: list[tuple[int, float]], slot: int) -> float | None:
    """Main's level at a point of the round: the geometric mean of the nearest main sessions
    before and after `slot` (one of them at either end), never the session at `slot` itself."""
    before = [v for s, v in sessions if s < slot]
    after = [v for s, v in sessions if s > slot]
    near = before[-1:] + after[:1]
    if not near:
        return None
    return float(np.exp(np.mean(np.log(near))))


def drift_free_spread(main: Slotted, outliers: int = 0) -> float:
    """Main-vs-main noise on one axis, the box's slow drift taken out.

    Sessions alternate main, PR, main …, so a box that slowly gets busier or quieter moves
    neighbouring sessions alike. Each main session is compared with its neighbours (see
    _neighbour_level); the noise is the largest such ratio, as max |log| -> exp - 1 (timing
    noise is multiplicative). With two sessions it is max / min - 1; 0 with fewer.
    `outliers`: leave out that many sessions first, the most deviant each time, as long as at
    least four others remain (one session in a burst of load then does not set the noise of a
    round of many; two such sessions still do).
    """
    sessions = sorted(main)
    for _ in range(outliers):
        if len(sessions) < 5:
            break
        devs = _deviations(sessions)
        worst = max(range(len(devs)), key=devs.__getitem__)
        sessions = sessions[:worst] + sessions[worst + 1 :]
    if len(sessions) < 2:
        return 0.0
    return float(np.exp(max(_deviations(sessions))) - 1.0)


def _deviations(sessions: list[tuple[int, float]]) -> list[float]:
    """|log| of each session over the level of its neighbours (itself left out)."""
    return [
        abs(np.log(value / _neighbour_level([x for x in sessions if x[0] != slot], slot)))  # type: ignore[operator]
        for slot, value in sessions
    ]


def local_ratios(main: Slotted, pr: Slotted) -> list[float]:
    """Each PR session's median over main's level at the same point of the round."""
    sessions = sorted(main)
    if not sessions:
        raise ValueError("main has no sessions")
    return [value / _neighbour_level(sessions, slot) for slot, value in pr]  # type: ignore[operator]


def is_implausible(main: Sequence[float], pr: Sequence[float], gain: float) -> bool:
    """A gain beyond `gain` x main that no noise explains: the PR's slowest sample is more than
    `gain` times main's fastest (so its median is too). A loaded box can make single runs of
    either side many times slower; only a claim this far outside main's whole range counts."""
    if not main or not pr:
        return False
    return min(pr) > gain * max(main)


def least_gain(main: Sequence[float], pr: Sequence[float]) -> float:
    """The PR's slowest sample over main's fastest: the smallest gain any pairing of their
    samples shows (what is_implausible holds against the implausible-gain guard)."""
    if not main or not pr:
        return 0.0
    return min(pr) / max(main)
