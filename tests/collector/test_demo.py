"""The demo round in data/demo: its manifest and policy are valid and current, its patches still
apply to HEAD (the conflicting one still conflicts), and the round gives every PR its expected
verdict, merge-first included."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.cli_demo import tmux_server
from collector.judge.verdict import open_gain
from collector.manifest import load_manifest
from collector.policy import load_policy, resolve

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
    assert "M" in expects  # a real gain of under +10%, within a paired session's reach


def test_demo_policy_is_the_default() -> None:
    """data/demo/policy.toml extends the default policy and changes nothing: every verdict rule,
    the noise floor included, is the default's."""
    loaded = load_manifest(DEMO)
    assert loaded.policy_path == ROOT / "data" / "demo" / "policy.toml"
    demo = resolve(load_policy(loaded.policy_path), "cpu").model_dump()
    assert demo == resolve(load_policy(), "cpu").model_dump()


def test_every_patch_applies_to_head_and_the_conflicting_one_conflicts(applies_to_head) -> None:  # noqa: ANN001
    loaded = load_manifest(DEMO)
    for p in loaded.manifest.pr:
        ok, why = applies_to_head(loaded.patches[p.number])
        if p.expect == "needs-rebase":
            assert not ok, f"PR #{p.number} should conflict with HEAD but applies"
        else:
            assert ok, f"PR #{p.number}: {why} (run data/demo/make_patches.py)"


def test_manifest_check_command() -> None:
    res = CliRunner().invoke(main, ["manifest", "check", str(DEMO)])
    assert res.exit_code == 0, res.output


# Why each REJECT is a REJECT: the gate that must fail. 102 loses tiny's prefill (the floor),
# 103 is no longer the same model, 104 slows its guard, 107 crashes.
# 110-112 forge their measurement (a patched clock, a shortcut taken only while benchmarked, a
# cached prefill), 113 keeps a decode table resident that breaks the long-context memory check
# (#1154), 114 breaks only its guard's accuracy (#294), 116 puts a small error into the math.
# 117-119 reach across the process boundary: 117 for its timing parent (gdb, /proc) with its own
# clock scaled to match, 118 for a tmux server outside its tree (the demo starts one), 119 works
# in a thread while it is not its turn; sealed, each is caught by what it could still do.
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
    117: "run:tiny",
}
# A gate of one of these kinds must fail (which model's session caught it first is the box's)
FAILING_RUN = {118, 119}
# What the reason of a forgery must say was caught.
CAUGHT = {
    110: "clock was changed",
    111: "computed something else",
    112: "computed something else",
    113: "long-context memory check",
    114: "no-regression guard tiny:q8_0: accuracy broke",
    117: "clock was changed",
    118: "it works while it is not its turn",
    119: "it works while it is not its turn",
}
# 109 (XL, the faster) carries the blocking label `hold`, 115 (as fast as 101) `wip`: merge-first
# is 101 whenever 101 has a tier. The rule that skips a faster held PR is also tested with fixed
# speeds (test_round.py).
MERGE_FIRST = 101
HELD = {109, 115}
TIERS = ("XS", "S", "M", "L", "XL")
SMALL_GAINS = ("XS", "S", "M")  # expected gains under +10%: `left_open_small_gain`


def same_verdict(label: str, expect: str) -> bool:
    """A real gain must keep a tier, but its size is the CPU's: #101's patch read +15% on one
    2-core VM and +50% on another (2026-12-03, AMD EPYC), so a tier stands for any tier. A real
    gain read `none` is a wrong round, whatever its reason (a noise band too wide for it is the
    measurement's failure, not the box's excuse), but for a small one (`left_open_small_gain`)."""
    return label == expect or (label in TIERS and expect in TIERS)


