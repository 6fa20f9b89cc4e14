"""The errors a `sparkboard` command reports as a one-line message (not a traceback)."""

from __future__ import annotations

import click

from collector.manifest import ManifestError
from collector.policy import PolicyError
from collector.run.candidates import GitError
from collector.store import StoreError
from collector.store.readout import ReadoutError

USER_ERRORS = (ManifestError, StoreError, PolicyError, ReadoutError, GitError, LookupError)


def fail(e: Exception) -> click.ClickException:
    """`e` as a click error: its first line, or its type when it has no message."""
    return click.ClickException(str(e).splitlines()[0] if str(e) else type(e).__name__)
