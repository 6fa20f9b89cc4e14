"""accuracy:<model> and guard-accuracy:<model> — the PR's teacher-forced scores against main's,
per target model and per guard model (sparkinfer #294: a guard model's accuracy broke while its
target's held).

Top-1 agreement (near-ties within the bars' margin agree), KL(main || PR) and the perplexity
ratio over the evaluation text must each stay within the model's bars (policy [accuracy],
collector/judge/accuracy.py for the method).
A served engine's build is compared with main's build in one session (`kld`, its own tool's
logits over the same text).
"""

from __future__ import annotations

import json

from collector.judge.accuracy import AccuracyError, compare_dumps, of_kld
from collector.judge.gates.base import GateContext, GateResult
from collector.judge.rules import EPS
from collector.policy import AccuracyBars
from collector.results import AccuracyResult

KIND = "accuracy"
GUARD_KIND = "guard-accuracy"


def accuracy_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    roles = [(m, KIND) for m in ctx.targets] + [(m, GUARD_KIND) for m in ctx.guards]
    for model, kind in roles:
        gate = f"{kind}:{model}"
        tie = ctx.policy.accuracy.bars(model).top1_tie_nats
        if ctx.policy.profile.engine != "builtin":  # its builds compared in one session
            klds = ctx.data.klds.get(("pr", ctx.pr, model))
            if not klds:
                out.skipped(gate, f"not judged: the PR's build was not scored (see run:{model})")
                continue
            tie = tie if klds[0].top_gaps is not None else 0.0  # stored before the gaps
            _hold(out, gate, kind, model, of_kld(klds[0], tie), ctx, tie)
            continue
        if kind == GUARD_KIND and not ctx.data.dumps.get(("pr", ctx.pr, model)):
            continue  # a round stored before guards were scored
        main_dumps = ctx.data.dumps.get(("main", 0, model), [])
        pr_dumps = ctx.data.dumps.get(("pr", ctx.pr, model), [])
        if not main_dumps:
            out.warned(
                gate,
                "not judged yet: main's score dump is missing (infrastructure, pending)",
                f"main's score of {model} is missing",
            )
            continue
        if not pr_dumps:
            out.skipped(gate, f"not judged: the PR has no score dump (see run:{model})")
            continue
        try:
            acc = compare_dumps(json.loads(main_dumps[0]), json.loads(pr_dumps[0]), tie)
        except AccuracyError as e:
            out.failed(
                gate, f"the score dumps cannot be compared: {e}", f"accuracy on {model}: {e}"
            )
            continue
        _hold(out, gate, kind, model, acc, ctx, tie)
    return out


def _hold(
    out: GateResult,
    gate: str,
    kind: str,
    model: str,
    acc: AccuracyResult,
    ctx: GateContext,
    tie_nats: float,
) -> None:
    """The PR's accuracy on `model` against the model's bars (`tie_nats`: the near-tie margin
    its top-1 was counted with)."""
    out.accuracy[model] = acc
    missed, txt = judge(acc, ctx.policy.accuracy.bars(model), tie_nats)
    if missed:
        what = (
            f"accuracy vs main broke on {model}"
            if kind == KIND
            else f"no-regression guard {model}: accuracy broke (top-1 {acc.top1:.4f}, "
            f"KL {acc.kl:.4f})"
        )
        out.failed(
            gate,
            f"outside the bar on {', '.join(missed)}: {txt}",
            f"{what} ({', '.join(missed)}): {txt}",
        )
    else:
        out.passed(gate, f"within every bar: {txt}")


def judge(acc: AccuracyResult, bars: AccuracyBars, tie_nats: float) -> tuple[list[str], str]:
    """The measures outside their bar, and every measure against its bar in words."""
    checks = [
        (
            "top-1",
            acc.top1 >= bars.top1_min - EPS,
            f"top-1 {acc.top1:.4f}"
            + (f" (near-ties within {tie_nats:g} nats agree)" if tie_nats else ""),
            "≥",
            "<",
            bars.top1_min,
        ),
        ("KL", acc.kl <= bars.kl_max + EPS, f"KL {acc.kl:.5f}", "≤", ">", bars.kl_max),
        (
            "PPL",
            acc.ppl_ratio <= bars.ppl_ratio_max + EPS,
            f"PPL ×{acc.ppl_ratio:.4f} of main",
            "≤",
            ">",
            bars.ppl_ratio_max,
        ),
    ]
    words = " · ".join(
        f"{value} {ok_op if ok else bad_op} {bar:g}" for _, ok, value, ok_op, bad_op, bar in checks
    )
    return [name for name, ok, *_ in checks if not ok], f"{words} over {acc.n_tokens} tokens"
