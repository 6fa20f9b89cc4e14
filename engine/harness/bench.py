"""Speed commands of the bench protocol: `sweep` (decode/prefill per context) and `concurrent`.

    python -m engine.harness.bench sweep --model M --ctx 128,512 --tokens N --reps R --out FILE
    python -m engine.harness.bench concurrent --model M --widths 2,4 --tokens N --runs R --out FILE

Each writes one JSON document (engine.harness.protocol.SweepResult / ConcurrentResult) holding every
repetition's raw value. The collector runs these from a candidate's checkout but pins this file
to main's copy, so a pull request cannot change how it is measured.

Timing rule: the runner is synchronized before every clock read (time.perf_counter). One
untimed warm-up (a short prefill and a few decode steps) runs first, so kernel compilation stays
out of the numbers; then each context and each width gets `--warmup` untimed repetitions of its
own shape (default 1), because a backend may size buffers or capture CUDA graphs per KV-cache
shape, and the first repetition at a new shape would otherwise carry that cost.

Short operations: a repetition runs its timed operation (a prefill, a decode of N tokens)
again and again until `--min-time` seconds are spent (at most MAX_INNER times) and reports the
fastest run. Interference on a shared machine only ever slows a run down, and a sub-millisecond
prefill that loses one 10 ms scheduler slice reads several times slower (measured on the 2-core
box: single-shot prefill@32 of `tiny` swung between 6,000 and 43,000 tok/s). On a GPU, or for
anything slower than `--min-time`, a repetition is exactly one run. Decode is repeated by
truncating the KV cache back to the prompt; each repeated prefill starts at another place in
the corpus, so a backend cannot replay a cached answer.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import click
import numpy as np

from engine.errors import EngineError
from engine.harness.common import (
    Clock,
    EngineOutputError,
    backend_option,
    check_out,
    cli_main,
    config_of,
    corpus_prompt_ids,
    cycled,
    header,
    open_model,
    out_option,
    parse_int_list,
    progress,
    require_non_negative,
    require_positive,
    write_document,
)
from engine.harness.protocol import (
    ConcurrentResult,
    ContextSample,
    SweepResult,
    WidthRun,
    WidthSample,
)
from engine.runner import Runner

WARMUP_PROMPT = 8
WARMUP_STEPS = 4
# Each concurrent sequence starts at a different place in the corpus, so prompts differ.
PROMPT_STRIDE = 97
_MIN_SECONDS = 1e-9  # a clock that did not move must not divide by zero
MIN_TIME_S = 0.1  # default --min-time
MAX_INNER = 100  # inner runs of one repetition at most


def _elapsed(runner: Runner, t0: float) -> float:
    runner.synchronize()
    return max(time.perf_counter() - t0, _MIN_SECONDS)


def warm_up(runner: Runner, prompt: Sequence[int]) -> None:
    """One untimed pass through prefill and decode so compilation stays out of the timings."""
    n = min(WARMUP_PROMPT, runner.config.max_context - WARMUP_STEPS)
    runner.reset(1, n + WARMUP_STEPS)
    logits = runner.prefill(0, cycled(prompt, n))
    first = np.array([int(np.argmax(logits))], dtype=np.int64)
    runner.decode_greedy([0], first, WARMUP_STEPS)
    runner.synchronize()


def _first_tokens(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 1 or not np.all(np.isfinite(logits)):
        raise EngineOutputError("prefill returned no usable logits (wrong shape or non-finite)")
    return np.array([int(np.argmax(logits))], dtype=np.int64)


def count_decoded(out: object, prompt_lens: Sequence[int], runner: Runner, tokens: int) -> int:
    """Tokens actually decoded: valid ids (0 <= id < vocab) in each sequence's column, capped
    by how far that sequence's KV cache really grew, and by `tokens`."""
    arr = np.asarray(out)
    width = len(prompt_lens)
    if arr.ndim != 2 or arr.shape[1] != width:
        return 0
    arr = arr[:tokens]
    if np.issubdtype(arr.dtype, np.integer):
        valid = (arr >= 0) & (arr < runner.config.vocab_size)
    elif np.issubdtype(arr.dtype, np.floating):
        finite = np.isfinite(arr)
        safe = np.where(finite, arr, -1.0)
        valid = finite & (safe == np.floor(safe)) & (safe >= 0) & (safe < runner.config.vocab_size)
    else:
        return 0
    total = 0
    for seq, plen in enumerate(prompt_lens):
        grown = runner.seq_len(seq) - plen
        total += max(0, min(int(valid[:, seq].sum()), grown, tokens))
    return total


