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

llama-server withholds the log-probs of a token that ends inside a UTF-8 character
(ServerEngine.top_logprobs). Where main's are withheld at a token the sample does not share,
that token has no margin (skipped: main's log-probs there cannot be had; the sample's other
tokens are still held to main's). A prefill digest the PR's server withheld stands where main's
server withholds its own for the same token, gets its margin where main's token differs, and is
the PR's failure where main's server sends one for the same token at the same context.

The decode path's numerics (`decode_kl`): a timed decode's tokens are held to main's pick only,
and within the tie margin a subtle bug in the decode's kernels alone (a token a step: on CUDA
the quantized mat-vec, not the matmul a prompt or llama-perplexity's batches take) flips too
few of them to tell. So both servers continue the same few timed prompts greedily, untimed, each
in its own turn, with their top log-probs, one sequence at a time (`decode_kl`) and then several
at once (`batched_decode_kl`): past the first token each step is a decode (of one sequence, or
of a batch of them as in the timed concurrent decode), the same path in both builds. Where
their tokens so far agree, the KL between main's step and the PR's is the decode path's distance
from main's (0 for a build that computes what main's computes, on the CPU exactly; each kind
judged on its own, so a bug in the batched path alone is not averaged away by the other).
"""

from __future__ import annotations

import numpy as np

from engine.errors import EngineOutputError
from engine.harness.protocol import VerificationReport
from engine.harness.server_engine import ServerEngine
from engine.harness.timing import Sample
from engine.harness.verify import TAIL_FLOOR

REFERENCE_TOPK = 20
PROBE_PROMPTS = 4  # timed prompts each server continues through its decode path (decode_kl)
PROBE_TOKENS = 16
PROBE_MIN = 4  # a prompt's slot must have room for this many of them

# a server's greedy continuation: its tokens and the top log-probs at each (None: withheld)
Continued = tuple[list[int], list[list[tuple[int, float]] | None]]


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
    """Main's margin of each of `made`, generated after `context` (none for a disagreement
    where main's own token's log-probs are withheld)."""
    margins: list[float] = []
    at = 0
    while at < len(made):
        rest = len(made) - at
        answer = main.continuation(seq, context + made[:at], rest, REFERENCE_TOPK)
        theirs, tops = answer["tokens"], main.top_logprobs(answer, rest)
        agree = next((j for j in range(rest) if theirs[j] != made[at + j]), rest)
        margins += [0.0] * agree
        if agree < rest and tops[agree] is not None:
            margins.append(_margin(tops[agree], made[at + agree]))
        at += agree + 1  # main continues from the sample's own tokens past the disagreement
    return margins


def prefill_check(
    main: ServerEngine, prompt: list[int], s: Sample
) -> tuple[float | None, float | None]:
    """(margin, KL) of a prefill digest against main's server; None where it cannot be had."""
    assert s.argmax is not None
    answer = main.continuation(0, prompt, 1, REFERENCE_TOPK)
    (theirs,), (top,) = answer["tokens"], main.top_logprobs(answer, 1)
    if top is None:  # main's own token ends inside a character: its log-probs withheld
        return (0.0 if theirs == s.argmax else None), None
    if s.topk is None and theirs == s.argmax:
        raise EngineOutputError(
            "the server withheld the log-probs of a first token that main's server sends for "
            "the same token at the same context"
        )
    return _margin(top, s.argmax), (None if s.topk is None else _kl(top, s.topk))


def probe_prompts(groups: list[list[Sample]], slot_ctx: int) -> list[list[int]]:
    """The prompts of the first PROBE_PROMPTS timed decodes (fresh challenges), distinct, that
    leave a slot of `slot_ctx` tokens room for PROBE_MIN tokens or more."""
    prompts: list[list[int]] = []
    for s in (s for group in groups for s in group):
        prompt = [int(t) for t in s.prompt]
        fits = len(prompt) + PROBE_MIN < slot_ctx
        if s.ids is not None and prompt and fits and prompt not in prompts:
            prompts.append(prompt)
        if len(prompts) == PROBE_PROMPTS:
            break
    return prompts


