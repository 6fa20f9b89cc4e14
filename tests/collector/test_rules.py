"""The verdict rules on synthetic numbers: tiers, floor, noise, implausible guard, merge-first.

Every speed comparison reads pairs: (the session's slot, main's value, the PR's value) of one
repetition, both engines timed turn by turn in the same minutes."""

from __future__ import annotations

import numpy as np
import pytest

from collector.judge.compare import compare_axis
from collector.judge.rules import loss_shortfall
from collector.judge.stats import bootstrap_ratio_ci, session_sds, session_spread
from collector.judge.verdict import choose_merge_first, left_open
from collector.policy import load_policy, resolve
from collector.results import Comparison, Pair, Verdict
from collector.schedule import CONFIRM_SLOTS

CPU_POLICY = resolve(load_policy(), "cpu")
# The rules on exact numbers: no calibrated box noise on top of what each test states.
POLICY = CPU_POLICY.model_copy(
    update={"profile": CPU_POLICY.profile.model_copy(update={"min_noise": 0.0})}
)


def pairs(main: list[float], pr: list[float], sessions: int = 2) -> list[Pair]:
    """main[i] beside pr[i], the repetitions dealt into `sessions` sessions in turn (slots 1..)."""
    return [(1 + i % sessions, m, p) for i, (m, p) in enumerate(zip(main, pr, strict=True))]


def by_session(main: float, prs: list[list[float]], first_slot: int = 1) -> list[Pair]:
    """Each session's PR values (a list per session) beside main's constant `main`."""
    return [(first_slot + k, main, v) for k, vals in enumerate(prs) for v in vals]


def cmp(main: float, pr: float, ax: str = "decode@128", policy=POLICY) -> Comparison:  # noqa: ANN001
    """Constant samples in two sessions: delta exact, interval a point, no spread."""
    return compare_axis(policy, "tiny", "target", ax, pairs([main] * 6, [pr] * 6))


@pytest.mark.parametrize(
    ("pr", "tier"),
    [
        (101.99, "none"),
        (102.0, "XS"),
        (103.49, "XS"),
        (103.5, "S"),
        (105.99, "S"),
        (106.0, "M"),
        (109.99, "M"),
        (110.0, "L"),
        (117.99, "L"),
        (118.0, "XL"),
        (500.0, "XL"),
    ],
)
def test_tier_boundaries(pr: float, tier: str) -> None:
    c = cmp(100.0, pr)
    assert c.tier == tier
    assert c.significant == (tier != "none")


def test_tier_boundaries_are_inclusive_at_other_scales() -> None:
    for main in (0.37, 63.5, 4824.02, 1e5):
        assert cmp(main, main * 1.02).tier == "XS"
        assert cmp(main, main * 1.035).tier == "S"
        assert cmp(main, main * 1.18).tier == "XL"


@pytest.mark.parametrize(
    ("pr", "below"), [(98.0, False), (97.99, True), (99.0, False), (50.0, True)]
)
def test_floor(pr: float, below: bool) -> None:
    assert cmp(100.0, pr).below_floor is below


def test_the_sessions_own_spread_is_the_noise_without_a_round() -> None:
    """Two sessions whose pairs read +5% and +25% and no round to say how far sessions stray:
    their own sample sd of log ratios, its band exp(5 sd / sqrt(2)) = +55%: their pooled +15%
    is no tier; sessions that agree give the same gain a tier."""
    assert POLICY.verdict.noise_multiplier == 1.5
    apart = by_session(100.0, [[105.0] * 3, [125.0] * 3])
    c = compare_axis(POLICY, "tiny", "target", "decode@128", apart)
    own = float(np.std(np.log([1.05, 1.25]), ddof=1))
    assert c.noise == pytest.approx(POLICY.verdict.round_noise(own, 2))
    assert c.band == pytest.approx(np.exp(5 * own / np.sqrt(2)))
    assert c.per_session == pytest.approx((0.05, 0.25))
    assert not c.significant and c.tier == "none"
    together = by_session(100.0, [[115.0] * 3, [116.0] * 3])
    assert compare_axis(POLICY, "tiny", "target", "decode@128", together).tier == "L"
    # a loss likewise: -12% and -2% in two sessions is not below the floor past the band
    loss = by_session(100.0, [[98.0] * 3, [88.0] * 3])
    assert not compare_axis(POLICY, "tiny", "target", "decode@128", loss).below_floor


