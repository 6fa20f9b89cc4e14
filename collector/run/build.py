"""A checkout's build, sealed: CMake from the checkout, main's compiler cache shared read-only;
and a round's builds (`build_round`: main's, then every PR's).

An engine that is built before it is served (llama.cpp: issue 30; the builtin engine is Python
and is not) is configured and built by CMake from its own checkout, inside the sandbox that
seals every checkout's code (engine/harness/sandbox.py): the checkout read-only, no network,
its build folder the only folder it may write.

The compiler cache (ccache, from the distribution) is written by main's build alone and read by
every PR's: a PR that touches one file recompiles that file and takes every other object from
main's. A PR's build sees the cache read-only (bound so, and `CCACHE_READONLY`): were it
writable, a PR's build could store an object under a key another checkout's build asks for
later and put its code into a competitor's engine.

A build ends in one of:
  ok        every target built
  failed    the compiler (or CMake) refused the checkout: the PR's fault, with the compiler's
            own first error lines for its page
  timeout   still building at the deadline (the whole sandbox killed): the PR's
  infra     the box: no CMake or no compiler on it, or too little free space left on the build
            disk (read from outside after the failure): built again, never judged

Only what the collector reads itself makes a failure the box's. The build's log is the PR's to
write (a CMakeLists can print "No space left on device", a compiler quotes the PR's source
lines) and its sandbox may kill its own compiler: were either believed, a PR could have its
failing build retried as the box's for ever and keep its round from finishing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from collector.errors import RoundError
from collector.judge.gates.build import BUILD_FAILED
from collector.policy import BuildRecipe
from collector.results import Candidate
from collector.run.runner import run_bounded
from engine.harness.sandbox import SYSTEM_PATHS, Sandbox, exit_status

Status = Literal["ok", "failed", "timeout", "infra"]
# where a sealed build sees its checkout, its build folder and the compiler cache
INSIDE = {"src": "/build/src", "build": "/build/out", "cache": "/build/ccache"}
PARALLEL_BUILDS = 4  # PRs' builds at once, after main's
ERROR_LINES = 8  # the compiler's first error lines kept for a PR's page
LOG_TAIL = 4000  # characters of the build's log kept beside them
CCACHE_LOG = "ccache.log"  # in the build folder: which objects were compiled, which taken
# a line that states an error: the compiler's (file:line:col: error: ...), the linker's, CMake's
ERROR_LINE = re.compile(
    r"(:\d+(:\d+)?: (fatal )?error\b)|(\bundefined reference to\b)|(^CMake Error\b)|"
    r"(^[\w.+-]+: (fatal )?error:)|(\bld returned \d+ exit status\b)|"
    r"(^g?make(\[\d+\])?: \*\*\*.*Error)",
    re.IGNORECASE,
)


# what a build runs, besides what the checkout's CMakeLists starts from these
BUILD_TOOLS = ("cmake", "ninja", "make", "cc", "c++", "gcc", "g++", "ccache", "nvcc")


def tool_folders() -> list[str]:
    """The install folders (the folder above `bin/`) of the build tools this box has outside the
    system's folders, which alone a sandbox binds: a pip cmake in a virtual environment, a
    compiler under /opt. Read-only in each build's sandbox; a PR's build may read them (and
    print them into its log, which its page shows), so never the home folder or one above it:
    a tool in ~/bin stays out of reach, and a build that needs it fails."""
    system = [Path(p) for p in SYSTEM_PATHS]
    home = Path.home().resolve()
    out: list[str] = []
    for tool in BUILD_TOOLS:
        found = shutil.which(tool)
        if found is None:
            continue
        for exe in (Path(found).absolute(), Path(found).resolve()):
            prefix = exe.parent.parent
            inside = any(prefix == s or s in prefix.parents for s in system)
            above_home = prefix == home or prefix in home.parents
            if not (inside or above_home) and str(prefix) not in out:
                out.append(str(prefix))
    return out


@dataclass(frozen=True)
class Recipe:
    """How a checkout of one engine kind is built: CMake options and the targets it serves and
    scores with (llama.cpp: llama-server, llama-perplexity)."""

    options: tuple[str, ...]
    targets: tuple[str, ...]
    jobs: int = 0  # parallel compiles; 0: every core this process may use

    @classmethod
    def of(cls, build: BuildRecipe) -> Recipe:
        """A profile's build recipe (policy `[profiles.NAME.build]`)."""
        return cls(tuple(build.options), tuple(build.targets), build.jobs)


