"""The words of every gate state the rule that decided it, with the numbers it read, and never
contradict them (issue 21.3: a floor gate once passed with "no axis below 98% of main (worst
prefill@128 on llama-1b:f16 -7.9%)"). Small constructed inputs, the gate functions called
directly; each gate reads as '<gate> <status>: <reason>'."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from collector.judge.compare import compare_axis
from collector.judge.gates import (
    GATE_ORDER,
    GateContext,
    GateResult,
    accuracy_gate,
    floor_gate,
    guard_gate,
    implausible_gate,
    merge_gate,
    prefill_path_gate,
    run_gate,
)
from collector.judge.rules import gain_shortfall, loss_shortfall
from collector.judge.verdict import label
from collector.policy import LABELS, TIER_NAMES, ResolvedPolicy, load_policy, resolve
from collector.results import Comparison, SessionRecord, Strike

CPU = resolve(load_policy(), "cpu")
# Exact numbers: no calibrated noise but a GPU-like 35% floor on prefill@128.
POLICY = CPU.model_copy(
    update={
        "profile": CPU.profile.model_copy(
            update={"min_noise": 0.0, "min_noise_axes": {"prefill@128": 0.35}}
        ),
    }
)
NOISY = 0.01  # a 1% floor: a band of +1.5% / -1.5%
WIDE = 0.105  # a band of +16.2% / -13.9%
BELOW = "below the 98% floor, its interval wholly below 0, past its noise band and in every PR"


@dataclass
class FakeRound:
    """What the gates read of store.evidence.RoundData."""

    policy: ResolvedPolicy = POLICY
    sessions: list[SessionRecord] = field(default_factory=list)
    dumps: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    prior_strikes: dict = field(default_factory=dict)
    round: dict = field(default_factory=lambda: {"round_id": "r2", "main_commit": "abcdef0123"})


def comp(pr: float, ax: str = "decode@128", model: str = "tiny", role: str = "target",
         noise: float = 0.0, sessions: list[float] | None = None) -> Comparison:  # fmt: skip
    """Main at 100 beside the PR (constant pairs: the interval is a point), in two sessions at
    `pr`, or one session per value of `sessions`; `noise`: the profile's floor."""
    policy = POLICY.model_copy(
        update={"profile": POLICY.profile.model_copy(update={"min_noise": noise})}
    )
    pairs = [(k, 100.0, v) for k, v in enumerate(sessions or [pr, pr], 1) for _ in range(3)]
    return compare_axis(policy, model, role, ax, pairs)


def ctx(comparisons: list[Comparison] | None = None, data: FakeRound | None = None) -> GateContext:
    return GateContext(data or FakeRound(), 7, "c0ffee", ["tiny"], ["tiny:q8_0"], comparisons or [])


def said(result: GateResult) -> list[str]:
    return [f"{g.gate} {g.status}: {g.reason}" for g in result.gates]


# --- floor ----------------------------------------------------------------------------------


def test_floor_pass_inside_the_noise_band_says_so() -> None:
    """The issue's case: -7.9% is below 98% of main, but inside the axis's noise band."""
    r = floor_gate(ctx([comp(92.1, ax="prefill@128"), comp(101.0)]))
    assert said(r) == [
        "floor pass: no target axis significantly below the 98% floor (2 compared): worst -7.9% "
        "(prefill@128 on tiny), inside its -36.2% noise band"
    ]
    assert not r.hard and not r.soft


