"""Hold what the timed operations produced against main's model: the timed work must be the
real work.

The timing parent keeps, for every timed operation whose time it reports (and a few others
picked at random), the prompt, the prefill's digest (argmax and top-k log-probs of the last
logits) and the tokens a decode generated. After the engine process has exited, the parent loads
the model with its own code (main's pinned checkout: the reference) and teacher-forces each
sample: the prompt is prefilled, then the tokens the decode was fed (its first token and every
generated one but the last) are prefilled in one more pass that returns every position's logits,
the logits main's model gives each generated token's place. For each generated token it records
the margin `max log-prob - log-prob of that token` under main's model (0 when main would have
picked it too), and for each prefill the margin of the reported argmax and the KL between main's
last-position distribution and the reported top-k. The collector turns margins into agreement
with its own tie margin and bars (collector/judge/gates), a tie margin wide enough for the float
differences between a decode step and a batched pass over the same tokens.

One pass per sample, not one decode step per token: step by step, the verification was most of a
concurrent session's device time after its timed work (2026-12-03-h200-legs1: 19 of 94 s).
"""

from __future__ import annotations

import numpy as np

from engine.harness.common import log_softmax_rows, top_k
from engine.harness.protocol import VerificationReport
from engine.harness.timing import Sample
from engine.runner import Runner

TAIL_FLOOR = 1e-12


def digest_kl(ref: np.ndarray, topk: list[tuple[int, float]]) -> float:
    """KL(main || reported) over main's top-k (k = the report's length) and the reported ids, plus
    one tail bucket; an id missing from the report gets the report's smallest log-prob (it ranked
    below all of them)."""
    reported = dict(topk)
    k = len(reported)
    floor = min(reported.values())
    ids = sorted(set(top_k(ref, k)) | set(reported))
    p = np.exp(ref[ids])
    q = np.exp(np.array([reported.get(i, floor) for i in ids]))
    p_tail = max(1.0 - p.sum(), 0.0)
    q_tail = max(1.0 - q.sum(), TAIL_FLOOR)
    kl = float(np.sum(p * (ref[ids] - np.log(q))))
    if p_tail > TAIL_FLOOR:
        kl += p_tail * float(np.log(p_tail / q_tail))
    return max(kl, 0.0)


def pick_margins(logits: np.ndarray, made: np.ndarray) -> np.ndarray:
    """Per row, max log-prob - log-prob of the token made. The log-softmax's normaliser is the
    same on both sides, so this is max logit - its logit: no exp over the vocabulary (which cost
    ~35 ms a step at 32 rows of 128k, most of a concurrent session's verification)."""
    x = np.asarray(logits)
    rows = np.arange(x.shape[0])
    return x.max(axis=1).astype(np.float64) - x[rows, made].astype(np.float64)


def verify(runner: Runner, groups: list[list[Sample]], reference: str) -> VerificationReport:
    """Teacher-force every group of samples (one group = sequences decoded together).

    A sweep keeps a context's prefill and the decodes that continued from it with one prompt:
    consecutive one-sequence groups of the same prompt share its prefill (the cache is cut back
    to the prompt between them), which is what a fresh prefill would hold again; at 32k tokens
    that prefill is most of the verification's time."""
    decode_margins: list[float] = []
    prefill_margins: list[float] = []
    prefill_kl: list[float] = []
    # a single sequence's prompt -> the most cache any of its groups needs
    room: dict[bytes, int] = {}
    for group in groups:
        if len(group) == 1:
            key = prompt_key(group[0])
            room[key] = max(room.get(key, 0), needed(group))
    held: bytes | None = None  # the prompt sequence 0 holds, prefilled alone
    held_logits: np.ndarray | None = None
    for group in groups:
        steps = decode_steps(group)
        key = prompt_key(group[0]) if len(group) == 1 else None
        if key is not None and key == held:
            runner.truncate(0, len(group[0].prompt))
            prefill_logits = [held_logits]
        else:
            runner.reset(len(group), room[key] if key is not None else needed(group))
            prefill_logits = [runner.prefill(seq, s.prompt) for seq, s in enumerate(group)]
            held, held_logits = key, prefill_logits[0]
        for s, logits in zip(group, prefill_logits, strict=True):
            if s.argmax is not None and s.topk is not None:
                lp = log_softmax_rows(np.asarray(logits).reshape(1, -1))[0]
                prefill_margins.append(float(lp.max() - lp[s.argmax]))
                prefill_kl.append(digest_kl(lp, s.topk))
        if not steps:
            continue
        for seq, s in enumerate(group):
            if s.ids is None or not len(s.ids):
                continue
            made = np.asarray(s.ids, dtype=np.int64)
            fed = np.concatenate([np.array([s.first], dtype=np.int64), made[:-1]])
            decode_margins += pick_margins(runner.prefill(seq, fed, all_logits=True), made).tolist()
    return VerificationReport(
        reference=reference,
        decode_margins=[round(max(m, 0.0), 6) for m in decode_margins],
        prefill_margins=[round(max(m, 0.0), 6) for m in prefill_margins],
        prefill_kl=[round(k, 8) for k in prefill_kl],
    )


def prompt_key(sample: Sample) -> bytes:
    return np.asarray(sample.prompt, dtype=np.int64).tobytes()


def decode_steps(group: list[Sample]) -> int:
    """Tokens a group's decodes generated (0 for a prefill sample)."""
    return max((len(s.ids) for s in group if s.ids is not None), default=0)


def needed(group: list[Sample]) -> int:
    """Cache positions a group's teacher-forced pass needs per sequence."""
    return max(len(s.prompt) for s in group) + decode_steps(group) + 1
