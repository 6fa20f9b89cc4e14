"""The demo's A/A round (data/demo/aa-round.toml): main measured against itself on the real
engine with the policy's cpu profile, guards included. Every PR is main byte for byte, so no
axis may earn a tier, none may fall below the floor, and the accuracy gates must see identical
dumps (the NumPy backend is deterministic)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from neighbour import Neighbour

from collector.cli import main
from collector.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
AA = ROOT / "data" / "demo" / "aa-round.toml"


def test_aa_prs_are_main_byte_for_byte(tmp_path: Path) -> None:
    """Each PR is the base ref itself or a patch that applies to HEAD and adds only a note
    outside every path the engine runs from."""
    loaded = load_manifest(AA)
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    subprocess.run(["git", "read-tree", "HEAD"], cwd=ROOT, env=env, check=True)
    for p in loaded.manifest.pr:
        assert p.expect == "none"
        if p.ref is not None:
            assert p.ref == loaded.manifest.base_ref
            continue
        patch = str(loaded.patches[p.number])
        check = subprocess.run(
            ["git", "apply", "--cached", "--check", "--", patch],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr
        files = subprocess.run(
            ["git", "apply", "--numstat", "--", patch],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        paths = [ln.split("\t")[2] for ln in files if ln]
        assert paths and all(f.startswith("data/demo/") and f.endswith(".txt") for f in paths)


def aa_problems(out: list[dict]) -> list[str]:
    """What an A/A round got wrong: any tier, loss, implausible axis, failing gate, merge-first
    or accuracy difference (main against itself)."""
    wrong = []
    if [d["pr"] for d in out] != [p.number for p in load_manifest(AA).manifest.pr]:
        wrong.append(f"PRs {[d['pr'] for d in out]}")
    for d in out:
        bad = [
            f"{c['model']} {c['axis']} {c['delta']:+.1%} (noise {c['noise']:.1%}, tier {c['tier']})"
            for c in d["comparisons"]
            if c["tier"] != "none" or c["below_floor"] or c["implausible"]
        ]
        if bad:
            wrong.append(f"A/A PR #{d['pr']}: {'; '.join(bad)}")
        if d["label"] != "none":
            wrong.append(f"#{d['pr']}: {d['label']}: {d['reason']}")
        if d["merge_first"]:
            wrong.append(f"#{d['pr']}: merge-first")
        roles = {(c["model"], c["role"]) for c in d["comparisons"]}
        if {m for m, _ in roles} != {"tiny", "tiny:q8_0"}:  # targets and guards measured
            wrong.append(f"#{d['pr']}: measured {sorted(roles)}")
        gates = {g["gate"]: g["status"] for g in d["gates"]}
        if not all(s == "pass" for s in gates.values()):
            wrong.append(f"#{d['pr']}: gates {gates}")
        for acc in d["accuracy"]:  # identical engines give identical dumps
            if not (acc["top1"] == 1.0 and acc["kl"] < 1e-9):
                wrong.append(f"#{d['pr']}: accuracy {acc}")
    return wrong


def collect_aa(db: Path) -> list[dict]:
    res = CliRunner().invoke(main, ["collect", str(AA), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    return json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)


@pytest.mark.slow
@pytest.mark.timed
def test_aa_round_beside_a_noisy_neighbour(tmp_path: Path) -> None:
    """About two and a half minutes, while a neighbour takes the round's own core in irregular
    bursts (tests/support/neighbour.py; `make test` gives this test a core). Each A/A PR's engine
    is timed beside main's, turn by turn, so the load reaches both alike: still `none` on every
    axis, no PR forged or diverged, and a wrong round is a failure, never measured again. (A
    quiet box is the easier case; the round itself, `sparkboard collect data/demo/aa-round.toml`,
    calibrates one.)"""
    with Neighbour(duty=0.5, mean_burst_s=0.2, seed=2):
        wrong = aa_problems(collect_aa(tmp_path / "aa.duckdb"))
    assert not wrong, "\n".join(wrong)