def test_noise_blocks_significance_and_floor() -> None:
    """The profile's floor: never less noise than it, whatever the sessions show."""
    floored = POLICY.model_copy(
        update={"profile": POLICY.profile.model_copy(update={"min_noise": 0.105})}
    )
    assert cmp(100.0, 115.0, policy=floored).significant is False
    assert cmp(100.0, 115.0, policy=floored).tier == "none"
    assert cmp(100.0, 88.0, policy=floored).below_floor is False
    assert cmp(100.0, 125.0, policy=floored).tier == "XL"
    assert cmp(100.0, 75.0, policy=floored).below_floor is True


def test_interval_including_zero_is_not_significant() -> None:
    ratios = [0.96, 1.06, 0.99, 1.05, 1.03, 0.98]  # median +1%, pairs on both sides of 1
    c = compare_axis(
        POLICY, "tiny", "target", "decode@32", pairs([100.0] * 6, [100 * r for r in ratios])
    )
    assert c.ci_low < 0 < c.ci_high
    assert not c.significant


def test_gain_and_loss_must_hold_in_every_pr_session() -> None:
    """One session whose pair of processes drew a slow or fast placement decides nothing."""
    mixed = by_session(100.0, [[64.0, 65.0, 63.0], [130.0, 131.0, 129.0]])
    wide = POLICY.model_copy(
        update={"verdict": POLICY.verdict.model_copy(update={"noise_multiplier": 0.0})}
    )
    assert compare_axis(wide, "tiny", "target", "decode@128", mixed).below_floor is False
    assert compare_axis(wide, "tiny", "target", "decode@128", mixed).significant is False
    slow = by_session(100.0, [[64.0, 65.0, 63.0], [66.0, 64.0, 65.0]])
    assert compare_axis(POLICY, "tiny", "target", "decode@128", slow).below_floor is True
    fast = by_session(100.0, [[130.0, 131.0, 129.0], [128.0, 132.0, 130.0]])
    assert compare_axis(POLICY, "tiny", "target", "decode@128", fast).tier == "XL"


def test_a_confirmation_session_holds_a_loss_only_below_the_floor_past_the_band() -> None:
    """A confirmation session (slot >= CONFIRM_SLOTS) at main's speed lifts a loss its planned
    sessions showed, even where the band is too tight to hold it (exact numbers, no spread
    counted: multiplier 0); one still below the floor past the band confirms the loss."""
    exact = POLICY.model_copy(
        update={"verdict": POLICY.verdict.model_copy(update={"noise_multiplier": 0.0})}
    )

    def c(planned: list[float], confirmation: float) -> Comparison:
        p = by_session(100.0, [[m] * 3 for m in planned])
        p += [(CONFIRM_SLOTS, 100.0, confirmation)] * 3
        return compare_axis(exact, "tiny", "target", "decode@128", p)

    burst = c([70.0, 70.0, 70.0], 99.8)
    assert not burst.below_floor and burst.confirmed == pytest.approx((-0.002,))
    assert "its confirmation session at -0.2% is not below the 98% floor" in str(
        loss_shortfall(burst, exact.verdict)
    )
    # a planned session not below the floor either: both are said
    both = loss_shortfall(c([70.0, 70.0, 99.6], 99.0), exact.verdict)
    assert "one PR session at -0.4%" in str(both)
    assert (
        "its confirmation session at -1.0% is not below the 98% floor past its noise band"
        in str(both)
    )
    assert c([70.0, 70.0, 70.0], 90.0).below_floor  # -10% measured again: the loss stands


def test_a_large_loss_beats_a_large_spread() -> None:
    """Noise is multiplicative: with the box swinging 1.57x between repetitions (both engines
    alike, turn by turn), a 5x slowdown is a loss and a 1.3x gain a gain."""
    level = [2539.0, 2117.0, 2401.0, 2170.0, 1614.0, 2300.0]
    slow = compare_axis(
        POLICY, "tiny:q8_0", "guard", "decode@128", pairs(level, [v / 5 for v in level])
    )
    assert slow.below_floor and slow.noise == pytest.approx(0.0)
    fast = compare_axis(
        POLICY, "tiny", "target", "decode@128", pairs(level, [v * 1.3 for v in level])
    )
    assert fast.significant and fast.tier == "XL"


