"""The demo round in data/demo: its manifest is valid, its patches still apply to HEAD (the
conflicting one still conflicts), and the round gives every PR its expected verdict."""

from __future__ import annotations

import json
import os
import subprocess
import warnings
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


# Verdicts that no timing can change: a patch that does not apply, one that edits the harness,
# a model that no longer computes the same thing, a crash. PR -> the gate that must fail.
DETERMINISTIC_GATES = {103: "accuracy:tiny", 107: "run:tiny"}
# Speed verdicts, and the comparisons that decide each: 101/109 gain on tiny's decode, 102 loses
# tiny's prefill, 104 slows its guard.
DECIDING_AXES = {
    101: lambda c: c.get("role") == "target" and c.get("axis", "").startswith("decode@"),
    109: lambda c: c.get("role") == "target" and c.get("axis", "").startswith("decode@"),
    102: lambda c: c.get("role") == "target" and c.get("axis", "").startswith("prefill@"),
    104: lambda c: c.get("role") == "guard",
}
# Each speed PR's effect on its deciding axes, measured interleaved with main on this box
# (data/demo/README.md). A speed verdict is asserted exactly when the round's noise leaves room
# for that effect: the band the rules apply, (1 + noise) ** multiplier, with 5% to spare. On a
# noisier box the collector, rightly, calls the gain `none` or misses the loss; a genuine
# speedup must still never be REJECTed, and a neutral PR (`none`) is held to its verdict at any
# noise, as in the A/A round.
# 101 measured +23..+31% across fresh-clone rounds: its lower end, so it is asserted only when
# the round's noise leaves room for that.
EFFECT = {101: 0.23, 109: 0.50, 102: -0.78, 104: -0.82}
NOISE_MULTIPLIER = 1.5  # policy.toml [verdict]; test_demo_effects_use_the_policy checks it
SPARE = 1.05


def decidable(pr: int, noise: float) -> bool:
    band = (1 + noise) ** NOISE_MULTIPLIER
    effect = 1 + EFFECT[pr]
    return effect > band * SPARE if effect > 1 else effect < 1 / (band * SPARE)


def test_demo_effects_use_the_policy() -> None:
    from collector.policy import load_policy

    assert load_policy().verdict.noise_multiplier == NOISE_MULTIPLIER
    assert decidable(101, 0.10) and not decidable(101, 0.237)
    assert decidable(102, 0.9) and decidable(109, 0.2)


def _deciding_noise(d: dict) -> float:
    pick = DECIDING_AXES.get(d["pr"], lambda c: True)
    noises = [c["noise"] for c in d["comparisons"] if pick(c)] or [
        c["noise"] for c in d["comparisons"]
    ]
    return max(noises, default=0.0)


def check_demo_round(out: list[dict]) -> list[str]:
    """What the demo round got wrong; each speed verdict judged only where main's noise allowed."""
    wrong, busy = [], []
    decided: set[int] = set()
    for d in out:
        n, label, expect = d["pr"], d["label"], d["expect"]
        gates = {g["gate"]: g["status"] for g in d["gates"]}
        if n in DETERMINISTIC_GATES and gates.get(DETERMINISTIC_GATES[n]) != "fail":
            wrong.append(f"#{n}: gate {DETERMINISTIC_GATES[n]} did not fail: {gates}")
        deterministic = expect in ("needs-rebase", "harness-touched", "none") or (
            n in DETERMINISTIC_GATES
        )
        noise = _deciding_noise(d)
        if deterministic or (n in EFFECT and decidable(n, noise)):
            decided.add(n)
            if label != expect:
                wrong.append(f"#{n}: {label} (expected {expect}): {d['reason']}")
            continue
        busy.append(f"#{n} (noise {noise:.0%})")
        if expect not in ("REJECT",) and label not in (expect, "none"):
            wrong.append(f"#{n}: {label} (expected {expect}, or none on a busy box): {d['reason']}")
    if 101 in decided:
        mf = [d["pr"] for d in out if d["merge_first"]]
        if mf != [101]:  # 109 carries more speed but is held
            wrong.append(f"merge-first went to {mf}, expected [101]")
    best = {d["pr"]: (d.get("best") or {}).get("delta") for d in out}
    both = {101, 109} <= decided and None not in (best.get(101), best.get(109))
    if both and best[109] <= best[101]:
        wrong.append(f"held 109 ({best[109]:+.1%}) should out-speed 101 ({best[101]:+.1%})")
    if busy:
        warnings.warn(
            f"demo round: too busy a box to call {', '.join(busy)} (main's noise on the deciding "
            "axes leaves no room for the patch's effect); those verdicts were not asserted exactly",
            stacklevel=2,
        )
    return wrong


