"""The plan: main's untimed evidence first and last, each PR's paired sessions round-robin between,
stable ids."""

from __future__ import annotations

from collector.policy import load_policy, resolve
from collector.schedule import CONFIRM_SLOTS, plan_confirmation, plan_round, plan_shards, split_prs

PROFILE = resolve(load_policy(), "cpu").profile


def sides(slots) -> str:  # type: ignore[no-untyped-def]
    return "".join("M" if s.side == "main" else str(s.pr) for s in slots)


def test_main_first_and_last_the_prs_round_robin_between() -> None:
    assert PROFILE.pr_sessions == 2
    assert sides(plan_round("r", [(7, ["tiny"])], PROFILE)) == "M77M"
    assert sides(plan_round("r", [(i, ["tiny"]) for i in range(1, 5)], PROFILE)) == "M12341234M"
    one = PROFILE.model_copy(update={"pr_sessions": 1})
    assert sides(plan_round("r", [(i, ["tiny"]) for i in range(1, 4)], one)) == "M123M"


def test_tasks_targets_and_guards() -> None:
    slots = plan_round("r", [(5, ["tiny"])], PROFILE)
    kinds = [(t.kind, t.model) for t in slots[1].tasks]
    # each model's accuracy evidence before its timed sessions (a PR stopped after a forged or
    # diverged session keeps it); its speed sessions time main's engine beside its own
    assert kinds == [
        ("score", "tiny"),
        ("prefill-check", "tiny"),
        ("sweep", "tiny"),
        ("concurrent", "tiny"),
        ("longctx", "tiny"),
        ("score", "tiny:q8_0"),
        ("guard", "tiny:q8_0"),
    ]
    assert [(t.kind, t.model) for t in slots[2].tasks] == [
        ("sweep", "tiny"),
        ("concurrent", "tiny"),
        ("guard", "tiny:q8_0"),
    ]
    # main: no speed session of its own (nor a long-context check: it runs beside the PR's);
    # its scores twice (the second: calibration), the prefill check once
    main = [[(t.kind, t.model) for t in s.tasks] for s in slots if s.side == "main"]
    assert main[0] == [("score", "tiny"), ("prefill-check", "tiny"), ("score", "tiny:q8_0")]
    assert main[1] == [("score", "tiny"), ("score", "tiny:q8_0")]


def test_confirmation_times_again_and_rechecks_only_a_short_long_context() -> None:
    """Confirmation sessions score nothing and have no main slot; the long-context check runs
    again (main's beside it) only for the PR whose long-context prefill fell short."""
    slots = plan_confirmation(
        "r", [(1, ["tiny"]), (2, ["tiny"])], PROFILE, recheck={1: ["tiny"], 2: []}
    )
    assert sides(slots) == "12" and all(s.index >= CONFIRM_SLOTS for s in slots)
    kinds = {s.side + str(s.pr): [t.kind for t in s.tasks] for s in slots}
    assert kinds == {
        "pr1": ["sweep", "concurrent", "longctx", "guard"],
        "pr2": ["sweep", "concurrent", "guard"],
    }
    plain = plan_confirmation("r", [(1, ["tiny"])], PROFILE)
    assert sides(plain) == "1" and all(t.kind != "longctx" for s in plain for t in s.tasks)


def test_ids_are_stable_and_unique() -> None:
    a = plan_round("r", [(1, ["tiny"]), (2, ["tiny:q8_0"])], PROFILE)
    b = plan_round("r", [(1, ["tiny"]), (2, ["tiny:q8_0"])], PROFILE)
    ids = [t.session_id for s in a for t in s.tasks]
    assert ids == [t.session_id for s in b for t in s.tasks]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "r/main/0/0/score/tiny"


def test_no_measurable_prs_no_sessions() -> None:
    assert plan_round("r", [], PROFILE) == []


def test_main_scores_every_model_a_pr_targets_or_guards() -> None:
    """PR 1 targets tiny (tiny:q8_0 its guard), PR 2 targets tiny:q8_0: main scores and checks
    the prefill path of both (each a target), and runs no speed session."""
    slots = plan_round("r", [(1, ["tiny"]), (2, ["tiny:q8_0"])], PROFILE)
    main_tasks = {(t.kind, t.model) for t in slots[0].tasks}
    assert {("score", "tiny"), ("score", "tiny:q8_0")} <= main_tasks
    assert {("prefill-check", "tiny"), ("prefill-check", "tiny:q8_0")} <= main_tasks
    assert not {k for k, _ in main_tasks} & {"sweep", "concurrent", "guard"}


def test_shards_balance_cost_and_keep_manifest_order() -> None:
    prs = [(1, ["tiny"]), (2, ["llama-8b:q4_0"]), (3, ["tiny"]), (4, ["llama-1b:f16"])]
    # the 8B first (3.7) to shard 0, then the 1B (2.6) to shard 1, then each tiny to the cheapest
    assert split_prs(prs, 2) == [
        [(2, ["llama-8b:q4_0"])],
        [(1, ["tiny"]), (3, ["tiny"]), (4, ["llama-1b:f16"])],
    ]
    assert split_prs(prs, 1) == [prs]
    assert split_prs(prs[:1], 2) == [[(1, ["tiny"])], []]


def test_shards_have_their_own_main_sessions_and_ids() -> None:
    prs = [(i, ["tiny"]) for i in range(1, 5)]
    one = plan_shards("r", prs, PROFILE, 1)
    assert one == [plan_round("r", prs, PROFILE)]  # one shard: today's ids
    two = plan_shards("r", prs, PROFILE, 2)
    assert [sides(p) for p in two] == ["M1313M", "M2424M"]
    ids = [t.session_id for p in two for s in p for t in s.tasks]
    assert len(ids) == len(set(ids))
    assert all(
        t.session_id.startswith(f"r/s{k}/") and t.shard == k
        for k, p in enumerate(two)
        for s in p
        for t in s.tasks
    )
