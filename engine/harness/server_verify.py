"""Hold a served engine's timed outputs against main's server: the reference is main's build.

The same report as verify.py's (a margin per generated token and per prefill, the KL of each
prefill digest), from main's server instead of this checkout's model: a server returns no logit
rows, only the top log-probs of each token it predicts. So each sample is teacher-forced by
greedy continuation, which is exact:

* main continues the sample's context (prompt and fed first token) greedily for the rest of the
  sample's tokens, with each position's top REFERENCE_TOPK log-probs;
* where main's token is the sample's, the sample's margin there is 0 (main picked it);
* at the first token where they differ, the margin is main's best log-prob minus the sample's
  token's (below main's top-k: main's best minus its k-th, a bound that already fails any tie
  margin), and main continues again from the sample's tokens up to and including that one.

So every margin is main's log-probs at the sample's own context, as a teacher-forced pass gives
them, at one request per disagreement (none beyond the first for an engine that computes what
main computes). Prefill digests: the margin of the reported first token and the KL between
main's top-k and the reported one (verify.digest_kl over main's top-k, the rest a tail bucket).
Runs in main's turns, untimed, while main's server is up (before the session's engines stop).
"""

from __future__ import annotations

import numpy as np

from engine.harness.protocol import VerificationReport
from engine.harness.server_engine import ServerEngine
from engine.harness.timing import Sample
from engine.harness.verify import TAIL_FLOOR

REFERENCE_TOPK = 20


def _margin(top: list[tuple[int, float]], made: int) -> float:
    best = max(lp for _, lp in top)
    for i, lp in top:
        if i == made:
            return best - lp
    return best - min(lp for _, lp in top)  # below main's top-k: at least this far


def _kl(main_top: list[tuple[int, float]], reported: list[tuple[int, float]]) -> float:
    """KL(main || reported) over main's top-k (k: the report's length) and a tail bucket; a
    reported id missing from main's top-k, or main's id missing from the report, gets that
    side's smallest log-prob."""
    ranked = sorted(main_top, key=lambda t: -t[1])[: len(reported)]  # k: the report's length
    ref, rep = dict(ranked), dict(reported)
    ids = sorted(set(ref) | set(rep))
    lp_p = np.array([ref.get(i, min(ref.values())) for i in ids])
    lp_q = np.array([rep.get(i, min(rep.values())) for i in ids])
    p, q = np.exp(lp_p), np.exp(lp_q)
    p_tail = max(1.0 - float(p.sum()), 0.0)
    q_tail = max(1.0 - float(q.sum()), TAIL_FLOOR)
    kl = float(np.sum(p * (lp_p - lp_q)))
    if p_tail > TAIL_FLOOR:
        kl += p_tail * float(np.log(p_tail / q_tail))
    return max(kl, 0.0)


def decode_margins(
    main: ServerEngine, seq: int, context: list[int], made: list[int]
) -> list[float]:
    """Main's margin of each of `made`, generated after `context`."""
    margins: list[float] = []
    while len(margins) < len(made):
        at = len(margins)
        answer = main.continuation(seq, context + made[:at], len(made) - at, REFERENCE_TOPK)
        theirs = answer["tokens"]
        for j in range(len(made) - at):
            if theirs[j] == made[at + j]:
                margins.append(0.0)
                continue
            margins.append(_margin(main.top_logprobs(answer, j), made[at + j]))
            break
    return margins


def verify_on(main: ServerEngine, groups: list[list[Sample]], reference: str) -> VerificationReport:
    """Every sample of every group against main's server, in main's turn."""
    dec: list[float] = []
    pre: list[float] = []
    kls: list[float] = []
    main.reset(1, main.slot_ctx)
    with main.turn():
        for group in groups:
            for s in group:
                prompt = [int(t) for t in s.prompt]
                if s.argmax is not None and s.topk is not None:
                    answer = main.continuation(0, prompt, 1, REFERENCE_TOPK)
                    top = main.top_logprobs(answer, 0)
                    pre.append(_margin(top, s.argmax))
                    kls.append(_kl(top, s.topk))
                if s.ids is not None and len(s.ids) and s.first is not None:
                    made = [int(t) for t in np.asarray(s.ids).reshape(-1)]
                    dec += decode_margins(main, 0, [*prompt, int(s.first)], made)
    return VerificationReport(
        reference=reference,
        decode_margins=[round(max(m, 0.0), 6) for m in dec],
        prefill_margins=[round(max(m, 0.0), 6) for m in pre],
        prefill_kl=[round(k, 8) for k in kls],
    )