@pytest.mark.slow
def test_demo_round_gives_every_pr_its_expected_verdict(tmp_path: Path) -> None:
    """The whole demo round on this machine's CPU (the policy's cpu profile): about 3.5 minutes
    on 2 busy cores."""
    db = tmp_path / "demo.duckdb"
    res = CliRunner().invoke(main, ["collect", str(DEMO), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)
    assert {d["pr"] for d in out} == {p.number for p in load_manifest(DEMO).manifest.pr}
    wrong = check_demo_round(out)
    assert not wrong, "\n".join(wrong)


def _pr(pr: int, label: str, expect: str, noise: float, failed: str = "", mf: bool = False) -> dict:
    return {
        "pr": pr,
        "label": label,
        "expect": expect,
        "reason": "r",
        "merge_first": mf,
        "gates": [{"gate": failed, "status": "fail", "reason": "r"}] if failed else [],
        "comparisons": [{"noise": noise}],
    }


def test_check_demo_round_judges_speed_only_on_a_quiet_box() -> None:
    def round_(noise: float, label_101: str, label_103: str, gate_103: str) -> list[dict]:
        return [
            _pr(101, label_101, "XL", noise, mf=label_101 == "XL"),
            _pr(103, label_103, "REJECT", noise, failed=gate_103),
            _pr(106, "needs-rebase", "needs-rebase", noise),
            _pr(107, "REJECT", "REJECT", noise, failed="run:tiny"),
        ]

    assert check_demo_round(round_(0.1, "XL", "REJECT", "accuracy:tiny")) == []
    quiet_miss = check_demo_round(round_(0.1, "none", "REJECT", "accuracy:tiny"))
    assert any(w.startswith("#101") for w in quiet_miss) and any(
        "merge-first" in w for w in quiet_miss
    )
    with pytest.warns(UserWarning, match="too busy"):
        assert check_demo_round(round_(0.9, "none", "REJECT", "accuracy:tiny")) == []
    with pytest.warns(UserWarning, match="too busy"):
        busy_wrong = check_demo_round(round_(0.9, "none", "none", ""))
    assert [w[:4] for w in busy_wrong] == ["#103", "#103"]
    with pytest.warns(UserWarning, match="too busy"):  # a genuine speedup is never REJECTed
        assert [
            w[:4] for w in check_demo_round(round_(0.9, "REJECT", "REJECT", "accuracy:tiny"))
        ] == ["#101"]
    neutral = [_pr(108, "S", "none", 0.9)]  # a neutral PR is held to `none` at any noise
    assert [w[:4] for w in check_demo_round(neutral)] == ["#108"]


def test_check_demo_round_wants_the_held_pr_faster_than_merge_first() -> None:
    def round_(delta_101: float, delta_109: float) -> list[dict]:
        a, b = _pr(101, "XL", "XL", 0.05, mf=True), _pr(109, "XL", "XL", 0.05)
        a["best"], b["best"] = {"delta": delta_101}, {"delta": delta_109}
        return [a, b]

    assert check_demo_round(round_(0.3, 0.55)) == []
    assert [w[:8] for w in check_demo_round(round_(0.6, 0.5))] == ["held 109"]
