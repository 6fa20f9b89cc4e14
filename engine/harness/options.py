"""The options and checks every speed command of bench.py shares: which engines run, sealed
how, in how many pairs of processes (legs), verified or not, and the shapes that must fit a
model's window (score's prefill-check shares the window check)."""

from __future__ import annotations

import os
from collections.abc import Callable

import click

from engine.errors import EngineError
from engine.harness.common import config_of, require_positive
from engine.harness.sandbox import KINDS, SANDBOX_ENV
from engine.harness.server_engine import KINDS as SERVER_KINDS

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
            "--server",
            type=click.Choice(sorted(SERVER_KINDS)),
            default=None,
            help="The engines are servers of this kind (llama.cpp: llama-server), and the "
            "checkouts are their builds (bin/ inside); needs --baseline-checkout, main's server "
            "being the reference its outputs are verified against.",
        ),
        click.option(
            "--server-threads",
            default=1,
            show_default=True,
            help="--server: compute threads of each server (the two take turns: each has them "
            "all during its own).",
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


legs_option = click.option(
    "--legs",
    default=1,
    show_default=True,
    help="Pairs of engine processes, one after another: the engines are started anew this many "
    "times and the repetitions (runs) dealt over them, so a session's numbers average over the "
    "speed each new process happens to settle at.",
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


def check_contexts(
    model: str, ctxs: list[int], tokens: int, names: tuple[str, str] = ("ctx", "tokens")
) -> int:
    """Every context, with the tokens that follow it, fits the model's window; returns the
    window. `names`: what the command calls the two (score's prefill-check: prefix, positions)."""
    start, after = names
    require_positive(tokens, f"--{after}")
    max_ctx = config_of(model).max_context
    for ctx in ctxs:
        if ctx + tokens > max_ctx:
            raise EngineError(
                f"{start} {ctx} + {after} {tokens} = {ctx + tokens} exceeds {model}'s "
                f"context of {max_ctx}"
            )
    return max_ctx


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
