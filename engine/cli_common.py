"""Shared CLI plumbing: user errors become one line on stderr and exit code 2.

Every engine command (generate, bench, score) wraps its body with `run_cli`, or decorates
its click command function with `@cli_errors`:

    @click.command()
    @click.option("--model", required=True)
    @cli_errors
    def main(model: str) -> None:
        ...

EngineError, pydantic ValidationError, OSError (missing or unreadable files), ValueError from
parsing input all print `error: <one line>` on stderr and exit 2; nothing prints a
traceback. Set SPARKBOARD_DEBUG=1 to get the traceback anyway.

`run_group(group)` runs a whole click group the same way and also turns click's usage errors
(an unknown flag, a bad value) into one line and exit 2:

    if __name__ == "__main__":
        sys.exit(run_group(main))
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from engine.errors import BaselineError, EngineError, EngineForged, EngineOutputError

EXIT_USER_ERROR = 2
EXIT_BAD_OUTPUT = 1  # the engine under test produced output the protocol cannot carry
EXIT_BASELINE = 3  # main's engine, measured beside it, failed (engine.errors.BaselineError)
EXIT_HARNESS = 4  # the timing parent (main's harness) failed in itself: an error it did not expect
EXIT_FORGED = 5  # the timing parent caught the engine under test working outside its turns
F = TypeVar("F", bound=Callable[..., Any])


def one_line(exc: BaseException) -> str:
    """The first meaningful line of an exception's message."""
    try:
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            errs = exc.errors()
            if errs:
                e = errs[0]
                where = ".".join(str(p) for p in e.get("loc", ())) or "input"
                more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
                return f"{where}: {e.get('msg', 'invalid')}{more}"
    except ImportError:  # pragma: no cover - pydantic is a dependency
        pass
    if isinstance(exc, OSError) and exc.strerror:
        name = exc.filename if exc.filename is not None else ""
        return f"{exc.strerror}: {name}" if name else exc.strerror
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line[:2000]


def fail(message: str) -> NoReturn:
    """Print `error: message` on stderr and exit 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_USER_ERROR)


def _handled() -> tuple[type[BaseException], ...]:
    kinds: list[type[BaseException]] = [EngineError, OSError, ValueError, MemoryError]
    try:
        from pydantic import ValidationError

        kinds.append(ValidationError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


def run_cli(fn: Callable[[], Any]) -> Any:
    """Call fn(); turn user errors into `error: ...` + exit 2 (KeyboardInterrupt: exit 130)."""
    try:
        return fn()
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except EngineOutputError as exc:
        if os.environ.get("SPARKBOARD_DEBUG"):
            raise
        click.echo(f"error: {one_line(exc)}", err=True)
        if isinstance(exc, BaselineError):
            sys.exit(EXIT_BASELINE)
        sys.exit(EXIT_FORGED if isinstance(exc, EngineForged) else EXIT_BAD_OUTPUT)
    except _handled() as exc:
        if os.environ.get("SPARKBOARD_DEBUG"):
            raise
        fail(one_line(exc))


def cli_errors(fn: F) -> F:
    """Decorator form of run_cli for click command functions."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_cli(lambda: fn(*args, **kwargs))

    return wrapper  # type: ignore[return-value]


def run_group(group: click.Group, args: Sequence[str] | None = None) -> int:
    """Run a click group; user errors, usage errors included, give one line and exit code 2
    (unusable engine output: exit 1)."""
    try:
        rc = run_cli(
            lambda: group.main(
                args=args, prog_name=f"python -m {group.name}", standalone_mode=False
            )
        )
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return 1
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare command: show its help
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            return EXIT_USER_ERROR
        hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx else ""
        click.echo(f"error: {' '.join(exc.format_message().split())}{hint}", err=True)
        return EXIT_USER_ERROR
    except click.ClickException as exc:
        click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        return EXIT_USER_ERROR
    return rc if isinstance(rc, int) else 0
