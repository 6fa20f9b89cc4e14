"""End to end with the real collector: a round on the collector's fake engine, then the site.

The collector's own fake engine (tests/collector/fake_engine) speaks the bench protocol; this
checks the contract between what the collector writes and what the site reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sitegen.build import build_site

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "collector" / "fake_engine"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
ENV.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
TITLE = "perf: <script>alert(1)</script> [x](javascript:alert(1)) {{ 7*7 }} | a | b |"


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        env=ENV,
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.skipif(not FAKE.is_dir(), reason="the collector's fake engine is not there")
def test_site_from_a_collected_round(tmp_path: Path) -> None:
    from collector.policy import default_policy_path
    from collector.run.collect import collect

    repo = tmp_path / "engine-repo"
    shutil.copytree(FAKE, repo)
    shutil.copy(
        REPO / "engine" / "harness" / "protocol.py", repo / "engine" / "harness" / "protocol.py"
    )
    policy = default_policy_path().read_text().replace("retry_wait_s = 2.0", "retry_wait_s = 0.0")
    (repo / "policy.toml").write_text(policy)
    (repo / ".gitignore").write_text("__pycache__/\n*.duckdb*\n.*.scratch/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "fake engine")
    git(repo, "checkout", "-q", "-b", "fast")
    behaviour = repo / "engine" / "fake_behavior.py"
    behaviour.write_text(behaviour.read_text() + '\nSPEED = {"tiny/decode": 1.12}\n')
    git(repo, "commit", "-qam", "faster")
    git(repo, "checkout", "-q", "main")
    (repo / "round.toml").write_text(
        'round = "e2e"\nengine_repo = "."\nbase_ref = "main"\npolicy = "policy.toml"\n'
        'profile = "cpu"\n\n[[pr]]\nnumber = 7\ntitle = '
        + repr(TITLE).replace("'", '"')
        + '\nauthor = "@everyone"\nlabels = ["<b>"]\ntargets = ["tiny"]\nref = "fast"\n'
    )
    db = tmp_path / "e2e.duckdb"
    assert collect(repo / "round.toml", db, progress=False) == 0

    out = tmp_path / "site"
    build_site(db, out, log=lambda _m: None)
    page = (out / "pr" / "7.html").read_text()
    assert "<script>alert(1)" not in page and "{{ 7*7 }}" not in page
    assert "&#60;script&#62;" in page  # the title, shown as text
    for heading in ("decode and prefill per context", "concurrent decode", "Gates and guards"):
        assert heading in page
    assert 'class="sb-chart"' in page
    home = (out / "index.html").read_text()
    assert "e2e" in home and 'href="pr/7.html"' in home
