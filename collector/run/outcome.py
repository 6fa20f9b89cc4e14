"""A session's outcome in one place: its status, and whose fault it is.

A session's evidence comes from three places: the subprocess as it ended (`Run`: its exit, its
document, the tail of its log; runner.py), the box around it (what the session changed outside
its own folders: collector/run/sandbox.py), and the document's own evidence that the numbers are the
engine's honest work (the timing parent's cross-checks and the verification against main's model:
collector/judge/forgery.py). `judge` reads all of it, once, in this order:

  infra        the box: too little disk, the harness could not start, an infrastructure error
               message, no usable device, main's engine beside the PR's failed, or the box's own
               speed moved during the session (the canary): measured again, never judged
  forged       the session changed files outside its own folders, its engine worked while it was
               not its turn (from its ledger, or the timing parent caught it holding the GPU and
               ended the session: EXIT_FORGED), or its own clock disagrees with the timing
               parent's
  timeout      still running at the deadline (the whole process group killed)
  crash        a non-zero exit (exit code kept) or death by a signal (exit_code < 0)
  malformed    exit 0 but no document, an invalid one, or one that answers another request
  incomplete   a concurrent width (a concurrent session's, or a sweep's that measures them) with
               fewer complete runs than asked for
  diverged     the timed outputs are not main's model's within the accuracy bars
  implausible  the PR's slowest sample beyond implausible_gain x main's fastest beside it
  ok

Whose fault: none when ok; infra for the box, for any failure of main's own sessions, and for a
PR failing where main fails the same way in the round (`main_failed`); the PR's otherwise.
collector/README.md ("Failure classification") says what the verdict does with each.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from collector.judge.forgery import (
    canary_problem,
    clock_problem,
    diverged_evidence,
    idle_problem,
    implausible_claim,
    shared_device_problem,
)
from collector.run.runner import Request, Run
from collector.samples import compared_widths
from engine.cli_common import EXIT_BASELINE, EXIT_FORGED, EXIT_HARNESS, EXIT_USER_ERROR
from engine.harness.protocol import (
    BenchDocument,
    ConcurrentResult,
    PrefillCheckResult,
    ScoreResult,
    SweepResult,
)

if TYPE_CHECKING:
    from collector.policy import ResolvedPolicy
    from collector.schedule import Task

TIMED = ("sweep", "guard", "concurrent", "longctx")  # the speed sessions: main's harness times them
# Statuses that end a session for good; a session whose fault is 'infra' is tried again.
FINISHED = (
    "ok",
    "crash",
    "timeout",
    "malformed",
    "incomplete",
    "implausible",
    "forged",
    "diverged",
    "skipped",
)


@dataclass
class Outcome:
    """A judged session: what `writer.write_session` stores."""

    status: str
    fault: str  # none | pr | infra
    detail: str
    run: Run
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def document(self) -> BenchDocument | None:
        return self.run.document

    @property
    def may_be_flaky(self) -> bool:
        """A timeout, a death by signal or lost tokens may not recur at the same commit."""
        code = self.run.exit_code
        return self.status in ("timeout", "incomplete") or (
            self.status == "crash" and (code is None or code < 0)
        )


def skipped(started_at: datetime, detail: str) -> Outcome:
    """A PR session not run (policy.failures.stop_after): no fault of its own."""
    return Outcome("skipped", "none", detail, Run(started_at))


def judge(
    task: Task, req: Request, run: Run, policy: ResolvedPolicy, main_failed: bool = False
) -> Outcome:
    """The session's status and fault from all of its evidence (module docstring).
    `main_failed`: main's own session of the same kind and model failed in this round."""
    status, detail = _status(task, req, run, policy)
    if status == "ok":
        return Outcome(status, "none", detail, run)
    if status == "infra" or task.side == "main":
        return Outcome(status, "infra", detail, run)
    if main_failed and status not in ("implausible", "forged", "diverged"):
        return Outcome(status, "infra", detail + " (main fails the same way in this round)", run)
    return Outcome(status, "pr", detail, run)


