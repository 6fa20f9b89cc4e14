"""reference:<model> — main and the PR against an independent implementation.

For a model with a reference dump (llama.cpp's teacher-forced pass over the evaluation text,
data/reference/; policy [accuracy] `reference`), both main's and the PR's score dumps are held
against it. The PR fails when its distance grows beyond main's by more than the allowance
(`reference_kl_excess` in KL, `reference_top1_drop` in top-1): a small drift that stays inside
the bars against main cannot pile up round after round. The reference is read from main's
commit of the engine repository, never from the PR's checkout.
"""

from __future__ import annotations

import functools
import json
import subprocess

from collector.judge.accuracy import AccuracyError, compare_dumps
from collector.judge.gates.base import GateContext, GateResult

KIND = "reference"
GIT_TIMEOUT_S = 30


@functools.cache
def reference_dump(repo: str, commit: str, path: str) -> dict | None:
    """The reference document at main's commit, or None where it cannot be read."""
    try:
        res = subprocess.run(
            ["git", "show", f"{commit}:{path}"],
            cwd=repo,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        return json.loads(res.stdout) if res.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _slice(ref: dict, n_tokens: int) -> dict:
    """The reference's first positions, to match a dump of a shorter slice of the same text."""
    return {
        **ref,
        "tokens": ref["tokens"][:n_tokens],
        "positions": ref["positions"][: n_tokens - 1],
    }


def reference_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    if not ctx.policy.profile.applies(KIND):  # llama.cpp is no independent reference of itself
        return out
    rules = ctx.policy.accuracy
    for model in [*ctx.targets, *ctx.guards]:
        path = rules.reference.get(model)
        main_dumps = ctx.data.dumps.get(("main", 0, model), [])
        pr_dumps = ctx.data.dumps.get(("pr", ctx.pr, model), [])
        if not path or not main_dumps or not pr_dumps:
            continue  # no reference, or nothing to hold against it (the accuracy gates say why)
        gate = f"{KIND}:{model}"
        rnd = ctx.data.round
        ref = reference_dump(str(rnd["engine_repo"]), str(rnd["main_commit"]), path)
        if ref is None:
            out.skipped(gate, f"not judged: the reference {path} cannot be read at main's commit")
            continue
        main, pr = json.loads(main_dumps[0]), json.loads(pr_dumps[0])
        try:
            m = compare_dumps(_slice(ref, len(main["tokens"])), main)
            p = compare_dumps(_slice(ref, len(pr["tokens"])), pr)
        except (AccuracyError, KeyError) as e:
            out.skipped(gate, f"not judged: the reference cannot be compared ({e})")
            continue
        txt = (
            f"main top-1 {m.top1:.4f} · KL {m.kl:.5f}; PR top-1 {p.top1:.4f} · KL {p.kl:.5f} "
            f"against {path} over {p.n_tokens} tokens"
        )
        missed = []
        if p.kl > m.kl + rules.reference_kl_excess:
            missed.append(
                f"KL {p.kl - m.kl:+.5f} over main's (allowance {rules.reference_kl_excess:g})"
            )
        if p.top1 < m.top1 - rules.reference_top1_drop:
            missed.append(
                f"top-1 {p.top1 - m.top1:+.4f} under main's (allowance {rules.reference_top1_drop:g})"
            )
        if missed:
            out.failed(
                gate,
                f"further from the reference than main beyond the allowance: {'; '.join(missed)} ({txt})",
                f"{model} drifts from the independent reference: {'; '.join(missed)} ({txt})",
            )
        else:
            out.passed(gate, f"within the allowance of main's distance to the reference: {txt}")
    return out
