"""Accuracy between score dumps: top-1, KL over the top-k union, perplexity ratio."""

from __future__ import annotations

import math

import pytest

from collector.judge.accuracy import AccuracyError, compare_dumps, of_kld, position_kl
from collector.judge.gates.accuracy import judge
from collector.policy import AccuracyBars
from engine.harness.protocol import DeviceInfo, KldResult


def dump(rows: list[tuple[int, float, dict[int, float]]], tokens: list[int] | None = None) -> dict:
    return {
        "tokens": tokens or list(range(len(rows) + 1)),
        "positions": [
            {"argmax": a, "target_logprob": t, "topk": [[i, math.log(p)] for i, p in k.items()]}
            for a, t, k in rows
        ],
    }


def test_identical_dumps() -> None:
    d = dump([(1, math.log(0.5), {1: 0.5, 2: 0.3}), (3, math.log(0.2), {3: 0.7, 1: 0.2})])
    r = compare_dumps(d, d)
    assert r.top1 == 1.0 and r.kl == 0.0 and r.ppl_ratio == 1.0


def test_disagreement_lowers_top1_and_raises_kl() -> None:
    a = dump([(1, math.log(0.5), {1: 0.5, 2: 0.3}), (3, math.log(0.7), {3: 0.7, 1: 0.2})])
    b = dump([(2, math.log(0.2), {2: 0.6, 1: 0.2}), (3, math.log(0.7), {3: 0.7, 1: 0.2})])
    r = compare_dumps(a, b)
    assert r.top1 == 0.5
    assert r.kl > 0.05
    assert r.ppl_pr > r.ppl_main


def test_kl_with_disjoint_topk_uses_tail_bucket() -> None:
    kl = position_kl({1: 0.9}, {2: 0.9})
    assert kl > 1.0 and math.isfinite(kl)
    assert position_kl({1: 0.9, 2: 0.05}, {1: 0.9, 2: 0.05}) == 0.0


def test_different_tokens_refused() -> None:
    a = dump([(1, -1.0, {1: 0.5})], tokens=[0, 1])
    b = dump([(1, -1.0, {1: 0.5})], tokens=[0, 2])
    with pytest.raises(AccuracyError, match="different tokens"):
        compare_dumps(a, b)


def test_a_near_tie_agrees_within_the_bars_margin_and_a_wrong_top_never_does() -> None:
    """Main's top (0.40) and the PR's (main gives it 0.38: 0.05 nats apart) are a near-tie; a PR
    top that main gives 0.10 is 1.4 nats behind, one outside main's top-k has no known gap."""
    a = dump([(1, -1.0, {1: 0.40, 2: 0.38}), (3, -1.0, {3: 0.4, 4: 0.1}), (5, -1.0, {5: 0.9})])
    b = dump([(2, -1.0, {2: 0.41, 1: 0.39}), (4, -1.0, {4: 0.5, 3: 0.2}), (6, -1.0, {6: 0.9})])
    assert compare_dumps(a, b).top1 == 0.0  # no margin: every flip counts (the default)
    assert compare_dumps(a, b, tie_nats=0.2).top1 == pytest.approx(1 / 3)
    assert compare_dumps(a, b, tie_nats=2.0).top1 == pytest.approx(2 / 3)


def kld_doc(tokens: int, gaps: list[float] | None, same_top: float) -> KldResult:
    device = DeviceInfo(backend="numpy", name="cpu")
    return KldResult(
        model="smollm2-135m", model_id="x", engine_commit="c", device=device, started_at="t",
        wall_s=1.0, ctx=128, chunks=1, tokens=tokens, kl_mean=0.001, kl_p99=0.01, kl_max=0.02,
        same_top=same_top, top_gaps=gaps, ppl_main=10.0, ppl_pr=10.0, ppl_ratio=1.0,
    )  # fmt: skip


def test_a_served_engines_flips_count_beyond_the_tie_and_old_documents_count_every_flip() -> None:
    doc = kld_doc(100, [0.01, 0.15, 0.19, 0.4, 1.2], same_top=0.95)
    assert of_kld(doc).top1 == pytest.approx(0.95)
    assert of_kld(doc, tie_nats=0.2).top1 == pytest.approx(0.98)
    assert of_kld(kld_doc(100, None, same_top=0.95), tie_nats=0.2).top1 == pytest.approx(0.95)
    with pytest.raises(ValueError, match="one gap for each position"):
        kld_doc(100, [0.1], same_top=0.95)


def test_the_gate_says_near_ties_agreed_only_where_they_were_counted() -> None:
    """A served engine's document stored before the gaps counts every flip: its words must not
    claim the bars' near-tie margin."""
    acc = of_kld(kld_doc(100, None, same_top=0.95))
    bars = AccuracyBars(top1_min=0.9, top1_tie_nats=0.2)
    assert "near-ties" not in judge(acc, bars, 0.0)[1]
    assert "near-ties within 0.2 nats agree" in judge(acc, bars, 0.2)[1]
