"""`sparkboard build`: render the site from a sparkboard database.

The collector's `sparkboard` group registers `build` from here with a lazy import.
"""

from __future__ import annotations

from pathlib import Path

import click

from sitegen.build import BuildError, build_site


@click.command("build")
@click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="the sparkboard DuckDB database to read",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="folder for the static site (replaced); never the repo's site/",
)
@click.option(
    "--docs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep the generated Markdown and data here, and its config as DOCS_DIR.mkdocs.yml "
    "(default: a scratch folder, removed)",
)
def build(db: Path, out: Path, docs_dir: Path | None) -> None:
    """Build the static leaderboard site from DB into OUT."""
    try:
        times = build_site(db, out, docs_dir=docs_dir)
    except (BuildError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"built {out} in {times['total_s']:.1f} s", err=True)


if __name__ == "__main__":
    build()
