"""Every side's compiled-kernel cache, and what the box guard checks between sessions.

Sealed, a PR's processes see no cache but their own (engine/harness/sandbox.py; tests/engine).
Unsealed (--unsandboxed), the box guard is what finds a PR session that changed another side's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from collector.run.runner import Place, Request, _command
from collector.run.sandbox import BoxGuard
from collector.schedule import Task
from engine.harness.sandbox import Sandbox, bwrap_path
from engine.harness.timing import EngineSpec

MAIN = Task("r/main/score/tiny", "main", 0, 0, "score", "tiny")
PR_SWEEP = Task("r/pr-7/sweep/tiny", "pr", 7, 1, "sweep", "tiny")

TIMED = Request(
    "sweep", "tiny", ["{python}", "-m", "engine.harness.bench", "sweep"], 60, timed=True
)
SCORE = Request("score", "tiny", ["{python}", "-m", "engine.harness.score", "score"], 60)


def test_each_side_compiles_into_its_own_cache(tmp_path: Path) -> None:
    root = tmp_path / "kernel-cache"
    place = Place(tmp_path / "main", tmp_path / "work", "bwrap", root)
    (root / "main").mkdir(parents=True)
    (root / "main" / "k.cubin").write_text("main's\n")
    # a timed session: main's harness (the clock, the verifier) and main's engine beside the
    # PR's read main's cache; the PR's engine its own, which starts as a copy of main's
    argv, env, cwd = _command(TIMED, tmp_path / "pr", place, tmp_path / "out.json", "pr", 7)
    assert env and env["CUPY_CACHE_DIR"] == str(root / "main") and cwd == tmp_path / "main"
    assert argv[argv.index("--engine-cache") + 1] == str(root / "pr-7")
    assert argv[argv.index("--baseline-cache") + 1] == str(root / "main")
    assert argv[argv.index("--baseline-checkout") + 1] == str(tmp_path / "main")
    assert argv[argv.index("--sandbox") + 1] == "bwrap"
    assert (root / "pr-7" / "k.cubin").read_text() == "main's\n"
    # the PR's accuracy commands run its code, sealed: its own cache, the one folder it writes
    (tmp_path / "pr").mkdir()
    argv, env, _ = _command(SCORE, tmp_path / "pr", place, tmp_path / "out" / "out.json", "pr", 7)
    assert bwrap_path() in argv and "CUPY_CACHE_DIR" not in (env or {})
    assert argv[argv.index("CUPY_CACHE_DIR") + 1] == str(root / "pr-7")  # --setenv inside
    binds = {argv[i + 1] for i, a in enumerate(argv) if a == "--bind"}
    assert str(root / "pr-7") in binds and str(root / "main") not in binds
    # a link to main's in place of its own is replaced by a folder of its own
    shutil.rmtree(root / "pr-7")
    (root / "pr-7").symlink_to(root / "main")
    _command(TIMED, tmp_path / "pr", place, tmp_path / "out.json", "pr", 7)
    assert not (root / "pr-7").is_symlink() and (root / "pr-7").is_dir()


def test_the_engine_child_compiles_into_its_own_cache(tmp_path: Path) -> None:
    spec = EngineSpec(tmp_path, Sandbox("none"), tmp_path / "home", tmp_path / "pr-7")
    _, env = spec.command([sys.executable, "-c", "pass"])
    assert env["CUPY_CACHE_DIR"] == str(tmp_path / "pr-7")


@pytest.fixture
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BoxGuard:
    monkeypatch.setattr("collector.run.sandbox.trusted_roots", lambda: [])
    main = tmp_path / "main"
    main.mkdir()
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    root = tmp_path / "kernel-cache"
    place = Place(main, tmp_path / "work", "none", root)
    for side, pr in (("main", 0), ("pr", 7), ("pr", 8)):
        place.prepare_caches(side, pr)
    (root / "main" / "k.cubin").write_text("main's\n")
    (root / "pr-8" / "k.cubin").write_text("PR 8's\n")
    return BoxGuard(place, lambda line: None)


def test_a_pr_that_rewrites_anothers_compiled_kernels_is_caught(guard: BoxGuard) -> None:
    root = guard.kernel_caches
    assert root is not None
    guard.before_session()
    (root / "pr-7" / "mine.cubin").write_text("its own business\n")
    (root / "main" / "k.cubin").write_text("slower\n")
    (root / "pr-8" / "new.cubin").write_text("added\n")
    found = guard.after_session(PR_SWEEP, None)
    assert found is not None and "compiled kernels of main" in found
    assert not (root / "main").exists()  # wiped: main compiles again
    assert not (root / "pr-8" / "new.cubin").exists()  # added: removed
    assert (root / "pr-8" / "k.cubin").read_text() == "PR 8's\n"
    assert (root / "pr-7" / "mine.cubin").exists()


def test_a_file_added_to_mains_cache_is_kept(guard: BoxGuard) -> None:
    """Main's engine, timed beside the PR's, compiles into main's cache what it needs: an
    addition there is never a PR's fault, and it is kept (it would be compiled again)."""
    root = guard.kernel_caches
    assert root is not None
    guard.before_session()
    (root / "main" / "beside.cubin").write_text("compiled by main's engine\n")
    assert guard.after_session(PR_SWEEP, None) is None
    assert (root / "main" / "beside.cubin").exists() and (root / "main" / "k.cubin").exists()


