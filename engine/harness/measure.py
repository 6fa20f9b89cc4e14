"""The speed measurements, driven from the timing parent over one or two `EngineProcess`es.

Timing rule: every timed operation is one request to an engine process, timed by the parent
from resuming the engine and sending the request to reading the answer that commits to its
result (timing.py). One untimed warm-up (a short prefill and a few decode steps) runs first, so
compilation stays out of the numbers; then each context and each width gets `warmup` untimed
repetitions of its own shape, because a backend may size buffers or capture CUDA graphs per
KV-cache shape, and a short prefill's region of several prompts one untimed region of its shape
(`warm_region`: the graphs of its sequences).

Two engines (main's beside the PR's, `Side`s of one `Bench`) take turns: each repetition of a
timed operation is four turns, A B B A, the first drawn from the session's seed, each turn a
burst of runs of that operation on fresh challenges of its own. The engine whose turn it is not
is stopped (turns.py). Both run the same number of runs of each operation in the same window of
time, so load on the box, its clocks and its heat reach both alike, and each repetition gives a
pair of values from one window. A turn is a burst, not one run: the first run after the other
engine has run finds the caches full of the other's weights (measured on a 2-core box: tiny's
4-token decode read 2.3-7.7 ms turn by turn against 1.6-2.0 ms back to back).

Short operations: a repetition runs its timed operation again and again until each engine has
spent `min_time` seconds on it (the first turn sets the runs per turn, at most MAX_BURST) and
reports each engine's fastest run: interference on a shared machine only ever slows a run down. A prefill shorter
than `prefill_tokens` prompt tokens is timed several prompts to a region (`prompts_per_region`),
each prompt fresh, so one region is long enough for the parent's clock. Every run gets a fresh
challenge: a prefill new prompts (a random place in the corpus, random ids), a decode a random
first token after truncating the KV cache back to the prompt, so no run can replay another's.

What is kept for verification (verify.py): of the engine under test, the fastest run of every
repetition (its time is the one reported) and up to EXTRA_CHECKS other runs picked at random, so
a shortcut taken in any run is at risk of being seen. Main's engine is the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.harness.memory import MemoryWatch
from engine.harness.protocol import (
    ContextSample,
    IdleReport,
    MemoryReport,
    TimingReport,
    VramInfo,
    WidthRun,
    WidthSample,
)
from engine.harness.timing import Challenges, EngineProcess, Sample

WARMUP_PROMPT = 8
WARMUP_STEPS = 4
MIN_TIME_S = 0.1  # default --min-time
MAX_BURST = 50  # runs of one turn at most (a repetition: two turns per engine)
EXTRA_CHECKS = 2  # runs verified beyond the reported one, per repetition


@dataclass
class Checks:
    """Samples to verify, as groups of sequences decoded together."""

    groups: list[list[Sample]] = field(default_factory=list)


@dataclass
class Side:
    """One engine of a session: its process, its memory read from outside, and (`verified`:
    the engine under test) the samples to hold against main's model."""

    engine: EngineProcess
    watch: MemoryWatch | None = None
    verified: bool = True
    checks: Checks = field(default_factory=Checks)


Run = Callable[[Side, int], tuple[float, object]]  # (side, its j-th run) -> (seconds, result)


@dataclass
class Bench:
    """One measuring session: its engines (main's first when there are two), its challenges."""

    sides: list[Side]
    challenges: Challenges
    material: np.ndarray  # the corpus as token ids (main's tokenizer), folded into the vocab
    min_time: float = 0.0
    prefill_tokens: int = 0  # a region of prefill holds at least this many prompt tokens

    @property
    def vocab(self) -> int:
        return self.sides[0].engine.vocab

    def prompt(self, length: int) -> np.ndarray:
        return self.challenges.prompt(self.material, length, self.vocab)

    def first_tokens(self, n: int) -> np.ndarray:
        return np.array([self.challenges.below(self.vocab) for _ in range(n)])

    def prompts_per_region(self, ctx: int) -> int:
        return max(1, math.ceil(self.prefill_tokens / ctx)) if self.prefill_tokens else 1

    def order(self) -> list[int]:
        """One repetition's turns over the sides: A B B A, the first drawn from the seed."""
        if len(self.sides) == 1:
            return [0]
        first = self.challenges.below(2)
        return [first, 1 - first, 1 - first, first]

    def fastest(self, run: Run) -> list[tuple[float, list]]:
        """One repetition of an operation: turn by turn over the sides (`order`), each turn a
        burst of `run(side, j)` -> (seconds, result) on fresh challenges. The first turn runs
        until it has spent its share of min_time; every other turn runs as many, so each side
        has the same number of runs. Per side (fastest s, results)."""
        block = self.order()
        share = self.min_time / (len(block) / len(self.sides))
        results: list[list] = [[] for _ in self.sides]
        count = 0
        for t, i in enumerate(block):
            side, spent, mine = self.sides[i], 0.0, 0
            with side.engine.turn():
                while (mine < count) if t else (not mine or (spent < share and mine < MAX_BURST)):
                    seconds, out = run(side, len(results[i]))
                    results[i].append((seconds, out))
                    spent += seconds
                    mine += 1
            count = count or mine
        return [(min(s for s, _ in rs), rs) for rs in results]

    def keep(self, side: Side, results: list, to_groups: Callable[[object], list]) -> None:
        """The fastest run, plus up to EXTRA_CHECKS others at random, go to verification."""
        if not side.verified:
            return
        order = sorted(range(len(results)), key=lambda i: results[i][0])
        others = order[1:]
        picked = [order[0]]
        while others and len(picked) < 1 + EXTRA_CHECKS:
            picked.append(others.pop(self.challenges.below(len(others))))
        for i in picked:
            side.checks.groups += to_groups(results[i][1])


