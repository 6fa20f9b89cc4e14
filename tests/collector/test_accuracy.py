"""Accuracy between score dumps: top-1, KL over the top-k union, perplexity ratio."""

from __future__ import annotations

import math

import pytest

from collector.judge.accuracy import AccuracyError, compare_dumps, position_kl


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
