"""The demo round in data/demo: its manifest and policy are valid and current, its patches still
apply to HEAD (the conflicting one still conflicts), and the round gives every PR its expected
verdict, merge-first included."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import load_manifest, manifest_to_toml
from collector.policy import TIER_NAMES, load_policy, resolve

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


def test_demo_policy_is_the_default_with_short_decode_runs_and_three_sessions() -> None:
    """data/demo/policy.toml extends the default policy and changes only the cpu profile's
    decode tokens and PR sessions: every verdict rule, the noise floor included, is the
    default's."""
    loaded = load_manifest(DEMO)
    assert loaded.policy_path == ROOT / "data" / "demo" / "policy.toml"
    demo = resolve(load_policy(loaded.policy_path), "cpu").model_dump()
    default = resolve(load_policy(), "cpu").model_dump()
    assert (demo["profile"].pop("tokens"), demo["profile"].pop("pr_sessions")) == (4, 3)
    default["profile"].pop("tokens"), default["profile"].pop("pr_sessions")
    assert demo == default


def test_every_patch_applies_to_head_and_the_conflicting_one_conflicts(applies_to_head) -> None:  # noqa: ANN001
    loaded = load_manifest(DEMO)
    for p in loaded.manifest.pr:
        ok, why = applies_to_head(loaded.patches[p.number])
        if p.expect == "needs-rebase":
            assert not ok, f"PR #{p.number} should conflict with HEAD but applies"
        else:
            assert ok, f"PR #{p.number}: {why} (run data/demo/make_patches.py)"


def test_a_subset_of_the_demo_round_is_the_same_prs_patches_and_policy(tmp_path: Path) -> None:
    """What a noisy demo round measures again (demo_subset): those PRs alone, as the demo has them."""
    whole = load_manifest(DEMO)
    part = load_manifest(demo_subset([101, 115], tmp_path))
    assert [p.number for p in part.manifest.pr] == [101, 115]
    assert part.repo == whole.repo and part.policy_path == whole.policy_path
    assert part.patches == {n: whole.patches[n] for n in (101, 115)}
    assert part.manifest.pr[1].expect == "XL" and part.manifest.round == whole.manifest.round


def test_manifest_check_command() -> None:
    res = CliRunner().invoke(main, ["manifest", "check", str(DEMO)])
    assert res.exit_code == 0, res.output


# Why each REJECT is a REJECT: the gate that must fail. 102 loses tiny's prefill (the floor),
# 103 is no longer the same model, 104 slows its guard, 107 crashes.
# 110-112 forge their measurement (a patched clock, a shortcut taken only while benchmarked, a
# cached prefill), 113 keeps a decode table resident that breaks the long-context memory check
# (#1154), 114 breaks only its guard's accuracy (#294), 116 puts a small error into the math.
FAILING_GATE = {
    102: "floor",
    103: "accuracy:tiny",
    104: "guard:tiny:q8_0",
    107: "run:tiny",
    110: "run:tiny",
    111: "run:tiny",
    112: "run:tiny",
    113: "long-context:tiny",
    114: "guard-accuracy:tiny:q8_0",
    116: "accuracy:tiny",
}
# What the reason of a forgery must say was caught.
CAUGHT = {
    110: "clock was changed",
    111: "computed something else",
    112: "computed something else",
    113: "long-context memory check",
    114: "no-regression guard tiny:q8_0: accuracy broke",
}
# 109 (XL too, usually the faster) carries the blocking label `hold`. Which of the two is
# faster is a measurement, not asserted here: one round on this box had 109 at +48.5% and
# 101 at +49.7% (its prefill gain short of the noise). The rule that skips a faster held PR
# is tested with the fake engine's fixed speeds (test_round.py).
MERGE_FIRST = 101


def check_demo_round(out: list[dict], merge_first: int | None = MERGE_FIRST) -> list[str]:
    """What the demo round got wrong: every PR's label against its `expect`, the gate behind
    each REJECT, and merge-first (None: not checked, in a round of some of the PRs)."""
    wrong = []
    for d in out:
        n, label, expect = d["pr"], d["label"], d["expect"]
        if label != expect:
            wrong.append(f"#{n}: {label} (expected {expect}): {d['reason']}")
        gates = {g["gate"]: g["status"] for g in d["gates"]}
        if n in FAILING_GATE and gates.get(FAILING_GATE[n]) != "fail":
            wrong.append(f"#{n}: gate {FAILING_GATE[n]} did not fail: {gates}")
        if n in CAUGHT and CAUGHT[n] not in d["reason"]:
            wrong.append(f"#{n}: the reason does not say {CAUGHT[n]!r}: {d['reason']}")
    mf = [d["pr"] for d in out if d["merge_first"]]
    if merge_first is not None and mf != [merge_first]:
        wrong.append(f"merge-first went to {mf}, expected [{merge_first}]")
    return wrong


def only_lost_to_noise(out: list[dict], wrong: list[str]) -> bool:
    """Whether every miss is a speedup the round could not call because main itself strayed
    more than the PR gained (label none where a tier was expected, the reason naming the noise
    band), plus the merge-first that follows when that PR is 101: a box with a slow spell, not
    a wrong verdict."""
    missed = {d["pr"]: d for d in out if d["label"] != d["expect"]}
    if not missed:
        return False
    for d in missed.values():
        if not (d["label"] == "none" and d["expect"] in TIER_NAMES and "noise band" in d["reason"]):
            return False
    for line in wrong:
        if line.startswith("merge-first"):
            if MERGE_FIRST not in missed:
                return False
        elif not any(line.startswith(f"#{n}: ") for n in missed):
            return False
    return True