def continued(
    server: ServerEngine, prompts: list[list[int]]
) -> tuple[list[Continued], list[Continued]]:
    """Each prompt continued greedily (PROBE_TOKENS tokens, or as many as its slot has room
    for) with the top log-probs at each: one sequence at a time (its decode of one token), then
    (a server of several slots) as many at once as it has slots (its batched decode). The
    caller holds the server's turn."""
    steps = min(PROBE_TOKENS, server.slot_ctx - 1 - max(map(len, prompts), default=0))
    one = [server.continuation(0, p, steps, REFERENCE_TOPK) for p in prompts]
    many = []
    if server.slots > 1 and len(prompts) > 1:
        batch = prompts[: server.slots]
        server.reset(len(batch), server.slot_ctx)
        for seq, p in enumerate(batch):  # each prompt into its slot alone: the same cache
            server.continuation(seq, p, 1, 0)  # in both builds, whatever arrives first below
        many = server.continuations(batch, steps, REFERENCE_TOPK)
    return [_read(server, a, steps) for a in one], [_read(server, a, steps) for a in many]


def _read(server: ServerEngine, answer: dict, steps: int) -> Continued:
    return list(answer["tokens"]), server.top_logprobs(answer, steps)


def decode_path_kl(mains: list[Continued], theirs: list[Continued]) -> list[float]:
    """KL(main || the PR) at each decode step (past the first token) where both continuations
    still share their context. The PR's server must send the log-probs main's sends for the same
    token at the same context, as many of them: a step withheld or cut short is its failure
    (else withholding them would be a way past this check)."""
    kls = []
    for (m_ids, m_tops), (t_ids, t_tops) in zip(mains, theirs, strict=True):
        for j in range(1, min(len(m_ids), len(t_ids))):
            if m_ids[:j] != t_ids[:j]:
                break  # another context from here: nothing to compare
            mine, reported = m_tops[j], t_tops[j]
            if mine is None:
                continue  # main's own withheld (a token inside a character): none to hold to
            if reported is None or len(reported) < len(mine):
                if reported is None and t_ids[j] != m_ids[j]:
                    continue  # another token, which may end inside a character
                raise EngineOutputError(
                    "the server withheld or cut short the log-probs of a decode step that "
                    "main's server sends in full at the same context"
                )
            kls.append(_kl(mine, reported))
    return kls


def _margins(
    main: ServerEngine, groups: list[list[Sample]]
) -> tuple[list[float], list[float], list[float]]:
    """(decode margins, prefill margins, prefill KLs) of every sample against main's server."""
    dec: list[float] = []
    pre: list[float] = []
    kls: list[float] = []
    for group in groups:
        for s in group:
            prompt = [int(t) for t in s.prompt]
            if s.argmax is not None:
                margin, kl = prefill_check(main, prompt, s)
                pre += [] if margin is None else [margin]
                kls += [] if kl is None else [kl]
            if s.ids is not None and len(s.ids) and s.first is not None:
                made = [int(t) for t in np.asarray(s.ids).reshape(-1)]
                dec += decode_margins(main, 0, [*prompt, int(s.first)], made)
    return dec, pre, kls


def _rounded(margins: list[float]) -> list[float]:
    return [round(max(m, 0.0), 6) for m in margins]


def verify_on(
    main: ServerEngine,
    groups: list[list[Sample]],
    reference: str,
    own: list[list[Sample]],
    measured: ServerEngine | None = None,
) -> VerificationReport:
    """Every sample of every group against main's server, in main's turn; then main's own
    samples of the same session (`own`) the same way (VerificationReport's baseline margins).
    With the `measured` server still up, its decode path against main's too (`decode_kl`,
    `batched_decode_kl`)."""
    prompts = probe_prompts(groups, main.slot_ctx) if measured is not None else []
    theirs: tuple[list[Continued], list[Continued]] = ([], [])
    if measured is not None and prompts:
        measured.reset(1, measured.slot_ctx)
        with measured.turn():
            theirs = continued(measured, prompts)
    main.reset(1, main.slot_ctx)
    with main.turn():
        dec, pre, kls = _margins(main, groups)
        main_dec, main_pre, _ = _margins(main, own)
        mains = continued(main, prompts) if prompts else ([], [])
    one, many = (decode_path_kl(m, t) for m, t in zip(mains, theirs, strict=True))
    return VerificationReport(
        reference=reference,
        decode_margins=_rounded(dec),
        prefill_margins=_rounded(pre),
        prefill_kl=[round(k, 8) for k in kls],
        decode_kl=[round(k, 8) for k in one],
        batched_decode_kl=[round(k, 8) for k in many],
        baseline_decode_margins=_rounded(main_dec),
        baseline_prefill_margins=_rounded(main_pre),
    )
