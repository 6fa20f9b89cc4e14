"""`sparkboard`: the command line (collect, verdict, combine, show, cost, comment, export here;
manifest in cli_manifest.py, demo in cli_demo.py, build in sitegen.cli)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from collector.cli_demo import demo
from collector.cli_errors import USER_ERRORS, fail
from collector.cli_manifest import manifest
from collector.store import open_store


class SparkboardGroup(click.Group):
    """Registers `build` from the site generator lazily, so the collector works without it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | {"build"})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "build" and name not in self.commands:
            try:
                from sitegen.cli import build  # noqa: PLC0415 - lazy on purpose
            except Exception as e:  # the site package may be incomplete: say so only when asked
                err = f"{type(e).__name__}: {e}"

                @click.command(
                    "build", help="Render the static site (site generator not available)."
                )
                def unavailable() -> None:
                    raise click.ClickException(f"the site generator is not available ({err})")

                return unavailable
            return build
        return super().get_command(ctx, name)


@click.group(cls=SparkboardGroup)
@click.version_option(package_name="sparkboard")
def main() -> None:
    """sparkboard: judge performance PRs against same-box main, store the evidence in DuckDB,
    and publish the verdicts."""


# their own modules: round manifests, and the demo (a local round, then the site)
main.add_command(manifest)
main.add_command(demo)


@main.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="DuckDB file (created if missing).",
)
@click.option(
    "--scratch",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where worktrees go (default: next to the database); removed afterwards.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--cluster",
    default=None,
    metavar="local|auto|ray://HOST:PORT",
    help="Cut the round into shards, one per GPU of a Ray cluster (pip install 'sparkboard[cluster]').",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=1),
    default=None,
    help="With --cluster local: GPUs to declare (logical ones on a CPU box); else: at most this many.",
)
@click.option(
    "--unsandboxed",
    is_flag=True,
    help="Run PR code without a sandbox (a box that cannot make one): it then runs with this "
    "process's own rights, and every page of the round says so.",
)
def collect(
    manifest: Path,
    db: Path,
    scratch: Path | None,
    quiet: bool,
    cluster: str | None,
    gpus: int | None,
    unsandboxed: bool,
) -> None:
    """Run (or resume) the round MANIFEST into --db, then decide its verdicts.

    Every PR's code runs sealed in a sandbox (bubblewrap), main's engine timed beside it turn by
    turn; a box that cannot make a sandbox is refused unless --unsandboxed. Re-running the same
    command resumes: finished sessions are not repeated. Exits 3 when some sessions failed for
    infrastructure (run it again to retry them). With --cluster, each GPU measures its own shard
    of the PRs; this process alone writes --db.
    """
    from collector.errors import RoundError
    from collector.run.collect import collect as run_collect

    if gpus is not None and cluster is None:
        raise click.UsageError("--gpus goes with --cluster")
    try:
        left = run_collect(
            manifest, db, scratch=scratch, progress=not quiet, cluster=cluster, gpus=gpus,
            unsandboxed=unsandboxed,
        )  # fmt: skip
    except (*USER_ERRORS, RoundError) as e:
        raise fail(e) from None
    if left:
        sys.exit(3)


@main.command()
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--round",
    "round_id",
    default=None,
    help="Round id (default: the newest leaderboard round; A/A rounds only by id).",
)
@click.option(
    "--policy",
    "policy_path",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Judge the round under this policy file from now on (e.g. after A/A rounds calibrated "
    "the gates) instead of the policy stored with it.",
)
def verdict(db: Path, round_id: str | None, policy_path: Path | None) -> None:
    """Recompute the verdicts of a round from its stored samples; print one line per PR."""
    from collector.judge.verdict import adopt_policy, decide_round
    from collector.policy import load_policy
    from collector.report.render import term_safe
    from collector.store.readout import pick_round

    try:
        with open_store(db) as store:
            rid = pick_round(store.con, round_id)
            if policy_path is not None:
                adopt_policy(store, rid, load_policy(policy_path))
            for v in decide_round(store, rid):
                mf = " merge-first" if v.merge_first else ""
                click.echo(f"#{v.pr}\t{v.label}{mf}\t{term_safe(v.reason)}")
    except USER_ERRORS as e:
        raise fail(e) from None


@main.command()
@click.argument(
    "sources", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path)
)
@click.option(
    "--into",
    "dst",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The database to add the rounds to (created if missing).",
)
@click.option(
    "--without-dumps",
    is_flag=True,
    help="Leave out the score dumps (the teacher-forced logits, most of the bytes): a database "
    "to publish. Its verdicts then stand as stored.",
)
def combine(sources: tuple[Path, ...], dst: Path, without_dumps: bool) -> None:
    """Add the rounds of SOURCES (databases written by separate collectors) to one database."""
    from collector.store.combine import combine_rounds

    try:
        for r in combine_rounds(dst, list(sources), without_dumps=without_dumps):
            click.echo(f"added {r}")
    except USER_ERRORS as e:
        raise fail(e) from None


