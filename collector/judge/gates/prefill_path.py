"""prefill-path:<model> — batched prefill must agree with the token-by-token loop.

Per prefix of the prefill check: PR top-1 >= main top-1 - top1_margin, and PR KL <=
max(kl_factor x main KL, main KL + kl_margin) (policy [prefill_path]).
"""

from __future__ import annotations

from collector.judge.gates.base import GateContext, GateResult
from collector.judge.rules import EPS
from collector.policy import PrefillPathRules

KIND = "prefill-path"


def prefill_path_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    prof = ctx.policy.profile
    for model in ctx.targets:
        gate = f"{KIND}:{model}"
        if not prof.applies(KIND):
            out.skipped(gate, f"not applicable to the {prof.engine} engine (the rules page)")
            continue
        main = ctx.data.checks.get(("main", 0, model))
        pr = ctx.data.checks.get(("pr", ctx.pr, model))
        if not main:
            out.warned(
                gate,
                "not judged yet: main's prefill check is missing (infrastructure, pending)",
                f"main's prefill check of {model} is missing",
            )
        elif not pr:
            out.skipped(gate, f"not judged: the PR has no prefill check (see run:{model})")
        else:
            bad, parts = judge(main, pr, ctx.policy.prefill_path)
            if bad:
                txt = "; ".join(bad)
                out.failed(
                    gate,
                    f"disagrees with the token loop: {txt}",
                    f"batched prefill disagrees with the token loop on {model}: {txt}",
                )
            else:
                out.passed(gate, f"agrees with the token loop at every prefix: {'; '.join(parts)}")
    return out


def judge(
    main: dict[int, tuple[float, float]],
    pr: dict[int, tuple[float, float]],
    rules: PrefillPathRules,
) -> tuple[list[str], list[str]]:
    """(the prefixes that fail, in words; every prefix against its bars, in words)."""
    bad, parts = [], []
    for prefix in sorted(main):
        if prefix not in pr:
            bad.append(f"P={prefix}: missing from the PR's check")
            continue
        (mt, mk), (pt, pk) = main[prefix], pr[prefix]
        tbar = mt - rules.top1_margin
        kbar = max(rules.kl_factor * mk, mk + rules.kl_margin)
        top1_ok, kl_ok = pt >= tbar - EPS, pk <= kbar + EPS
        words = (
            f"P={prefix}: top-1 {pt:.3f} {'≥' if top1_ok else '<'} {tbar:.3f}, "
            f"KL {pk:.4f} {'≤' if kl_ok else '>'} {kbar:.4f}"
        )
        parts.append(words)
        if not (top1_ok and kl_ok):
            bad.append(words)
    return bad, parts