@dataclass(frozen=True)
class Build:
    status: Status
    fault: Literal["none", "pr", "infra"]
    seconds: float
    errors: tuple[str, ...] = ()  # the compiler's first error lines (failed), or the box's words
    log_tail: str = ""
    binaries: dict[str, Path] = field(default_factory=dict)  # target -> the built executable
    compiled: int = 0  # objects compiled in this build
    cached: int = 0  # objects taken from main's compiler cache

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def first_errors(log: str, limit: int = ERROR_LINES, strip: tuple[Path, ...] = ()) -> list[str]:
    """The first `limit` lines of a build log that state an error, each once, with the build's
    own folders (`strip`) cut from the paths so a page shows the checkout's file names."""
    out: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        if not line or not ERROR_LINE.search(line):
            continue
        for prefix in strip:
            line = line.replace(f"{prefix}/", "")
        if line not in out:
            out.append(line[:400])
        if len(out) == limit:
            break
    return out


def box_problem(build_dir: Path, min_free_mb: int) -> str | None:
    """Why a failed build is the box's, from what this process reads itself: the free space
    left on the build disk; None otherwise."""
    free_mb = shutil.disk_usage(build_dir).free // 2**20
    if free_mb < min_free_mb:
        return f"{free_mb} MiB free on the build disk (under {min_free_mb})"
    return None


def build(
    checkout: Path,
    build_dir: Path,
    cache_dir: Path,
    recipe: Recipe,
    sandbox: Sandbox,
    timeout_s: float,
    *,
    writes_cache: bool,
    env: dict[str, str] | None = None,
    min_free_mb: int = 200,
) -> Build:
    """Configure and build `recipe.targets` of `checkout` into `build_dir`, sealed, within
    `timeout_s` seconds for both steps. `writes_cache`: main's build, the one that fills the
    compiler cache `cache_dir`; every other build only reads it. `min_free_mb`: a failure with
    less free space than this on the build disk is the box's (policy `min_free_disk_mb`)."""
    started = time.monotonic()
    absent = [tool for tool in ("cmake", "cc", "c++") if shutil.which(tool) is None]
    if absent:
        return Build("infra", "infra", 0.0, (f"{', '.join(absent)}: not installed on this box",))
    build_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    log_path = build_dir / "build.log"
    # sealed, every build sees its checkout, build folder and the cache at the same paths, so
    # the compiler is given the same arguments for the same source in every checkout
    host = {"src": checkout.resolve(), "build": build_dir.resolve(), "cache": cache_dir.resolve()}
    at = {host[k]: INSIDE[k] for k in host}
    path = {k: Path(INSIDE[k]) if sandbox.sealed else host[k] for k in host}
    base = dict(os.environ if env is None else env)
    launcher: list[str] = []
    if shutil.which("ccache"):
        base["CCACHE_DIR"] = str(path["cache"])
        base["CCACHE_TEMPDIR"] = str(path["build"] / "ccache-tmp")
        base.pop("CCACHE_READONLY", None)
        if not writes_cache:
            base["CCACHE_READONLY"] = "1"
        base["CCACHE_NOHASHDIR"] = "true"  # no debug info: the build folder's path is no input
        base["CCACHE_LOGFILE"] = str(path["build"] / CCACHE_LOG)
        (build_dir / CCACHE_LOG).unlink(missing_ok=True)
        # CUDA too: a CUDA build's kernels are most of its compile time (unused by a CPU build)
        langs = ("C", "CXX", "CUDA")
        launcher = [f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in langs]
    jobs = recipe.jobs or len(os.sched_getaffinity(0))
    cmake = shutil.which("cmake") or "cmake"  # the box's own, wherever it lies (tool_folders)
    steps = [
        [cmake, "-S", str(path["src"]), "-B", str(path["build"]), *launcher, *recipe.options],
        [cmake, "--build", str(path["build"]), "-j", str(jobs), "--target", *recipe.targets],
    ]
    # the cache is read-only to every build but main's (bound so, and CCACHE_READONLY)
    readable = () if writes_cache else (str(cache_dir),)
    readable = (*sandbox.readable, *readable, *tool_folders())
    sealed = Sandbox(sandbox.kind, gpu=False, readable=readable)
    writable = [build_dir] + ([cache_dir] if writes_cache else [])
    code: int | None = 0
    with log_path.open("w") as log:
        for argv in steps:
            left = timeout_s - (time.monotonic() - started)
            cmd, cmd_env = sealed.wrap(argv, checkout=checkout, writable=writable, env=base, at=at)
            code = run_bounded(cmd, cmd_env, None, log, subprocess.STDOUT, left)
            if code != 0:
                break
    text = log_path.read_text(errors="replace")
    seconds = time.monotonic() - started
    tail = text[-LOG_TAIL:]
    if code is None:
        return Build("timeout", "pr", seconds, (f"still building after {timeout_s:.0f} s",), tail)
    code = exit_status(sealed, code)
    if code != 0:
        why = box_problem(build_dir, min_free_mb)
        if why:
            return Build("infra", "infra", seconds, (why,), tail)
        errors = first_errors(text, strip=(path["build"], path["src"]))
        return Build("failed", "pr", seconds, tuple(errors or [f"exit code {code}"]), tail)
    binaries = {t: build_dir / "bin" / t for t in recipe.targets}
    absent = [t for t, p in binaries.items() if not p.is_file()]
    if absent:
        return Build("failed", "pr", seconds, (f"built no {', '.join(absent)}",), tail)
    return Build("ok", "none", seconds, (), tail, binaries, *cache_results(build_dir / CCACHE_LOG))


