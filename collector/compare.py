"""One axis, PR against main: the comparison every gate reads.

Speed axes (`compare_axis`): delta = median(PR) / median(main) - 1 with a bootstrap interval,
the round's noise on the axis and the band it implies, each PR session against the main sessions
beside it (its confirmation sessions also apart); significance and the floor are decided by
`gates.rules` (words and decision from one function). Memory axes (`compare_memory`): bytes,
lower is better, never a tier.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.gates.base import EPS
from collector.gates.rules import gain_shortfall, loss_shortfall
from collector.policy import ResolvedPolicy
from collector.schedule import is_confirmation
from collector.stats import (
    Slotted,
    bootstrap_delta_ci,
    drift_free_spread,
    is_implausible,
    least_gain,
    local_ratios,
    median,
    seed_for,
)


@dataclass
class Comparison:
    model: str
    role: str  # target | guard
    axis: str
    main_value: float
    pr_value: float
    delta: float
    ci_low: float
    ci_high: float
    noise: float
    tier: str
    significant: bool
    below_floor: bool
    implausible: bool
    n_main: int
    n_pr: int
    # not stored: what the gates' words read
    band: float = 1.0  # VerdictRules.band(noise)
    per_session: tuple[float, ...] = ()  # each PR session's delta against main beside it
    confirmed: tuple[float, ...] = ()  # the same, of its confirmation sessions alone
    least_gain: float = 0.0  # the PR's slowest sample over main's fastest


def compare_axis(
    policy: ResolvedPolicy,
    model: str,
    role: str,
    ax: str,
    main_vals: list[float],
    pr_vals: list[float],
    main_sessions: Slotted,
    pr_sessions: Slotted | None = None,
) -> Comparison:
    """One axis, PR against main; sessions are (slot, median) pairs. A gain (or a loss) must
    also hold in each PR session alone, against main's sessions beside it: one session that ran
    during a burst of load elsewhere on the box decides nothing, and slow drift cancels."""
    v = policy.verdict
    d, lo, hi = bootstrap_delta_ci(
        main_vals,
        pr_vals,
        v.bootstrap_resamples,
        v.confidence,
        seed_for(v.bootstrap_seed, model, ax),
    )
    # the band is the planned round's: main's confirmation sessions only stand beside the PR's
    # (the largest of more deviations is larger, and would loosen the band for a confirmed PR)
    planned = [(slot, m) for slot, m in main_sessions if not is_confirmation(slot)]
    noise = max(drift_free_spread(planned, v.noise_outliers), policy.profile.noise_floor(ax))
    main_med = median(main_vals)
    per_session = (
        [r - 1 for r in local_ratios(main_sessions, pr_sessions)]
        if pr_sessions
        else [median(pr_vals) / main_med - 1]
    )
    confirmed = (
        [d for (slot, _), d in zip(pr_sessions, per_session, strict=True) if is_confirmation(slot)]
        if pr_sessions
        else []
    )
    c = Comparison(
        model=model,
        role=role,
        axis=ax,
        main_value=main_med,
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
        per_session=tuple(per_session),
        confirmed=tuple(confirmed),
        least_gain=least_gain(main_vals, pr_vals),
    )
    c.significant = gain_shortfall(c, v) is None
    c.tier = v.tier(d) if c.significant else "none"
    c.below_floor = loss_shortfall(c, v) is None
    return c


# Which sessions a shard's verdicts read: every PR's, and main's of that shard only (a PR is
# only ever compared with main measured on its own GPU). `x` is the sessions table.


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
