"""The speed measurements, driven from the timing parent over an `EngineProcess`.

Timing rule: every timed operation is one request to the engine process, timed by the parent
from sending the request to reading the answer that commits to its result (timing.py). One
untimed warm-up (a short prefill and a few decode steps) runs first, so compilation stays out of
the numbers; then each context and each width gets `warmup` untimed repetitions of its own shape,
because a backend may size buffers or capture CUDA graphs per KV-cache shape.

Short operations: a repetition runs its timed operation again and again until `min_time` seconds
are spent (at most MAX_INNER times) and reports the fastest run: interference on a shared machine
only ever slows a run down. Every run gets a fresh challenge: a prefill a new prompt (a random
place in the corpus, a random first id), a decode a random first token after truncating the KV
cache back to the prompt, so no run can replay another's answer.

What is kept for verification (verify.py): the fastest run of every repetition (its time is the
one reported) and up to EXTRA_CHECKS other runs picked at random, so a shortcut taken in any run
is at risk of being seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.harness.memory import MemoryWatch
from engine.harness.protocol import ContextSample, VramInfo, WidthRun, WidthSample
from engine.harness.timing import Challenges, EngineProcess, Sample

WARMUP_PROMPT = 8
WARMUP_STEPS = 4
MIN_TIME_S = 0.1  # default --min-time
MAX_INNER = 100  # inner runs of one repetition at most
EXTRA_CHECKS = 2  # runs verified beyond the reported one, per repetition


@dataclass
class Checks:
    """Samples to verify, as groups of sequences decoded together."""

    groups: list[list[Sample]] = field(default_factory=list)


@dataclass
class Bench:
    """One measuring session: the engine process, its challenges, and what to verify."""

    engine: EngineProcess
    challenges: Challenges
    material: np.ndarray  # the corpus as token ids (main's tokenizer), folded into the vocab
    min_time: float = 0.0
    checks: Checks = field(default_factory=Checks)
    watch: MemoryWatch | None = None  # the engine process's memory, read from outside

    def prompt(self, length: int) -> np.ndarray:
        return self.challenges.prompt(self.material, length, self.engine.vocab)

    def first_tokens(self, n: int) -> np.ndarray:
        return np.array([self.challenges.below(self.engine.vocab) for _ in range(n)])

    def fastest(self, run: Callable[[int], tuple[float, object]]) -> tuple[float, list]:
        """Repeat `run(j)` -> (seconds, result) until min_time is spent; (fastest s, results)."""
        spent, best, results = 0.0, math.inf, []
        while not results or (spent < self.min_time and len(results) < MAX_INNER):
            seconds, out = run(len(results))
            results.append((seconds, out))
            spent += seconds
            best = min(best, seconds)
        return best, results

    def keep(self, results: list, to_group: Callable[[object], list[Sample]]) -> None:
        """The fastest run, plus up to EXTRA_CHECKS others at random, go to verification."""
        order = sorted(range(len(results)), key=lambda i: results[i][0])
        others = order[1:]
        picked = [order[0]]
        while others and len(picked) < 1 + EXTRA_CHECKS:
            picked.append(others.pop(self.challenges.below(len(others))))
        for i in picked:
            self.checks.groups.append(to_group(results[i][1]))


def warm_up(b: Bench) -> None:
    """One untimed pass through prefill and decode so compilation stays out of the timings."""
    b.engine.reset(1, WARMUP_PROMPT + WARMUP_STEPS + 1)
    b.engine.prefill(0, b.prompt(WARMUP_PROMPT), timed=False)
    b.engine.decode([0], b.first_tokens(1), WARMUP_STEPS, timed=False)  # first calls: not timed


def measure_context(b: Bench, ctx: int, tokens: int, reps: int, warmup: int) -> ContextSample:
    """`reps` timed repetitions at one context: prefill `ctx` tokens, then decode `tokens`.
    The first `warmup` repetitions run the same way and are dropped."""
    decode_tok_s: list[float] = []
    prefill_tok_s: list[float] = []
    for rep in range(warmup + reps):

        def prefill(_j: int) -> tuple[float, Sample]:
            b.engine.reset(1, ctx + tokens + 1)
            sample, seconds = b.engine.prefill(0, b.prompt(ctx))
            return seconds, sample

        p_best, p_runs = b.fastest(prefill)
        cached = p_runs[-1][1].prompt  # the KV cache holds the last prefill's prompt

        def decode(j: int, prompt: np.ndarray = cached) -> tuple[float, Sample]:
            if j:
                b.engine.truncate(0, ctx)
            first = b.first_tokens(1)
            ids, seconds = b.engine.decode([0], first, tokens)
            return seconds, Sample(prompt=prompt, first=int(first[0]), ids=ids[:, 0])

        d_best, d_runs = b.fastest(decode)
        if rep < warmup:
            continue
        prefill_tok_s.append(ctx / p_best)
        decode_tok_s.append(tokens / d_best)
        b.keep(p_runs, lambda s: [s])
        b.keep(d_runs, lambda s: [s])
    host_peak, gpu_peak = b.watch.mark() if b.watch else (None, None)
    return ContextSample(
        ctx=ctx,
        decode_tokens=tokens,
        decode_tok_s=decode_tok_s,
        prefill_tok_s=prefill_tok_s,
        vram=vram_info(b.engine.vram(kv_tokens=ctx + tokens)),
        host_peak=host_peak,
        gpu_peak=gpu_peak,
    )


def measure_width(b: Bench, width: int, prompt_len: int, tokens: int) -> WidthRun:
    """One run: `width` sequences with prompts of prompt_len + i tokens (untimed prefills),
    decoded together; the fastest inner run's seconds."""
    b.engine.reset(width, prompt_len + tokens + width + 1)
    lens = [prompt_len + i for i in range(width)]
    prompts = [b.prompt(n) for n in lens]
    for seq, ids in enumerate(prompts):
        b.engine.prefill(seq, ids, timed=False)

    def decode(j: int) -> tuple[float, list[Sample]]:
        if j:
            for seq, n in enumerate(lens):
                b.engine.truncate(seq, n)
        first = b.first_tokens(width)
        ids, seconds = b.engine.decode(list(range(width)), first, tokens)
        group = [
            Sample(prompt=prompts[s], first=int(first[s]), ids=ids[:, s]) for s in range(width)
        ]
        return seconds, group

    best, runs = b.fastest(decode)
    b.keep(runs, lambda g: g)
    return WidthRun(
        tokens_expected=width * tokens,
        tokens_decoded=width * tokens,  # every id is in the vocabulary (timing.py checks it)
        seconds=best,
        tok_s=width * tokens / best,
    )


def measure_widths(
    b: Bench, widths: list[int], prompt_len: int, tokens: int, runs: int, warmup: int
) -> list[WidthSample]:
    samples = []
    for w in widths:
        for _ in range(warmup):  # same shape, untimed: its timed runs are not kept
            kept = len(b.checks.groups)
            measure_width(b, w, prompt_len, tokens)
            del b.checks.groups[kept:]
        width_runs = [measure_width(b, w, prompt_len, tokens) for _ in range(runs)]
        samples.append(WidthSample(width=w, prompt_len=prompt_len, runs=width_runs))
    return samples


def vram_info(report: dict | None) -> VramInfo | None:
    """The engine process's own VRAM report (informative; memory verdicts use MemoryReport)."""
    if report is None:
        return None
    try:
        return VramInfo(**report)
    except (TypeError, ValueError):
        return None