def _status(task: Task, req: Request, run: Run, policy: ResolvedPolicy) -> tuple[str, str]:
    f = policy.failures
    if run.refused:
        return "infra", run.refused
    if any(re.search(p, run.log_tail, flags=re.IGNORECASE) for p in f.infra_patterns):
        return "infra", "infrastructure error: " + _last_line(run.log_tail)
    if run.box and task.side == "pr":
        return "forged", run.box
    if req.by_harness and run.exit_code in (EXIT_BASELINE, EXIT_USER_ERROR, EXIT_HARNESS):
        # the timing parent is main's pinned harness: main's engine beside the PR's failed, or
        # main's harness refused the request or failed in itself; none is the PR's doing
        why = _last_line(run.log_tail).removeprefix("error: ")
        who = "main's engine beside it" if run.exit_code == EXIT_BASELINE else "main's harness"
        return "infra", f"{who} failed: {why}"
    if req.timed and run.exit_code == EXIT_FORGED:  # main's harness caught it in the act
        return "forged", _last_line(run.log_tail).removeprefix("error: ")
    if run.exit_code is None:
        return "timeout", f"no answer within {req.timeout_s:.0f} s; killed"
    if run.exit_code < 0:
        return "crash", f"killed by {_signal_name(run.exit_code)}"
    if run.exit_code != 0:
        last = _last_line(run.log_tail)
        return "crash", f"exit code {run.exit_code}" + (f": {last}" if last else "")
    doc = run.document
    if doc is None:
        return "malformed", run.unreadable or "exited 0 without writing a JSON document"
    if req.backend in ("numpy", "cupy") and doc.device.backend != req.backend:
        return (
            "infra",
            f"no usable device: ran on {doc.device.backend}, the profile needs {req.backend}",
        )
    wrong = _answers_another(doc, req)
    if wrong:
        return "malformed", wrong
    guard = task.kind == "guard"
    if req.timed:
        short = [
            f"c{w.width}: {sum(r.complete for r in w.runs)}/{req.runs} complete runs"
            for w in compared_widths(doc, guard)
            if sum(r.complete for r in w.runs) < req.runs
        ]
        if short:
            return "incomplete", "lost tokens: " + ", ".join(short)
    if req.timed:
        moved = canary_problem(doc, policy.profile.canary_limit) or shared_device_problem(
            doc, policy.forgery
        )
        if moved:
            return "infra", moved
        if task.side == "pr":
            forged = idle_problem(doc, policy.forgery) or clock_problem(doc, policy.forgery)
            if forged:
                return "forged", forged
            outputs = diverged_evidence(doc, task.model, policy)
            if outputs:
                return "diverged", outputs
            claim = implausible_claim(doc, policy.verdict.implausible_gain, guard)
            if claim:
                return "implausible", claim
    return "ok", "ok"


def _answers_another(doc: BenchDocument, req: Request) -> str | None:
    """Why a valid document does not answer the request, or None."""
    if doc.model != req.model:
        return f"document is for model {doc.model!r}, asked for {req.model!r}"
    if isinstance(doc, SweepResult):
        got = tuple(c.ctx for c in doc.contexts)
        if got != req.contexts:
            return f"sweep contexts {list(got)}, asked for {list(req.contexts)}"
        if doc.reps != req.reps:
            return f"sweep reps {doc.reps}, asked for {req.reps}"
        widths = tuple(w.width for w in doc.widths)
        if widths != req.widths:
            return f"sweep widths {list(widths)}, asked for {list(req.widths)}"
    elif isinstance(doc, ConcurrentResult):
        got = tuple(w.width for w in doc.widths)
        if got != req.widths:
            return f"concurrent widths {list(got)}, asked for {list(req.widths)}"
        for w in doc.widths:
            for r in w.runs:
                if r.tokens_expected != w.width * doc.tokens:
                    return f"width {w.width}: tokens_expected {r.tokens_expected} != width x tokens"
                if r.tokens_decoded > r.tokens_expected:
                    return f"width {w.width}: decoded more tokens than expected"
    elif isinstance(doc, PrefillCheckResult):
        got = tuple(p.prefix for p in doc.prefixes)
        if got != req.prefixes:
            return f"prefill-check prefixes {list(got)}, asked for {list(req.prefixes)}"
    elif isinstance(doc, ScoreResult):
        for i, pos in enumerate(doc.positions):
            if len(pos.topk) > doc.topk:
                return f"position {i}: {len(pos.topk)} top-k entries, topk is {doc.topk}"
    beside = "main" if req.kind == "longctx" else "baseline"  # its own run, or its turns
    if req.timed and getattr(doc, beside, None) is None:
        return "the document carries no measurement of main's engine beside it"
    return None


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def with_attempts(run: Run, attempts: int) -> Run:
    return replace(run, attempts=attempts)
