"""Run one bench-protocol command, sealed, and hand back what it left: a `Run` (outcome.py judges it).

Every command that runs a checkout's code runs inside the sandbox (engine/harness/sandbox.py,
bubblewrap: its own user, PID, network and IPC namespaces, the filesystem read-only but its own
folders). Accuracy commands (score, prefill-check) run the checkout itself in a sandbox, its
output written into the session's own `out` folder. Speed commands (sweep, concurrent, guard,
longctx) run main's pinned harness, the timing parent, from main's checkout and unsealed: it is
main's code, and it starts each engine in a sandbox of its own (`--sandbox`), the PR's from the
PR's checkout (`--engine-checkout`) and main's beside it (`--baseline-checkout`), taking turns.
The timing parent writes no file outside the session's folder, and never imports the PR's code.

Its output is untrusted: the document is read from `--out` (size-capped) and parsed strictly
with engine.harness.protocol; stderr is kept only as a short tail. Every run has a timeout; on
expiry the whole process group (and with it every sandbox, `--die-with-parent`) is killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from engine.harness.protocol import BenchDocument, parse_document
from engine.harness.sandbox import Sandbox, exit_status, library_paths
from engine.harness.turns import LOAD_CORES_ENV

LOG_TAIL_BYTES = 4000


@dataclass
class Run:
    """One harness subprocess as it ended, and what was found around it: nothing judged yet."""

    started_at: datetime
    wall_s: float = 0.0
    exit_code: int | None = None  # None: killed at its timeout (or never started: `refused`)
    log_tail: str = ""
    document: BenchDocument | None = None
    unreadable: str | None = None  # why its output is no document of the request's kind
    refused: str | None = None  # the box could not run it at all (disk, the harness not starting)
    attempts: int = 1
    box: str | None = None  # what the session changed outside its own folders
    stop_round: str | None = None  # a change the box cannot recover from: the round stops


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
    # run by main's harness with both engines' checkouts named, the PR's code only inside its
    # sandboxes (every timed command; a served engine's accuracy, server_score kld)
    beside_main: bool = False

    @property
    def by_harness(self) -> bool:
        """Run by main's harness (from main's checkout, or the collector's for a served engine),
        the engines' checkouts named; otherwise the command runs sealed in the PR's checkout."""
        return self.timed or self.beside_main

    one_core: bool = False  # all of its processes on one core (Profile.one_core)
    load_cores: int = 0  # a timed one's engines load on this many cores first (Profile.load_cores)


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


@dataclass(frozen=True)
class Place:
    """Where a round's sessions run on this box: main's checkout (the timing parent's), the
    work folder (each session's scratch and output), what seals every checkout's code, and the
    root of every side's compiled-kernel cache (main's, each PR's own: sandbox.kernel_cache)."""

    main_checkout: Path
    work: Path
    sandbox: str = "bwrap"  # engine.harness.sandbox.KINDS; 'none': --unsandboxed
    kernel_caches: Path | None = None
    # the harness's checkout where main's holds none (a served engine: the checkouts are its
    # builds, and the harness is the collector's own); None: main's checkout
    harness: Path | None = None

    @property
    def parent_checkout(self) -> Path:
        """Where the timing parent (main's harness) runs from."""
        return self.harness or self.main_checkout

    def cache(self, side: str, pr: int) -> Path | None:
        if self.kernel_caches is None:
            return None
        return self.kernel_caches / ("main" if side == "main" else f"pr-{pr}")

    def prepare_caches(self, side: str, pr: int) -> tuple[Path | None, Path | None]:
        """(main's cache, the side's own), each made a plain folder first (a PR may have left a
        link to another side's in place of its own); a PR's starts as a copy of main's, so the
        kernels it did not change are not compiled again."""
        main, own = self.cache("main", 0), self.cache(side, pr)
        if main is None or own is None:
            return main, own
        for path in (main, own):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                path.unlink()
            if not path.exists():
                if path != main and main.is_dir():
                    shutil.copytree(main, path, symlinks=True)
                path.mkdir(parents=True, exist_ok=True)
        return main, own


def run_request(
    req: Request,
    checkout: Path,
    place: Place,
    min_free_disk_mb: float,
    max_document_mb: int,
    disk_paths: list[Path] | None = None,
    side: str = "pr",
    pr: int = 0,
) -> Run:
    """Run one harness command once. A timed request runs main's harness from
    `place.main_checkout`, measuring the engine of `checkout` beside main's; any other runs the
    code of `checkout` in its sandbox. Nothing is judged here (outcome.judge)."""
    started = datetime.now(UTC).replace(tzinfo=None)
    for p in [place.work, *(disk_paths or [])]:
        free = free_disk_mb(p)
        if free < min_free_disk_mb:
            return Run(started, refused=f"only {free:.0f} MB free on the disk of {p}")
    out_dir, err_file = place.work / "out", place.work / "stderr.txt"
    shutil.rmtree(out_dir, ignore_errors=True)  # the last session's output (and anything else)
    out_dir.mkdir(parents=True)
    err_file.unlink(missing_ok=True)
    out_file = out_dir / "out.json"
    t0 = time.monotonic()
    try:
        argv, env, cwd = _command(req, checkout, place, out_file, side, pr)
        code = _run(
            argv, env, cwd, err_file, req.timeout_s, session_core() if req.one_core else None
        )
        if not req.by_harness:  # its own sandbox: a death by signal is its own
            code = exit_status(Sandbox(place.sandbox), code)
    except OSError as e:
        return Run(started, refused=f"cannot start the harness: {e.strerror or e}")
    wall = time.monotonic() - t0
    doc, unreadable = _read(out_file, req.kind, max_document_mb) if code == 0 else (None, None)
    return Run(started, wall, code, _tail(err_file), doc, unreadable)


def _command(
    req: Request, checkout: Path, place: Place, out_file: Path, side: str, pr: int
) -> tuple[list[str], dict[str, str] | None, Path]:
    """(argv, environment, cwd) of the request: the timing parent from main's checkout with
    each engine's checkout, sandbox and cache named; else the command sealed in `checkout`."""
    argv = [a.replace("{python}", sys.executable) for a in req.argv] + ["--out", str(out_file)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(dict(req.env))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    main_cache, own_cache = place.prepare_caches(side, pr)
    loading = load_cores(req.load_cores) if req.timed and req.one_core else []
    if loading:
        env[LOAD_CORES_ENV] = ",".join(map(str, loading))
    if req.by_harness:
        argv += ["--engine-checkout", str(checkout), "--sandbox", place.sandbox]
        argv += ["--scratch", str(place.work / "session")] if req.timed else []
        argv += ["--baseline-checkout", str(place.main_checkout)]
        for flag, cache in (("--engine-cache", own_cache), ("--baseline-cache", main_cache)):
            if cache is not None:
                argv += [flag, str(cache)]
        if main_cache is not None:  # the parent verifies with main's kernels
            env["CUPY_CACHE_DIR"] = str(main_cache)
        env["PYTHONPATH"] = str(place.parent_checkout)
        return argv, env, place.parent_checkout
    if own_cache is not None:
        env["CUPY_CACHE_DIR"] = str(own_cache)
    home = place.work / "home"
    shutil.rmtree(home, ignore_errors=True)
    writable = [home, out_file.parent, *([own_cache] if own_cache else [])]
    sealed = Sandbox(place.sandbox, gpu=req.backend != "numpy")
    argv, env = sealed.wrap(
        argv, checkout=checkout, writable=writable, env=env, python_path=library_paths([checkout])
    )
    return argv, env, checkout


def _read(out_file: Path, kind: str, max_document_mb: int) -> tuple[object | None, str | None]:
    """(document, None), or (None, why the output is not a document of `kind`)."""
    if not out_file.is_file() or out_file.stat().st_size == 0:
        return None, "exited 0 without writing a JSON document"
    if out_file.stat().st_size > max_document_mb * 2**20:
        return None, f"document larger than {max_document_mb} MB"
    try:
        return parse_document(out_file.read_bytes(), kind), None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "document"
        return None, f"invalid {kind} document: {where}: {err['msg']}"[:400]
    except ValueError as e:
        return None, f"invalid {kind} document: {str(e)[:300]}"


# A host's shards (one per GPU, eight at most) take its last cores as their sessions' cores
SHARD_CORES = 8


def load_cores(n: int) -> list[int]:
    """The cores a one-core session's engines load on before they are moved onto its core: the
    first `n` this process may use, never one of its last SHARD_CORES (so on a box of fewer
    cores, none: the engines load on the session's core)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[: max(len(cores) - SHARD_CORES, 0)][:n]


def session_core() -> int:
    """The core a one-core session runs on: the last this process may use, one further down per
    GPU index (the first of CUDA_VISIBLE_DEVICES, as Ray sets it for each shard), so that the
    shards of a round on one host's GPUs, each pinned, never share a core."""
    cores = sorted(os.sched_getaffinity(0))
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    offset = int(first) if first.isdigit() else 0
    return cores[-1 - offset % len(cores)]


def _run(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: Path,
    err_file: Path,
    timeout_s: float,
    core: int | None = None,
) -> int | None:
    """The subprocess, its stderr into `err_file` (`run_bounded`)."""
    with open(err_file, "wb") as err:
        return run_bounded(argv, env, cwd, subprocess.DEVNULL, err, timeout_s, core)


def run_bounded(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: Path | None,
    stdout: int | IO[Any],
    stderr: int | IO[Any],
    timeout_s: float,
    core: int | None = None,
) -> int | None:
    """A subprocess bounded by `timeout_s` (its whole process group killed then), on `core`
    alone when given (every process it starts inherits that); its exit code, or None when it was
    killed on timeout (or had no time left to start)."""
    if timeout_s <= 0:
        return None
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,  # its own process group: a timeout kills all of it
        preexec_fn=None if core is None else (lambda: os.sched_setaffinity(0, {core})),
    )
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
