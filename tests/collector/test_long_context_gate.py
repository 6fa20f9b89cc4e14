"""long-context:<model>'s prefill floor: a PR that completes the check but falls back to a
slower path there is a REJECT; the floor is main's slowest over the profile's noise band for
that axis (cpu: 30% credited to one 8,000-token prefill on a 2-core box; gpu: 2%)."""

from __future__ import annotations

from types import SimpleNamespace

from collector.judge.gates import GateContext
from collector.judge.gates.long_context import long_context_gate
from collector.policy import load_policy, resolve


def doc(ctx: int, prefill: float, completed: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        ctx=ctx, tokens=16, budget_bytes=256 * 2**20, completed=completed, failure=None,
        prefill_tok_s=prefill, measured=None,
    )  # fmt: skip


def judged(profile: str, model: str, ctx: int, mains: list[float], prs: list[SimpleNamespace]):  # noqa: ANN201
    policy = resolve(load_policy(), profile)
    longctx = {("main", 0, model): [doc(ctx, p) for p in mains], ("pr", 1, model): prs}
    data = SimpleNamespace(policy=policy, longctx=longctx)
    (gate,) = long_context_gate(GateContext(data, 1, "c0ffee", [model], [], [])).gates
    return gate


def status(profile: str, model: str, ctx: int, mains: list[float], pr: float) -> str:
    return judged(profile, model, ctx, mains, [doc(ctx, pr)]).status


def test_a_slower_path_under_the_budget_fails_beyond_the_noise_of_each_profile() -> None:
    mains = [10_000.0, 10_500.0]  # the floor is taken against the slowest
    assert status("cpu", "tiny", 8000, mains, 7_900.0) == "pass"  # the -21% a quiet PR showed
    assert status("cpu", "tiny", 8000, mains, 6_700.0) == "pass"  # 67%: inside the cpu band
    assert status("cpu", "tiny", 8000, mains, 6_500.0) == "fail"  # 65%: below 0.98 / 1.3**1.5
    assert status("cpu", "tiny", 8000, mains, 5_000.0) == "fail"  # a path half as fast
    assert status("gpu", "llama-1b:f16", 131000, mains, 9_600.0) == "pass"
    assert status("gpu", "llama-1b:f16", 131000, mains, 9_000.0) == "fail"  # -10% on the H200


def test_a_short_prefill_is_a_timing_and_a_confirmation_run_can_lift_it() -> None:
    """Load only ever slows a run: the fastest of the PR's runs counts, and a short prefill is
    marked timed (the PR is measured again); a run that did not complete is memory, not load."""
    mains = [10_000.0, 10_500.0]
    slow = judged("cpu", "tiny", 8000, mains, [doc(8000, 5_000.0)])
    assert slow.status == "fail" and slow.timed
    lifted = judged("cpu", "tiny", 8000, mains, [doc(8000, 5_000.0), doc(8000, 9_800.0)])
    assert lifted.status == "pass" and "the fastest of its 2 runs" in lifted.reason
    again = judged("cpu", "tiny", 8000, mains, [doc(8000, 5_000.0), doc(8000, 5_200.0)])
    assert again.status == "fail" and again.timed
    broke = judged("cpu", "tiny", 8000, mains, [doc(8000, 9_800.0), doc(8000, 0.0, False)])
    assert broke.status == "fail" and not broke.timed