def test_implausible_guard() -> None:
    assert cmp(100.0, 2001.0).implausible is True
    assert cmp(100.0, 1999.0).implausible is False
    c = compare_axis(
        POLICY,
        "tiny",
        "target",
        "decode@32",
        pairs([90.0, 100.0, 110.0, 100.0], [2150.0, 2300.0, 2200.0, 2250.0]),
    )
    assert c.implausible is False  # 2150 is not 20x main's fastest (110)


def test_implausible_needs_samples_that_do_not_overlap() -> None:
    """A loaded box makes single repetitions 100x fast on either side: that is noise."""
    main = [500.0, 480.0, 87000.0, 490.0]
    pr = [485.0, 86000.0, 88000.0, 85000.0]
    c = compare_axis(POLICY, "tiny", "target", "prefill@128", pairs(main, pr))
    assert not c.implausible
    assert not c.significant  # and the interval is far too wide to call it a gain


def test_bootstrap_interval_contains_true_delta() -> None:
    """On synthetic pairs with a known 5% gain the 95% interval covers it about 95% of the time."""
    rng = np.random.default_rng(7)
    covered = 0
    trials = 200
    for t in range(trials):
        main = rng.normal(100.0, 1.0, 16)
        pr = main * 1.05 * rng.normal(1.0, 0.01, 16)
        _, lo, hi = bootstrap_ratio_ci(pairs(list(main), list(pr)), 1000, 0.95, seed=t)
        covered += lo <= 0.05 <= hi
    assert covered / trials > 0.85


def test_bootstrap_is_deterministic() -> None:
    p = pairs([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0])
    assert bootstrap_ratio_ci(p, seed=3) == bootstrap_ratio_ci(p, seed=3)


def test_session_spread() -> None:
    assert session_spread(by_session(100.0, [[110.0] * 3])) == 0.0  # one session: none
    assert session_spread(by_session(100.0, [[50.0], [100.0]])) == pytest.approx(1.0)
    assert session_spread(by_session(100.0, [[100.0, 104.0, 96.0], [100.0]])) == 0.0  # medians
    assert session_spread(by_session(100.0, [[101.0], [103.0], [99.0]])) == pytest.approx(
        103 / 99 - 1
    )


def test_the_rounds_session_sd_sets_the_least_noise() -> None:
    """A no-op whose three sessions agree at -9%, where the round's other PRs' sessions strayed
    14-35% from each other (measured on a 2-core VM, concurrent@2): not a loss. Alone, at the
    floor, its sessions' agreement would have made it one."""
    noop = by_session(100.0, [[90.0] * 3, [91.0] * 3, [94.0] * 3])
    others = [
        by_session(100.0, [[104.0] * 3, [88.0] * 3, [99.0] * 3]),
        by_session(100.0, [[108.0] * 3, [97.0] * 3, [91.0] * 3]),
        by_session(100.0, [[107.0] * 3, [98.0] * 3, [79.0] * 3]),
    ]
    key = ("tiny", "concurrent@2", "full")
    sds = session_sds({(n, *key): p for n, p in enumerate([noop, *others])})
    kind = "concurrent"
    # each PR's sample variance of its log session ratios over the median of chi-square(2) / 2
    scaled = sorted(
        float(np.var(np.log([p[3 * k][2] / 100.0 for k in range(3)]), ddof=1)) / (1 - 2 / 18) ** 3
        for p in [noop, *others]
    )
    assert sds[kind] == pytest.approx(np.sqrt((scaled[1] + scaled[2]) / 2))  # the median of four
    alone = compare_axis(CPU_POLICY, "tiny", "target", "concurrent@2", noop)
    assert alone.below_floor
    judged = compare_axis(CPU_POLICY, "tiny", "target", "concurrent@2", noop, sds[kind])
    assert not judged.below_floor
    own = np.var(np.log([0.90, 0.91, 0.94]), ddof=1)
    moderated = np.sqrt((2 * own + 4 * sds[kind] ** 2) / 6)  # the round's sd counts 4 dof
    assert judged.noise == pytest.approx(CPU_POLICY.verdict.round_noise(moderated, 3))
    # fewer than three groups measured in two sessions or more: no session sd
    assert session_sds({(1, *key): noop, (2, *key): by_session(100.0, [[95.0] * 3])}) == {}
    # every axis of a kind pools: a guard's axis that one PR measured borrows from the rest
    guard = ("tiny:q8_0", "concurrent@4", "guard")
    pooled = session_sds({(0, *key): others[0], (1, *key): others[1], (2, *guard): others[2]})
    assert set(pooled) == {"concurrent"}