def test_floor_pass_names_every_part_of_the_rule_the_worst_axis_misses() -> None:
    pairs = [(1, 100.0, v) for v in (70.0, 80.0, 92.1)] + [(3, 100.0, v) for v in (100.0, 110.0)]
    c = compare_axis(POLICY, "llama-1b:f16", "target", "prefill@128", pairs)
    assert said(floor_gate(ctx([c]))) == [
        "floor pass: no target axis significantly below the 98% floor (1 compared): worst -7.9% "
        "(prefill@128 on llama-1b:f16), inside its -49.3% noise band and one PR session at "
        "+5.0% is not below the 98% floor"
    ]
    assert said(floor_gate(ctx([comp(98.5)])))[0].endswith(
        "worst -1.5% (decode@128 on tiny), at or above the 98% floor"
    )
    one_session = floor_gate(ctx([comp(0.0, sessions=[89.0, 89.0, 99.0])]))
    assert said(one_session)[0].endswith(
        "worst -11.0% (decode@128 on tiny), inside its -16.3% noise band and one PR session at "
        "-1.0% is not below the 98% floor"
    )
    wide = [(1, 100.0, v) for v in (90.0, 99.0, 95.0)] + [
        (2, 100.0, v) for v in (100.0, 98.0, 94.0)
    ]
    c = compare_axis(POLICY, "tiny", "target", "decode@32", wide)
    assert said(floor_gate(ctx([c])))[0].endswith(
        "worst -3.5% (decode@32 on tiny), inside its -7.5% noise band and one PR session at "
        "-2.0% is not below the 98% floor"
    )
    spanning = [(1, 100.0, v) for v in (90.0, 104.0, 95.0, 101.0, 92.0, 96.0)]  # one session
    c = compare_axis(POLICY, "tiny", "target", "decode@32", spanning)
    assert (
        "its interval" in said(floor_gate(ctx([c])))[0]
        and "reaches 0" in said(floor_gate(ctx([c])))[0]
    )


def test_floor_fail_states_every_part_of_the_rule() -> None:
    r = floor_gate(ctx([comp(90.0, noise=NOISY), comp(101.0)]))
    item = "decode@128 on tiny -10.0% (CI -10.0%..-10.0%, noise band -1.5%)"
    assert said(r) == [f"floor fail: {BELOW} session: {item}"]
    assert r.hard == [f"regression below the 98% floor: {item}"]
    assert floor_gate(ctx([])).gates == []  # nothing compared: the run gates say why


# --- guard ----------------------------------------------------------------------------------


def test_guard_pass_fail_and_warn() -> None:
    q8 = {"model": "tiny:q8_0", "role": "guard"}
    ok = guard_gate(ctx([comp(97.0, noise=WIDE, **q8), comp(103.0, ax="prefill@128", **q8)]))
    assert said(ok) == [
        "guard:tiny:q8_0 pass: none significantly below the 98% floor: decode@128 -3.0%, inside "
        "its -13.9% noise band; prefill@128 +3.0%, at or above the 98% floor"
    ]
    bad = guard_gate(ctx([comp(80.0, noise=NOISY, **q8)]))
    item = "decode@128 -20.0% (CI -20.0%..-20.0%, noise band -1.5%)"
    assert said(bad) == [f"guard:tiny:q8_0 fail: {BELOW} session: {item}"]
    assert bad.hard == [f"guard tiny:q8_0 below the 98% floor: {item}"]
    missing = guard_gate(ctx([]))
    assert said(missing) == [
        "guard:tiny:q8_0 warn: not compared: no guard sweep of tiny:q8_0 from the PR, or none "
        "from main (see run:tiny:q8_0; pending)"
    ]
    assert missing.soft == ["guard tiny:q8_0 not measured"]


# --- implausible ----------------------------------------------------------------------------


def test_implausible_fail_and_silence() -> None:
    r = implausible_gate(ctx([comp(2500.0)]))
    claim = "decode@128 on tiny: the PR's slowest sample is 25.0x main's fastest"
    assert said(r) == [f"implausible fail: beyond the 20x implausible-gain guard: {claim}"]
    assert r.hard == [f"broken measurement: {claim} (beyond the 20x implausible-gain guard)"]
    assert implausible_gate(ctx([comp(1500.0)])).gates == []  # written only when it fails
    # one decimal would read 20.0x: enough digits to show it is above the guard
    c = compare_axis(POLICY, "tiny", "target", "decode@128", [(1, 100.0, 2000.01)] * 3)
    assert "is 20.0001x main's fastest" in said(implausible_gate(ctx([c])))[0]


