"""Statistics of a comparison of paired runs: medians, the bootstrap interval of a delta, the
spread between a PR's sessions and how far one session strays on the box."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from collector.axes import is_memory_axis, parse_axis
from collector.results import Pair


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def delta_of(main: float, pr: float) -> float:
    """(PR - main) / main."""
    return (pr - main) / main


def seed_for(base_seed: int, *parts: str) -> int:
    """A stable per-comparison seed: the same samples always give the same interval."""
    return (base_seed ^ zlib.crc32("\x1f".join(parts).encode())) & 0xFFFFFFFF


def session_ratios(pairs: Sequence[Pair]) -> list[tuple[int, list[float]]]:
    """The paired ratios PR / main of each session, by slot, in schedule order."""
    by: dict[int, list[float]] = {}
    for slot, main, pr in pairs:
        by.setdefault(slot, []).append(pr / main)
    return sorted(by.items())


def bootstrap_ratio_ci(
    pairs: Sequence[Pair],
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Delta = median(PR / main) - 1 over every pair, and its percentile-bootstrap interval.

    The two values of a pair come from the same minutes (turn by turn), so their ratio is what
    is resampled; each session's pairs are resampled within the session (a session keeps its
    weight), and each resample's delta is the median of the pooled ratios - 1.
    """
    sessions = [np.asarray(q, dtype=np.float64) for _, q in session_ratios(pairs)]
    if not sessions:
        raise ValueError("no pairs to compare")
    point = float(np.median(np.concatenate(sessions))) - 1.0
    rng = np.random.default_rng(seed)
    drawn = [q[rng.integers(0, q.size, size=(resamples, q.size))] for q in sessions]
    deltas = np.median(np.concatenate(drawn, axis=1), axis=1) - 1.0
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(deltas, [alpha, 1.0 - alpha])
    return point, float(min(lo, point)), float(max(hi, point))


def session_spread(pairs: Sequence[Pair]) -> float:
    """How far the PR's sessions disagree: the largest session median ratio over the smallest,
    - 1 (timing noise is multiplicative); 0 with one session. Load, clocks and heat reach both
    engines of a pair alike; what is left between sessions is each pair of processes' own luck
    (placement, memory layout) and the few repetitions behind each median."""
    meds = [median(q) for _, q in session_ratios(pairs)]
    return max(meds) / min(meds) - 1.0 if len(meds) > 1 else 0.0


def _chi2_median_over_dof(dof: int) -> float:
    """The median of a chi-square variable over its degrees of freedom (Wilson-Hilferty: 0.471
    at one degree of freedom against the exact 0.455): a sample variance of `dof` degrees over
    this is a median-unbiased estimate of the variance."""
    return (1.0 - 2.0 / (9.0 * dof)) ** 3


def session_log_ratios(pairs: Sequence[Pair]) -> list[float]:
    """Each session's log median ratio PR / main, in schedule order."""
    return [float(np.log(median(q))) for _, q in session_ratios(pairs)]


def session_sds(pairs: Mapping[tuple, Sequence[Pair]]) -> dict[str, float]:
    """How far one session strays on this box, per kind of axis (decode, prefill, concurrent):
    `pairs` keyed (pr, model, axis, shape); the standard deviation of a session's log median
    ratio around its own group's (one PR, model, axis and shape), from every group measured in
    two sessions or more (a kind three such groups or more measured).

    Each group's sessions give a sample variance, scaled to estimate the variance unbiased in
    the median; the estimate is their median over groups. A PR's own two or three sessions can
    agree by chance where the box moves sessions by 20% (a 2-core VM, 2026-12-03: a no-op's three
    concurrent sessions read -6..-10% while other PRs' strayed 14-35%); the round's groups
    together say how far sessions stray here (every axis of a kind: an axis one PR measured, a
    guard's, borrows from the rest), and one PR cannot widen everyone's band by making its own
    sessions erratic (a median, not a mean)."""
    by_kind: dict[str, list[float]] = {}
    for (_pr, _model, ax, *_), ps in pairs.items():
        logs = session_log_ratios(ps)
        if len(logs) > 1 and not is_memory_axis(ax):
            var = float(np.var(logs, ddof=1)) / _chi2_median_over_dof(len(logs) - 1)
            by_kind.setdefault(parse_axis(ax)[0], []).append(var)
    return {k: float(np.sqrt(median(v))) for k, v in by_kind.items() if len(v) > 2}


def moderated_sd(logs: Sequence[float], round_sd: float, prior_dof: float) -> float:
    """A PR's session standard deviation on an axis: its own sessions' sample variance (n - 1
    degrees of freedom) pooled with the round's (`round_sd`, counted as `prior_dof` degrees):
    two or three sessions alone say little about their spread (they agree by chance, or one
    strays), the round's many say how far sessions stray here. The round's alone with one
    session; the PR's own alone where the round has none."""
    n = len(logs)
    own = float(np.var(logs, ddof=1)) if n > 1 else 0.0
    if round_sd <= 0:
        return float(np.sqrt(own))
    return float(np.sqrt(((n - 1) * own + prior_dof * round_sd**2) / (n - 1 + prior_dof)))


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
