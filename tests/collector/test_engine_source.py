"""`sparkboard llama-cpp-source`: llama.cpp's tree out of a llama-cpp-python sdist, trimmed, as a
git repository of one commit that is the same on every box. The archives here are made by the
tests (no network): one shaped like the real sdist, and hostile ones."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.engine_source import SourceError, llama_cpp_repo

TOP = "llama_cpp_python-0.3.36"
pytestmark = pytest.mark.skipif(
    not hasattr(tarfile, "data_filter"), reason="Python before 3.11.4 has no tarfile data filter"
)


def sdist(tmp_path: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    path = tmp_path / f"{TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


REAL = {
    f"{TOP}/pyproject.toml": b"[project]\n",
    f"{TOP}/llama_cpp/__init__.py": b"",
    f"{TOP}/vendor/llama.cpp/CMakeLists.txt": b"project(llama.cpp)\n",
    f"{TOP}/vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp": b"int f() { return 1; }\n",
    f"{TOP}/vendor/llama.cpp/tools/server/server.cpp": b"int main() {}\n",
    f"{TOP}/vendor/llama.cpp/models/ggml-vocab-gpt-2.gguf": b"\0" * 64,
    f"{TOP}/vendor/llama.cpp/docs/build.md": b"# build\n",
    f"{TOP}/vendor/llama.cpp/tests/test-x.cpp": b"",
    f"{TOP}/vendor/llama.cpp/.github/workflows/ci.yml": b"",
    f"{TOP}/vendor/llama.cpp/scripts/sync.sh": b"",
    # the sdist's submodule link, which would make git look for a repository that is not there
    f"{TOP}/vendor/llama.cpp/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp\n",
}


def files_of(tree: Path) -> set[str]:
    return {
        str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts
    }


def test_the_vendored_tree_trimmed_is_one_commit_the_same_everywhere(tmp_path: Path) -> None:
    archive = sdist(tmp_path, REAL)
    a = llama_cpp_repo("0.3.36", tmp_path / "a", archive)
    b = llama_cpp_repo("0.3.36", tmp_path / "b", archive)
    assert a == b and len(a) == 40  # a fixed identity and date: the same commit on every box
    assert files_of(tmp_path / "a") == {
        "CMakeLists.txt",
        "ggml/src/ggml-cpu/ops.cpp",
        "tools/server/server.cpp",
        "scripts/sync.sh",
    }
    tags = subprocess.run(
        ["git", "tag"], cwd=tmp_path / "a", capture_output=True, text=True, check=True
    )
    assert tags.stdout.split() == ["llama-cpp-python-0.3.36"]


def test_the_command_prints_the_commit_and_refuses_a_used_folder(tmp_path: Path) -> None:
    archive = sdist(tmp_path, REAL)
    into = tmp_path / "repo"
    args = ["llama-cpp-source", "--release", "0.3.36", "--into", str(into), "--sdist", str(archive)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == llama_cpp_repo("0.3.36", tmp_path / "again", archive)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "exists: give a new folder" in res.output
    res = CliRunner().invoke(main, [*args[:2], "0.3", *args[3:]])
    assert res.exit_code == 1 and "not a version like 0.3.36" in res.output


def test_a_hostile_archive_writes_nothing_outside_its_folder(tmp_path: Path) -> None:
    evil = dict(REAL)
    evil[f"{TOP}/vendor/llama.cpp/../../../escaped.txt"] = b"x"
    with pytest.raises(SourceError, match="cannot unpack"):
        llama_cpp_repo("0.3.36", tmp_path / "x", sdist(tmp_path, evil))
    assert not (tmp_path / "escaped.txt").exists()
    (tmp_path / f"{TOP}.tar.gz").unlink()
    out = tmp_path / "y"
    links = {f"{TOP}/vendor/llama.cpp/ggml/link": "/etc/passwd"}
    with pytest.raises(SourceError, match="cannot unpack"):
        llama_cpp_repo("0.3.36", out, sdist(tmp_path, REAL, links))
    assert not (out / "ggml" / "link").exists()


def test_an_archive_without_the_tree_is_said(tmp_path: Path) -> None:
    archive = sdist(tmp_path, {f"{TOP}/pyproject.toml": b""})
    with pytest.raises(SourceError, match="has no llama_cpp_python-0.3.36/vendor/llama.cpp/CMake"):
        llama_cpp_repo("0.3.36", tmp_path / "z", archive)
    assert not (tmp_path / "z").exists()