def repeat_fastest(
    runner: Runner,
    setup: Callable[[int], Any],
    op: Callable[[Any], Any],
    check: Callable[[Any], None],
    min_time: float,
) -> tuple[float, list[Any]]:
    """Run `op(setup(j))` for j = 0, 1, ... until `min_time` seconds of timed work are spent
    (once at least, MAX_INNER times at most). Only `op` is timed; `check` sees every result
    outside the clock. Returns the fastest run's seconds and every result."""
    best = math.inf
    spent = 0.0
    results: list[Any] = []
    while not results or (spent < min_time and len(results) < MAX_INNER):
        arg = setup(len(results))
        runner.synchronize()
        t0 = time.perf_counter()
        out = op(arg)
        seconds = _elapsed(runner, t0)
        check(out)
        results.append(out)
        spent += seconds
        best = min(best, seconds)
    return best, results


def measure_context(
    runner: Runner,
    prompt: Sequence[int],
    ctx: int,
    tokens: int,
    reps: int,
    warmup: int = 0,
    min_time: float = 0.0,
) -> ContextSample:
    """`reps` timed repetitions at one context: prefill `ctx` tokens, then decode `tokens`.

    The first `warmup` repetitions run the same way and are dropped.
    """
    decode_tok_s: list[float] = []
    prefill_tok_s: list[float] = []

    def fresh_prompt(j: int) -> np.ndarray:
        runner.reset(1, ctx + tokens)
        return cycled(prompt, ctx, offset=j * PROMPT_STRIDE)

    def prefill(ids: np.ndarray) -> np.ndarray:
        return runner.prefill(0, ids)

    def back_to_prompt(first: np.ndarray) -> Callable[[int], np.ndarray]:
        def setup(j: int) -> np.ndarray:
            if j:
                runner.truncate(0, ctx)
            return first

        return setup

    def decode(first: np.ndarray) -> np.ndarray:
        return runner.decode_greedy([0], first, tokens)

    def check_decode(out: object) -> None:
        # a decode that skipped work would look fast: every token must be real
        decoded = count_decoded(out, [ctx], runner, tokens)
        if decoded != tokens:
            raise EngineOutputError(
                f"ctx {ctx}: decode produced {decoded} valid tokens of {tokens} "
                f"(KV cache holds {runner.seq_len(0)} of {ctx + tokens})"
            )

    for _ in range(warmup + reps):
        seconds, outs = repeat_fastest(runner, fresh_prompt, prefill, _first_tokens, min_time)
        prefill_tok_s.append(ctx / seconds)
        first = _first_tokens(outs[-1])  # the cache holds the last prefill's prompt
        seconds, _ = repeat_fastest(runner, back_to_prompt(first), decode, check_decode, min_time)
        decode_tok_s.append(tokens / seconds)
    return ContextSample(
        ctx=ctx,
        decode_tokens=tokens,
        decode_tok_s=decode_tok_s[warmup:],
        prefill_tok_s=prefill_tok_s[warmup:],
        vram=runner.vram(kv_tokens=ctx + tokens),
    )