# --- run --------------------------------------------------------------------------------------


def session(
    kind: str, status: str, side: str = "pr", model: str = "tiny", **kw: Any
) -> SessionRecord:
    fault = kw.get("fault", "none" if status == "ok" else "pr")
    return SessionRecord(f"{side}/{kind}/{model}", side, 7 if side == "pr" else 0, 1, kind, model,
                         status, fault, kw.get("detail", ""), kw.get("exit_code"))  # fmt: skip


FINISHED = [
    session("sweep", "ok"),
    session("score", "ok"),
    session("guard", "ok", model="tiny:q8_0"),
    session("sweep", "ok", side="main"),
    session("guard", "ok", side="main", model="tiny:q8_0"),
]


def run(*extra: SessionRecord, prior: dict | None = None) -> GateResult:
    return run_gate(ctx(data=FakeRound(sessions=FINISHED + list(extra), prior_strikes=prior or {})))


def test_run_pass_and_not_measured() -> None:
    assert said(run()) == [
        "run:tiny pass: all 2 of the PR's sessions finished, and main finished every kind it ran",
        "run:tiny:q8_0 pass: the PR's one session finished, and main finished every kind it ran",
    ]
    r = run_gate(ctx(data=FakeRound(sessions=FINISHED[:2])))
    assert said(r)[1] == (
        "run:tiny:q8_0 warn: not measured yet: none of the PR's sessions on tiny:q8_0 has run "
        "(pending)"
    )
    assert r.soft == ["tiny:q8_0 not measured yet"]


def test_run_failures_say_which_rule_applies() -> None:
    infra = run(session("concurrent", "infra", fault="infra", detail="no space left on device"))
    assert said(infra)[0] == (
        "run:tiny warn: concurrent infra: no space left on device (infrastructure, never a "
        "REJECT: retried)"
    )
    assert infra.soft == ["tiny concurrent: infrastructure (no space left on device)"]

    timeout = session("sweep", "timeout", detail="no answer in 300 s")
    first = run(timeout)
    assert said(first)[0] == (
        "run:tiny warn: sweep timeout: no answer in 300 s (strike 1 of 2: may be flaky, a REJECT "
        "only if it recurs at this commit)"
    )
    assert first.strikes == [Strike(7, "c0ffee", "timeout:sweep:tiny", "r2", "no answer in 300 s")]
    assert first.soft == [
        "tiny sweep timeout (strike 1 of 2; the same failure at this commit next round is a REJECT)"
    ]
    second = run(timeout, prior={(7, "c0ffee", "timeout:sweep:tiny"): 1})
    assert said(second)[0] == (
        "run:tiny fail: sweep timeout: no answer in 300 s (strike 2 of 2: the same failure in 2 "
        "rounds at this commit is a REJECT)"
    )
    assert second.hard == ["tiny sweep timeout in 2 rounds at this commit (no answer in 300 s)"]
    segv = said(run(session("sweep", "crash", detail="killed by SIGSEGV", exit_code=-11)))[0]
    assert segv.startswith("run:tiny warn:") and "strike 1 of 2" in segv

    at_once = {
        ("crash", 1): "an error exit is a REJECT at once",
        ("malformed", None): "output that is not the protocol's answer is a REJECT at once",
        ("implausible", None): "a claim beyond the implausible-gain guard is a REJECT at once",
    }
    for (status, code), rule in at_once.items():
        r = run(session("sweep", status, detail="boom", exit_code=code))
        assert said(r)[0] == f"run:tiny fail: sweep {status}: boom ({rule})"
    assert run(session("sweep", "implausible", detail="claims 1000x main")).hard == [
        "tiny sweep: broken measurement, claims 1000x main"
    ]


