"""`sparkboard`: the command line (collect, verdict, show, cost, comment, export, manifest, build,
demo)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from collector.candidates import GitError
from collector.manifest import ManifestError
from collector.policy import PolicyError
from collector.readout import ReadoutError
from collector.store import StoreError, open_store

USER_ERRORS = (ManifestError, StoreError, PolicyError, ReadoutError, GitError, LookupError)


def _fail(e: Exception) -> click.ClickException:
    return click.ClickException(str(e).splitlines()[0] if str(e) else type(e).__name__)


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
def collect(
    manifest: Path,
    db: Path,
    scratch: Path | None,
    quiet: bool,
    cluster: str | None,
    gpus: int | None,
) -> None:
    """Run (or resume) the round MANIFEST into --db, then decide its verdicts.

    Re-running the same command resumes: finished sessions are not repeated. Exits 3 when some
    sessions failed for infrastructure (run it again to retry them). With --cluster, each GPU
    measures its own shard of the PRs beside its own main sessions; this process alone writes --db.
    """
    from collector.collect import RoundError
    from collector.collect import collect as run_collect

    if gpus is not None and cluster is None:
        raise click.UsageError("--gpus goes with --cluster")
    try:
        left = run_collect(
            manifest, db, scratch=scratch, progress=not quiet, cluster=cluster, gpus=gpus
        )
    except (*USER_ERRORS, RoundError) as e:
        raise _fail(e) from None
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
    from collector.policy import load_policy
    from collector.readout import pick_round
    from collector.report import term_safe
    from collector.verdict import adopt_policy, decide_round

    try:
        with open_store(db) as store:
            rid = pick_round(store.con, round_id)
            if policy_path is not None:
                adopt_policy(store, rid, load_policy(policy_path))
            for v in decide_round(store, rid):
                mf = " merge-first" if v.merge_first else ""
                click.echo(f"#{v.pr}\t{v.label}{mf}\t{term_safe(v.reason)}")
    except USER_ERRORS as e:
        raise _fail(e) from None


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
def merge(sources: tuple[Path, ...], dst: Path, without_dumps: bool) -> None:
    """Add the rounds of SOURCES (databases written by separate collectors) to one database."""
    from collector.merge import merge_rounds

    try:
        for r in merge_rounds(dst, list(sources), without_dumps=without_dumps):
            click.echo(f"merged {r}")
    except USER_ERRORS as e:
        raise _fail(e) from None


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
    from collector.readout import Readout, pick_round
    from collector.report import render_terminal, to_json

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
        raise _fail(e) from None
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
    """Device minutes of a round: per PR its own sessions plus an even share of main's, and
    where the time goes (by kind of session, main and PRs). From sessions.wall_s."""
    from collector.cost import load_cost
    from collector.readout import pick_round
    from collector.report import render_cost

    try:
        with open_store(db, read_only=True) as store:
            rc = load_cost(store, pick_round(store.con, round_id))
    except USER_ERRORS as e:
        raise _fail(e) from None
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
    from collector.readout import Readout, pick_round
    from collector.report import render_markdown

    try:
        with open_store(db, read_only=True) as store:
            rid = pick_round(store.con, round_id, pr)
            text = render_markdown(Readout.from_connection(store.con, [rid]).evaluation(rid, pr))
    except USER_ERRORS as e:
        raise _fail(e) from None
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
    from collector.export import export_round
    from collector.readout import pick_round

    try:
        with open_store(db, read_only=True) as store:
            rid = pick_round(store.con, round_id)
            for p in export_round(store, rid, fmt, out or Path(f"export-{rid}-{fmt}")):
                click.echo(str(p))
    except USER_ERRORS as e:
        raise _fail(e) from None


@main.group()
def manifest() -> None:
    """Round manifests: build one from gh output, or check one."""


@manifest.command("from-gh")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--round", "round_id", required=True, help="The new round's id.")
@click.option("--engine-repo", default=".", show_default=True)
@click.option("--base-ref", default="main", show_default=True)
@click.option("--profile", type=click.Choice(["cpu", "gpu"]), default="gpu", show_default=True)
@click.option("--policy", default=None, help="Policy file, relative to the manifest.")
@click.option("--targets", default="", help="Comma-separated models for PRs whose body names none.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default="-")
def from_gh(file, round_id, engine_repo, base_ref, profile, policy, targets, output) -> None:  # type: ignore[no-untyped-def]
    """Build a manifest from FILE: `gh pr list --json number,title,author,labels,headRefOid,headRefName,body`
    output ('-' for stdin)."""
    from collector.manifest import manifest_from_gh, manifest_to_toml

    try:
        m = manifest_from_gh(
            file.read(),
            round_id,
            engine_repo,
            base_ref,
            profile,
            [t for t in targets.split(",") if t],
            policy,
        )
    except ManifestError as e:
        raise _fail(e) from None
    output.write(manifest_to_toml(m))


@manifest.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def check(file: Path) -> None:
    """Validate a manifest fully (fields, models, refs, patches) without measuring anything."""
    import tempfile

    from collector.candidates import Workspace, preflight
    from collector.manifest import load_manifest
    from collector.policy import load_policy, resolve

    try:
        loaded = load_manifest(file)
        resolve(load_policy(loaded.policy_path), loaded.manifest.profile)
        with tempfile.TemporaryDirectory(prefix="sparkboard-check-") as tmp:
            ws = Workspace(loaded.repo, Path(tmp) / "ws")
            try:
                main_commit, _ = preflight(loaded, ws)
            finally:
                ws.cleanup()
    except USER_ERRORS as e:
        raise _fail(e) from None
    click.echo(
        f"ok: round {loaded.manifest.round}, main {main_commit[:12]}, {len(loaded.manifest.pr)} PRs"
    )


PUBLISHED = Path("data/sparkboard.duckdb")


def _drop(db: Path) -> None:
    for path in (db, db.with_name(db.name + ".wal"), db.with_name(db.name + ".published")):
        path.unlink(missing_ok=True)


def _stale_local_round(db: Path, loaded) -> str | None:  # type: ignore[no-untyped-def]
    """Why the demo round stored in `db` can no longer be resumed (main moved under its base
    ref, or its manifest changed), or None. The collector refuses both under the same round id;
    for the demo, measuring afresh is what is meant."""
    import duckdb

    from collector.candidates import git

    if not db.is_file():
        return None
    try:
        con = duckdb.connect(str(db), read_only=True)
        try:
            row = con.execute(
                "SELECT main_commit, manifest_toml FROM rounds WHERE round_id = ?",
                [loaded.manifest.round],
            ).fetchone()
        finally:
            con.close()
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

    with published.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    stamp = db.with_name(db.name + ".published")
    try:
        con = duckdb.connect(str(published), read_only=True)
        try:
            clash = con.execute("SELECT 1 FROM rounds WHERE round_id = ?", [round_id]).fetchall()
        finally:
            con.close()
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


@main.command()
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
def demo(out: Path, manifest_path: Path, published: Path) -> None:
    """Run the demo round on this machine into OUT/demo.duckdb, then build the site into OUT/site.

    When the published database (data/sparkboard.duckdb) exists, OUT/demo.duckdb starts as a
    copy of it, so the site shows the published rounds (the GPU rounds) beside the round
    measured here. The published file itself is never written. Running it again resumes the
    local round in the same copy until the published file changes; once main has moved under
    the manifest's base ref (or the manifest changed) the local round is measured afresh.
    """
    from collector.collect import RoundError
    from collector.collect import collect as run_collect
    from collector.manifest import load_manifest

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
        run_collect(manifest_path, db)
    except (*USER_ERRORS, RoundError) as e:
        raise _fail(e) from None
    build = main.get_command(click.get_current_context(), "build")
    assert build is not None
    click.get_current_context().invoke(build, db=db, out=out / "site")
