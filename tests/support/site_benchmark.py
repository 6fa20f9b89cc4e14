"""The site benchmark: build the site from a synthetic database, report time and page weight.

    .venv/bin/python tests/support/site_benchmark.py --prs 1000 --rounds 20

Prints the seconds of each stage (the synthetic database includes its verdicts, judged by
collector.judge.verdict) and the weight of the heaviest PR page (its HTML plus the files only it
references, i.e. beyond the assets every page shares).
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

import click
import synthetic_round
from sitegen.build import build_site


def _cpu_s() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pr_page_weights(out: Path) -> list[tuple[int, str]]:
    """(bytes, name) of every PR page, heaviest first."""
    pages = sorted(out.glob("pr/*.html"))
    return sorted(((p.stat().st_size, p.name) for p in pages), reverse=True)


@click.command()
@click.option("--prs", default=1000, show_default=True)
@click.option("--rounds", default=20, show_default=True)
@click.option("--seed", default=7, show_default=True)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep the database and site here (default: a scratch folder)",
)
def main(prs: int, rounds: int, seed: int, workdir: Path | None) -> None:
    """Make a synthetic database and time `sparkboard build` on it."""
    with tempfile.TemporaryDirectory(prefix="sparkboard-bench-") as tmp:
        base = workdir or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        db = base / "bench.duckdb"
        t0 = time.perf_counter()
        synthetic_round.generate(db, prs=prs, rounds=rounds, seed=seed)
        gen_s = time.perf_counter() - t0
        cpu0 = _cpu_s()
        times = build_site(db, base / "out")
        cpu = _cpu_s() - cpu0
        weights = pr_page_weights(base / "out")
        heaviest = weights[0] if weights else (0, "-")
        median = weights[len(weights) // 2][0] if weights else 0
        click.echo(
            f"cores={os.cpu_count()} prs={prs} rounds={rounds}\n"
            f"synthetic database (with verdicts): {gen_s:.1f} s\n"
            f"build: {times['total_s']:.1f} s (docs {times['docs_s']:.1f} s, "
            f"mkdocs {times['mkdocs_s']:.1f} s); CPU {cpu:.1f} s (user+sys, with workers)\n"
            f"load average at the end: {os.getloadavg()[0]:.1f}\n"
            f"PR pages: {len(weights)}, heaviest {heaviest[1]} {heaviest[0] / 1024:.0f} KiB, "
            f"median {median / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
