"""Hold what the timed operations produced against main's model: the timed work must be the
real work.

The timing parent keeps, for every timed operation whose time it reports (and a few others
picked at random), the prompt, the prefill's digest (argmax and top-k log-probs of the last
logits) and the tokens a decode generated. After the engine process has exited, the parent loads
the model with its own code (main's pinned checkout: the reference) and teacher-forces each
sample: the prompt is prefilled, then every fed token is decoded one step at a time. For each
generated token it records the margin `max log-prob - log-prob of that token` under main's model
(0 when main would have picked it too), and for each prefill the margin of the reported argmax
and the KL between main's last-position distribution and the reported top-k. The collector
turns margins into agreement with its own tie margin and bars (collector/gates).
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


def verify(runner: Runner, groups: list[list[Sample]], reference: str) -> VerificationReport:
    """Teacher-force every group of samples (one group = sequences decoded together)."""
    decode_margins: list[float] = []
    prefill_margins: list[float] = []
    prefill_kl: list[float] = []
    for group in groups:
        steps = max((len(s.ids) for s in group if s.ids is not None), default=0)
        runner.reset(len(group), max(len(s.prompt) for s in group) + steps + 1)
        for seq, s in enumerate(group):
            logits = runner.prefill(seq, s.prompt)
            if s.argmax is not None and s.topk is not None:
                lp = log_softmax_rows(np.asarray(logits).reshape(1, -1))[0]
                prefill_margins.append(float(lp.max() - lp[s.argmax]))
                prefill_kl.append(digest_kl(lp, s.topk))
        if not steps:
            continue
        seqs = list(range(len(group)))
        fed = np.array([s.first for s in group], dtype=np.int64)
        for step in range(steps):
            lp = log_softmax_rows(runner.decode(seqs, fed))
            made = np.array([s.ids[step] for s in group], dtype=np.int64)  # type: ignore[index]
            decode_margins += (lp.max(axis=1) - lp[np.arange(len(group)), made]).tolist()
            fed = made
    return VerificationReport(
        reference=reference,
        decode_margins=[round(max(m, 0.0), 6) for m in decode_margins],
        prefill_margins=[round(max(m, 0.0), 6) for m in prefill_margins],
        prefill_kl=[round(k, 8) for k in prefill_kl],
    )