def warm_up(b: Bench) -> None:
    """One untimed pass through prefill and decode so compilation stays out of the timings."""
    for side in b.sides:
        e = side.engine
        with e.turn():
            e.reset(1, WARMUP_PROMPT + WARMUP_STEPS + 1)
            e.prefill([0], [b.prompt(WARMUP_PROMPT)], timed=False)
            e.decode([0], b.first_tokens(1), WARMUP_STEPS, timed=False)  # first calls: untimed


def warm_region(b: Bench, k: int, ctx: int, tokens: int) -> None:
    """One untimed region of a short prefill's shape (k prompts of ctx, one a sequence) per
    engine, before its timed repetitions. A backend's first call of a shape does one-time work
    (a CUDA graph captured per sequence: a 1B's first region of 8 x 128 read 49-110 ms, the next
    15-20 ms), and in the first turn of a repetition that run would set the runs of every turn:
    one instead of about four (data/demo/gpu/README.md, "Short prefills' regions")."""
    for side in b.sides:
        e = side.engine
        with e.turn():
            e.reset(k, ctx + tokens + 1)
            e.prefill(list(range(k)), [b.prompt(ctx) for _ in range(k)], timed=False)


def measure_context(b: Bench, ctx: int, tokens: int, reps: int, warmup: int) -> list[ContextSample]:
    """`reps` timed repetitions at one context, per side: prefill `ctx` tokens (several fresh
    prompts per region when one is short), then decode `tokens` after the first of them. The
    first `warmup` repetitions run the same way and are dropped."""
    k = b.prompts_per_region(ctx)
    if k > 1:
        warm_region(b, k, ctx, tokens)
    decode_tok_s: list[list[float]] = [[] for _ in b.sides]
    prefill_tok_s: list[list[float]] = [[] for _ in b.sides]
    for rep in range(warmup + reps):

        def prefill(side: Side, _j: int) -> tuple[float, list[Sample]]:
            side.engine.reset(k, ctx + tokens + 1)
            samples, seconds = side.engine.prefill(
                list(range(k)), [b.prompt(ctx) for _ in range(k)]
            )
            return seconds, samples

        prefills = b.fastest(prefill)
        # each engine's KV cache holds its last prefill's prompts; its decodes continue the first
        cached = {
            id(s): runs[-1][1][0].prompt for s, (_, runs) in zip(b.sides, prefills, strict=True)
        }

        def decode(side: Side, j: int, cached: dict = cached) -> tuple[float, Sample]:
            if j:
                side.engine.truncate(0, ctx)
            first = b.first_tokens(1)
            ids, seconds = side.engine.decode([0], first, tokens)
            return seconds, Sample(prompt=cached[id(side)], first=int(first[0]), ids=ids[:, 0])

        decodes = b.fastest(decode)
        if rep < warmup:
            continue
        for i, side in enumerate(b.sides):
            (p_best, p_runs), (d_best, d_runs) = prefills[i], decodes[i]
            prefill_tok_s[i].append(k * ctx / p_best)
            decode_tok_s[i].append(tokens / d_best)
            b.keep(side, p_runs, lambda ss: [[s] for s in ss])
            b.keep(side, d_runs, lambda s: [[s]])
    out = []
    for i, side in enumerate(b.sides):
        host_peak, gpu_peak = side.watch.mark() if side.watch else (None, None)
        out.append(
            ContextSample(
                ctx=ctx,
                decode_tokens=tokens,
                decode_tok_s=decode_tok_s[i],
                prefill_tok_s=prefill_tok_s[i],
                vram=vram_info(side.engine.vram(kv_tokens=ctx + tokens)),
                host_peak=host_peak,
                gpu_peak=gpu_peak,
            )
        )
    return out


