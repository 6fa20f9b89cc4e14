"""Fixtures: a throwaway git repo holding a fake engine (fake_repo.py), and a patch check."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_repo import HERE, REPO_ROOT, FakeRepo, git, test_policy_text

from collector.run import sandbox


@pytest.fixture
def fake_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRepo:
    # the box guard walks only sparkboard's own code between the fake engine's second-long
    # sessions (the interpreter's ~10^5 files: the demo round walks them)
    own = Path(sandbox.__file__).parent
    monkeypatch.setattr("collector.run.sandbox.trusted_roots", lambda: [own])
    repo = tmp_path / "engine-repo"
    shutil.copytree(HERE / "fake_engine", repo)
    shutil.copy(
        REPO_ROOT / "engine" / "harness" / "protocol.py",
        repo / "engine" / "harness" / "protocol.py",
    )
    (repo / "policy.toml").write_text(test_policy_text())
    (repo / ".gitignore").write_text("__pycache__/\n*.duckdb*\n.*.scratch/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "fake engine")
    return FakeRepo(repo)


@pytest.fixture
def applies_to_head(tmp_path: Path):  # noqa: ANN201
    """`git apply --check` of a patch against HEAD's tree (or another commit's), through a
    scratch index so the working tree is not involved: returns (applies, git's message)."""

    def check(patch: Path, commit: str = "HEAD") -> tuple[bool, str]:
        env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / f"index-{commit}")}
        subprocess.run(["git", "read-tree", commit], cwd=REPO_ROOT, env=env, check=True)
        r = subprocess.run(
            ["git", "apply", "--cached", "--check", "--", str(patch)],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        return r.returncode == 0, r.stderr.strip()

    return check