def measure_width(
    runner: Runner,
    prompt: Sequence[int],
    width: int,
    prompt_len: int,
    tokens: int,
    min_time: float = 0.0,
) -> WidthRun:
    """One run: `width` sequences with prompts of prompt_len + i tokens, decoded together.

    tokens_decoded is the fewest any inner run produced, so one lost token marks the run
    incomplete; tok_s is that count over the fastest inner run's seconds.
    """
    runner.reset(width, prompt_len + tokens + width)
    prompt_lens = [prompt_len + i for i in range(width)]
    firsts = np.empty(width, dtype=np.int64)
    for seq, plen in enumerate(prompt_lens):
        logits = runner.prefill(seq, cycled(prompt, plen, offset=seq * PROMPT_STRIDE))
        firsts[seq] = _first_tokens(logits)[0]
    counts: list[int] = []

    def back_to_prompts(j: int) -> None:
        if j:
            for seq, plen in enumerate(prompt_lens):
                runner.truncate(seq, plen)

    seconds, _ = repeat_fastest(
        runner,
        back_to_prompts,
        lambda _: runner.decode_greedy(list(range(width)), firsts, tokens),
        lambda out: counts.append(count_decoded(out, prompt_lens, runner, tokens)),
        min_time,
    )
    decoded = min(counts)
    return WidthRun(
        tokens_expected=width * tokens,
        tokens_decoded=decoded,
        seconds=seconds,
        tok_s=decoded / seconds,
    )


# --- command line --------------------------------------------------------------------------

MODEL_HELP = "Model name, e.g. tiny, smollm2-135m, llama-8b:q4_0."
WARMUP_HELP = "Untimed repetitions of the same shape before the timed ones"
MIN_TIME_HELP = (
    "Seconds a repetition repeats a short timed operation for; it reports the fastest run "
    "(0: one run per repetition)."
)


def check_min_time(min_time: float) -> None:
    if not 0.0 <= min_time <= 60.0:
        raise EngineError(f"--min-time must be between 0 and 60 seconds, got {min_time}")


@click.group(name="engine.harness.bench")
def bench() -> None:
    """Speed measurements of the bench protocol; each command writes one JSON document."""


@bench.command()
@click.option("--model", required=True, help=MODEL_HELP)
@click.option(
    "--ctx",
    "ctx_list",
    default="128,512",
    show_default=True,
    help="Comma-separated context lengths (prompt tokens prefilled before decoding).",
)
@click.option(
    "--tokens", default=32, show_default=True, help="Tokens decoded per repetition (greedy)."
)
@click.option("--reps", default=3, show_default=True, help="Timed repetitions per context.")
@click.option("--warmup", default=1, show_default=True, help=WARMUP_HELP + " per context.")
@click.option("--min-time", default=MIN_TIME_S, show_default=True, help=MIN_TIME_HELP)
@out_option
@backend_option
def sweep(
    model: str,
    ctx_list: str,
    tokens: int,
    reps: int,
    warmup: int,
    min_time: float,
    out: str,
    backend: str,
) -> None:
    """Decode and prefill tok/s per context, every repetition's raw value."""
    clock = Clock()
    check_out(out)
    ctxs = parse_int_list(ctx_list, "ctx")
    require_positive(tokens, "--tokens")
    require_positive(reps, "--reps")
    require_non_negative(warmup, "--warmup")
    check_min_time(min_time)
    max_ctx = config_of(model).max_context
    for ctx in ctxs:
        if ctx + tokens > max_ctx:
            raise EngineError(
                f"ctx {ctx} + tokens {tokens} = {ctx + tokens} exceeds {model}'s context of {max_ctx}"
            )
    runner = open_model(model, backend)
    prompt = corpus_prompt_ids(model, runner.config.vocab_size)
    warm_up(runner, prompt)
    contexts = []
    for ctx in ctxs:
        sample = measure_context(runner, prompt, ctx, tokens, reps, warmup, min_time)
        progress(
            f"sweep {model} ctx {ctx}: decode {np.median(sample.decode_tok_s):.1f} tok/s, "
            f"prefill {np.median(sample.prefill_tok_s):.1f} tok/s (median of {reps})"
        )
        contexts.append(sample)
    doc = SweepResult(**header(model, runner, clock), tokens=tokens, reps=reps, contexts=contexts)
    write_document(doc, out)


