"""run:<model> — did every session of the PR on a model (and main's beside it) finish?

A PR failure that may be the box (timeout, death by signal, lost tokens) is a strike, a REJECT
only when the same failure recurs at the same commit in `strikes_to_reject` rounds; an error
exit, garbage output or an implausible claim is the code itself, a REJECT at once; a failure
of the infrastructure, or of main, is never a REJECT: the PR is pending.
"""

from __future__ import annotations

from typing import NamedTuple

from collector.judge.gates.base import Gate, GateContext, GateResult
from collector.results import SessionRecord, Strike

KIND = "run"


def is_flaky(session: SessionRecord) -> bool:
    """A failure the box can cause and that may not recur."""
    return session.status in ("timeout", "incomplete") or (
        session.status == "crash" and (session.exit_code is None or session.exit_code < 0)
    )


AT_ONCE = {
    "crash": "an error exit is a REJECT at once",
    "malformed": "output that is not the protocol's answer is a REJECT at once",
    "implausible": "a claim beyond the implausible-gain guard is a REJECT at once",
    "forged": "a forged measurement is a REJECT at once",
    "diverged": "a timed run that computed something else than main's model is a REJECT at once",
}


def run_gate(ctx: GateContext) -> GateResult:
    out = GateResult()
    for model in ctx.targets + ctx.guards:
        _one_model(ctx, model, out)
    return out


class Failure(NamedTuple):
    """One failed session of the PR, judged."""

    rejects: bool  # a REJECT now, else pending
    reason: str  # for the verdict's reason
    words: str  # for the gate's text
    strike: Strike | None = None  # to record


def _one_model(ctx: GateContext, model: str, out: GateResult) -> None:
    gate = f"{KIND}:{model}"
    every = [s for s in ctx.sessions if s.model == model]
    ran = [s for s in every if s.status != "skipped"]
    if every and not ran:
        out.skipped(gate, every[0].detail or "")
        return
    if not ran:
        out.warned(
            gate,
            f"not measured yet: none of the PR's sessions on {model} has run (pending)",
            f"{model} not measured yet",
        )
        return
    failures = [_failure(ctx, model, s) for s in ran if s.status != "ok"]
    failures += [
        Failure(
            False,
            f"main could not be measured on {model} {kind} (infrastructure, will retry)",
            f"main failed on {kind} and has no finished {kind} session (infrastructure, never "
            "a REJECT: retried)",
        )
        for kind in _main_kinds_missing(ctx, model)
    ]
    out.strikes += [f.strike for f in failures if f.strike]
    if not failures:
        finished = (
            "the PR's one session finished"
            if len(ran) == 1
            else f"all {len(ran)} of the PR's sessions finished"
        )
        if len(every) > len(ran):
            finished += f" ({len(every) - len(ran)} skipped)"
        out.passed(gate, f"{finished}, and main finished every kind it ran")
        return
    status = "fail" if any(f.rejects for f in failures) else "warn"
    out.gates.append(Gate(gate, status, "; ".join(f.words for f in failures)))
    out.hard += _first_of_each(ctx, model, [f for f in failures if f.rejects])
    out.soft += [f.reason for f in failures if not f.rejects]


def _first_of_each(ctx: GateContext, model: str, failures: list[Failure]) -> list[str]:
    """The verdict's reason names each kind of failure once (the gate's text lists them all):
    the first session's words, and in how many of the PR's sessions it happened."""
    by_kind: dict[str, list[str]] = {}
    for f in failures:
        key = f.reason.split(":", 1)[0]  # '<model> <kind> <status>'
        by_kind.setdefault(key, []).append(f.reason)
    return [
        reasons[0]
        + (f" (and in {len(reasons) - 1} more of its sessions)" if len(reasons) > 1 else "")
        for reasons in by_kind.values()
    ]


def _failure(ctx: GateContext, model: str, s: SessionRecord) -> Failure:
    what = f"{s.kind} {s.status}: {s.detail}"
    if s.fault == "infra":
        return Failure(
            False,
            f"{model} {s.kind}: infrastructure ({s.detail})",
            f"{what} (infrastructure, never a REJECT: retried)",
        )
    if is_flaky(s) and ctx.commit:
        return _strike(ctx, model, s, what)
    if s.status == "implausible":
        reason = f"{model} {s.kind}: broken measurement, {s.detail}"
    else:
        reason = f"{model} {s.kind} {s.status}: {s.detail}"
    return Failure(True, reason, f"{what} ({AT_ONCE.get(s.status, 'a REJECT at once')})")


def _strike(ctx: GateContext, model: str, s: SessionRecord, what: str) -> Failure:
    """A failure that may be flaky: a strike; enough of them at this commit, a REJECT."""
    key = f"{s.status}:{s.kind}:{model}"
    strike = Strike(ctx.pr, ctx.commit, key, ctx.data.round["round_id"], s.detail)
    count = ctx.data.prior_strikes.get((ctx.pr, ctx.commit, key), 0) + 1  # this round's too
    need = ctx.policy.verdict.strikes_to_reject
    if count >= need:
        return Failure(
            True,
            f"{model} {s.kind} {s.status} in {count} rounds at this commit ({s.detail})",
            f"{what} (strike {count} of {need}: the same failure in {count} rounds at this "
            "commit is a REJECT)",
            strike,
        )
    return Failure(
        False,
        f"{model} {s.kind} {s.status} (strike {count} of {need}; the same failure at this "
        "commit next round is a REJECT)",
        f"{what} (strike {count} of {need}: may be flaky, a REJECT only if it recurs at this "
        "commit)",
        strike,
    )


def _main_kinds_missing(ctx: GateContext, model: str) -> list[str]:
    """Kinds main failed on this model without a finished session of the same kind."""
    main = [s for s in ctx.data.sessions if s.side == "main" and s.model == model]
    ok = {s.kind for s in main if s.status == "ok"}
    return sorted({s.kind for s in main if s.status != "ok"} - ok)
