"""Accuracy of one score dump against another (PR against main, or main against main).

Both dumps are teacher-forced passes over the same tokens: per position the target token's
log-prob, the argmax and the top-k log-probs. We compute

* top-1 agreement: the share of positions whose argmax is the same, or where the PR's argmax is a
  near-tie of main's: within the bars' `top1_tie_nats` of main's top log-prob, under main's own
  log-probs (0 by default: every flip counts). Another summation order, as a kernel's new tiling
  gives, flips near-ties and nothing else (data/demo/llama/README.md measured it);
* KL(main || PR) over the union of the two top-k sets, per position, then the mean. Each side
  only knows its own top-k. On the union U plus one tail bucket, a side's distribution is its
  own top-k probabilities; an id of U outside its own top-k gets min(its smallest top-k
  probability, tail / (number of such ids + 1)), where tail = 1 - sum of its top-k; whatever is
  left of the tail goes to the tail bucket. Probabilities are floored at 1e-10. Identical dumps
  give exactly 0;
* perplexity of each dump over the target tokens, exp(-mean target log-prob), and their ratio.

A served engine's builds are compared by main's harness itself, over every logit of each
position (engine/harness/kld.py): `of_kld` reads its document as the same measures.
"""

from __future__ import annotations

import math

from collector.results import AccuracyResult
from engine.harness.protocol import KldResult

EPS = 1e-10


class AccuracyError(ValueError):
    pass


def _side(topk: dict[int, float], union: list[int]) -> list[float]:
    probs = {i: math.exp(lp) for i, lp in topk.items()}
    known = sum(probs.values())
    tail = max(0.0, 1.0 - known)
    smallest = min(probs.values()) if probs else 0.0
    unknown = [i for i in union if i not in probs]
    share = min(smallest, tail / (len(unknown) + 1)) if unknown else 0.0
    dist = [probs.get(i, share) for i in union]
    dist.append(max(0.0, tail - share * len(unknown)))
    return [max(p, EPS) for p in dist]


def position_kl(main_topk: dict[int, float], pr_topk: dict[int, float]) -> float:
    union = sorted(set(main_topk) | set(pr_topk))
    p = _side(main_topk, union)
    q = _side(pr_topk, union)
    sp, sq = sum(p), sum(q)
    return max(
        0.0, sum((a / sp) * math.log((a / sp) / (b / sq)) for a, b in zip(p, q, strict=True))
    )


def agrees(gap: float, tie_nats: float) -> bool:
    """Whether a position whose top tokens differ by `gap` nats (main's log-prob of its own top
    minus of the PR's) still agrees on top-1: a near-tie."""
    return gap <= tie_nats


def compare_dumps(main: dict, pr: dict, tie_nats: float = 0.0) -> AccuracyResult:
    """Compare two ScoreResult documents (as dicts); `tie_nats`: the bars' near-tie margin."""
    if main["tokens"] != pr["tokens"]:
        raise AccuracyError("the two dumps scored different tokens (tokenizer or text changed)")
    mp, pp = main["positions"], pr["positions"]
    if len(mp) != len(pp) or not mp:
        raise AccuracyError("the two dumps have different numbers of positions")
    agree = 0
    kl_sum = 0.0
    lp_main = 0.0
    lp_pr = 0.0
    for a, b in zip(mp, pp, strict=True):
        main_topk = {int(i): float(lp) for i, lp in a["topk"]}
        if a["argmax"] == b["argmax"]:
            agree += 1
        elif tie_nats > 0 and int(b["argmax"]) in main_topk:  # outside main's top-k: no tie
            agree += agrees(max(main_topk.values()) - main_topk[int(b["argmax"])], tie_nats)
        kl_sum += position_kl(main_topk, {int(i): float(lp) for i, lp in b["topk"]})
        lp_main += a["target_logprob"]
        lp_pr += b["target_logprob"]
    n = len(mp)
    return AccuracyResult(
        n_tokens=n,
        top1=agree / n,
        kl=kl_sum / n,
        ppl_main=math.exp(-lp_main / n),
        ppl_pr=math.exp(-lp_pr / n),
    )


def of_kld(doc: KldResult, tie_nats: float = 0.0) -> AccuracyResult:
    """A served engine's comparison (server_score kld) as the measures the bars read; a document
    without the gaps of its flips (written before them) counts every flip."""
    top1 = doc.same_top
    if doc.top_gaps is not None:
        top1 = 1.0 - sum(not agrees(g, tie_nats) for g in doc.top_gaps) / doc.tokens
    return AccuracyResult(
        n_tokens=doc.tokens, top1=top1, kl=doc.kl_mean, ppl_main=doc.ppl_main, ppl_pr=doc.ppl_pr
    )
