"""The build: database -> docs folder (Markdown, data JSON, assets) -> MkDocs -> site folder.

    build_site(db, out)            # docs in a scratch folder, removed afterwards
    build_site(db, out, docs_dir)  # keep the docs folder and its `<docs_dir>.mkdocs.yml`

The same database gives the same files: no build-time clocks (MkDocs' sitemap date comes from
SOURCE_DATE_EPOCH, set to the newest time in the database), stable ordering everywhere,
deterministic SVGs and exports.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from markupsafe import Markup

from collector.store.readout import export_tables, newest_time, schema_sql
from sitegen import charts, pages, queries, tiers
from sitegen.escape import block, script_json

VENDOR_JS = ["vega.min.js", "vega-lite.min.js", "vega-embed.min.js"]

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class BuildError(Exception):
    """A build that cannot go on (a missing database, an output inside the repo's site/)."""


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _dump(data: Any) -> str:
    return (
        json.dumps(
            data, default=_json_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        + "\n"
    )


def _replaceable(folder: Path) -> None:
    """Refuse to wipe a folder that is neither empty nor an earlier build of ours."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise BuildError(f"{folder} is not a folder")
    if any(folder.iterdir()) and not (folder / "assets" / "sparkboard.js").is_file():
        raise BuildError(
            f"refusing to replace {folder}: it is not empty and not an earlier sparkboard build"
        )


def _check_out(out: Path) -> None:
    """Refuse to build into the generator's own folder (MkDocs' default `site/`)."""
    source = Path(resources.files("sitegen")).resolve().parent  # the repo's site/
    o = out.resolve()
    if o == source or source in o.parents:
        raise BuildError(f"refusing to build into {out}: that is the generator's own site/ folder")


def mkdocs_config(docs: Path, out: Path, site: pages.Site) -> dict[str, Any]:
    nav: list[Any] = [{"Leaderboard": "index.md"}]
    nav.append(
        {
            "Rounds": ["rounds/index.md"]
            + [f"rounds/{site.round_slug[r.round_id]}.md" for r in reversed(site.rounds)]
        }
    )
    nav.append({"Tiers": ["tiers/index.md"] + [f"tiers/{t}.md" for t in tiers.ORDER]})
    nav.append(
        {"Models": ["models/index.md"] + [f"models/{site.model_slug[m]}.md" for m in site.models]}
    )
    nav.append({"Find a PR": "find.md"})
    nav.append({"Rules": "rules.md"})
    nav.append({"Data": "data.md"})
    return {
        "site_name": "sparkboard",
        "docs_dir": str(docs),
        "site_dir": str(out),
        "use_directory_urls": False,  # pages work from a local folder and under any path
        "strict": False,
        "theme": {
            "name": "material",
            "font": False,  # no Google Fonts: the site loads nothing from the network
            "palette": [
                {
                    "media": "(prefers-color-scheme: light)",
                    "scheme": "default",
                    "primary": "indigo",
                    "toggle": {"icon": "material/weather-night", "name": "Dark mode"},
                },
                {
                    "media": "(prefers-color-scheme: dark)",
                    "scheme": "slate",
                    "primary": "indigo",
                    "toggle": {"icon": "material/weather-sunny", "name": "Light mode"},
                },
            ],
            "features": ["navigation.sections"],
        },
        # no plugins: Material's search worker cannot load from file:// (its offline plugin
        # fetches a shim from unpkg.com); find.html searches a local index instead
        "plugins": [],
        "markdown_extensions": ["tables", "attr_list", {"toc": {"permalink": False}}],
        "extra_css": ["assets/sparkboard.css"],
        "extra_javascript": [f"assets/vendor/{f}" for f in VENDOR_JS] + ["assets/sparkboard.js"],
        "extra": {"generator": False},
        "nav": nav,
        "validation": {
            "omitted_files": "ignore",
            "absolute_links": "warn",
            "unrecognized_links": "warn",
            "anchors": "ignore",
        },
    }


def export_rounds(db: Path, docs: Path, site: pages.Site) -> dict[str, dict[str, list[str]]]:
    """Each round's rows of every table as Parquet, CSV and JSON, under docs/data/<round>/
    (collector/store/export.py, the one export): {round: {table: [links]}}."""
    con = queries.connect(db)
    try:
        out: dict[str, dict[str, list[str]]] = {}
        for rnd in site.rounds:
            slug = site.round_slug[rnd.round_id]
            written = export_tables(con, rnd.round_id, docs / "data" / slug, pages.EXPORT_FORMATS)
            out[rnd.round_id] = {
                table: [Markup(f"data/{slug}/{p.name}") for p in paths]  # slug-safe
                for table, paths in written.items()
            }
        return out
    finally:
        con.close()


def _schema_text() -> str | None:
    try:
        return schema_sql()
    except OSError:
        return None


def _copy_assets(docs: Path) -> None:
    assets = Path(str(resources.files("sitegen").joinpath("assets")))
    shutil.copytree(
        assets, docs / "assets", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.md")
    )
    for label in [*tiers.ORDER, "unknown"]:
        _write(docs / "assets" / "badges" / f"{label}.svg", tiers.badge_svg(label))


def _pr_pages(site: pages.Site, docs: Path, prs: list[int]) -> None:
    for pr in prs:
        _write(docs / "pr" / f"{pr}.md", site.pr_page(pr))
        _write(docs / "data" / "pr" / f"{pr}.json", _dump(site.pr_data(pr)))


def generate_docs(db: Path, docs: Path, log: Log = _stderr) -> pages.Site:
    """Write the whole docs folder (Markdown, data, assets) for `db` into `docs`.

    A second thread renders the SVGs (vl-convert) and writes the exports (DuckDB) while this
    one renders Markdown: both release the GIL, so the two overlap on two cores."""
    t0 = time.perf_counter()
    site = pages.Site(queries.load(db))
    log(
        f"loaded {len(site.data.evaluations)} evaluations of {len(site.data.by_pr)} PRs "
        f"in {len(site.rounds)} rounds ({time.perf_counter() - t0:.1f} s)"
    )
    _replaceable(docs)
    if docs.exists():
        shutil.rmtree(docs)
    docs.mkdir(parents=True)
    _copy_assets(docs)

    with ThreadPoolExecutor(1) as pool:
        side = pool.submit(_svgs_and_exports, db, docs, site, log)
        t1 = time.perf_counter()
        prs = list(site.data.by_pr)
        _pr_pages(site, docs, prs)
        log(f"wrote {len(prs)} PR pages ({time.perf_counter() - t1:.1f} s)")
        _write(docs / "rounds" / "index.md", site.rounds_index())
        for rnd in site.rounds:
            _write(docs / "rounds" / f"{site.round_slug[rnd.round_id]}.md", site.round_page(rnd))
        members = site.tier_members()
        _write(docs / "tiers" / "index.md", site.tiers_index(members))
        for label in tiers.ORDER:
            _write(docs / "tiers" / f"{label}.md", site.tier_page(label, members.get(label, [])))
        _write(docs / "models" / "index.md", site.models_index())
        for model in site.models:
            _write(docs / "models" / f"{site.model_slug[model]}.md", site.model_page(model))
        _write(docs / "rules.md", site.rules_page())
        for author, slug in site.author_slug.items():
            _write(docs / "authors" / f"{slug}.md", site.author_page(author))
        _write(docs / "find.md", site.render("find.md.j2", root=""))
        _write(
            docs / "assets" / "find-index.js",
            f"window.SB_FIND = {script_json(site.find_index())};\n",
        )
        headline, exports = side.result()
    _write(docs / "index.md", site.home_page(headline))
    schema = _schema_text()
    _write(docs / "data.md", site.data_page(exports, block(schema, 0) if schema else None))
    log(f"docs written in {time.perf_counter() - t0:.1f} s")
    return site


def _svgs_and_exports(
    db: Path, docs: Path, site: pages.Site, log: Log
) -> tuple[bool, dict[str, dict[str, list[str]]]]:
    """The headline and comment SVGs, then each round's exports. Returns (headline, exports)."""
    t = time.perf_counter()
    headline = False
    if site.primary:
        rows = site.leaderboard_chart_rows(site.primary.round_id)
        if rows:
            for name, look in (("light", charts.LIGHT), ("dark", charts.DARK)):
                svg = charts.svg(charts.leaderboard(rows, look))
                _write(docs / "assets" / "charts" / f"leaderboard-{name}.svg", svg)
            headline = True
    n_svg = _comment_svgs(site, docs)
    log(f"wrote {n_svg} comment SVGs and the headline chart ({time.perf_counter() - t:.1f} s)")
    t = time.perf_counter()
    exports = export_rounds(db, docs, site)
    log(f"exported {len(exports)} rounds ({time.perf_counter() - t:.1f} s)")
    return headline, exports


def _comment_svgs(site: pages.Site, docs: Path) -> int:
    """A static SVG per PR measured in a round of the home page's leaderboards, for its GitHub
    comment to link to (pr/<n>.svg): main vs PR on the kind of axis that set its label. Bounded
    to those rounds; a PR on two boards gets the first board's (gpu first)."""
    n = 0
    for pr, round_id in sorted(site.comment_round.items()):
        svg = site.comment_svg(site.data.evaluations[(round_id, pr)])
        if svg:
            _write(docs / "pr" / f"{int(pr)}.svg", svg)
            n += 1
    return n


def _source_date(db: Path) -> int:
    """The newest time recorded in the database, as the build's date (sitemap lastmod)."""
    con = queries.connect(db)
    try:
        when = newest_time(con) or datetime(2026, 1, 1)
    finally:
        con.close()
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def run_mkdocs(config: dict[str, Any], source_date: int, keep_config: bool = False) -> None:
    """Build with MkDocs' Python API from a generated `<docs>.mkdocs.yml` beside the docs
    folder (kept when asked, so `mkdocs build -f` or another builder can read it again)."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    docs = Path(config["docs_dir"])
    cfg_path = docs.parent / f"{docs.name}.mkdocs.yml"
    cfg_path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is valid YAML
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(source_date)
    # PR pages are deliberately not in the nav; MkDocs' INFO lines about that are noise.
    loggers = [logging.getLogger(n) for n in ("mkdocs", "mkdocs.structure.pages")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        cfg = load_config(config_file=str(cfg_path))
        build(cfg)
    finally:
        if old is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if not keep_config:
            cfg_path.unlink(missing_ok=True)


def build_site(
    db: Path, out: Path, docs_dir: Path | None = None, log: Log = _stderr
) -> dict[str, float]:
    """Generate the docs and build the site into `out`. Returns seconds per stage."""
    db, out = Path(db), Path(out)
    if not db.is_file():
        raise BuildError(f"no database at {db}")
    _check_out(out)
    _replaceable(out)
    t0 = time.perf_counter()
    scratch = None
    if docs_dir is None:
        scratch = tempfile.mkdtemp(prefix="sparkboard-docs-")
        docs = Path(scratch) / "docs"
    else:
        docs = Path(docs_dir)
    try:
        site = generate_docs(db, docs, log=log)
        t1 = time.perf_counter()
        if out.exists():
            shutil.rmtree(out)
        config = mkdocs_config(docs.resolve(), out.resolve(), site)
        run_mkdocs(config, _source_date(db), keep_config=docs_dir is not None)
        t2 = time.perf_counter()
        log(f"mkdocs built {out} in {t2 - t1:.1f} s")
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return {"docs_s": t1 - t0, "mkdocs_s": t2 - t1, "total_s": t2 - t0}
