"""guard:<model> — the PR's other models (its guards) must not fall below the floor either.

The same floor rule as the target axes (rules.loss_shortfall), on the guard context's
decode and prefill, each held against main's guard sweeps.
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.rules import below_floor_words, loss_in_words, loss_shortfall, pct, pct_of

KIND = "guard"


def guard_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    rules = ctx.policy.verdict
    for model in ctx.guards:
        gate = f"{KIND}:{model}"
        compared = ctx.compared("guard", model)
        below = [c for c in compared if c.below_floor]
        if below:
            txt = "; ".join(loss_in_words(c, c.axis) for c in below)
            out.failed(
                gate,
                f"{below_floor_words(rules)}: {txt}",
                f"guard {model} below the {pct_of(rules.floor)} floor: {txt}",
                timed=True,
            )
        elif compared:
            each = "; ".join(
                f"{c.axis} {pct(c.delta)}, {loss_shortfall(c, rules)}" for c in compared
            )
            out.passed(gate, f"none significantly below the {pct_of(rules.floor)} floor: {each}")
        else:
            out.warned(
                gate,
                f"not compared: no guard sweep of {model} from the PR, or none from main "
                f"(see run:{model}; pending)",
                f"guard {model} not measured",
            )
    return out