def left_open_small_gain(d: dict) -> bool:
    """A small real gain (expected under +10%, `SMALL_GAINS`) that the round left open after its
    confirmation sessions, as `verdict.left_open` reads one: a target axis past the +2% gate with
    its interval above 0, kept from counting only by its noise band or one session, and no gate
    failed. The demo's #120 is that size everywhere it was measured (+7.2% on the Xeon VM the cpu
    floor was calibrated on; +5.0% on a 2-core AMD EPYC VM in a quiet `make demo` of 94c7c20,
    sessions +6.1, +4.5, +4.6% against the floor's +4.5% band, then +6.1% inside a +7.7% band
    beside the untimed tests in the same clone's `make test`), so whether a round resolves it is
    the box's; a round that lost it (under the gate, an interval reaching 0, a gate failed) is
    wrong. A gain past any box's band by a margin (#101, #109, #115) must keep its tier."""
    rules = resolve(load_policy(), "cpu").verdict
    axes = [SimpleNamespace(**c) for c in d.get("comparisons", ())]
    return (
        d["expect"] in SMALL_GAINS
        and d["label"] == "none"
        and all(g["status"] == "pass" for g in d["gates"])
        and any(open_gain(c, rules) for c in axes)  # type: ignore[arg-type]
    )


def check_demo_round(out: list[dict], merge_first: int | None = MERGE_FIRST) -> list[str]:
    """What the demo round got wrong: every PR's label against its `expect`, the gate behind
    each REJECT, and merge-first (None: not checked, in a round of some of the PRs): `merge_first`
    when it has a tier, else no held PR and none without a tier."""
    wrong = []
    for d in out:
        n, label, expect = d["pr"], d["label"], d["expect"]
        if not (same_verdict(label, expect) or left_open_small_gain(d)):
            wrong.append(f"#{n}: {label} (expected {expect}): {d['reason']}")
        gates = {g["gate"]: g["status"] for g in d["gates"]}
        if n in FAILING_GATE and gates.get(FAILING_GATE[n]) != "fail":
            wrong.append(f"#{n}: gate {FAILING_GATE[n]} did not fail: {gates}")
        if n in FAILING_RUN and not any(
            g.startswith("run:") and v == "fail" for g, v in gates.items()
        ):
            wrong.append(f"#{n}: no run gate failed: {gates}")
        if n in CAUGHT and CAUGHT[n] not in d["reason"]:
            wrong.append(f"#{n}: the reason does not say {CAUGHT[n]!r}: {d['reason']}")
    mf = [d["pr"] for d in out if d["merge_first"]]
    labels = {d["pr"]: d["label"] for d in out}
    if merge_first is not None:
        if labels.get(merge_first) in TIERS and mf != [merge_first]:
            wrong.append(f"merge-first went to {mf}, expected [{merge_first}]")
        elif len(mf) > 1 or any(n in HELD or labels[n] not in TIERS for n in mf):
            wrong.append(f"merge-first went to {mf}: a held PR or one without a tier")
    return wrong


