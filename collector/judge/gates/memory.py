"""memory:<model> — the engine process's memory against main's, per target and guard model.

Memory is read from outside the engine process (engine/harness/memory.py): resident after the
model loaded (`mem-load`, `vram-load` on the GPU) and the most while each context was measured
(`mem-peak@ctx`, `vram-peak@ctx`). A target's full sweeps are held against main's full sweeps, a
guard's guard sweeps against main's guard sweeps of that model (verdict.compare_pr_memory): a PR
that keeps memory resident only for the models it does not target is caught too. Lower is better
and it earns no tier; a PR fails when its median is more than the profile's `memory_growth` above
main's and even its least reading is above main's most (compare.compare_memory, the one rule).
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.rules import pct, pct_of

KIND = "memory"


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def memory_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    growth = ctx.policy.profile.memory_growth
    for model in [*ctx.targets, *ctx.guards]:
        compared = ctx.compared("memory", model)
        if not compared:
            continue  # a round stored before memory was read from outside (or main's guard sweeps)
        gate = f"{KIND}:{model}"
        guard = model not in ctx.targets
        runs = " in its guard sweeps (against main's)" if guard else ""
        who = f"guard {model}" if guard else model
        over = [c for c in compared if c.below_floor]
        if over:
            txt = "; ".join(
                f"{c.axis} {mib(c.pr_value)} against main's {mib(c.main_value)} ({pct(c.delta)})"
                for c in over
            )
            out.failed(
                gate,
                f"more than {pct_of(growth)} above main's memory{runs}, beyond main's own range: "
                f"{txt}",
                f"{who} uses more memory than main allows (bar +{pct_of(growth)}): {txt}",
            )
            continue
        worst = max(compared, key=lambda c: c.delta)
        out.passed(
            gate,
            f"no memory axis more than {pct_of(growth)} above main's{runs} beyond its range "
            f"({len(compared)} compared): most {worst.axis} {mib(worst.pr_value)} against "
            f"{mib(worst.main_value)} ({pct(worst.delta)})",
        )
    return out
