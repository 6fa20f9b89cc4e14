"""long-context:<model>'s prefill floor: a PR that completes the check but falls back to a
slower path there is a REJECT; the floor is main's run beside it in the same session over the
profile's noise band for that axis. Rounds before main ran beside the PR are judged as they
were: the PR's fastest run against the slowest of main's own sessions."""

from __future__ import annotations

from types import SimpleNamespace

from collector.judge.gates import GateContext
from collector.judge.gates.long_context import long_context_gate
from collector.policy import load_policy, resolve


def doc(
    ctx: int, prefill: float, completed: bool = True, main: float | None = None
) -> SimpleNamespace:
    """A run of the check; `main`: main's prefill beside it in the same session."""
    beside = None if main is None else SimpleNamespace(prefill_tok_s=main, memory=None)
    return SimpleNamespace(
        ctx=ctx, tokens=16, budget_bytes=256 * 2**20, completed=completed, failure=None,
        prefill_tok_s=prefill, measured=None, main=beside,
    )  # fmt: skip


def judged(profile: str, model: str, mains: list[SimpleNamespace], prs: list[SimpleNamespace]):  # noqa: ANN201
    policy = resolve(load_policy(), profile)
    longctx = {("main", 0, model): mains, ("pr", 1, model): prs}
    data = SimpleNamespace(policy=policy, longctx=longctx)
    (gate,) = long_context_gate(GateContext(data, 1, "c0ffee", [model], [], [])).gates
    return gate


def paired(profile: str, model: str, ctx: int, main: float, pr: float) -> str:
    return judged(profile, model, [], [doc(ctx, pr, main=main)]).status


def test_a_slower_path_under_the_budget_fails_against_main_beside_it() -> None:
    """The floor: 0.98 / band(the axis's noise floor), against main's run in the same session."""
    assert paired("cpu", "tiny", 8000, 10_000.0, 9_900.0) == "pass"
    floor = 0.98 / 1.2**1.5  # the cpu profile credits prefill@8000 20% (policy.toml)
    assert paired("cpu", "tiny", 8000, 10_000.0, 10_000.0 * (floor + 0.01)) == "pass"
    assert paired("cpu", "tiny", 8000, 10_000.0, 10_000.0 * (floor - 0.01)) == "fail"
    assert paired("cpu", "tiny", 8000, 10_000.0, 5_000.0) == "fail"  # a path half as fast
    assert paired("gpu", "llama-1b:f16", 131000, 10_000.0, 9_600.0) == "pass"
    assert paired("gpu", "llama-1b:f16", 131000, 10_000.0, 9_000.0) == "fail"  # -10% on the H200


def test_a_short_prefill_is_a_timing_and_a_confirmation_session_can_lift_it() -> None:
    """Load only ever slows a run: the PR's best session counts, and a short prefill is marked
    timed (the PR is measured again); a run that did not complete is memory, not load, and
    stands where main completed beside it."""
    slow = judged("cpu", "tiny", [], [doc(8000, 5_000.0, main=10_000.0)])
    assert slow.status == "fail" and slow.timed
    lifted = judged("cpu", "tiny", [], [doc(8000, 5_000.0, main=10_000.0), doc(8000, 9_800.0, main=10_000.0)])  # fmt: skip
    assert lifted.status == "pass" and "its best of 2 sessions" in lifted.reason
    # a session whose main ran slow does not lift a PR that is slow against main in each
    again = judged("cpu", "tiny", [], [doc(8000, 5_000.0, main=10_000.0), doc(8000, 5_200.0, main=9_000.0)])  # fmt: skip
    assert again.status == "fail" and again.timed
    broke = judged("cpu", "tiny", [], [doc(8000, 9_800.0, main=10_000.0), doc(8000, 0.0, False, main=10_000.0)])  # fmt: skip
    assert broke.status == "fail" and not broke.timed and "where main did" in broke.reason


def test_rounds_before_main_ran_beside_keep_their_rule() -> None:
    """No baseline in the PR's documents: main's own sessions, its slowest, the PR's fastest."""
    mains = [doc(8000, 10_000.0), doc(8000, 10_500.0)]
    assert judged("cpu", "tiny", mains, [doc(8000, 8_900.0)]).status == "pass"
    assert judged("cpu", "tiny", mains, [doc(8000, 7_000.0)]).status == "fail"
    two = judged("cpu", "tiny", mains, [doc(8000, 5_000.0), doc(8000, 9_800.0)])
    assert two.status == "pass" and "the fastest of its 2 runs" in two.reason
    # a PR that did not complete where main's own sessions never did: not judged yet
    nomain = judged("cpu", "tiny", [doc(8000, 0.0, False)], [doc(8000, 0.0, False)])
    assert nomain.status == "warn"
    assert judged("cpu", "tiny", mains, [doc(8000, 0.0, False)]).status == "fail"