def test_a_sealed_round_has_no_cache_walk(tmp_path: Path) -> None:
    """Sealed, a PR's process sees no other side's cache and no trusted file: nothing to walk."""
    main = tmp_path / "main"
    main.mkdir()
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    g = BoxGuard(Place(main, tmp_path / "work", "bwrap", tmp_path / "kc"), lambda line: None)
    assert g.kernel_caches is None and g.roots == []


@pytest.mark.parametrize(
    "tamper",
    [
        lambda root: shutil.rmtree(root / "main"),  # main's cache deleted: main recompiles slower
        lambda root: (root / "pr-8" / "k.cubin").write_text("slower\n"),  # a competitor's
        lambda root: (root / "main" / "k.cubin").unlink(),
    ],
    ids=["main-deleted", "competitor-rewritten", "main-binary-removed"],
)
def test_every_change_to_anothers_compiled_kernels_is_caught(
    guard: BoxGuard, tamper: Callable[[Path], object]
) -> None:
    root = guard.kernel_caches
    assert root is not None
    guard.before_session()
    tamper(root)
    found = guard.after_session(PR_SWEEP, None)
    assert found is not None and "compiled kernels of" in found


def test_a_build_changed_by_a_session_stops_the_round(tmp_path: Path) -> None:
    """A built engine's checkouts are builds, no git work trees: main's and another PR's are
    watched by stat, and a change stops the round (only a rebuild restores a build); a PR's own
    build is its own business."""
    builds = tmp_path / "builds"
    for name in ("main", "pr-7", "pr-8"):
        (builds / name / "bin").mkdir(parents=True)
        (builds / name / "bin" / "llama-server").write_text(f"{name}'s server\n")
    place = Place(builds / "main", tmp_path / "work", "bwrap", None, harness=tmp_path)
    mine, other = builds / "pr-7", builds / "pr-8"
    for tamper, found_words in (
        (lambda: (mine / "bin" / "llama-server").write_text("its own\n"), None),
        (lambda: (builds / "main" / "bin" / "llama-server").write_text("slower\n"), "main's build"),
        (lambda: (other / "bin" / "extra.so").write_text("added\n"), "another PR's checkout pr-8"),
    ):
        guard = BoxGuard(place, lambda line: None, (mine, other))
        guard.before_session()
        tamper()
        found = guard.after_session(PR_SWEEP, mine)
        if found_words is None:
            assert found is None and guard.stop_round is None
        else:
            assert found is not None and found_words in found, found
            assert guard.stop_round is not None and "only building it again" in guard.stop_round