def collect_demo(db: Path, manifest: Path = DEMO) -> list[dict]:
    res = CliRunner().invoke(main, ["collect", str(manifest), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)
    assert {d["pr"] for d in out} == {p.number for p in load_manifest(manifest).manifest.pr}
    return out


@pytest.mark.slow
@pytest.mark.timed
def test_demo_round_gives_every_pr_its_expected_verdict(tmp_path: Path) -> None:
    """The whole demo round on this machine's CPU, sealed (a tmux server running beside it, as a
    maintainer's round would: #118 reaches for it). Main's engine is timed beside each PR's,
    turn by turn, so the box's load reaches both: a wrong round is a failure, never measured
    again."""
    with tmux_server():
        out = collect_demo(tmp_path / "demo.duckdb")
    wrong = check_demo_round(out)
    assert not wrong, "\n".join(wrong)
    forged = [
        (d["pr"], g["gate"])
        for d in out
        if d["expect"] != "REJECT"
        for g in d["gates"]
        if g["status"] == "fail" and g["gate"].startswith("run:")
    ]
    assert not forged, f"an honest PR's session failed its run gate: {forged}"


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


def _round(label_101: str = "L", gate_103: str = "accuracy:tiny", d101=0.15, d109=0.45) -> list:
    return [
        _pr(101, label_101, "L", mf=label_101 == "L", best=d101),
        _pr(103, "REJECT", "REJECT", failed=gate_103),
        _pr(106, "needs-rebase", "needs-rebase"),
        _pr(108, "none", "none", best=0.01),
        _pr(109, "XL", "XL", best=d109),
    ]


def test_check_demo_round_accepts_the_expected_round() -> None:
    assert check_demo_round(_round()) == []


def test_check_demo_round_flags_a_wrong_label_gate_or_merge_first() -> None:
    missed = check_demo_round(_round(label_101="none"))
    assert [w[:4] for w in missed] == ["#101"]
    assert [w[:4] for w in check_demo_round(_round(gate_103="floor"))] == ["#103"]
    neutral = _round()
    neutral[3]["label"] = "S"  # the neutral refactor must stay `none`
    assert [w[:4] for w in check_demo_round(neutral)] == ["#108"]
    lost = _round()
    lost[4]["label"] = "pending"  # a real gain must keep a tier
    assert [w[:4] for w in check_demo_round(lost)] == ["#109"]
    held = _round()
    held[0]["merge_first"], held[4]["merge_first"] = False, True  # #109 carries `hold`
    assert any("merge-first" in w for w in check_demo_round(held))


def test_a_real_gain_may_read_another_tier_on_another_cpu() -> None:
    bigger = _round(label_101="XL")
    bigger[0]["merge_first"] = True
    assert check_demo_round(bigger) == []
    small = [*_round(), _pr(120, "S", "M")]
    assert check_demo_round(small) == []
    small[-1]["label"] = "REJECT"
    assert [w[:4] for w in check_demo_round(small)] == ["#120"]


def _axis(delta: float, ci_low: float, significant: bool = False, role: str = "target") -> dict:
    return {
        "role": role,
        "delta": delta,
        "ci_low": ci_low,
        "significant": significant,
        "implausible": False,
    }


def test_a_real_gain_read_none_is_a_wrong_round_whatever_its_reason() -> None:
    unresolved = _round(label_101="none")
    unresolved[0]["reason"] = "best decode@128 on tiny +48.2%, inside its +55.3% noise band"
    unresolved[0]["comparisons"] = [_axis(0.482, 0.30)]
    assert [w[:4] for w in check_demo_round(unresolved)] == ["#101"]


def test_a_small_real_gain_may_be_left_open_never_lost() -> None:
    """#120 (expected M) read `none` with its gain past the gate and its interval above 0, kept
    from counting by its band: the box's reach. Under the gate, with an interval reaching 0, on
    a guard's axis alone, on an implausible axis, or beside a failed gate, the round lost it."""
    small = [*_round(), _pr(120, "none", "M")]
    small[-1]["comparisons"] = [_axis(-0.01, -0.03), _axis(0.061, 0.03)]
    assert check_demo_round(small) == []
    implausible = {**_axis(0.061, 0.03), "implausible": True}
    for lost in (
        [_axis(0.015, 0.005)],
        [_axis(0.061, -0.002)],
        [_axis(0.061, 0.03, role="guard")],
        [implausible],
    ):
        small[-1]["comparisons"] = lost
        assert [w[:4] for w in check_demo_round(small)] == ["#120"]
    small[-1]["comparisons"] = [_axis(0.061, 0.03)]
    small[-1]["gates"] = [{"gate": "guard:tiny:q8_0", "status": "fail", "reason": "r"}]
    assert [w[:4] for w in check_demo_round(small)] == ["#120"]


def test_check_demo_round_does_not_time_the_held_pr_against_merge_first() -> None:
    # a timing, not a rule (see MERGE_FIRST): whichever is faster, merge-first is 101
    assert check_demo_round(_round(d101=0.6, d109=0.5)) == []
