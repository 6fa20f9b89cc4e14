"""memory:<model> — the engine process's memory against main's, per target model.

Memory is read from outside the engine process (engine/harness/memory.py): resident after the
model loaded (`mem-load`, `vram-load` on the GPU) and the most while each context was measured
(`mem-peak@ctx`, `vram-peak@ctx`). Lower is better and it earns no tier; a PR fails when its
median is more than the profile's `memory_growth` above main's and even its least reading is
above main's most (verdict.compare_memory).
"""

from __future__ import annotations

from collector.gates.base import GateContext, GateResult, pct, pct_of

KIND = "memory"


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def memory_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    growth = ctx.policy.profile.memory_growth
    for model in ctx.targets:
        compared = ctx.compared("memory", model)
        if not compared:
            continue  # a round stored before memory was read from outside
        gate = f"{KIND}:{model}"
        over = [c for c in compared if c.below_floor]
        if over:
            txt = "; ".join(
                f"{c.axis} {mib(c.pr_value)} against main's {mib(c.main_value)} ({pct(c.delta)})"
                for c in over
            )
            out.failed(
                gate,
                f"more than {pct_of(growth)} above main's memory, beyond main's own range: {txt}",
                f"{model} uses more memory than main allows (bar +{pct_of(growth)}): {txt}",
            )
            continue
        worst = max(compared, key=lambda c: c.delta)
        out.passed(
            gate,
            f"no memory axis more than {pct_of(growth)} above main's beyond its range "
            f"({len(compared)} compared): most {worst.axis} {mib(worst.pr_value)} against "
            f"{mib(worst.main_value)} ({pct(worst.delta)})",
        )
    return out
