"""Shared CLI plumbing: user errors become one line on stderr and exit code 2.

Every engine command (generate, bench, score) wraps its body with `run_cli`, or decorates
its click command function with `@cli_errors`:

    @click.command()
    @click.option("--model", required=True)
    @cli_errors
    def main(model: str) -> None:
        ...

EngineError, pydantic ValidationError, OSError (missing or unreadable files), ValueError from
parsing input and click usage errors all print `error: <one line>` on stderr and exit 2;
nothing prints a traceback. Set SPARKBOARD_DEBUG=1 to get the traceback anyway.
Click's own usage errors (bad flags) already exit 2 with click's message.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from engine.errors import EngineError

EXIT_USER_ERROR = 2
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