def test_one_erratic_pr_cannot_widen_everyones_band() -> None:
    """The session sd is a median over PRs: a PR whose own sessions swing 3x leaves it where
    the three calm PRs put it."""
    key = ("tiny", "decode@128", "full")
    calm = [by_session(100.0, [[100.0], [110.0]]) for _ in range(3)]
    erratic = by_session(100.0, [[50.0], [150.0]])
    alone = session_sds({(n, *key): p for n, p in enumerate(calm)})["decode"]
    assert session_sds({(n, *key): p for n, p in enumerate([*calm, erratic])})["decode"] == alone
    assert alone == pytest.approx(np.sqrt(np.var(np.log([1.0, 1.1]), ddof=1) / (7 / 9) ** 3))


def test_the_round_noise_spans_z_standard_errors_of_the_mean_session() -> None:
    v = CPU_POLICY.verdict
    assert v.sessions_z == 5.0
    for sd, n in [(0.05, 2), (0.05, 3), (0.002, 3)]:
        band = v.band(v.round_noise(sd, n))
        assert np.log(band) == pytest.approx(v.sessions_z * sd / np.sqrt(n))
    assert v.round_noise(0.0, 3) == 0.0
    off = v.model_copy(update={"noise_multiplier": 0.0})
    assert off.round_noise(0.05, 3) == 0.0 and off.band(0.0) == 1.0


def test_neutral_prs_of_a_noisy_box_get_no_tier_and_no_floor() -> None:
    """Simulated rounds of PRs of main's speed: each session offset by its own pair of
    processes' luck (8% log sd, the concurrent axes of a 2-core VM), each pair by 3% more. Judged
    with the round's session sd, none of 2,900 axes is a tier or a loss; a real +80% keeps a
    tier in nearly every round (its own three sessions can spread past it)."""
    rng = np.random.default_rng(20261203)
    key = ("tiny", "concurrent@2", "full")
    called, gains = 0, 0
    for _ in range(100):
        round_pairs = {}
        for n in range(30):
            true = 1.8 if n == 0 else 1.0
            sessions = [
                true * np.exp(rng.normal(0, 0.08) + rng.normal(0, 0.03, 5)) for _ in range(3)
            ]
            round_pairs[(n, *key)] = by_session(100.0, [list(100.0 * s) for s in sessions])
        sd = session_sds(round_pairs)["concurrent"]
        for (n, *_), p in round_pairs.items():
            c = compare_axis(CPU_POLICY, "tiny", "target", "concurrent@2", p, sd)
            if n == 0:
                gains += c.tier != "none"
            else:
                called += c.significant or c.below_floor
    assert called == 0
    assert gains >= 95


def test_load_that_reaches_both_engines_cancels() -> None:
    """The box getting 10% quieter per repetition: a PR of main's own speed is not a gain, and a
    real 40% gain shows whole."""
    level = [100.0 * 1.1**i for i in range(6)]
    same = compare_axis(POLICY, "tiny", "target", "decode@128", pairs(level, level))
    assert same.tier == "none" and same.delta == pytest.approx(0.0)
    fast = compare_axis(
        POLICY, "tiny", "target", "decode@128", pairs(level, [1.4 * v for v in level])
    )
    assert fast.tier == "XL" and fast.delta == pytest.approx(0.4)


def _v(pr: int, label: str, delta: float) -> Verdict:
    v = Verdict(pr, "c", label, "r")
    v.best = cmp(100.0, 100.0 * (1 + delta))
    return v


def test_merge_first_skips_held_and_rejected() -> None:
    verdicts = [
        _v(1, "XL", 0.30),
        _v(2, "REJECT", 0.50),
        _v(3, "M", 0.07),
        _v(4, "L", 0.12),
        _v(5, "none", 0.01),
    ]
    prs = {
        1: {"labels": ["Hold"]},
        2: {"labels": []},
        3: {"labels": []},
        4: {"labels": ["perf"]},
        5: {"labels": []},
    }
    assert choose_merge_first(verdicts, prs, POLICY) == 4
    prs[4]["labels"] = ["needs-rebase"]
    assert choose_merge_first(verdicts, prs, POLICY) == 3


