"""floor — no target axis significantly below the floor (guards have their own gate).

An axis fails when every part of the floor rule holds (rules.loss_shortfall): PR under
floor x main, its interval wholly below 0, past its noise band, and in each PR session.
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.rules import below_floor_words, loss_in_words, loss_shortfall, pct, pct_of

KIND = "floor"


def floor_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    rules = ctx.policy.verdict
    compared = ctx.compared("target")
    if not compared:
        return out  # nothing compared: the run gates say why
    below = [c for c in compared if c.below_floor]
    if below:
        txt = "; ".join(loss_in_words(c, f"{c.axis} on {c.model}") for c in below)
        out.failed(
            KIND,
            f"{below_floor_words(rules)}: {txt}",
            f"regression below the {pct_of(rules.floor)} floor: {txt}",
            timed=True,
        )
        return out
    worst = min(compared, key=lambda c: c.delta)
    out.passed(
        KIND,
        f"no target axis significantly below the {pct_of(rules.floor)} floor "
        f"({len(compared)} compared): worst {pct(worst.delta)} ({worst.axis} on {worst.model}), "
        f"{loss_shortfall(worst, rules)}",
    )
    return out