@bench.command()
@click.option("--model", required=True, help=MODEL_HELP)
@click.option(
    "--widths",
    "width_list",
    default="2,4",
    show_default=True,
    help="Comma-separated numbers of sequences decoded together.",
)
@click.option("--tokens", default=32, show_default=True, help="Tokens decoded per sequence.")
@click.option("--runs", default=3, show_default=True, help="Timed runs per width.")
@click.option("--warmup", default=1, show_default=True, help=WARMUP_HELP + " per width.")
@click.option("--min-time", default=MIN_TIME_S, show_default=True, help=MIN_TIME_HELP)
@click.option(
    "--prompt-len",
    default=64,
    show_default=True,
    help="Prompt tokens of the first sequence; sequence i gets prompt-len + i (GPU: use 128).",
)
@out_option
@backend_option
def concurrent(
    model: str,
    width_list: str,
    tokens: int,
    runs: int,
    warmup: int,
    min_time: float,
    prompt_len: int,
    out: str,
    backend: str,
) -> None:
    """Aggregate decode tok/s with N sequences in flight, tokens expected and decoded."""
    clock = Clock()
    check_out(out)
    widths = parse_int_list(width_list, "widths")
    require_positive(tokens, "--tokens")
    require_positive(runs, "--runs")
    require_positive(prompt_len, "--prompt-len")
    require_non_negative(warmup, "--warmup")
    check_min_time(min_time)
    max_ctx = config_of(model).max_context
    for w in widths:
        need = prompt_len + tokens + w
        if need > max_ctx:
            raise EngineError(
                f"width {w}: prompt-len {prompt_len} + tokens {tokens} + {w} = {need} "
                f"exceeds {model}'s context of {max_ctx}"
            )
    runner = open_model(model, backend)
    prompt = corpus_prompt_ids(model, runner.config.vocab_size)
    warm_up(runner, prompt)
    samples = []
    for w in widths:
        for _ in range(warmup):  # same shape, untimed
            measure_width(runner, prompt, w, prompt_len, tokens)
        width_runs = [
            measure_width(runner, prompt, w, prompt_len, tokens, min_time) for _ in range(runs)
        ]
        progress(
            f"concurrent {model} width {w}: "
            f"{np.median([r.tok_s for r in width_runs]):.1f} tok/s (median of {runs}), "
            f"{sum(r.tokens_decoded for r in width_runs)}/"
            f"{sum(r.tokens_expected for r in width_runs)} tokens"
        )
        samples.append(WidthSample(width=w, prompt_len=prompt_len, runs=width_runs))
    widest = max(widths)
    doc = ConcurrentResult(
        **header(model, runner, clock),
        tokens=tokens,
        widths=samples,
        vram=runner.vram(kv_tokens=widest * (prompt_len + tokens + widest)),
    )
    write_document(doc, out)


# --- extra commands --------------------------------------------------------------------------
# Modules listed here add commands to this group when they import (`python -m engine.harness.bench
# roofline ...`). Each exposes `register(group: click.Group) -> None`, or else every click
# command it defines is added. A module that is absent or cannot import (no CuPy on this
# machine) is skipped, so sweep and concurrent always work. Add a name here; nothing else in
# this file needs to change.
EXTRA_COMMAND_MODULES = ("engine.roofline", "engine.peers")


def _register_extra_commands(group: click.Group) -> None:
    for name in EXTRA_COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        register = getattr(module, "register", None)
        if callable(register):
            register(group)
            continue
        for obj in vars(module).values():
            if isinstance(obj, click.Command) and getattr(obj.callback, "__module__", "") == name:
                group.add_command(obj)


_register_extra_commands(bench)

main = cli_main(bench)

if __name__ == "__main__":
    main()
