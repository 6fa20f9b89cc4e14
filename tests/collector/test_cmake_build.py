"""A checkout's build, sealed (collector/run/build.py), on a CMake project of three C files.

The same mechanism builds llama.cpp's server; a tiny project keeps the suite fast and tests
what matters: a PR that touches one file recompiles that file alone (main's compiler cache,
read-only to it), the compiler's own error lines on a failure, and a failure the box's only on
what the collector reads itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from collector.run.build import Build, Recipe, build, first_errors, tool_folders
from engine.harness.sandbox import Sandbox, SandboxError, probe

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("cc") is None, reason="needs cmake and cc"
)
RECIPE = Recipe(options=("-DCMAKE_BUILD_TYPE=Release",), targets=("hello",), jobs=2)
CMAKE = """cmake_minimum_required(VERSION 3.16)
project(hello C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(hello main.c a.c b.c)
"""
FILES = {
    "CMakeLists.txt": CMAKE,
    "main.c": "int a(void); int b(void);\nint main(void) { return a() + b() - 3; }\n",
    "a.c": "int a(void) { return 1; }\n",
    "b.c": "int b(void) { return 2; }\n",
}


def checkout(root: Path, name: str, **changed: str) -> Path:
    path = root / name
    path.mkdir()
    for f, text in {**FILES, **{k.replace("_", "."): v for k, v in changed.items()}}.items():
        (path / f).write_text(text)
    return path


def build_pr(src: Path, sandbox: Sandbox, timeout_s: float = 120, **kw: int) -> Build:
    """A PR's build of checkout `src`: its own build folder, main's cache beside it, read-only."""
    return build(src, src.parent / f"b-{src.name}", src.parent / "cc", RECIPE, sandbox, timeout_s,
                 writes_cache=False, **kw)  # fmt: skip


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    box = Sandbox("bwrap")
    try:
        probe(box, tmp_path_factory.mktemp("probe"))
    except SandboxError as e:
        pytest.skip(str(e))
    return box


def test_a_pr_recompiles_what_it_touched_and_takes_the_rest_from_mains_cache(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    if shutil.which("ccache") is None:
        pytest.skip("needs ccache (make test installs it where it can)")
    main = build(checkout(tmp_path, "main"), tmp_path / "b-main", tmp_path / "cc", RECIPE,
                 sandbox, 120, writes_cache=True)  # fmt: skip
    assert main.ok, main.errors
    assert (main.compiled, main.cached) == (3, 0)
    touched = "int b(void) { return 2 + 0; }\n"
    pr = build_pr(checkout(tmp_path, "pr", b_c=touched), sandbox)
    assert pr.ok and pr.binaries["hello"].is_file()
    assert (pr.compiled, pr.cached) == (1, 2)  # b.c alone; main.c and a.c as main built them
    # the PR's build stored nothing: the cache is main's alone
    again = build_pr(checkout(tmp_path, "pr2", b_c=touched), sandbox)
    assert (again.compiled, again.cached) == (1, 2)


def test_a_build_tool_outside_the_systems_folders_is_reachable_sealed(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box whose cmake is a pip package in a virtual environment (the device image's is
    /opt/torch/.venv/bin/cmake): the sandbox binds the system's folders alone, so the build
    binds the tool's install folder too, read-only."""
    real = shutil.which("cmake")
    assert real is not None
    tools = tmp_path / "opt" / "venv"
    (tools / "bin").mkdir(parents=True)
    wrapper = tools / "bin" / "cmake"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools / 'bin'}:{os.environ['PATH']}")
    assert str(tools) in tool_folders()
    # never the home folder (a tool in ~/bin): a PR's build could print what lies there
    home_bin = tmp_path / "home" / "bin"
    home_bin.mkdir(parents=True)
    (home_bin / "ninja").write_text("#!/bin/sh\n")
    (home_bin / "ninja").chmod(0o755)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{home_bin}:{os.environ['PATH']}")
    assert str(tmp_path / "home") not in tool_folders() and str(tools) in tool_folders()
    b = build_pr(checkout(tmp_path, "pr"), sandbox)
    assert b.ok, b.errors


def test_a_build_that_fails_is_the_prs_with_the_compilers_own_words(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    broken = checkout(tmp_path, "pr", a_c="int a(void) { return 1 }\n")
    out = build_pr(broken, sandbox)
    assert (out.status, out.fault) == ("failed", "pr")
    assert out.errors[0].startswith("a.c:1:") and "error" in out.errors[0]
    assert "/build/" not in out.errors[0]  # the checkout's own file names, not the sandbox's


def test_a_build_cannot_write_its_checkout(tmp_path: Path, sandbox: Sandbox) -> None:
    """A checkout whose CMakeLists writes into its own tree fails, and leaves nothing there."""
    writes = CMAKE + 'file(WRITE "${CMAKE_SOURCE_DIR}/planted.txt" "x")\n'
    src = checkout(tmp_path, "pr", CMakeLists_txt=writes)
    out = build_pr(src, sandbox)
    assert out.status == "failed" and not (src / "planted.txt").exists()
    assert any("CMake Error" in e for e in out.errors)


def test_a_build_past_its_deadline_is_killed_and_is_the_prs(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    slow = CMAKE + "execute_process(COMMAND sleep 30)\n"
    src = checkout(tmp_path, "pr", CMakeLists_txt=slow)
    out = build_pr(src, sandbox, timeout_s=3)
    assert (out.status, out.fault) == ("timeout", "pr") and out.seconds < 15


def test_the_builds_own_words_never_make_its_failure_the_boxs(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """A build that says the box failed it (a CMakeLists printing the words of a full disk, a
    compiler killed in its own sandbox) is still the PR's: only the free space the collector
    reads itself makes a failure the box's."""
    says = CMAKE + 'message(FATAL_ERROR "cc1: fatal error: No space left on device")\n'
    out = build_pr(checkout(tmp_path, "pr", CMakeLists_txt=says), sandbox)
    assert (out.status, out.fault) == ("failed", "pr")
    kills = CMAKE + 'execute_process(COMMAND sh -c "kill -9 $PPID")\n'
    out = build_pr(checkout(tmp_path, "pr2", CMakeLists_txt=kills), sandbox)
    assert (out.status, out.fault) == ("failed", "pr"), out
    broken = checkout(tmp_path, "pr3", a_c="int a(void) { return 1 }\n")
    full = build_pr(broken, sandbox, min_free_mb=2**40)
    assert (full.status, full.fault) == (
        "infra",
        "infra",
    ) and "free on the build disk" in full.errors[0]


def test_error_lines() -> None:
    log = "\n".join(
        [
            "[ 10%] Building C object a.o",
            "/build/src/a.c:3:5: error: expected ';' before '}' token",
            "/build/src/a.c:3:5: error: expected ';' before '}' token",
            "/usr/bin/ld: a.o: in function `main': undefined reference to `b'",
            "collect2: error: ld returned 1 exit status",
            "make[2]: *** [CMakeFiles/hello.dir/build.make:76: hello] Error 1",
        ]
    )
    errors = first_errors(log, strip=(Path("/build/src"),))
    assert errors[0] == "a.c:3:5: error: expected ';' before '}' token" and len(errors) == 4
