"""One axis, PR against main: the comparison every gate reads.

Speed axes (`compare_axis`): every repetition of a PR's speed session is a pair, main's engine
and the PR's timed turn by turn in the same minutes (engine/harness/measure.py). Delta =
median(PR / main) - 1 over the pairs, with a bootstrap interval; the noise on the axis is the
one whose band spans `sessions_z` standard errors of the mean of the PR's sessions (each a new
pair of processes), a session's sd being the PR's own pooled with the round's
(`stats.moderated_sd`), never less than the profile's floor; each session's own delta (its
confirmation sessions also apart). Significance and the floor are decided by `rules.py` (words
and decision from one function). Memory axes (`compare_memory`): bytes, lower is better, never
a tier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from collector.judge.rules import EPS, gain_shortfall, loss_shortfall
from collector.judge.stats import (
    Pair,
    bootstrap_ratio_ci,
    is_implausible,
    least_gain,
    median,
    moderated_sd,
    seed_for,
    session_ratios,
)
from collector.policy import ResolvedPolicy
from collector.results import Comparison
from collector.schedule import is_confirmation


def compare_axis(
    policy: ResolvedPolicy,
    model: str,
    role: str,
    ax: str,
    pairs: Sequence[Pair],
    session_sd: float = 0.0,
) -> Comparison:
    """One axis, PR against main, from its pairs (slot, main's value, the PR's). A gain (or a
    loss) must also hold in each PR session alone: one pair of processes that drew a slow
    placement decides nothing. `session_sd`: how far one session strays on this kind of axis in
    the round (`stats.session_sds`, a log ratio), pooled with the PR's own sessions
    (`stats.moderated_sd`); the noise is `VerdictRules.round_noise` of that over the PR's
    sessions, never under the profile's floor."""
    v = policy.verdict
    d, lo, hi = bootstrap_ratio_ci(
        pairs, v.bootstrap_resamples, v.confidence, seed_for(v.bootstrap_seed, model, ax)
    )
    sessions = [(slot, median(q) - 1) for slot, q in session_ratios(pairs)]
    logs = [math.log1p(d) for _, d in sessions]  # each session's log median ratio
    sd = moderated_sd(logs, session_sd, v.sessions_prior_dof)
    noise = max(v.round_noise(sd, len(logs)), policy.profile.noise_floor(ax))
    main_vals = [m for _, m, _ in pairs]
    pr_vals = [p for _, _, p in pairs]
    c = Comparison(
        model=model,
        role=role,
        axis=ax,
        main_value=median(main_vals),
        pr_value=median(pr_vals),
        delta=d,
        ci_low=lo,
        ci_high=hi,
        noise=noise,
        tier="none",
        significant=False,
        below_floor=False,
        implausible=is_implausible(main_vals, pr_vals, v.implausible_gain),
        n_main=len(main_vals),
        n_pr=len(pr_vals),
        band=v.band(noise),
        per_session=tuple(d for _, d in sessions),
        confirmed=tuple(d for slot, d in sessions if is_confirmation(slot)),
        least_gain=least_gain(main_vals, pr_vals),
    )
    c.significant = gain_shortfall(c, v) is None
    c.tier = v.tier(d) if c.significant else "none"
    c.below_floor = loss_shortfall(c, v) is None
    return c


def compare_memory(
    policy: ResolvedPolicy, model: str, ax: str, main_vals: list[float], pr_vals: list[float]
) -> Comparison:
    """A memory axis (bytes, lower is better; role 'memory', never a tier): the PR uses too much
    when its median is above (1 + memory_growth) x main's and even its least reading is above
    main's most (beyond main's own range: memory moves a little between processes)."""
    main_med, pr_med = median(main_vals), median(pr_vals)
    growth = policy.profile.memory_growth
    delta = pr_med / main_med - 1
    return Comparison(
        model=model,
        role="memory",
        axis=ax,
        main_value=main_med,
        pr_value=pr_med,
        delta=delta,
        ci_low=min(pr_vals) / max(main_vals) - 1,
        ci_high=max(pr_vals) / min(main_vals) - 1,
        noise=max(main_vals) / min(main_vals) - 1,
        tier="none",
        significant=False,
        below_floor=delta > growth + EPS and min(pr_vals) > max(main_vals),
        implausible=False,
        n_main=len(main_vals),
        n_pr=len(pr_vals),
    )
