"""Speed commands of the bench protocol: `sweep` (decode/prefill per context) and `concurrent`.

    python -m engine.harness.bench sweep --model M --ctx 128,512 --tokens N --reps R --out FILE
        [--widths 2 --width-tokens N --width-runs R --prompt-len L]   then decode sequences together
    python -m engine.harness.bench concurrent --model M --widths 2,4 --tokens N --runs R --out FILE
    ... --engine-checkout DIR     measure the engine of another checkout (a PR's) from this one
    ... --baseline-checkout DIR   and main's engine (this checkout's harness, DIR's engine) beside
                                  it, the two taking turns per timed operation
    ... --sandbox bwrap           each engine sealed in its own sandbox (sandbox.py)
    ... --legs N                  the engines started anew N times, the repetitions dealt over them

This process is the timing parent: it runs the harness of its own checkout (main's, pinned by
the collector) and never imports an engine it measures. Each engine runs in a child process
(`serve.py`, started in its checkout, in its own sandbox); every timed operation is timed here,
from the request to the answer that commits to its result, on prompts and first tokens drawn
here after the models have loaded (timing.py, measure.py). With a baseline, the two engines
take turns, the one whose turn it is not stopped and watched (turns.py). Afterwards the engine
processes exit and this process loads the model with its own code (main's) and holds every
reported operation of the engine under test against it (verify.py). A fixed workload timed
right before and after (canary.py) says whether the box itself moved meanwhile. Each command
writes one JSON document (engine.harness.protocol.SweepResult / ConcurrentResult) with every
repetition's raw value of each engine, the seed, every region's two timings, what each engine did
while not its turn and the verification margins: the collector decides from them.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np

from engine.backends import resolve_backend
from engine.cli_common import EXIT_HARNESS
from engine.errors import EngineError, EngineOutputError
from engine.harness.canary import Canary
from engine.harness.common import (
    DEFAULT_CORPUS,
    REPO_ROOT,
    Clock,
    backend_option,
    check_out,
    cli_main,
    config_of,
    corpus_prompt_ids,
    engine_commit,
    header,
    open_model,
    out_option,
    parse_int_list,
    progress,
    require_non_negative,
    require_positive,
    write_document,
)
from engine.harness.longctx import LongContextRun
from engine.harness.measure import (
    MIN_TIME_S,
    Bench,
    Side,
    idle_report,
    measure_context,
    measure_widths,
    timing_report,
    warm_up,
    watch_engine,
)
from engine.harness.protocol import (
    Baseline,
    ConcurrentResult,
    ContextSample,
    Measured,
    MemoryReport,
    SweepResult,
    WidthSample,
)
from engine.harness.reaper import become_subreaper, kill_leftovers
from engine.harness.sandbox import KINDS, SANDBOX_ENV, Sandbox
from engine.harness.sandbox import describe as describe_sandbox
from engine.harness.timing import Challenges, EngineProcess, EngineSpec
from engine.harness.turns import DeviceProbe
from engine.harness.verify import verify as verify_outputs
from engine.models import model_id

# --- command line --------------------------------------------------------------------------

MODEL_HELP = "Model name, e.g. tiny, smollm2-135m, llama-8b:q4_0."
WARMUP_HELP = "Untimed repetitions of the same shape before the timed ones"
MIN_TIME_HELP = (
    "Seconds a repetition repeats a short timed operation for; it reports the fastest run "
    "(0: one run per repetition)."
)


def session_options(f: Callable) -> Callable:
    """The options every speed command takes: which engines run, sealed how, writing where."""
    options = [
        click.option(
            "--engine-checkout",
            type=click.Path(exists=True, file_okay=False),
            default=None,
            help="Checkout whose engine is measured (default: this one); this checkout's "
            "harness times it.",
        ),
        click.option(
            "--baseline-checkout",
            type=click.Path(exists=True, file_okay=False),
            default=None,
            help="Also run this checkout's engine (main's) beside it, the two taking turns per "
            "timed operation, the idle one stopped.",
        ),
        click.option(
            "--sandbox",
            type=click.Choice(KINDS),
            default=lambda: os.environ.get(SANDBOX_ENV, "none"),
            show_default=f"${SANDBOX_ENV}, else none",
            help="Seal each engine process: bwrap (namespaces, read-only files) or none.",
        ),
        click.option(
            "--scratch",
            type=click.Path(file_okay=False),
            default=None,
            help="Folder for each engine's home and this process's caches (default: a temporary "
            "one); the only place an engine may write, with its kernel cache.",
        ),
        click.option(
            "--engine-cache",
            type=click.Path(file_okay=False),
            default=None,
            help="The measured engine's compiled-kernel cache (CUPY_CACHE_DIR).",
        ),
        click.option(
            "--baseline-cache",
            type=click.Path(file_okay=False),
            default=None,
            help="The baseline engine's compiled-kernel cache (CUPY_CACHE_DIR).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@dataclass(frozen=True)
class Engines:
    """The engines a command measures, from its session options."""

    checkout: Path
    baseline: Path | None
    sandbox: str
    scratch: Path | None
    cache: Path | None
    baseline_cache: Path | None

    @classmethod
    def of(cls, o: dict) -> Engines:
        def path(k: str) -> Path | None:
            return Path(o[k]).resolve() if o.get(k) else None

        return cls(
            checkout=path("engine_checkout") or REPO_ROOT,
            baseline=path("baseline_checkout"),
            sandbox=o["sandbox"],
            scratch=path("scratch"),
            cache=path("engine_cache"),
            baseline_cache=path("baseline_cache"),
        )


legs_option = click.option(
    "--legs",
    default=1,
    show_default=True,
    help="Pairs of engine processes, one after another: the engines are started anew this many "
    "times and the repetitions (runs) dealt over them, so a session's numbers average over the "
    "speed each new process happens to settle at.",
)


def shares(n: int, legs: int) -> list[int]:
    """`n` repetitions dealt over `legs` pairs of engine processes, the first legs taking the
    remainder (a leg may get none)."""
    return [n // legs + (i < n % legs) for i in range(legs)]


def deal(n: int, legs: int, what: str) -> list[int]:
    """`shares`, every leg getting one at least."""
    require_positive(legs, "--legs")
    if legs > n:
        raise EngineError(f"--legs {legs} exceeds {what} {n}: every leg times each shape once")
    return shares(n, legs)


verify_option = click.option(
    "--verify/--no-verify",
    default=True,
    show_default=True,
    help="Hold the timed outputs against this checkout's model afterwards.",
)


def check_min_time(min_time: float) -> None:
    if not 0.0 <= min_time <= 60.0:
        raise EngineError(f"--min-time must be between 0 and 60 seconds, got {min_time}")


def check_widths(
    model: str,
    widths: list[int],
    prompt_len: int,
    tokens: int,
    runs: int,
    max_ctx: int,
    options: tuple[str, str] = ("--tokens", "--runs"),
) -> None:
    """Sequences decoded together (concurrent, or a sweep's --widths) fit the model's window;
    `options` names the tokens and runs options in errors."""
    require_positive(tokens, options[0])
    require_positive(runs, options[1])
    require_positive(prompt_len, "--prompt-len")
    for w in widths:
        need = prompt_len + tokens + w
        if need > max_ctx:
            raise EngineError(
                f"width {w}: prompt-len {prompt_len} + tokens {tokens} + {w} = {need} "
                f"exceeds {model}'s context of {max_ctx}"
            )


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
@click.option(
    "--prefill-tokens",
    default=0,
    show_default=True,
    help="Prompt tokens one timed prefill region holds at least: a shorter context is timed "
    "ceil(N / ctx) fresh prompts to a region (0: one prompt per region).",
)
@click.option(
    "--widths",
    "width_list",
    default="",
    help="After the contexts, also decode this many sequences together (comma-separated, e.g. 2) "
    "in the same engine process; their outputs are verified like a concurrent session's.",
)
@click.option(
    "--width-tokens", default=8, show_default=True, help="--widths: tokens decoded per sequence."
)
@click.option("--width-runs", default=2, show_default=True, help="--widths: timed runs per width.")
@click.option(
    "--prompt-len",
    default=64,
    show_default=True,
    help="--widths: prompt tokens of the first sequence; sequence i gets prompt-len + i.",
)
@legs_option
@session_options
@verify_option
@out_option
@backend_option
def sweep(
    model: str,
    ctx_list: str,
    tokens: int,
    reps: int,
    warmup: int,
    min_time: float,
    prefill_tokens: int,
    width_list: str,
    width_tokens: int,
    width_runs: int,
    prompt_len: int,
    legs: int,
    verify: bool,
    out: str,
    backend: str,
    **session: object,
) -> None:
    """Decode and prefill tok/s per context, every repetition's raw value; with --widths, then
    sequences decoded together (a guard's batched decode, verified with the rest)."""
    clock = Clock()
    check_out(out)
    ctxs = parse_int_list(ctx_list, "ctx")
    widths = parse_int_list(width_list, "widths") if width_list.strip() else []
    require_positive(tokens, "--tokens")
    require_positive(reps, "--reps")
    require_non_negative(warmup, "--warmup")
    require_non_negative(prefill_tokens, "--prefill-tokens")
    check_min_time(min_time)
    max_ctx = config_of(model).max_context
    for ctx in ctxs:
        if ctx + tokens > max_ctx:
            raise EngineError(
                f"ctx {ctx} + tokens {tokens} = {ctx + tokens} exceeds {model}'s context of {max_ctx}"
            )
    if widths:
        options = ("--width-tokens", "--width-runs")
        check_widths(model, widths, prompt_len, width_tokens, width_runs, max_ctx, options)
    reps_of = deal(reps, legs, "--reps")
    # a guard's few batched runs: the legs that get none skip them
    runs_of = shares(width_runs, legs)

    def body(b: Bench, leg: int) -> list[dict]:
        per_side: list[dict] = [{"contexts": [], "widths": []} for _ in b.sides]
        for ctx in ctxs:
            for got, sample in zip(
                per_side, measure_context(b, ctx, tokens, reps_of[leg], warmup), strict=True
            ):
                got["contexts"].append(sample)
            last = per_side[-1]["contexts"][-1]
            progress(
                f"sweep {model} ctx {ctx}: decode {np.median(last.decode_tok_s):.1f} tok/s, "
                f"prefill {np.median(last.prefill_tok_s):.1f} tok/s (median of {reps_of[leg]})"
                + _beside(per_side, lambda d: np.median(d["contexts"][-1].decode_tok_s))
            )
        # after the contexts, whose memory peaks are marked already: same process, same model
        if runs_of[leg]:
            batched = measure_widths(b, widths, prompt_len, width_tokens, runs_of[leg], warmup)
            for got, samples in zip(per_side, batched, strict=True):
                got["widths"] = samples
        for s in per_side[-1]["widths"]:
            progress(
                f"sweep {model} width {s.width}: "
                f"{np.median([r.tok_s for r in s.runs]):.1f} tok/s (median of {len(s.runs)})"
            )
        return per_side

    b = Bench([], Challenges(), np.zeros(1, dtype=np.int64), min_time, prefill_tokens)
    (mine, baseline), measured, fields = run_session(
        model, backend, Engines.of(session), verify, b, body, clock, legs
    )
    extra = {"widths": mine["widths"], "width_tokens": width_tokens} if widths else {}
    doc = SweepResult(
        **fields,
        tokens=tokens,
        reps=reps,
        contexts=mine["contexts"],
        **extra,
        measured=measured,
        baseline=baseline,
    )
    write_document(doc, out)


def _beside(per_side: list[dict], value: Callable[[dict], float]) -> str:
    """', main's beside it X' in a progress line when two engines take turns."""
    if len(per_side) < 2:
        return ""
    return f"; main's engine beside it {value(per_side[0]):.1f}"


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
@legs_option
@session_options
@verify_option
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
    legs: int,
    verify: bool,
    out: str,
    backend: str,
    **session: object,
) -> None:
    """Aggregate decode tok/s with N sequences in flight, tokens expected and decoded."""
    clock = Clock()
    check_out(out)
    widths = parse_int_list(width_list, "widths")
    check_widths(model, widths, prompt_len, tokens, runs, config_of(model).max_context)
    require_non_negative(warmup, "--warmup")
    check_min_time(min_time)

    runs_of = deal(runs, legs, "--runs")

    def body(b: Bench, leg: int) -> list[dict]:
        per_side = [
            {"widths": ws}
            for ws in measure_widths(b, widths, prompt_len, tokens, runs_of[leg], warmup)
        ]
        for i, s in enumerate(per_side[-1]["widths"]):
            progress(
                f"concurrent {model} width {s.width}: "
                f"{np.median([r.tok_s for r in s.runs]):.1f} tok/s (median of {runs_of[leg]})"
                + _beside(
                    per_side, lambda d, i=i: np.median([r.tok_s for r in d["widths"][i].runs])
                )
            )
        return per_side

    b = Bench([], Challenges(), np.zeros(1, dtype=np.int64), min_time)
    (mine, baseline), measured, fields = run_session(
        model, backend, Engines.of(session), verify, b, body, clock, legs
    )
    doc = ConcurrentResult(
        **fields, tokens=tokens, widths=mine["widths"], measured=measured, baseline=baseline
    )
    write_document(doc, out)


@bench.command()
@click.option("--model", required=True, help=MODEL_HELP)
@click.option("--ctx", type=int, required=True, help="Prompt tokens to prefill (a long context).")
@click.option("--tokens", default=16, show_default=True, help="Tokens decoded after it.")
@click.option(
    "--memory-budget",
    "budget",
    type=int,
    required=True,
    help="Bytes the engine process may use (CPU: its data segment; GPU: free device memory).",
)
@session_options
@verify_option
@out_option
@backend_option
def longctx(
    model: str,
    ctx: int,
    tokens: int,
    budget: int,
    verify: bool,
    out: str,
    backend: str,
    **session: object,
) -> None:
    """Can the engine prefill a long context and decode after it within a memory budget?"""
    clock = Clock()
    check_out(out)
    require_positive(ctx, "--ctx")
    require_positive(tokens, "--tokens")
    require_positive(budget, "--memory-budget")
    max_ctx = config_of(model).max_context
    if ctx + tokens > max_ctx:
        raise EngineError(f"ctx {ctx} + tokens {tokens} exceeds {model}'s context of {max_ctx}")
    engines = Engines.of(session)
    if engines.baseline is not None:
        raise EngineError("longctx measures one engine: --baseline-checkout is not taken")
    resolved = resolve_backend(backend)
    become_subreaper()
    canary = Canary(resolved)
    with scratch_folder(engines.scratch) as scratch:
        spec = engine_spec(engines, resolved, scratch, baseline=False)
        check = LongContextRun(model, resolved, ctx, tokens, budget, clock=clock)
        check.sandbox = describe_sandbox(engines.sandbox)
        check.run(spec, corpus_ids(scratch))
    check.canary = canary.after()
    if check.completed and verify:
        progress("verifying the long-context run against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        check.verification = verify_outputs(open_model(model, resolved), check.groups, reference)
        check.mark("verified")
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    write_document(check.document(header(model, me, clock)), out)


@contextlib.contextmanager
def scratch_folder(given: Path | None) -> Iterator[Path]:
    """The session's scratch folder: the one given, or a temporary one removed afterwards."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="sparkboard-session-") as tmp:
        yield Path(tmp)


def engine_spec(engines: Engines, backend: str, scratch: Path, baseline: bool) -> EngineSpec:
    """One engine's checkout, sandbox and writable folders (each its own, under `scratch`)."""
    name = "baseline" if baseline else "engine"
    cache = engines.baseline_cache if baseline else engines.cache
    checkout = engines.baseline if baseline else engines.checkout
    assert checkout is not None
    shutil.rmtree(scratch / f"{name}-home", ignore_errors=True)  # nothing of an earlier session
    return EngineSpec(
        checkout=checkout,
        sandbox=Sandbox(engines.sandbox, gpu=backend == "cupy"),
        home=scratch / f"{name}-home",
        kernel_cache=cache,
    )


def corpus_ids(scratch: Path) -> Callable[[str, int], list[int]]:
    """The corpus as the model's token ids, tokenized once per scratch folder (the tokenizer
    reads a whole GGUF vocabulary: most of a short session's start); the cache lives beside the
    engines' homes, where no engine can write."""

    def ids(model: str, vocab: int) -> list[int]:
        key = hashlib.sha256(f"{model}\0{vocab}".encode() + DEFAULT_CORPUS.read_bytes()).hexdigest()
        path = scratch / f"corpus-{key[:20]}.npy"
        if path.is_file():
            return np.load(path).tolist()
        out = corpus_prompt_ids(model, vocab)
        np.save(path, np.asarray(out, dtype=np.int64))
        return out

    return ids


class Steps:
    """Where a session's seconds go, legs summed: each step's time from the end of the step
    before it, written to the clock as phases (Measured.phases: seconds from the start at which
    each step would have ended had every leg's steps run back to back)."""

    ORDER = ("engine_loaded", "warmed", "measured", "engine_stopped", "verified")

    def __init__(self, clock: Clock) -> None:
        self.clock, self.spent, self._last = clock, dict.fromkeys(self.ORDER, 0.0), 0.0

    def done(self, step: str) -> None:
        now = self.clock.wall_s()
        self.spent[step] += now - self._last
        self._last = now
        total = 0.0
        for name in self.ORDER[: self.ORDER.index(step) + 1]:
            total += self.spent[name]
            self.clock.phases[name] = round(total, 3)


@dataclass
class Role:
    """One engine's part of a session (main's, or the one measured) over every leg: what its
    processes were timed at and did, and the outputs kept to verify."""

    engines: list[EngineProcess]
    memory: list[MemoryReport]
    checks: list = field(default_factory=list)  # groups of Samples (the measured engine's)


def _most(values: list[int | None]) -> int | None:
    """The largest reading, None when no leg had one."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _joined_memory(reports: list[MemoryReport]) -> MemoryReport | None:
    """The most any leg's process held at each reading."""
    if not reports:
        return None
    return MemoryReport(
        host_after_load=max(r.host_after_load for r in reports),
        host_peak=max(r.host_peak for r in reports),
        gpu_after_load=_most([r.gpu_after_load for r in reports]),
        gpu_peak=_most([r.gpu_peak for r in reports]),
    )


def _joined_contexts(parts: list[ContextSample]) -> ContextSample:
    first = parts[0]
    return ContextSample(
        ctx=first.ctx,
        decode_tokens=first.decode_tokens,
        decode_tok_s=[v for c in parts for v in c.decode_tok_s],
        prefill_tok_s=[v for c in parts for v in c.prefill_tok_s],
        vram=first.vram,
        host_peak=_most([c.host_peak for c in parts]),
        gpu_peak=_most([c.gpu_peak for c in parts]),
    )


def joined_legs(parts: list[dict]) -> dict:
    """One engine's results of every leg as one session's: each context's and each width's
    repetitions in leg order (a width some legs left out, a guard's, from the legs that ran it)."""
    out: dict = {}
    if "contexts" in parts[0]:
        out["contexts"] = [
            _joined_contexts([p["contexts"][i] for p in parts])
            for i in range(len(parts[0]["contexts"]))
        ]
    if "widths" in parts[0]:
        by_width: dict[int, list[WidthSample]] = {}
        for p in parts:
            for w in p["widths"]:
                by_width.setdefault(w.width, []).append(w)
        out["widths"] = [
            WidthSample(width=w, prompt_len=ws[0].prompt_len, runs=[r for x in ws for r in x.runs])
            for w, ws in by_width.items()
        ]
    return out


def run_session(
    model: str,
    backend: str,
    engines: Engines,
    do_verify: bool,
    b: Bench,
    body: Callable[[Bench, int], list[dict]],
    clock: Clock,
    legs: int = 1,
) -> tuple[tuple[dict, Baseline | None], Measured, dict]:
    """Time the canary; then, `legs` times, start the engines (main's beside the measured one
    when there is a baseline; both load at once), run `body(b, leg)` against them turn by turn
    and stop them; time the canary again, then verify the measured engine's outputs of every
    leg with this checkout's model. Each leg is a new pair of processes: a process settles at a
    speed of its own (where its buffers land; ~1% apart on the H200, engine/PERF.md), which more
    repetitions in it never average out, more processes do.
    Returns (its results, main's as a Baseline), what makes them trustworthy, and the header."""
    resolved = resolve_backend(backend)
    become_subreaper()  # what an engine process leaves running is ours to kill
    canary = Canary(resolved)
    probe = DeviceProbe() if resolved == "cupy" else None
    steps = Steps(clock)
    results: list[list[dict]] = []  # per leg, per side
    with scratch_folder(engines.scratch) as scratch:
        specs = [engine_spec(engines, resolved, scratch, baseline=True)] if engines.baseline else []
        specs.append(engine_spec(engines, resolved, scratch, baseline=False))
        roles = [Role([], []) for _ in specs]
        for leg in range(legs):
            if legs > 1:
                progress(f"leg {leg + 1} of {legs}: the engines start anew")
            procs = [
                EngineProcess(spec, model, resolved, probe=probe, baseline=i < len(specs) - 1)
                for i, spec in enumerate(specs)
            ]
            b.sides = []
            try:
                for p in procs:
                    p.connect()
                steps.done("engine_loaded")
                if len({p.vocab for p in procs}) != 1:
                    raise EngineOutputError(
                        "main's engine and the engine under test disagree on the vocabulary"
                    )
                b.sides = [
                    Side(p, watch_engine(p, resolved == "cupy"), verified=(i == len(procs) - 1))
                    for i, p in enumerate(procs)
                ]
                if leg == 0:
                    b.material = np.asarray(corpus_ids(scratch)(model, procs[0].vocab))
                warm_up(b)
                steps.done("warmed")
                for side in b.sides:
                    side.watch.mark()  # each context's peak counts from here
                results.append(body(b, leg))
                steps.done("measured")
            finally:
                for role, side in zip(roles, b.sides, strict=False):
                    role.memory.append(side.watch.stop())
                    role.checks += side.checks.groups
                for role, p in zip(roles, procs, strict=True):
                    role.engines.append(p)
                    p.close()
                kill_leftovers()
            steps.done("engine_stopped")
    canary_report = canary.after()
    mine = roles[-1]
    report = None
    if do_verify:
        progress(f"verifying {len(mine.checks)} timed operations against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        report = verify_outputs(open_model(model, resolved), mine.checks, reference)
        steps.done("verified")
    progress(
        "phases (s, legs summed): " + ", ".join(f"{k} {v:.1f}" for k, v in clock.phases.items())
    )
    per_side = [joined_legs([leg[i] for leg in results]) for i in range(len(roles))]
    measured = Measured(
        seed=b.challenges.seed,
        timing=timing_report(*mine.engines),
        verification=report,
        memory=_joined_memory(mine.memory),
        phases=clock.phases,
        idle=idle_report(*mine.engines),
        canary=canary_report,
        sandbox=describe_sandbox(engines.sandbox),
        legs=legs,
    )
    baseline = None
    if len(roles) == 2:
        main = roles[0]
        baseline = Baseline(
            commit=engine_commit(main.engines[0].spec.checkout),
            timing=timing_report(*main.engines),
            memory=_joined_memory(main.memory),
            idle=idle_report(*main.engines),
            **per_side[0],
        )
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    return (per_side[-1], baseline), measured, header(model, me, clock)


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


def _main() -> None:
    """The timing parent is main's own harness: an exception it did not expect is its own
    failure (exit EXIT_HARNESS, the box's or main's), never the engine it measures."""
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - every engine error is handled inside
        if os.environ.get("SPARKBOARD_DEBUG"):
            raise
        traceback.print_exc()
        print(
            f"error: the timing parent failed: {type(exc).__name__}: {exc}"[:400], file=sys.stderr
        )
        sys.exit(EXIT_HARNESS)


if __name__ == "__main__":
    _main()