def test_run_main_failing_is_infrastructure() -> None:
    r = run(session("concurrent", "crash", side="main", fault="infra", detail="exit code 1"))
    assert said(r)[0] == (
        "run:tiny warn: main failed on concurrent and has no finished concurrent session "
        "(infrastructure, never a REJECT: retried)"
    )
    assert r.soft == ["main could not be measured on tiny concurrent (infrastructure, will retry)"]


# --- accuracy -------------------------------------------------------------------------------


def dump(argmax: list[int]) -> str:
    half, tail = math.log(0.5), [9, math.log(0.3)]
    positions = [{"argmax": a, "target_logprob": half, "topk": [[a, half], tail]} for a in argmax]
    return json.dumps({"tokens": list(range(len(argmax) + 1)), "positions": positions})


def accuracy(main: list[int] | None, pr: list[int] | None) -> GateResult:
    dumps = {("main", 0, "tiny"): [dump(main)]} if main else {}
    dumps |= {("pr", 7, "tiny"): [dump(pr)]} if pr else {}
    return accuracy_gate(ctx(data=FakeRound(dumps=dumps)))


def test_accuracy_pass_fail_warn_skip() -> None:
    assert said(accuracy([1, 2], [1, 2])) == [
        "accuracy:tiny pass: within every bar: top-1 1.0000 ≥ 0.958 · KL 0.00000 ≤ 0.00075 · "
        "PPL ×1.0000 of main ≤ 1.00089 over 2 tokens"
    ]
    bad = accuracy([1, 2], [1, 3])
    measures = (
        "top-1 0.5000 < 0.958 · KL 0.32189 > 0.00075 · PPL ×1.0000 of main ≤ 1.00089 over 2 tokens"
    )
    assert said(bad) == [f"accuracy:tiny fail: outside the bar on top-1, KL: {measures}"]
    assert bad.hard == [f"accuracy vs main broke on tiny (top-1, KL): {measures}"]
    assert list(bad.accuracy) == ["tiny"] and bad.accuracy["tiny"].top1 == 0.5
    no_main = accuracy(None, [1, 2])
    assert said(no_main) == [
        "accuracy:tiny warn: not judged yet: main's score dump is missing (infrastructure, pending)"
    ]
    assert no_main.soft == ["main's score of tiny is missing"]
    assert said(accuracy([1, 2], None)) == [
        "accuracy:tiny skip: not judged: the PR has no score dump (see run:tiny)"
    ]
    assert said(accuracy([1, 2], [1])) == [
        "accuracy:tiny fail: the score dumps cannot be compared: the two dumps scored different "
        "tokens (tokenizer or text changed)"
    ]


# --- prefill path ---------------------------------------------------------------------------


MAIN_CHECK = {32: (0.95, 0.01), 96: (0.9, 0.02)}


def prefill(main: dict | None, pr: dict | None) -> GateResult:
    checks = {("main", 0, "tiny"): main} if main else {}
    checks |= {("pr", 7, "tiny"): pr} if pr else {}
    return prefill_path_gate(ctx(data=FakeRound(checks=checks)))


def test_prefill_path_pass_fail_warn_skip() -> None:
    assert said(prefill(MAIN_CHECK, {32: (0.94, 0.02), 96: (0.9, 0.03)})) == [
        "prefill-path:tiny pass: agrees with the token loop at every prefix: P=32: top-1 0.940 ≥ "
        "0.850, KL 0.0200 ≤ 0.0600; P=96: top-1 0.900 ≥ 0.800, KL 0.0300 ≤ 0.0700"
    ]
    bad = prefill(MAIN_CHECK, {32: (0.5, 0.2)})
    why = "P=32: top-1 0.500 < 0.850, KL 0.2000 > 0.0600; P=96: missing from the PR's check"
    assert said(bad) == [f"prefill-path:tiny fail: disagrees with the token loop: {why}"]
    assert bad.hard == [f"batched prefill disagrees with the token loop on tiny: {why}"]
    assert said(prefill(None, MAIN_CHECK)) == [
        "prefill-path:tiny warn: not judged yet: main's prefill check is missing (infrastructure, "
        "pending)"
    ]
    assert said(prefill(MAIN_CHECK, None)) == [
        "prefill-path:tiny skip: not judged: the PR has no prefill check (see run:tiny)"
    ]


