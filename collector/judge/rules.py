"""The two tests of one axis, PR against main: a significant gain, a loss below the floor.

`compare.compare_axis` decides with them and the gates say why with them, so a gate's words
cannot part from its decision: each returns None when the axis passes every part of its test,
else the parts it misses, in words. The rules themselves are written in collector/README.md
("Verdict rules"); the numbers are the policy's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from collector.policy import VerdictRules

EPS = 1e-12  # rule boundaries are inclusive: a gain of exactly +2% clears the +2% gate


def pct(x: float) -> str:
    """A delta in words: +12.0%, -7.9%."""
    return f"{x * 100:+.1f}%"


def pct_of(fraction: float) -> str:
    """A fraction as a plain percentage: 98%, 3.5%."""
    return f"{fraction * 100:g}%"


class AxisEvidence(Protocol):
    delta: float  # median(PR) / median(main) - 1
    ci_low: float
    ci_high: float
    band: float  # VerdictRules.band of the axis's noise
    per_session: Sequence[float]  # each PR session's delta against main beside it
    confirmed: Sequence[float]  # the same, of its confirmation sessions alone


def gain_shortfall(c: AxisEvidence, rules: VerdictRules) -> str | None:
    """Why the axis is not a significant gain (under the gate; else every other part it
    misses); None when it is one."""
    if c.delta < rules.gate - EPS:
        return f"under the +{pct_of(rules.gate)} gate"
    misses = []
    if c.ci_low <= 0:
        misses.append(f"its interval {pct(c.ci_low)}..{pct(c.ci_high)} reaches 0")
    if 1 + c.delta <= c.band:
        misses.append(f"inside its {pct(c.band - 1)} noise band")
    worst = min(c.per_session)
    if worst < rules.gate - EPS:
        misses.append(f"one PR session at {pct(worst)} is under the +{pct_of(rules.gate)} gate")
    return _listed(misses)


def loss_shortfall(c: AxisEvidence, rules: VerdictRules) -> str | None:
    """Why the axis is not a loss below the floor (at or above it; else every other part it
    misses); None when it is one."""
    if 1 + c.delta >= rules.floor - EPS:
        return f"at or above the {pct_of(rules.floor)} floor"
    misses = []
    if c.ci_high >= 0:
        misses.append(f"its interval {pct(c.ci_low)}..{pct(c.ci_high)} reaches 0")
    if 1 + c.delta >= 1 / c.band:
        misses.append(f"inside its {pct(1 / c.band - 1)} noise band")
    # load on a shared box only ever slows a session: a real loss measured again is below the
    # floor past the band again (unless main's sessions beside it are slowed too); a burst that
    # hit the PR's planned sessions is not
    unconfirmed = [d for d in c.confirmed if 1 + d >= min(rules.floor, 1 / c.band) - EPS]
    best = max(c.per_session)
    if best >= rules.floor - 1 - EPS:
        who = "its confirmation session" if best in unconfirmed else "one PR session"
        misses.append(f"{who} at {pct(best)} is not below the {pct_of(rules.floor)} floor")
        unconfirmed = [d for d in unconfirmed if d != best]
    if unconfirmed:
        misses.append(
            f"its confirmation session at {pct(max(unconfirmed))} is not below the "
            f"{pct_of(rules.floor)} floor past its noise band"
        )
    return _listed(misses)


def _listed(parts: list[str]) -> str | None:
    """'a', 'a and b', 'a, b and c'; None for no parts."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def below_floor_words(rules: VerdictRules) -> str:
    """The floor rule a failing axis broke, every part of it."""
    return (
        f"below the {pct_of(rules.floor)} floor, its interval wholly below 0, past its noise band "
        "and in every PR session"
    )


def loss_in_words(c: AxisEvidence, where: str) -> str:
    """A loss with the numbers the floor rule read."""
    again = "".join(f", confirmed at {pct(d)}" for d in c.confirmed)
    return (
        f"{where} {pct(c.delta)} (CI {pct(c.ci_low)}..{pct(c.ci_high)}, "
        f"noise band {pct(1 / c.band - 1)}{again})"
    )
