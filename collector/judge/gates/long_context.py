"""long-context:<model> — the long-context memory check, PR against main (sparkinfer #1154).

The engine process is held to the profile's memory budget while it prefills the model's long
context and decodes a few tokens (engine/harness/longctx.py). Main must complete: if it does
not, the budget is wrong for this box, and the PR is not judged (pending). A PR that does not
complete where main does, or whose prefill there is below the floor against main's (beyond the
prefill's noise band: a fallback to a slower path), is a REJECT.

The prefill is a timing: a burst of load can fake that loss, so a PR failing on it alone is
measured again (a confirmation session, main's beside it) and judged on its fastest run against
main's slowest. Load only ever slows a run; a slower path is slow in each.
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.gates.memory import mib
from collector.judge.rules import pct, pct_of
from engine.harness.protocol import LongContextResult

KIND = "long-context"


def _peak(doc: LongContextResult) -> str:
    m = doc.measured.memory if doc.measured else None
    return (
        f"peak {mib(m.host_peak)}" + (f", device {mib(m.gpu_peak)}" if m and m.gpu_peak else "")
        if m
        else "no memory reading"
    )


def long_context_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    prof = ctx.policy.profile
    for model in ctx.targets:
        if model not in prof.long_context:
            continue
        gate = f"{KIND}:{model}"
        mains = [d for d in ctx.data.longctx.get(("main", 0, model), []) if d.completed]
        mine = ctx.data.longctx.get(("pr", ctx.pr, model), [])
        if not mine:
            out.skipped(gate, f"not judged: the PR has no long-context run (see run:{model})")
            continue
        failed = [d for d in mine if not d.completed]
        # memory is not load: any run that did not complete stands; else the fastest run counts
        doc = failed[0] if failed else max(mine, key=lambda d: d.prefill_tok_s or 0.0)
        where = f"{doc.ctx:,} tokens under a {mib(doc.budget_bytes)} budget"
        if not mains:
            out.warned(
                gate,
                f"not judged yet: main did not complete {where} (the budget does not fit this box: "
                "infrastructure, pending)",
                f"main could not complete the long-context check of {model}",
            )
            continue
        main_prefill = min(d.prefill_tok_s or 0.0 for d in mains)
        if not doc.completed:
            why = doc.failure or "it did not complete"
            out.failed(
                gate,
                f"did not complete {where} where main did ({_peak(mains[0])}): {why}",
                f"long-context memory check of {model}: the PR's engine cannot prefill {doc.ctx:,} "
                f"tokens and decode {doc.tokens} within {mib(doc.budget_bytes)}, where main "
                f"completes with {_peak(mains[0])} ({why})",
            )
            continue
        floor = ctx.policy.verdict.floor / ctx.policy.verdict.band(
            prof.noise_floor(f"prefill@{doc.ctx}")
        )
        ratio = (doc.prefill_tok_s or 0.0) / main_prefill
        best = f" (the fastest of its {len(mine)} runs)" if len(mine) > 1 else ""
        words = (
            f"prefill {doc.prefill_tok_s:,.0f} tok/s{best} against main's slowest "
            f"{main_prefill:,.0f} ({pct(ratio - 1)}); {_peak(doc)} against main's {_peak(mains[0])}"
        )
        if ratio < floor:
            out.failed(
                gate,
                f"completed {where}, but its prefill is below {floor:.0%} of main's: {words}",
                f"long-context check of {model}: under the {mib(doc.budget_bytes)} budget the "
                f"PR's prefill of {doc.ctx:,} tokens falls to {pct_of(ratio)} of main's (a slower "
                f"path): {words}",
                timed=True,
            )
            continue
        out.passed(gate, f"completed {where}, prefill at least {floor:.0%} of main's: {words}")
    return out
