"""The box guard's compiled-kernel caches: every side its own, main's read by the timing parent."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from collector.sandbox import BoxGuard, kernel_cache_env
from collector.schedule import Task
from engine.harness.timing import ENGINE_KERNEL_CACHE

MAIN = Task("r/main/sweep/tiny", "main", 0, 0, "sweep", "tiny")
PR_SWEEP = Task("r/pr-7/sweep/tiny", "pr", 7, 1, "sweep", "tiny")
PR_SCORE = Task("r/pr-7/score/tiny", "pr", 7, 1, "score", "tiny")


def test_each_side_compiles_into_its_own_cache(tmp_path: Path) -> None:
    root = tmp_path / "kernel-cache"
    main_env = kernel_cache_env(root, MAIN, timed=True)
    assert main_env == {
        "CUPY_CACHE_DIR": str(root / "main"),
        ENGINE_KERNEL_CACHE: str(root / "main"),
    }
    (root / "main" / "k.cubin").write_text("main's\n")
    # a timed session: main's harness (the clock, the verifier) reads main's cache, the PR's
    # engine its own, which starts as a copy of main's
    timed = kernel_cache_env(root, PR_SWEEP, timed=True)
    assert timed == {"CUPY_CACHE_DIR": str(root / "main"), ENGINE_KERNEL_CACHE: str(root / "pr-7")}
    assert (root / "pr-7" / "k.cubin").read_text() == "main's\n"
    # the PR's accuracy commands run its code in-process: its own cache
    assert kernel_cache_env(root, PR_SCORE, timed=False)["CUPY_CACHE_DIR"] == str(root / "pr-7")
    # a link to main's in place of its own is replaced by a folder of its own
    (root / "pr-7" / "k.cubin").unlink()
    (root / "pr-7").rmdir()
    (root / "pr-7").symlink_to(root / "main")
    kernel_cache_env(root, PR_SWEEP, timed=True)
    assert not (root / "pr-7").is_symlink() and (root / "pr-7").is_dir()


@pytest.fixture
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BoxGuard:
    monkeypatch.setattr("collector.sandbox.trusted_roots", lambda: [])
    main = tmp_path / "main"
    main.mkdir()
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    root = tmp_path / "kernel-cache"
    for task in (MAIN, PR_SWEEP, Task("r/pr-8/sweep/tiny", "pr", 8, 2, "sweep", "tiny")):
        kernel_cache_env(root, task, timed=True)
    (root / "main" / "k.cubin").write_text("main's\n")
    (root / "pr-8" / "k.cubin").write_text("PR 8's\n")
    return BoxGuard(main, lambda line: None, kernel_caches=root)


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


def test_a_file_added_to_mains_cache_is_removed_not_judged(guard: BoxGuard) -> None:
    """The timing parent compiles into main's cache what main's sessions never built (the first
    session of a resumed round): an addition there is removed, never a PR's fault."""
    root = guard.kernel_caches
    assert root is not None
    guard.before_session()
    (root / "main" / "verifier.cubin").write_text("compiled by main's harness\n")
    assert guard.after_session(PR_SWEEP, None) is None
    assert not (root / "main" / "verifier.cubin").exists()
    assert (root / "main" / "k.cubin").exists()
    # main's own sessions fill main's cache freely
    guard.before_session()
    (root / "main" / "more.cubin").write_text("main's\n")
    assert guard.after_session(MAIN, None) is None
    assert (root / "main" / "more.cubin").exists()


def test_the_engine_child_compiles_into_its_own_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.harness.timing import engine_env

    monkeypatch.setenv("CUPY_CACHE_DIR", "/cache/main")
    monkeypatch.setenv(ENGINE_KERNEL_CACHE, "/cache/pr-7")
    assert engine_env(Path("/pr-7"))["CUPY_CACHE_DIR"] == "/cache/pr-7"
    monkeypatch.delenv(ENGINE_KERNEL_CACHE)
    assert engine_env(Path("/pr-7"))["CUPY_CACHE_DIR"] == "/cache/main"


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
