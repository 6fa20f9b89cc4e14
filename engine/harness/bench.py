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

import importlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np

from engine.backends import resolve_backend
from engine.cli_common import EXIT_HARNESS
from engine.errors import BaselineError, EngineError
from engine.harness.canary import Canary
from engine.harness.common import (
    Clock,
    backend_option,
    check_out,
    cli_main,
    config_of,
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
)
from engine.harness.options import (
    MIN_TIME_HELP,
    MODEL_HELP,
    WARMUP_HELP,
    check_contexts,
    check_min_time,
    check_widths,
    legs_option,
    session_options,
    verify_option,
)
from engine.harness.protocol import (
    ConcurrentResult,
    SweepResult,
)
from engine.harness.reaper import become_subreaper
from engine.harness.sandbox import describe as describe_sandbox
from engine.harness.server_engine import ServerEngine, server_kind
from engine.harness.server_verify import verify_on
from engine.harness.speed_session import (
    Engines,
    corpus_ids,
    deal,
    engine_spec,
    run_session,
    scratch_folder,
    shares,
)
from engine.harness.timing import Challenges, EngineSpec
from engine.harness.verify import verify as verify_outputs
from engine.models import model_id


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
    sequences decoded together in the same processes (a guard's batched decode, or a target's
    concurrent decode), verified with the rest."""
    clock = Clock()
    check_out(out)
    ctxs = parse_int_list(ctx_list, "ctx")
    widths = parse_int_list(width_list, "widths") if width_list.strip() else []
    require_positive(reps, "--reps")
    require_non_negative(warmup, "--warmup")
    require_non_negative(prefill_tokens, "--prefill-tokens")
    check_min_time(min_time)
    max_ctx = check_contexts(model, ctxs, tokens)
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
    # a server's slots: the most sequences one operation holds, each the most tokens
    slots = max([b.prompts_per_region(c) for c in ctxs] + widths)
    slot_ctx = max(ctxs) + tokens + 1
    if widths:
        slot_ctx = max(slot_ctx, prompt_len + width_tokens + max(widths) + 1)
    (mine, baseline), measured, fields = run_session(
        model, backend, Engines.of(session), verify, b, body, clock, legs, (slots, slot_ctx)
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
    room = (max(widths), prompt_len + tokens + max(widths) + 1)  # a server's slots
    (mine, baseline), measured, fields = run_session(
        model, backend, Engines.of(session), verify, b, body, clock, legs, room
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
@click.option(
    "--runs",
    default=1,
    show_default=True,
    help="Long prefills each engine's process times, each a fresh prompt; the fastest counts.",
)
@click.option(
    "--legs",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="With --baseline-checkout: processes of each engine, alternating (main, PR, PR, main, "
    "... or its mirror); each engine's fastest counts.",
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
    runs: int,
    legs: int,
    verify: bool,
    out: str,
    backend: str,
    **session: object,
) -> None:
    """Can the engine prefill a long context and decode after it within a memory budget?

    With --baseline-checkout, main's engine runs the same check in the same session, alone under
    the same budget, right before or after the measured one (the order drawn at random; with
    --legs 2, main PR PR main or its mirror, so a drift of the box's speed and whatever favours
    a session's first or last process fall on both): the speed the measured engine's is held
    against, from the same minutes of the box. A main that cannot complete ends the session as
    main's failure (exit 3)."""
    clock = Clock()
    check_out(out)
    require_positive(ctx, "--ctx")
    require_positive(tokens, "--tokens")
    require_positive(budget, "--memory-budget")
    require_positive(runs, "--runs")
    max_ctx = config_of(model).max_context
    if ctx + tokens > max_ctx:
        raise EngineError(f"ctx {ctx} + tokens {tokens} exceeds {model}'s context of {max_ctx}")
    engines = Engines.of(session)
    served = engines.server is not None  # then main's build is named too (Engines.of)
    resolved = resolve_backend(backend)
    become_subreaper()
    canary = Canary(resolved)
    with scratch_folder(engines.scratch) as scratch:
        serve = served_at(engines, model, ctx + tokens + 1, scratch) if served else None
        corpus = corpus_ids(scratch)

        def checked(baseline: bool) -> LongContextRun:
            run = LongContextRun(model, resolved, ctx, tokens, budget, runs, baseline, clock=clock)
            run.run(engine_spec(engines, resolved, scratch, baseline=baseline), corpus, serve)
            if baseline and (not run.completed or run.outside_failure):  # never the PR's
                why = run.failure or run.outside_failure or "it did not complete"
                raise BaselineError(f"main's engine failed the long-context check itself: {why}")
            return run

        paired = engines.baseline is not None
        main_first = paired and Challenges().below(2) == 0
        mine: list[LongContextRun] = []
        mains: list[LongContextRun] = []
        for baseline in leg_order(main_first, legs, paired):
            if not baseline and mine and not (mine[-1].completed and not mine[-1].outside_failure):
                continue  # a leg that failed stands: the PR's engine is not started again
            if baseline and mains and not (mine and mine[-1].completed):
                continue  # main's speed is not needed beside a PR that failed
            (mains if baseline else mine).append(checked(baseline))
        check = LongContextRun.of_legs(mine)
        check.legs = len(mine) if paired else 1
        check.sandbox = describe_sandbox(engines.sandbox)
        main_run = LongContextRun.of_legs(mains) if mains else None
        check.canary = canary.after()
        if main_run is not None:
            commit = "unknown" if served else engine_commit(engines.baseline)
            check.main = main_run.as_main(commit, main_first)
        if served and check.completed and verify:  # main's server, unbudgeted, after the PR's
            progress("verifying the long-context run against main's server")
            main = serve(engine_spec(engines, resolved, scratch, baseline=True), True)
            try:
                main.connect(config_of(model).vocab_size)
                own = main_run.groups if main_run is not None else []
                check.verification = verify_on(
                    main, check.groups, f"main's server ({main.kind.name})", own
                )
            finally:
                main.close()
            check.mark("verified")
    if check.completed and verify and not served:
        progress("verifying the long-context run against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        check.verification = verify_outputs(open_model(model, resolved), check.groups, reference)
        check.mark("verified")
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    write_document(check.document(header(model, me, clock)), out)


def leg_order(main_first: bool, legs: int, paired: bool) -> list[bool]:
    """Whose process runs the long-context check in turn (True: main's): the measured engine
    alone unpaired; else `legs` pairs, each the mirror of the one before (main PR PR main ...)."""
    if not paired:
        return [False]
    pair = [True, False] if main_first else [False, True]
    return [side for i in range(legs) for side in (pair if i % 2 == 0 else pair[::-1])]


def served_at(
    engines: Engines, model: str, slot_ctx: int, scratch: Path
) -> Callable[[EngineSpec, bool], ServerEngine]:
    """How the long-context check starts a server from a spec: one slot of `slot_ctx` tokens
    (`main`: main's server, the reference of the verification)."""

    def serve(spec: EngineSpec, main: bool = False) -> ServerEngine:
        assert engines.server is not None
        return ServerEngine(
            spec, model, server_kind(engines.server), 1, slot_ctx, engines.server_threads,
            baseline=main, models=scratch / "models",
        )  # fmt: skip

    return serve


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