# --- merge ----------------------------------------------------------------------------------


def test_merge_fail() -> None:
    rebase = merge_gate({"status": "needs-rebase", "detail": "conflict in x.py"}, "abcdef0123")
    assert f"{rebase.gate} {rebase.status}: {rebase.reason}" == (
        "merge fail: Not measured: conflict in x.py. Rebase onto main abcdef012 and push again."
    )
    detail = "edits the measuring harness: engine/harness/bench.py"
    harness = merge_gate({"status": "harness-touched", "detail": detail}, "abcdef0123")
    assert harness.reason == (
        f"Not measured: {detail}. Harness files are pinned from main; move that change to its "
        "own PR."
    )


# --- the verdict's reason -------------------------------------------------------------------


def test_reason_of_a_tier_states_every_part_of_the_gain_rule() -> None:
    fast = comp(112.0, noise=NOISY, sessions=[112.0, 112.0])
    lab, reason, best = label(GateResult(), [fast, comp(103.0)], POLICY)
    assert (lab, best) == ("L", fast)
    assert reason == (
        "decode@128 on tiny +12.0% (95% CI +12.0%..+12.0%, above 0) clears the L gate (+10%) and "
        "its +1.5% noise band, and every PR session clears the +2% gate; every gate passed."
    )


@pytest.mark.parametrize(
    ("pr", "noise", "sessions", "why"),
    [
        (101.0, 0.0, None, "+1.0%, under the +2% gate"),
        (105.0, WIDE, None, "+5.0%, inside its +16.2% noise band"),
        (
            0.0,
            0.0,
            [112.0, 112.0, 101.0],
            "+12.0%, inside its +18.8% noise band and one PR session at +1.0% is under the +2% gate",
        ),
    ],
)
def test_reason_of_none_says_which_rule_the_best_axis_missed(
    pr: float, noise: float, sessions: list[float] | None, why: str
) -> None:
    assert label(GateResult(), [comp(pr, noise=noise, sessions=sessions)], POLICY)[:2] == (
        "none",
        f"No target axis is a significant gain: best decode@128 on tiny {why}; every gate passed.",
    )


def test_reason_of_reject_and_pending() -> None:
    fast = [comp(112.0)]
    rejected = GateResult(hard=["a broke", "b broke", "a broke"], soft=["c missing"])
    assert label(rejected, fast, POLICY)[:2] == ("REJECT", "Rejected — a broke; b broke.")
    pending = GateResult(soft=["c missing", "d missing"])
    assert label(pending, fast, POLICY)[:2] == ("pending", "Pending — c missing; d missing.")
    nothing = ("none", "No target axis was compared; every gate passed.")
    assert label(GateResult(), [], POLICY)[:2] == nothing


# --- words and decisions from one rule ------------------------------------------------------


def test_shortfall_words_are_none_exactly_when_the_axis_passes() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        level = rng.uniform(-0.3, 0.3)
        prs = [float(x) for x in 100 * np.exp(rng.normal(level, 0.05, 3))]
        c = comp(0.0, noise=float(rng.uniform(0, 0.1)), sessions=prs)
        assert (gain_shortfall(c, POLICY.verdict) is None) == c.significant
        assert (loss_shortfall(c, POLICY.verdict) is None) == c.below_floor


def test_one_list_of_gate_kinds_and_labels() -> None:
    assert GATE_ORDER == (
        "merge",
        "build",
        "run",
        "floor",
        "implausible",
        "accuracy",
        "reference",
        "prefill-path",
        "memory",
        "long-context",
        "guard",
        "guard-accuracy",
    )
    assert LABELS[: len(TIER_NAMES)] == TIER_NAMES
    others = {"none", "REJECT", "needs-rebase", "harness-touched", "pending"}
    assert set(LABELS) - set(TIER_NAMES) == others
