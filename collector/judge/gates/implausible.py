"""implausible — a gain no noise explains is a broken measurement, not a speedup.

An axis fails when the PR's slowest sample is above implausible_gain x main's fastest
(stats.is_implausible); a loaded box can slow single repetitions of either side many times,
so only a claim beyond main's whole range counts. The gate is written only when it fails.
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult

KIND = "implausible"


def implausible_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    gain = ctx.policy.verdict.implausible_gain
    claims = [c for c in ctx.comparisons if c.implausible]
    if claims:
        txt = "; ".join(
            f"{c.axis} on {c.model}: the PR's slowest sample is {_times(c.least_gain, gain)} "
            "main's fastest"
            for c in claims
        )
        out.failed(
            KIND,
            f"beyond the {gain:g}x implausible-gain guard: {txt}",
            f"broken measurement: {txt} (beyond the {gain:g}x implausible-gain guard)",
        )
    return out


def _times(ratio: float, gain: float) -> str:
    """'1000.0x'; with more digits where one decimal would not show it is above `gain`."""
    short = f"{ratio:.1f}"
    return f"{short if float(short) > gain else f'{ratio:.6g}'}x"
