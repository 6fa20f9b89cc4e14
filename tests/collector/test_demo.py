"""The demo round in data/demo: its manifest is valid, its patches still apply to HEAD (the
conflicting one still conflicts), and the round gives every PR its expected verdict."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "demo.toml"


def test_demo_manifest_is_complete() -> None:
    loaded = load_manifest(DEMO)
    prs = loaded.manifest.pr
    assert all(p.expect for p in prs), "every demo PR states the verdict it should get"
    expects = [p.expect for p in prs]
    for label in ("XL", "REJECT", "harness-touched", "needs-rebase", "none"):
        assert label in expects
    assert any("hold" in p.labels for p in prs)
    assert set(loaded.patches) == {p.number for p in prs}


def test_every_patch_applies_to_head_and_the_conflicting_one_conflicts(tmp_path: Path) -> None:
    """Checked against HEAD's tree through a scratch index: the working tree is not involved."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    subprocess.run(["git", "read-tree", "HEAD"], cwd=ROOT, env=env, check=True)
    loaded = load_manifest(DEMO)
    for p in loaded.manifest.pr:
        check = subprocess.run(
            ["git", "apply", "--cached", "--check", "--", str(loaded.patches[p.number])],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if p.expect == "needs-rebase":
            assert check.returncode != 0, f"PR #{p.number} should conflict with HEAD but applies"
        else:
            assert check.returncode == 0, (
                f"PR #{p.number}: {check.stderr.strip()} (run data/demo/make_patches.py)"
            )


def test_manifest_check_command() -> None:
    res = CliRunner().invoke(main, ["manifest", "check", str(DEMO)])
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_demo_round_gives_every_pr_its_expected_verdict(tmp_path: Path) -> None:
    """The whole demo round on this machine's CPU (the policy's cpu profile): a few minutes."""
    db = tmp_path / "demo.duckdb"
    res = CliRunner().invoke(main, ["collect", str(DEMO), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)
    got = {d["pr"]: d["label"] for d in out}
    want = {d["pr"]: d["expect"] for d in out}
    assert got == want, "\n".join(
        f"#{d['pr']}: {d['label']} (expected {d['expect']}): {d['reason']}"
        for d in out
        if d["label"] != d["expect"]
    )
    assert [d["pr"] for d in out if d["merge_first"]] == [101]  # 109 is held