def collect_demo(db: Path, manifest: Path = DEMO) -> list[dict]:
    res = CliRunner().invoke(main, ["collect", str(manifest), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)
    assert {d["pr"] for d in out} == {p.number for p in load_manifest(manifest).manifest.pr}
    return out


def demo_subset(prs: list[int], where: Path) -> Path:
    """The demo round's manifest with only `prs` (their patches and the policy by absolute
    path), written into `where`."""
    loaded = load_manifest(DEMO)
    m = loaded.manifest.model_copy(
        update={
            "engine_repo": str(loaded.repo),
            "policy": str(loaded.policy_path),
            "pr": [
                p.model_copy(update={"patch": str(loaded.patches[p.number])})
                for p in loaded.manifest.pr
                if p.number in prs
            ],
        }
    )
    path = where / "demo-subset.toml"
    path.write_text(manifest_to_toml(m))
    return path


@pytest.mark.slow
def test_demo_round_gives_every_pr_its_expected_verdict(tmp_path: Path) -> None:
    """The whole demo round on this machine's CPU (the demo policy's cpu profile): 5-15 minutes
    on 2 busy cores. A 2-core VM has spells of minutes in which main's own sessions stray by
    more than the demo's +50-80% speedups (noise bands of +113% to +391% measured on 2026-12-02);
    the round then rightly calls those PRs none. Then, and only then, those PRs are measured once
    more in a round of their own beside main (a fifth of the whole round's time). If that round
    too is only too noisy to call them, the test says so and passes: every other verdict held in
    both rounds, and the tiers themselves are held with fixed speeds by test_round.py."""
    out = collect_demo(tmp_path / "demo.duckdb")
    wrong = check_demo_round(out)
    if wrong and only_lost_to_noise(out, wrong):
        missed = sorted(d["pr"] for d in out if d["label"] != d["expect"])
        note = "demo round's PRs measured again, main strayed too much: " + "; ".join(wrong)
        warnings.warn(note, stacklevel=1)
        out = collect_demo(tmp_path / "again.duckdb", demo_subset(missed, tmp_path))
        wrong = check_demo_round(out, MERGE_FIRST if MERGE_FIRST in missed else None)
        if wrong and only_lost_to_noise(out, wrong):
            warnings.warn("this box was too noisy twice: " + "; ".join(wrong), stacklevel=1)
            return
    assert not wrong, "\n".join(wrong)


def _pr(pr: int, label: str, expect: str, failed: str = "", mf: bool = False, best=None) -> dict:
    return {
        "pr": pr,
        "label": label,
        "expect": expect,
        "reason": "r",
        "merge_first": mf,
        "gates": [{"gate": failed, "status": "fail", "reason": "r"}] if failed else [],
        "best": {"delta": best} if best is not None else None,
    }


def _round(label_101: str = "XL", gate_103: str = "accuracy:tiny", d101=0.5, d109=0.7) -> list:
    return [
        _pr(101, label_101, "XL", mf=label_101 == "XL", best=d101),
        _pr(103, "REJECT", "REJECT", failed=gate_103),
        _pr(106, "needs-rebase", "needs-rebase"),
        _pr(108, "none", "none", best=0.01),
        _pr(109, "XL", "XL", best=d109),
    ]


def test_check_demo_round_accepts_the_expected_round() -> None:
    assert check_demo_round(_round()) == []


def test_check_demo_round_flags_a_wrong_label_gate_or_merge_first() -> None:
    missed = check_demo_round(_round(label_101="none"))
    assert any(w.startswith("#101") for w in missed) and any("merge-first" in w for w in missed)
    assert [w[:4] for w in check_demo_round(_round(gate_103="floor"))] == ["#103"]
    neutral = _round()
    neutral[3]["label"] = "S"  # the neutral refactor must stay `none`
    assert [w[:4] for w in check_demo_round(neutral)] == ["#108"]


def test_check_demo_round_does_not_time_the_held_pr_against_merge_first() -> None:
    # a timing, not a rule (see MERGE_FIRST): either order of the two XL PRs' deltas is a
    # correct round as long as merge-first is 101
    assert check_demo_round(_round(d101=0.6, d109=0.5)) == []


def test_only_a_speedup_lost_in_main_noise_measures_the_round_again() -> None:
    noisy = _round(label_101="none")
    noisy[0]["reason"] = (
        "No target axis is a significant gain: best decode@32 +42%, inside its +53% noise band"
    )
    assert only_lost_to_noise(noisy, check_demo_round(noisy))
    wrong_reason = _round(label_101="none")  # none for another reason: a wrong verdict
    assert not only_lost_to_noise(wrong_reason, check_demo_round(wrong_reason))
    rejected = _round(label_101="REJECT")
    rejected[0]["reason"] = "inside its noise band"
    assert not only_lost_to_noise(rejected, check_demo_round(rejected))
    also_a_gate = _round(label_101="none", gate_103="floor")
    also_a_gate[0]["reason"] = noisy[0]["reason"]
    assert not only_lost_to_noise(also_a_gate, check_demo_round(also_a_gate))
    assert not only_lost_to_noise(_round(), [])
