"""`sparkboard manifest`: build a round manifest from `gh pr list` output, or check one."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli_errors import USER_ERRORS, fail
from collector.manifest import ManifestError


@click.group()
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
        raise fail(e) from None
    output.write(manifest_to_toml(m))


@manifest.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def check(file: Path) -> None:
    """Validate a manifest fully (fields, models, refs, patches) without measuring anything."""
    import tempfile

    from collector.manifest import load_manifest
    from collector.policy import load_policy, resolve
    from collector.run.candidates import Workspace, preflight

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
        raise fail(e) from None
    click.echo(
        f"ok: round {loaded.manifest.round}, main {main_commit[:12]}, {len(loaded.manifest.pr)} PRs"
    )