def cache_results(log: Path) -> tuple[int, int]:
    """(objects compiled, objects taken from the cache) in one build, from ccache's log; (0, 0)
    without one (no ccache on this box, or nothing to compile). Words for a page, never
    evidence: the log lies in the build folder, which the PR's build writes."""
    if not log.is_file():
        return 0, 0
    results = re.findall(r"Result: (\w+)", log.read_text(errors="replace"))
    hits = sum(r.endswith("cache_hit") for r in results)
    return sum(r == "cache_miss" for r in results), hits


def build_round(
    main: Path,
    candidates: list[Candidate],
    folder: Path,
    cache: Path,
    recipe: Recipe,
    sandbox: Sandbox,
    timeout_s: float,
    min_free_mb: int,
    log: Callable[[str], None],
) -> Path:
    """Every checkout of a round built into `folder`: main's first (it alone fills the compiler
    cache `cache`, kept from round to round), then each measurable PR's, reading it. Returns
    main's build; each built PR's candidate now names its build as the checkout its sessions
    measure, and a PR whose build failed is `build-failed`, the compiler's first lines its
    detail (the PR's REJECT). A build the box failed, or main's own failure, stops the round
    (RoundError): nothing can be judged against a main that does not build, and the box's
    failure is built again on the next run."""

    def one(name: str, checkout: Path, writes: bool) -> Build:
        log(f"  building {name} ({', '.join(recipe.targets)})")
        b = build(checkout, folder / name, cache, recipe, sandbox, timeout_s,
                  writes_cache=writes, min_free_mb=min_free_mb)  # fmt: skip
        took = f"{b.seconds:.0f} s, {b.compiled} compiled, {b.cached} from main's cache"
        log(f"    {name}: {b.status} ({took})" + (f": {b.errors[0]}" if b.errors else ""))
        if b.fault == "infra":
            raise RoundError(f"the box could not build {name}: {'; '.join(b.errors)}")
        return b

    mains = one("main", main, writes=True)
    if not mains.ok:
        raise RoundError(f"main's build {mains.status}: {' | '.join(mains.errors)}")
    built = [c for c in candidates if c.measurable and c.checkout is not None]
    # side by side: a PR's build mostly recompiles a file or two, one core's work each, and
    # configures (CMake alone) for seconds; each in its own sandbox, reading main's cache only
    with ThreadPoolExecutor(max_workers=max(1, min(len(built), PARALLEL_BUILDS))) as pool:
        futures = [pool.submit(one, f"pr-{c.pr}", c.checkout, False) for c in built]
        for c, future in zip(built, futures, strict=True):
            b = future.result()  # the box's failure (RoundError) is raised here
            if b.ok:
                c.checkout = folder / f"pr-{c.pr}"
            else:
                c.status, c.detail = BUILD_FAILED, "\n".join(b.errors)
    return folder / "main"
