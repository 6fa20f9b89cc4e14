"""`sparkboard demo`: a round measured on this machine beside the published rounds, then the
site. The published database is only ever copied, never written."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click

from collector.cli_errors import USER_ERRORS, fail

PUBLISHED = Path("data/sparkboard.duckdb")
# The tmux server a maintainer's round runs beside (`tmux -L sparkboard-demo`): the demo starts
# one so its PR #118, which asks such a server for work outside its own process tree, has one to
# ask; sealed, no PR's code can reach it.
TMUX_SOCKET = "sparkboard-demo"


@contextlib.contextmanager
def tmux_server() -> Iterator[bool]:
    """A tmux server for the length of the demo round (True), where tmux is installed."""
    tmux = shutil.which("tmux")
    if tmux is None:
        yield False
        return
    base = [tmux, "-L", TMUX_SOCKET]
    started = subprocess.run(
        [*base, "new-session", "-d", "-s", "round"], capture_output=True, timeout=30, check=False
    )
    try:
        yield started.returncode == 0
    finally:
        if started.returncode == 0:
            subprocess.run([*base, "kill-server"], capture_output=True, timeout=30, check=False)


def _drop(db: Path) -> None:
    for path in (db, db.with_name(db.name + ".wal"), db.with_name(db.name + ".published")):
        path.unlink(missing_ok=True)


def _stale_local_round(db: Path, loaded) -> str | None:  # type: ignore[no-untyped-def]
    """Why the demo round stored in `db` can no longer be resumed (main moved under its base
    ref, or its manifest changed), or None. The collector refuses both under the same round id;
    for the demo, measuring afresh is what is meant."""
    import duckdb

    from collector.run.candidates import git
    from collector.store import lookups

    if not db.is_file():
        return None
    try:
        row = lookups.round_manifest_in(db, loaded.manifest.round)
    except duckdb.Error:
        return None  # not ours to judge: the collector says what is wrong with it
    if row is None:
        return None
    if row[1] != loaded.text:
        return "its manifest changed"
    if isinstance(loaded.repo, Path):
        ref = f"{loaded.manifest.base_ref}^{{commit}}"
        p = git(
            loaded.repo, "rev-parse", "--verify", "--quiet", "--end-of-options", ref, check=False
        )
        head = p.stdout.strip()
        if p.returncode == 0 and head and head != row[0]:
            return f"it was measured at main {row[0][:12]}, {loaded.manifest.base_ref} is now {head[:12]}"
    return None


def _published_copy(published: Path, db: Path, round_id: str) -> bool:
    """Make `db` a copy of the published database, unless it already is one of this very file
    (then the local round resumes in it). Never writes `published`. Returns True when copied."""
    import hashlib
    import shutil

    import duckdb

    from collector.store import lookups

    with published.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    stamp = db.with_name(db.name + ".published")
    try:
        clash = lookups.has_round(published, round_id)
    except duckdb.Error as e:
        raise click.ClickException(f"cannot read {published}: {str(e).splitlines()[0]}") from None
    if clash:
        raise click.ClickException(
            f"{published} already holds a round {round_id!r}: give the local demo round "
            "another id in its manifest"
        )
    if db.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return False
    _drop(db)
    shutil.copyfile(published, db)
    stamp.write_text(digest + "\n")
    return True


@click.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
)
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("data/demo/demo.toml"),
    show_default=True,
)
@click.option(
    "--published",
    type=click.Path(dir_okay=False, path_type=Path),
    default=PUBLISHED,
    show_default=True,
    help="The published database; when it exists its rounds are shown beside the local one "
    "(copied into OUT, never written).",
)
@click.option(
    "--unsandboxed",
    is_flag=True,
    help="Run the demo PRs' code without a sandbox (a box that cannot make one); the pages say so.",
)
def demo(out: Path, manifest_path: Path, published: Path, unsandboxed: bool) -> None:
    """Run the demo round on this machine into OUT/demo.duckdb, then build the site into OUT/site.

    When the published database (data/sparkboard.duckdb) exists, OUT/demo.duckdb starts as a
    copy of it, so the site shows the published rounds (the GPU rounds) beside the round
    measured here. The published file itself is never written. Running it again resumes the
    local round in the same copy until the published file changes; once main has moved under
    the manifest's base ref (or the manifest changed) the local round is measured afresh.
    """
    from collector.errors import RoundError
    from collector.manifest import load_manifest
    from collector.run.collect import collect as run_collect

    out.mkdir(parents=True, exist_ok=True)
    db = out / "demo.duckdb"
    try:
        loaded = load_manifest(manifest_path)
        why = _stale_local_round(db, loaded)
        if why:
            click.echo(f"{db}: the local round is measured afresh ({why})", err=True)
            _drop(db)
        if published.is_file():
            round_id = loaded.manifest.round
            if _published_copy(published, db, round_id):
                click.echo(
                    f"copied {published} to {db}; the local round goes into the copy", err=True
                )
            else:
                click.echo(f"{db} is a copy of {published}; resuming the local round", err=True)
        elif db.with_name(db.name + ".published").is_file():
            _drop(db)  # a copy of a published file that is gone: a local-only database afresh
        with tmux_server():
            run_collect(manifest_path, db, unsandboxed=unsandboxed)
    except (*USER_ERRORS, RoundError) as e:
        raise fail(e) from None
    ctx = click.get_current_context()
    group = ctx.parent.command if ctx.parent else None  # the sparkboard group: it owns `build`
    build = group.get_command(ctx.parent, "build") if isinstance(group, click.Group) else None
    if build is None:
        raise click.ClickException("the site generator's `build` command is not available")
    ctx.invoke(build, db=db, out=out / "site")
