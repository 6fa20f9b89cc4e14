"""Run one bench-protocol command in a checkout, and classify what came back.

Accuracy commands (score, prefill-check) run with cwd = PYTHONPATH = the checkout, so the PR's
engine is what runs (the harness files in it were rewritten from main). Speed commands (sweep,
concurrent) run the same way from main's checkout instead, with `--engine-checkout` naming the
PR's: the process that reads the clock runs main's pinned harness and never imports the PR's
code; the PR's engine runs in its child (engine/harness/timing.py). Its output is untrusted: the
document is read from --out (size-capped) and parsed strictly with engine.harness.protocol; stderr is
kept only as a short tail. Every run has a timeout; on expiry the whole process group is killed.

Classification (collector/README.md, "Failure classification"):
  ok           a valid document that answers the request
  crash        non-zero exit (exit code kept) or death by a signal (exit_code < 0)
  timeout      still running at the deadline (exit_code NULL)
  malformed    exit 0 but no document, an invalid one, or one that answers another request
  incomplete   a concurrent width with fewer complete runs than asked for
  implausible  decided by the collector against main (see collect.py)
  infra        the box: too little disk, no usable device, an infrastructure error message
A failure on main's side is never the PR's: the collector charges it to infrastructure.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from engine.harness.protocol import (
    BenchDocument,
    ConcurrentResult,
    PrefillCheckResult,
    ScoreResult,
    SweepResult,
    parse_document,
)

LOG_TAIL_BYTES = 4000


@dataclass(frozen=True)
class Request:
    """One harness command: what to run and what the answer must look like."""

    kind: str  # 'sweep' | 'concurrent' | 'score' | 'prefill-check' (a guard is a sweep)
    model: str
    argv: list[str]
    timeout_s: float
    contexts: tuple[int, ...] = ()
    reps: int = 0
    widths: tuple[int, ...] = ()
    runs: int = 0
    prefixes: tuple[int, ...] = ()
    backend: str = "auto"
    env: tuple[tuple[str, str], ...] = ()  # extra environment (the profile's)
    timed: bool = False  # a speed command: run from main's checkout, timing the PR's engine


@dataclass
class Outcome:
    status: str
    detail: str
    exit_code: int | None
    started_at: datetime
    wall_s: float
    log_tail: str
    document: BenchDocument | None = None
    attempts: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def may_be_flaky(self) -> bool:
        """A timeout, a death by signal or lost tokens may not recur at the same commit."""
        return self.status in ("timeout", "incomplete") or (
            self.status == "crash" and (self.exit_code is None or self.exit_code < 0)
        )


def free_disk_mb(path: Path) -> float:
    p = path
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free / 2**20


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _check_answer(doc: BenchDocument, req: Request) -> str | None:
    """Why a valid document does not answer the request, or None."""
    if doc.model != req.model:
        return f"document is for model {doc.model!r}, asked for {req.model!r}"
    if req.backend in ("numpy", "cupy") and doc.device.backend != req.backend:
        return None  # handled as infrastructure by the caller
    if isinstance(doc, SweepResult):
        got = tuple(c.ctx for c in doc.contexts)
        if got != req.contexts:
            return f"sweep contexts {list(got)}, asked for {list(req.contexts)}"
        if doc.reps != req.reps:
            return f"sweep reps {doc.reps}, asked for {req.reps}"
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
    return None


def run_request(
    req: Request,
    checkout: Path,
    work: Path,
    infra_patterns: list[str],
    min_free_disk_mb: float,
    max_document_mb: int,
    disk_paths: list[Path] | None = None,
    harness_checkout: Path | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run one harness command once and classify the result. A timed request runs from
    `harness_checkout` (main's) and measures the engine of `checkout`. `env`: variables the
    session's processes get on top of the request's (the collector's kernel caches)."""
    started = datetime.now(UTC).replace(tzinfo=None)
    for p in [work, *(disk_paths or [])]:
        free = free_disk_mb(p)
        if free < min_free_disk_mb:
            return Outcome(
                "infra", f"only {free:.0f} MB free on the disk of {p}", None, started, 0.0, ""
            )
    work.mkdir(parents=True, exist_ok=True)
    out_file, err_file = work / "out.json", work / "stderr.txt"
    for f in (out_file, err_file):
        f.unlink(missing_ok=True)
    t0 = time.monotonic()
    try:
        code = _run(req, checkout, harness_checkout, out_file, err_file, env or {})
    except OSError as e:
        return Outcome("infra", f"cannot start the harness: {e.strerror}", None, started, 0.0, "")
    wall = time.monotonic() - t0
    tail = _tail(err_file)
    status, detail, doc = _classify(req, code, tail, out_file, infra_patterns, max_document_mb)
    return Outcome(status, detail, code, started, wall, tail, doc)


def _run(
    req: Request,
    checkout: Path,
    harness_checkout: Path | None,
    out_file: Path,
    err_file: Path,
    extra_env: dict[str, str],
) -> int | None:
    """The subprocess, bounded by the request's timeout (its whole process group killed then);
    its exit code, or None when it was killed on timeout."""
    argv = [a.replace("{python}", sys.executable) for a in req.argv] + ["--out", str(out_file)]
    runs_in = checkout
    if req.timed:
        runs_in = harness_checkout or checkout
        argv += ["--engine-checkout", str(checkout)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(dict(req.env))
    env.update(extra_env)
    env["PYTHONPATH"] = str(runs_in)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with open(err_file, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=runs_in,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group: a timeout kills all of it
        )
        try:
            return proc.wait(timeout=req.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def _classify(
    req: Request,
    code: int | None,
    tail: str,
    out_file: Path,
    infra_patterns: list[str],
    max_document_mb: int,
) -> tuple[str, str, BenchDocument | None]:
    """(status, detail, document) of a finished run (module docstring: the classification)."""
    if any(re.search(p, tail, flags=re.IGNORECASE) for p in infra_patterns):
        return "infra", "infrastructure error: " + _last_line(tail), None
    if code is None:
        return "timeout", f"no answer within {req.timeout_s:.0f} s; killed", None
    if code < 0:
        return "crash", f"killed by {_signal_name(code)}", None
    if code != 0:
        last = _last_line(tail)
        return "crash", f"exit code {code}" + (f": {last}" if last else ""), None
    if not out_file.exists() or out_file.stat().st_size == 0:
        return "malformed", "exited 0 without writing a JSON document", None
    if out_file.stat().st_size > max_document_mb * 2**20:
        return "malformed", f"document larger than {max_document_mb} MB", None
    try:
        doc = parse_document(out_file.read_bytes(), req.kind)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "document"
        return "malformed", f"invalid {req.kind} document: {where}: {err['msg']}"[:400], None
    except ValueError as e:
        return "malformed", f"invalid {req.kind} document: {str(e)[:300]}", None
    if req.backend in ("numpy", "cupy") and doc.device.backend != req.backend:
        why = f"no usable device: ran on {doc.device.backend}, the profile needs {req.backend}"
        return "infra", why, None
    wrong = _check_answer(doc, req)
    if wrong:
        return "malformed", wrong, None
    if isinstance(doc, ConcurrentResult):
        short = [
            f"c{w.width}: {sum(r.complete for r in w.runs)}/{req.runs} complete runs"
            for w in doc.widths
            if sum(r.complete for r in w.runs) < req.runs
        ]
        if short:
            return "incomplete", "lost tokens: " + ", ".join(short), doc
    return "ok", "ok", doc