@main.command()
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--round",
    "round_id",
    default=None,
    help="Round id (default: the newest leaderboard round; with --pr, the newest that measured it).",
)
@click.option("--pr", "pr", type=int, default=None, help="Only this PR.")
@click.option("--json", "as_json", is_flag=True, help="A JSON list, one object per PR.")
def show(db: Path, round_id: str | None, pr: int | None, as_json: bool) -> None:
    """Show a round's verdicts: tables like the reference comments, or JSON."""
    from collector.report.render import render_terminal, to_json
    from collector.store.readout import Readout, pick_round

    try:
        with open_store(db, read_only=True) as store:
            rid = pick_round(store.con, round_id, pr)
            rd = Readout.from_connection(store.con, [rid])
            evs = [rd.evaluation(rid, pr)] if pr is not None else rd.by_round.get(rid, [])
            text = (
                json.dumps([to_json(ev) for ev in evs], indent=2, default=str)
                if as_json
                else "\n".join(render_terminal(ev) for ev in evs)
            )
    except USER_ERRORS as e:
        raise fail(e) from None
    click.echo(text, nl=not text.endswith("\n"))


@main.command()
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--round",
    "round_id",
    default=None,
    help="Round id (default: the newest leaderboard round; A/A rounds only by id).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object, minutes throughout.")
def cost(db: Path, round_id: str | None, as_json: bool) -> None:
    """Device minutes of a round: per PR its own sessions plus an even share of main's (its own
    shard's main in a sharded round), and where the time goes (by kind of session, main and
    PRs). From sessions.wall_s; inside a speed session (load, warm-up, timed work,
    verification), from the phases its harness recorded."""
    from collector.report.render import render_cost
    from collector.store.cost import load_cost
    from collector.store.readout import pick_round

    try:
        with open_store(db, read_only=True) as store:
            rc = load_cost(store, pick_round(store.con, round_id))
    except USER_ERRORS as e:
        raise fail(e) from None
    if as_json:
        click.echo(json.dumps(rc.to_json(), indent=2))
    else:
        click.echo(render_cost(rc), nl=False)


@main.command()
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--pr", "pr", type=int, required=True)
@click.option(
    "--round", "round_id", default=None, help="Round id (default: the newest that measured the PR)."
)
def comment(db: Path, pr: int, round_id: str | None) -> None:
    """A PR's verdict as a GitHub-flavoured Markdown comment."""
    from collector.report.render import render_markdown
    from collector.store.readout import Readout, pick_round

    try:
        with open_store(db, read_only=True) as store:
            rid = pick_round(store.con, round_id, pr)
            text = render_markdown(Readout.from_connection(store.con, [rid]).evaluation(rid, pr))
    except USER_ERRORS as e:
        raise fail(e) from None
    click.echo(text, nl=False)


@main.command()
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--round",
    "round_id",
    default=None,
    help="Round id (default: the newest leaderboard round; A/A rounds only by id).",
)
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv", "json"]), required=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the files (default: export-<round>-<format>).",
)
def export(db: Path, round_id: str | None, fmt: str, out: Path | None) -> None:
    """Export every table's rows of one round, one file per table."""
    from collector.store.export import export_round
    from collector.store.readout import pick_round

    try:
        with open_store(db, read_only=True) as store:
            rid = pick_round(store.con, round_id)
            for p in export_round(store, rid, fmt, out or Path(f"export-{rid}-{fmt}")):
                click.echo(str(p))
    except USER_ERRORS as e:
        raise fail(e) from None


@main.command("llama-cpp-source")
@click.option("--release", required=True, help="A llama-cpp-python release, e.g. 0.3.36.")
@click.option(
    "--into",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A new folder: the git repository of llama.cpp's tree as that release vendors it.",
)
@click.option(
    "--sdist",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The release's source archive, already downloaded (default: pip downloads it).",
)
def llama_cpp_source(release: str, into: Path, sdist: Path | None) -> None:
    """llama.cpp's source as a git repository (main of a round of llama.cpp PRs), from the
    llama-cpp-python release on PyPI that vendors it, trimmed to what a build reads."""
    from collector.engine_source import SourceError, llama_cpp_repo

    click.echo(f"llama.cpp of {release} into {into} ...", err=True)
    try:
        commit = llama_cpp_repo(release, into, sdist)
    except SourceError as e:
        raise fail(e) from None
    click.echo(commit)