def measure_width(b: Bench, width: int, prompt_len: int, tokens: int) -> list[WidthRun]:
    """One run per side: `width` sequences with prompts of prompt_len + i tokens (untimed
    prefills, fresh per side), decoded together; each side's fastest inner run."""
    lens = [prompt_len + i for i in range(width)]
    prompts: dict[int, list[np.ndarray]] = {}
    for side in b.sides:
        prompts[id(side)] = [b.prompt(n) for n in lens]
        with side.engine.turn():
            side.engine.reset(width, prompt_len + tokens + width + 1)
            for seq, ids in enumerate(prompts[id(side)]):
                side.engine.prefill([seq], [ids], timed=False)

    def decode(side: Side, j: int) -> tuple[float, list[Sample]]:
        if j:
            for seq, n in enumerate(lens):
                side.engine.truncate(seq, n)
        first = b.first_tokens(width)
        ids, seconds = side.engine.decode(list(range(width)), first, tokens)
        mine = prompts[id(side)]
        group = [Sample(prompt=mine[s], first=int(first[s]), ids=ids[:, s]) for s in range(width)]
        return seconds, group

    runs = []
    for side, (best, results) in zip(b.sides, b.fastest(decode), strict=True):
        b.keep(side, results, lambda g: [g])
        runs.append(
            WidthRun(
                tokens_expected=width * tokens,
                tokens_decoded=width * tokens,  # every id is in the vocabulary (timing.py checks)
                seconds=best,
                tok_s=width * tokens / best,
            )
        )
    return runs


def measure_widths(
    b: Bench, widths: list[int], prompt_len: int, tokens: int, runs: int, warmup: int
) -> list[list[WidthSample]]:
    """Per side, one WidthSample per width."""
    out: list[list[WidthSample]] = [[] for _ in b.sides]
    for w in widths:
        for _ in range(warmup):  # same shape, untimed: its timed runs are not kept
            kept = [len(s.checks.groups) for s in b.sides]
            measure_width(b, w, prompt_len, tokens)
            for side, n in zip(b.sides, kept, strict=True):
                del side.checks.groups[n:]
        per_run = [measure_width(b, w, prompt_len, tokens) for _ in range(runs)]
        for i in range(len(b.sides)):
            out[i].append(WidthSample(width=w, prompt_len=prompt_len, runs=[r[i] for r in per_run]))
    return out


def watch_engine(engine: EngineProcess, gpu: bool) -> MemoryWatch:
    """The engine's memory, read from outside, with what its sandbox's other processes hold."""
    own = engine.pid
    return MemoryWatch(
        own,
        gpu=gpu,
        helpers=lambda: [p for p in engine.turns.tree.pids() if p != own],
        sandboxed=engine.spec.sandbox.sealed,
    )


def timing_report(*engines: EngineProcess) -> TimingReport:
    """Every timed region of the engine's processes (one per leg of a session), in order."""
    regions = [r for e in engines for r in e.timeline.regions]
    return TimingReport(
        regions=[(r.parent_s, r.inproc_s) for r in regions], groups=[r.group for r in regions]
    )


def idle_report(*engines: EngineProcess) -> IdleReport:
    """What the engine's processes (one per leg of a session) did while not their turn."""

    def r(field_name: str) -> list[float]:
        return [round(x, 6) for e in engines for x in getattr(e.ledger, field_name)]

    return IdleReport(
        between_s=r("between_s"),
        after_answer_s=r("after_answer_s"),
        window_s=r("window_s"),
        while_stopped_s=r("while_stopped_s"),
        stop_s=r("stop_s"),
        device_busy_s=r("device_busy_s"),
        request_cpu_s=r("request_cpu_s"),
        request_wall_s=r("request_wall_s"),
        cores=max((e.ledger.cores for e in engines), default=0) or None,
    )


def most(values: list[int | None]) -> int | None:
    """The largest reading, None when no leg had one."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def joined_memory(reports: list[MemoryReport]) -> MemoryReport | None:
    """The most any leg's process held at each reading (None without a reading)."""
    if not reports:
        return None
    return MemoryReport(
        host_after_load=max(r.host_after_load for r in reports),
        host_peak=max(r.host_peak for r in reports),
        gpu_after_load=most([r.gpu_after_load for r in reports]),
        gpu_peak=most([r.gpu_peak for r in reports]),
    )


def vram_info(report: dict | None) -> VramInfo | None:
    """The engine process's own VRAM report (informative; memory verdicts use MemoryReport)."""
    if report is None:
        return None
    try:
        return VramInfo(**report)
    except (TypeError, ValueError):
        return None
