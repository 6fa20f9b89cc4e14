"""Accuracy commands of the bench protocol: `score` (teacher-forced dump) and `prefill-check`.

    python -m engine.harness.score score --model M (--text-file F | --tokens-file F) --topk K --out FILE
    python -m engine.harness.score prefill-check --model M --prefix 128,1024 --positions 64 --out FILE

`score` dumps, for every position i of an evaluation text, the model's prediction of token i+1
from tokens 0..i: the argmax, the target's log-prob and the top-k log-probs. The collector
compares two such dumps (top-1 agreement, KL over the top-k union, perplexity); this command
compares nothing itself.

`prefill-check` compares, inside one build, the batched prefill path against the token-by-token
decode loop over the same tokens, so a pull request that speeds up prefill by computing
something else is caught even when decode is right.

All log-probs are computed on the host in float64 from the runner's float32 logits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click
import numpy as np

from engine.errors import EngineError
from engine.harness.common import (
    DEFAULT_CORPUS,
    Clock,
    EngineOutputError,
    backend_option,
    check_out,
    cli_main,
    config_of,
    corpus_prompt_ids,
    cycled,
    encode_text,
    header,
    log_softmax_rows,
    open_model,
    out_option,
    parse_int_list,
    progress,
    read_text_file,
    require_positive,
    top_k_rows,
    write_document,
)
from engine.harness.options import check_contexts
from engine.harness.protocol import PrefillCheckResult, PrefixCheck, ScoredPosition, ScoreResult
from engine.runner import Runner

# Prefill at most this many tokens per call in `score`, so the [n, vocab] logits of a long
# text never sit in memory at once. Chunks append to the same sequence; the result is the
# same teacher-forced pass.
SCORE_CHUNK = 256
LSE_ROWS = 16  # rows per float64 log-sum-exp pass in score_rows (16 x 128k x 8 B = 16 MB)


def log_softmax(logits: np.ndarray, where: str) -> np.ndarray:
    """Row-wise log-softmax in float64; non-finite logits are the engine's fault."""
    x = np.asarray(logits, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise EngineOutputError(f"non-finite logits {where}")
    return log_softmax_rows(x)


def _logit_rows(logits: np.ndarray, rows: int, vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(logits)
    if arr.ndim == 1 and rows == 1:
        arr = arr[None, :]
    if arr.shape != (rows, vocab):
        raise EngineOutputError(
            f"{what} returned logits of shape {arr.shape}, expected {(rows, vocab)}"
        )
    return arr


def score_rows(
    logits: np.ndarray, targets: Sequence[int], topk: int, where: str
) -> list[ScoredPosition]:
    """Predictions of a block of positions: argmax, the target's log-prob and the top-k.

    Log-probs are x - logsumexp(x) in float64. Argmax and top-k are picked on the float32
    logits, which gives the same order (float32 -> float64 is exact and the shift is per row).
    Top-k is sorted by log-prob descending, ties by the smaller id; argmax takes the smallest
    id among equal maxima, so a target that is the argmax has its log-prob as topk[0].

    The float64 work runs LSE_ROWS rows at a time in two reused row-major buffers: whole-block
    temporaries (three of 256 x 128k float64) were fresh pages each call, and faulting them in
    cost up to ~1 s per 256 rows, several times the arithmetic. Each row's sum runs along the
    row whatever the logits' memory order (a column-major block used to be summed across rows,
    which moved the last bits of its log-probs).
    """
    x = np.ascontiguousarray(logits)  # row by row below: a column-major block is slow to scan
    if not np.all(np.isfinite(x)):
        raise EngineOutputError(f"non-finite logits {where}")
    rows, vocab = x.shape
    argmax = x.argmax(axis=1)
    x64 = np.empty((min(rows, LSE_ROWS), vocab), dtype=np.float64)
    shifted = np.empty_like(x64)
    out: list[ScoredPosition] = []
    for a in range(0, rows, LSE_ROWS):
        n = min(LSE_ROWS, rows - a)
        xb, sb = x64[:n], shifted[:n]
        np.copyto(xb, x[a : a + n])
        peak = xb.max(axis=1, keepdims=True)
        np.subtract(xb, peak, out=sb)
        np.exp(sb, out=sb)
        lse = peak[:, 0] + np.log(sb.sum(axis=1))
        tops = top_k_rows(x[a : a + n], topk)
        for i in range(n):
            r = a + i
            ids = tops[i]
            lp = np.minimum(xb[i, ids] - lse[i], 0.0)  # round-off must not push one above 0
            target_lp = min(float(xb[i, targets[r]] - lse[i]), 0.0)
            out.append(
                ScoredPosition(
                    argmax=int(argmax[r]),
                    target_logprob=target_lp,
                    topk=[(int(j), float(v)) for j, v in zip(ids, lp, strict=True)],
                )
            )
    return out


def score_tokens(
    runner: Runner, tokens: Sequence[int], topk: int, chunk: int = SCORE_CHUNK
) -> list[ScoredPosition]:
    """Teacher-forced pass: position i predicts tokens[i+1] from tokens[0..i].

    Only tokens[0..n-2] are fed (the last token predicts nothing we score), in batched
    prefills of at most `chunk` tokens each.
    """
    ids = np.asarray(tokens, dtype=np.int64)
    vocab = runner.config.vocab_size
    n_pred = len(ids) - 1
    runner.reset(1, n_pred)
    positions: list[ScoredPosition] = []
    for start in range(0, n_pred, chunk):
        stop = min(start + chunk, n_pred)
        logits = runner.prefill(0, ids[start:stop], all_logits=True)
        rows = _logit_rows(logits, stop - start, vocab, "prefill")
        targets = [int(t) for t in ids[start + 1 : stop + 1]]
        positions += score_rows(rows, targets, topk, f"at positions {start}..{stop - 1}")
    return positions


def check_prefix(runner: Runner, tokens: Sequence[int], prefix: int, positions: int) -> PrefixCheck:
    """Batched prefill against the token loop at one prefix length.

    `tokens` holds prefix + positions ids. Compared are the `positions` predictions right after
    the prefix: rows prefix .. prefix+positions-1 (0-based), i.e. the predictions of tokens
    prefix+1 .. prefix+positions, each made from every token before it.
    (a) batched: one prefill of all prefix+positions tokens with all_logits=True;
    (b) loop: the same tokens fed one at a time through decode() from an empty cache.
    top1 = share of positions where both argmaxes agree; KL(loop || batched) per position over
    the full vocab, in float64.
    """
    ids = np.asarray(tokens, dtype=np.int64)
    n = prefix + positions
    if len(ids) != n:
        raise ValueError(f"need {n} tokens, got {len(ids)}")
    vocab = runner.config.vocab_size

    runner.reset(1, n)
    batched = _logit_rows(runner.prefill(0, ids, all_logits=True), n, vocab, "prefill")
    lp_batched = log_softmax(batched[prefix:], f"of the batched prefill at prefix {prefix}")

    runner.reset(1, n)
    loop_rows = np.empty((positions, vocab), dtype=np.float32)
    for i in range(n):
        logits = _logit_rows(runner.decode([0], ids[i : i + 1]), 1, vocab, "decode")
        if i >= prefix:
            loop_rows[i - prefix] = logits[0]
    lp_loop = log_softmax(loop_rows, f"of the token loop at prefix {prefix}")

    top1 = float(np.mean(lp_loop.argmax(axis=-1) == lp_batched.argmax(axis=-1)))
    kl = np.sum(np.exp(lp_loop) * (lp_loop - lp_batched), axis=-1)
    kl = np.maximum(kl, 0.0)  # float round-off can make a zero KL slightly negative
    return PrefixCheck(
        prefix=prefix,
        positions=positions,
        top1=top1,
        kl_mean=float(kl.mean()),
        kl_max=float(kl.max()),
    )


# --- inputs --------------------------------------------------------------------------------


def read_tokens_file(path: str) -> list[int]:
    """A JSON list of integer token ids (at least two)."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EngineError(f"cannot read tokens file {path!r}: {e}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise EngineError(f"tokens file {path!r} is not valid JSON: {e}") from None
    if not isinstance(data, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in data
    ):
        raise EngineError(f"tokens file {path!r} must hold a JSON list of integer token ids")
    if len(data) < 2:
        raise EngineError(
            f"tokens file {path!r} has {len(data)} token(s); scoring needs at least 2"
        )
    return data


def check_tokens(tokens: Sequence[int], vocab: int, max_context: int, model: str) -> None:
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise EngineError(
            f"token id {bad[0]} is out of range for {model} (vocab {vocab}); "
            f"{len(bad)} id(s) outside 0..{vocab - 1}"
        )
    if len(tokens) > max_context:
        raise EngineError(f"{len(tokens)} tokens do not fit {model}'s context of {max_context}")


# --- command line --------------------------------------------------------------------------

MODEL_HELP = "Model name, e.g. tiny, smollm2-135m, llama-8b:q4_0."


@click.group(name="engine.harness.score")
def score_group() -> None:
    """Accuracy measurements of the bench protocol; each command writes one JSON document."""


@score_group.command(name="score")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option(
    "--text-file",
    default=None,
    help="UTF-8 text to score, encoded by the model's tokenizer (BOS as its GGUF says) "
    f"[default: {DEFAULT_CORPUS.relative_to(DEFAULT_CORPUS.parents[1])}].",
)
@click.option(
    "--tokens-file", default=None, help="JSON list of token ids to score as given (no BOS added)."
)
@click.option("--topk", default=10, show_default=True, help="Log-probs kept per position.")
@out_option
@backend_option
def score_command(
    model: str,
    text_file: str | None,
    tokens_file: str | None,
    topk: int,
    out: str,
    backend: str,
) -> None:
    """Teacher-forced pass: per position the argmax, the target's log-prob and the top-k."""
    clock = Clock()
    check_out(out)
    if text_file is not None and tokens_file is not None:
        raise EngineError("give --text-file or --tokens-file, not both")
    require_positive(topk, "--topk")
    cfg = config_of(model)
    if tokens_file is not None:
        tokens = read_tokens_file(tokens_file)
    else:
        from engine.models import open_tokenizer

        text = read_text_file(text_file if text_file is not None else DEFAULT_CORPUS)
        tokens = encode_text(open_tokenizer(model), text)
        if len(tokens) < 2:
            raise EngineError("the text encodes to fewer than 2 tokens; nothing to score")
    check_tokens(tokens, cfg.vocab_size, cfg.max_context, model)
    if topk > cfg.vocab_size:
        raise EngineError(f"--topk {topk} exceeds {model}'s vocab of {cfg.vocab_size}")
    runner = open_model(model, backend)
    positions = score_tokens(runner, tokens, topk)
    nll = -float(np.mean([p.target_logprob for p in positions]))
    progress(f"score {model}: {len(positions)} positions, perplexity {np.exp(nll):.3f}")
    doc = ScoreResult(**header(model, runner, clock), topk=topk, tokens=tokens, positions=positions)
    write_document(doc, out, compact=True)


@score_group.command(name="prefill-check")
@click.option("--model", required=True, help=MODEL_HELP)
@click.option(
    "--prefix",
    "prefix_list",
    default="128,1024",
    show_default=True,
    help="Comma-separated prefix lengths fed before the compared positions.",
)
@click.option(
    "--positions",
    default=64,
    show_default=True,
    help="Teacher-forced positions compared right after each prefix.",
)
@out_option
@backend_option
def prefill_check(model: str, prefix_list: str, positions: int, out: str, backend: str) -> None:
    """Batched prefill against the token-by-token loop inside one build (top-1, KL)."""
    clock = Clock()
    check_out(out)
    prefixes = parse_int_list(prefix_list, "prefix")
    check_contexts(model, prefixes, positions, ("prefix", "positions"))
    runner = open_model(model, backend)
    corpus = corpus_prompt_ids(model, runner.config.vocab_size)
    checks = []
    for p in prefixes:
        check = check_prefix(runner, cycled(corpus, p + positions), p, positions)
        progress(
            f"prefill-check {model} prefix {p}: top-1 {check.top1:.3f}, "
            f"KL mean {check.kl_mean:.2e} max {check.kl_max:.2e}"
        )
        checks.append(check)
    doc = PrefillCheckResult(**header(model, runner, clock), prefixes=checks)
    write_document(doc, out)


main = cli_main(score_group)

if __name__ == "__main__":
    main()
