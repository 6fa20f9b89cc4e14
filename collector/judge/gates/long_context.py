"""long-context:<model> — the long-context memory check, PR against main (sparkinfer #1154).

The engine process is held to the profile's memory budget while it prefills the model's long
context and decodes a few tokens (engine/harness/longctx.py); main's engine runs the same check
in the same session, alone under the same budget, right before or after the PR's. Main completes
there (a session where it cannot is main's failure, measured again, never the PR's). A PR that
does not complete, or whose prefill is below the floor against main's beside it (beyond the
prefill's noise band: a fallback to a slower path), is a REJECT.

The prefill is a timing: a burst of load can fake that loss, so a PR failing on it alone is
measured again (a confirmation session, main's run beside it again) and judged on its best
session. Load only ever slows a run; a slower path is slow in each.

Rounds before main ran beside the PR (documents without `main`) kept main's runs in sessions
of its own: there the PR's fastest run is held against main's slowest.
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.gates.memory import mib
from collector.judge.rules import pct, pct_of
from engine.harness.protocol import LongContextResult, MemoryReport

KIND = "long-context"


def _peak(m: MemoryReport | None) -> str:
    if m is None:
        return "no memory reading"
    return f"peak {mib(m.host_peak)}" + (f", device {mib(m.gpu_peak)}" if m.gpu_peak else "")


def _own_peak(doc: LongContextResult) -> str:
    return _peak(doc.measured.memory if doc.measured else None)


def _against_main(
    mine: list[LongContextResult], mains: list[LongContextResult]
) -> tuple[LongContextResult, float, str] | None:
    """The PR's run that counts, its prefill over main's, and the comparison in words: against
    main's run beside it in the same session (its best session), else (older rounds) its fastest
    run against the slowest of main's own sessions; None where main has no run to hold it to."""
    paired = [d for d in mine if d.main is not None]
    if paired:
        ratios = [(d.prefill_tok_s or 0.0) / d.main.prefill_tok_s for d in paired]  # type: ignore[union-attr]
        i = max(range(len(paired)), key=ratios.__getitem__)
        doc, main = paired[i], paired[i].main
        assert main is not None
        against = f"main's {main.prefill_tok_s:,.0f} beside it"
        best = f", its best of {len(paired)} sessions" if len(paired) > 1 else ""
        main_peak = _peak(main.memory)
        ratio = ratios[i]
    else:
        done = [d for d in mains if d.completed]
        if not done:
            return None
        doc = max(mine, key=lambda d: d.prefill_tok_s or 0.0)
        slowest = min(d.prefill_tok_s or 0.0 for d in done)
        against = f"main's slowest {slowest:,.0f}"
        best = f", the fastest of its {len(mine)} runs" if len(mine) > 1 else ""
        main_peak = _own_peak(done[0])
        ratio = (doc.prefill_tok_s or 0.0) / slowest
    words = (
        f"prefill {doc.prefill_tok_s:,.0f} tok/s against {against} ({pct(ratio - 1)}{best}); "
        f"{_own_peak(doc)} against main's {main_peak}"
    )
    return doc, ratio, words


def long_context_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    prof = ctx.policy.profile
    for model in ctx.targets:
        if model not in prof.long_context:
            continue
        gate = f"{KIND}:{model}"
        mains = ctx.data.longctx.get(("main", 0, model), [])
        mine = ctx.data.longctx.get(("pr", ctx.pr, model), [])
        if not mine:
            out.skipped(gate, f"not judged: the PR has no long-context run (see run:{model})")
            continue
        failed = [d for d in mine if not d.completed]
        where = f"{mine[0].ctx:,} tokens under a {mib(mine[0].budget_bytes)} budget"
        # memory is not load: any run that did not complete stands, where main completed
        main_done = failed[0].main if failed else None
        if failed and (main_done is not None or any(d.completed for d in mains)):
            doc = failed[0]
            why = doc.failure or "it did not complete"
            main_peak = (
                _peak(main_done.memory)
                if main_done
                else _own_peak(next(d for d in mains if d.completed))
            )
            out.failed(
                gate,
                f"did not complete {where} where main did ({main_peak}): {why}",
                f"long-context memory check of {model}: the PR's engine cannot prefill {doc.ctx:,} "
                f"tokens and decode {doc.tokens} within {mib(doc.budget_bytes)}, where main "
                f"completes with {main_peak} ({why})",
            )
            continue
        held = None if failed else _against_main(mine, mains)
        if held is None:
            out.warned(
                gate,
                f"not judged yet: main did not complete {where} (the budget does not fit this box: "
                "infrastructure, pending)",
                f"main could not complete the long-context check of {model}",
            )
            continue
        doc, ratio, words = held
        floor = ctx.policy.verdict.floor / ctx.policy.verdict.band(
            prof.noise_floor(f"prefill@{doc.ctx}")
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
