"""Speed commands of the bench protocol: `sweep` (decode/prefill per context) and `concurrent`.

    python -m engine.harness.bench sweep --model M --ctx 128,512 --tokens N --reps R --out FILE
        [--widths 2 --width-tokens N --width-runs R --prompt-len L]   then decode sequences together
    python -m engine.harness.bench concurrent --model M --widths 2,4 --tokens N --runs R --out FILE
    ... --engine-checkout DIR   measure the engine of another checkout (a PR's) from this one

This process is the timing parent: it runs the harness of its own checkout (main's, pinned by
the collector) and never imports the engine it measures. The engine runs in a child process
(`serve.py`, started in `--engine-checkout`, default this checkout); every timed operation is
timed here, from the request to the answer that commits to its result, on prompts and first
tokens drawn here after the model has loaded (timing.py, measure.py). Afterwards the engine
process exits and this process loads the model with its own code (main's) and holds every
reported operation's outputs against it (verify.py). Each command writes one JSON document
(engine.harness.protocol.SweepResult / ConcurrentResult) with every repetition's raw value, the
seed, every region's two timings and the verification margins: the collector decides from them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np

from engine.backends import resolve_backend
from engine.errors import EngineError
from engine.harness.common import (
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
    measure_context,
    measure_widths,
    warm_up,
)
from engine.harness.memory import MemoryWatch
from engine.harness.protocol import ConcurrentResult, Measured, SweepResult, TimingReport
from engine.harness.reaper import become_subreaper, kill_leftovers
from engine.harness.timing import Challenges, EngineProcess
from engine.harness.verify import verify as verify_outputs
from engine.models import model_id

# --- command line --------------------------------------------------------------------------

MODEL_HELP = "Model name, e.g. tiny, smollm2-135m, llama-8b:q4_0."
WARMUP_HELP = "Untimed repetitions of the same shape before the timed ones"
MIN_TIME_HELP = (
    "Seconds a repetition repeats a short timed operation for; it reports the fastest run "
    "(0: one run per repetition)."
)


engine_checkout_option = click.option(
    "--engine-checkout",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Checkout whose engine is measured (default: this one); this checkout's harness times it.",
)
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
@engine_checkout_option
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
    width_list: str,
    width_tokens: int,
    width_runs: int,
    prompt_len: int,
    engine_checkout: str | None,
    verify: bool,
    out: str,
    backend: str,
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

    def body(b: Bench) -> list:
        contexts = []
        for ctx in ctxs:
            sample = measure_context(b, ctx, tokens, reps, warmup)
            progress(
                f"sweep {model} ctx {ctx}: decode {np.median(sample.decode_tok_s):.1f} tok/s, "
                f"prefill {np.median(sample.prefill_tok_s):.1f} tok/s (median of {reps})"
            )
            contexts.append(sample)
        # after the contexts, whose memory peaks are marked already: same process, same model
        samples = measure_widths(b, widths, prompt_len, width_tokens, width_runs, warmup)
        for s in samples:
            progress(
                f"sweep {model} width {s.width}: "
                f"{np.median([r.tok_s for r in s.runs]):.1f} tok/s (median of {width_runs})"
            )
        return [contexts, samples]

    (contexts, samples), measured, fields = run_session(
        model, backend, engine_checkout, verify, min_time, body, clock
    )
    extra = {"widths": samples, "width_tokens": width_tokens} if samples else {}
    doc = SweepResult(
        **fields, tokens=tokens, reps=reps, contexts=contexts, **extra, measured=measured
    )
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
@engine_checkout_option
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
    engine_checkout: str | None,
    verify: bool,
    out: str,
    backend: str,
) -> None:
    """Aggregate decode tok/s with N sequences in flight, tokens expected and decoded."""
    clock = Clock()
    check_out(out)
    widths = parse_int_list(width_list, "widths")
    check_widths(model, widths, prompt_len, tokens, runs, config_of(model).max_context)
    require_non_negative(warmup, "--warmup")
    check_min_time(min_time)

    def body(b: Bench) -> list:
        samples = measure_widths(b, widths, prompt_len, tokens, runs, warmup)
        for s in samples:
            progress(
                f"concurrent {model} width {s.width}: "
                f"{np.median([r.tok_s for r in s.runs]):.1f} tok/s (median of {runs})"
            )
        return samples

    samples, measured, fields = run_session(
        model, backend, engine_checkout, verify, min_time, body, clock
    )
    doc = ConcurrentResult(**fields, tokens=tokens, widths=samples, measured=measured)
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
@engine_checkout_option
@verify_option
@out_option
@backend_option
def longctx(
    model: str,
    ctx: int,
    tokens: int,
    budget: int,
    engine_checkout: str | None,
    verify: bool,
    out: str,
    backend: str,
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
    resolved = resolve_backend(backend)
    become_subreaper()
    check = LongContextRun(model, resolved, ctx, tokens, budget, clock=clock)
    check.run(Path(engine_checkout or REPO_ROOT).resolve())
    if check.completed and verify:
        progress("verifying the long-context run against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        check.verification = verify_outputs(open_model(model, resolved), check.groups, reference)
        check.mark("verified")
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    write_document(check.document(header(model, me, clock)), out)


def run_session(
    model: str,
    backend: str,
    engine_checkout: str | None,
    do_verify: bool,
    min_time: float,
    body: Callable[[Bench], list],
    clock: Clock,
) -> tuple[list, Measured, dict]:
    """Start the engine process, run `body` against it, stop it, then verify its outputs with
    this checkout's model. Returns body's result, what makes it trustworthy, and the header."""
    resolved = resolve_backend(backend)
    become_subreaper()  # what the engine process leaves running is ours to kill
    engine = EngineProcess(Path(engine_checkout or REPO_ROOT).resolve(), model, resolved)
    clock.mark("engine_loaded")
    watch = MemoryWatch(engine.pid, gpu=resolved == "cupy")
    try:
        material = np.asarray(corpus_prompt_ids(model, engine.vocab))
        b = Bench(engine, Challenges(), material, min_time, watch=watch)
        warm_up(b)
        clock.mark("warmed")
        watch.mark()  # each context's peak counts from here
        result = body(b)
        clock.mark("measured")
    finally:
        memory = watch.stop()
        engine.close()
        kill_leftovers()
    clock.mark("engine_stopped")
    report = None
    if do_verify:
        progress(f"verifying {len(b.checks.groups)} timed operations against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        report = verify_outputs(open_model(model, resolved), b.checks.groups, reference)
        clock.mark("verified")
    progress("phases (s from start): " + ", ".join(f"{k} {v:.1f}" for k, v in clock.phases.items()))
    regions = engine.timeline.regions
    timing = TimingReport(
        regions=[(r.parent_s, r.inproc_s) for r in regions], groups=[r.group for r in regions]
    )
    measured = Measured(
        seed=b.challenges.seed,
        timing=timing,
        verification=report,
        memory=memory,
        phases=clock.phases,
    )
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    return result, measured, header(model, me, clock)


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