def test_merge_first_none_when_nothing_passes() -> None:
    assert (
        choose_merge_first(
            [_v(1, "none", 0.0), _v(2, "REJECT", 0.2)],
            {1: {"labels": []}, 2: {"labels": []}},
            POLICY,
        )
        is None
    )


def test_the_cpu_floor_and_confirmation_keep_an_aa_stray_from_a_tier() -> None:
    """Identical code in pairs of processes on a 2-core box (calibrated in policy.toml): one
    session's pair can read up to +8% or -14% on a concurrent axis. Two planned sessions that
    strayed alike (+5%, +8%) are no gain past their own spread's band (+7.3%), and the
    confirmation session (a third pair, back near 0) widens it further. A real change of the
    size the demo's #120 makes (+8.8%, its sessions agreeing) keeps its tier through its
    confirmation."""
    floor = CPU_POLICY.profile.min_noise
    assert 0 < floor <= 0.05 and CPU_POLICY.profile.confirm_sessions == 1

    def c(medians: list[float], ax: str = "concurrent@2") -> Comparison:
        p = by_session(100.0, [[m] * 3 for m in medians[:2]])
        p += [(CONFIRM_SLOTS + i, 100.0, m) for i, m in enumerate(medians[2:]) for _ in range(3)]
        return compare_axis(CPU_POLICY, "tiny", "target", ax, p)

    assert c([105.0, 108.0]).tier == "none"  # two planned sessions alone
    assert c([105.0, 108.0, 101.0]).tier == "none"
    assert not c([95.0, 92.0, 99.0]).below_floor
    real = c([108.0, 109.0, 108.5], "prefill@128")
    assert real.tier == "M" and real.band == pytest.approx((1 + floor) ** 1.5)


def test_gpu_floors_per_axis() -> None:
    """The gpu profile's floors (policy.toml, calibrated on the H200): a tight one on decode so a
    +2.5% change is a tier, one per short prefill axis."""
    gpu = resolve(load_policy(), "gpu")
    assert gpu.profile.noise_floor("decode@128") <= 0.0067  # band <= 1%
    assert gpu.profile.noise_floor("prefill@128") <= 0.02  # band <= 3%
    gain = compare_axis(
        gpu,
        "smollm2-135m",
        "target",
        "decode@128",
        by_session(1000.0, [[1025.0] * 3, [1024.0] * 3]),
    )
    assert gain.tier == "XS"
    loss = compare_axis(
        gpu, "smollm2-135m", "target", "decode@128", by_session(1000.0, [[975.0] * 3, [976.0] * 3])
    )
    assert loss.below_floor


def test_a_verdict_left_open_on_speed_is_measured_again() -> None:
    """A `none` whose target axis is past the +2% gate with its interval above 0, kept from
    counting only by its band or one session, gets a confirmation session (verdict.to_confirm);
    so does a loss kept from counting by them. A PR under the gate, one whose interval reaches
    0, or one whose label is decided already does not."""
    rules = CPU_POLICY.verdict

    def verdict(label: str, sessions: list[list[float]], role: str = "target") -> Verdict:
        v = Verdict(1, "c", label, "r")
        c = compare_axis(CPU_POLICY, "tiny", role, "prefill@128", by_session(100.0, sessions))
        v.comparisons = [c]
        return v

    near = verdict("none", [[108.6] * 5, [103.0] * 5])  # +5.8%, its sessions 5.4% apart
    assert near.comparisons[0].ci_low > 0 and not near.comparisons[0].significant
    assert left_open(near, rules)
    assert not left_open(verdict("none", [[101.0] * 5, [101.5] * 5]), rules)  # under the gate
    assert not left_open(verdict("none", [[95.0, 112.0] * 3, [96.0, 113.0] * 3]), rules)
    assert not left_open(verdict("REJECT", [[108.6] * 5, [103.0] * 5]), rules)
    assert not left_open(verdict("none", [[108.6] * 5, [103.0] * 5], role="guard"), rules)
    loss = verdict("none", [[92.0] * 5, [97.0] * 5], role="guard")  # -5.5%, one session at -3%
    assert not loss.comparisons[0].below_floor and left_open(loss, rules)
