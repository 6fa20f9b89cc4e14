"""The generated Markdown and HTML: structure, every field, escaping, no network, determinism."""

from __future__ import annotations

import hashlib
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import synthetic_round as synthetic
from click.testing import CliRunner
from sitegen import tiers
from sitegen.build import build_site
from sitegen.cli import build
from sitegen.escape import text

from collector.report.render import render_markdown
from collector.store.readout import Readout


class Page(HTMLParser):
    """Tags, attributes and visible text of one HTML page."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[str, str]] = []  # (type, body) of inline scripts
        self._skip = 0
        self._script_type: str | None = None
        self.feed(source)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "script" and not dict(attrs).get("src"):
            self._script_type = dict(attrs).get("type") or "text/javascript"
            self.scripts.append((self._script_type, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        if tag == "script":
            self._script_type = None

    def handle_data(self, data: str) -> None:
        if self._script_type and self.scripts:
            kind, body = self.scripts[-1]
            self.scripts[-1] = (kind, body + data)
        if not self._skip:
            self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


def pages(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


def test_every_page_kind_is_built(built: tuple[Path, Path], small_db: Path) -> None:
    docs, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    prs = [r[0] for r in con.execute("SELECT DISTINCT pr FROM prs ORDER BY pr").fetchall()]
    rounds = con.execute("SELECT count(*) FROM rounds").fetchone()[0]
    con.close()
    assert (out / "index.html").is_file()
    for pr in prs:
        assert (docs / "pr" / f"{pr}.md").is_file()
        assert (out / "pr" / f"{pr}.html").is_file()
        data = json.loads((out / "data" / "pr" / f"{pr}.json").read_text())
        assert data["pr"] == pr and data["evaluations"]
    assert len(list((out / "rounds").glob("*.html"))) == rounds + 1  # + index
    for label in tiers.ORDER:
        assert (out / "tiers" / f"{label}.html").is_file()
        assert (out / "assets" / "badges" / f"{label}.svg").read_text().startswith("<svg")
    assert len(list((out / "models").glob("*.html"))) == len(synthetic.MODELS) + 1
    assert (out / "rules.html").is_file() and (out / "data.html").is_file()
    # the kept config: plain MkDocs, nothing fetched, relative links, no plugins (Material's
    # search cannot run from file://; find.html searches a local index file instead)
    config = json.loads((docs.parent / f"{docs.name}.mkdocs.yml").read_text())
    assert config["theme"]["font"] is False and config["plugins"] == []
    find = (out / "find.html").read_text()
    assert '<script src="assets/find-index.js"></script>' in find
    assert (out / "assets" / "find-index.js").read_text().startswith("window.SB_FIND = [")
    assert config["use_directory_urls"] is False


def test_leaderboard_shows_every_field(built: tuple[Path, Path], small_db: Path) -> None:
    docs, out = built
    md = (docs / "index.md").read_text()
    header = "| rank | PR | author | tier | best axis | delta | interval | gates | merge-first |"
    assert header in md
    page = Page((out / "index.html").read_text())
    con = duckdb.connect(str(small_db), read_only=True)
    rid, main, device = con.execute(
        "SELECT round_id, main_commit, device_name FROM rounds ORDER BY created_at DESC LIMIT 1"
    ).fetchone()
    n = con.execute("SELECT count(*) FROM prs WHERE round_id = ?", [rid]).fetchone()[0]
    winner = con.execute(
        "SELECT pr FROM verdicts WHERE round_id = ? AND merge_first", [rid]
    ).fetchone()
    con.close()
    assert rid in page.plain and main[:9] in page.plain and device in page.plain
    assert "main baseline" in page.plain
    rows = [
        line
        for line in md.splitlines()
        if re.match(r"^\| \d+ \| <a href=\"pr/\d+\.html\">#\d+</a>", line)
    ]
    assert len(rows) == n
    assert re.search(r"\[[+-]\d+\.\d%, [+-]\d+\.\d%\]", page.plain)  # an interval
    html_ = (out / "index.html").read_text()
    assert 'class="sb-icon sb-pass"' in html_ and "<svg" in html_  # gates: the theme's SVG icons
    if winner:
        assert 'class="sb-icon sb-merge-first"' in html_ and "merge-first" in page.plain
    badges = [a for t, a in page.tags if t == "img" and "sb-badge" in (a.get("class") or "")]
    assert len(badges) >= n
    assert (out / "assets" / "charts" / "leaderboard-light.svg").is_file()
    assert any(t == "figure" and "sb-chart" in (a.get("class") or "") for t, a in page.tags)


def test_best_axis_of_a_pr_without_a_significant_gain_says_so(
    built: tuple[Path, Path], small_db: Path
) -> None:
    """A best axis that cleared no significance (every `none` PR's, some REJECTs') is only the
    largest change: the leaderboard and the PR page mark it; a tier's axis is shown plain."""
    docs, _ = built
    con = duckdb.connect(str(small_db), read_only=True)
    rid = con.execute("SELECT round_id FROM rounds ORDER BY created_at DESC LIMIT 1").fetchone()[0]
    rows = con.execute(
        """SELECT v.pr, v.label, c.significant FROM verdicts v JOIN comparisons c
           ON c.round_id = v.round_id AND c.pr = v.pr AND c.model = v.best_model
              AND c.axis = v.best_axis
           WHERE v.round_id = ?""",
        [rid],
    ).fetchall()
    tiered_somewhere = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT pr FROM verdicts WHERE label IN ('XS', 'S', 'M', 'L', 'XL')"
        ).fetchall()
    }
    con.close()
    labels = {label for _, label, _ in rows}
    assert "none" in labels and labels & {"XS", "S", "M", "L", "XL"}
    md = (docs / "index.md").read_text()
    for pr, label, significant in rows:
        assert significant or label not in ("XS", "S", "M", "L", "XL")
        (row,) = [ln for ln in md.splitlines() if f'href="pr/{pr}.html">#{pr}</a>' in ln]
        assert ("(not significant)" in row) == (not significant), (pr, label, row)
    # its page shows every round's evaluation: one whose every round is untiered
    none_pr = next(pr for pr, label, _ in rows if label == "none" and pr not in tiered_somewhere)
    page = (docs / "pr" / f"{none_pr}.md").read_text()
    assert "largest change" in page and "tier from" not in page


def test_pr_page_has_the_reference_tables(built: tuple[Path, Path], small_db: Path) -> None:
    docs, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    pr, model = con.execute(
        """SELECT v.pr, v.best_model FROM verdicts v JOIN comparisons c USING (round_id, pr)
           WHERE c.role = 'guard' ORDER BY v.pr LIMIT 1"""
    ).fetchone()
    rounds = con.execute("SELECT count(*) FROM prs WHERE pr = ?", [pr]).fetchone()[0]
    con.close()
    md = (docs / "pr" / f"{pr}.md").read_text()
    for heading in (
        "## History",
        "decode and prefill per context",
        "concurrent decode",
        "### Guard models",
        "### Accuracy vs main",
        "### Prefill path",
        "### Gates and guards",
    ):
        assert heading in md, heading
    heads = "".join(
        f"<th>{h}</th>"
        for h in ["ctx", "phase", "main", "PR", "delta", "interval", "noise", "significant"]
    )
    assert heads in md
    assert "<th>concurrency</th><th>main</th><th>PR</th><th>delta</th>" in md
    assert md.count("\n## Round ") == rounds
    assert md.count('<a id="commit-') >= 1  # each commit measured has its own anchor
    page = Page((out / "pr" / f"{pr}.html").read_text())
    figures = [a for t, a in page.tags if t == "figure" and "sb-chart" in (a.get("class") or "")]
    assert len(figures) >= 3  # decode, prefill, concurrency
    assert "merge-first" in page.plain
    assert "tier from" in page.plain or "largest change" in page.plain  # (the test above)


def test_comment_svgs_for_the_latest_round(built: tuple[Path, Path], small_db: Path) -> None:
    _, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    measured = {
        r[0]
        for r in con.execute(
            """SELECT DISTINCT pr FROM comparisons WHERE round_id =
               (SELECT round_id FROM rounds ORDER BY created_at DESC LIMIT 1)"""
        ).fetchall()
    }
    con.close()
    svgs = {int(p.stem) for p in (out / "pr").glob("*.svg")}
    assert svgs == measured
    for pr in svgs:
        assert (out / "pr" / f"{pr}.svg").read_text().startswith("<svg")
        assert f'href="{pr}.svg"' in (out / "pr" / f"{pr}.html").read_text()


def test_hostile_strings_show_as_plain_text_on_every_page(built: tuple[Path, Path]) -> None:
    _, out = built
    for path in pages(out):
        source = path.read_text()
        page = Page(source)
        for tag, attrs in page.tags:
            for name, value in attrs.items():
                assert not name.startswith("on"), (path, tag, name)
                if name in ("href", "src"):
                    assert not (value or "").lower().startswith(("javascript:", "data:text")), path
            assert tag not in ("iframe", "object", "embed", "textarea"), (path, tag)
            if tag == "img":
                assert not (attrs.get("src") or "").startswith(("http:", "https:", "//")), path
        assert "alert(1)</script>" not in source
        # MkDocs and Material print page titles raw: they hold only generated, safe text.
        title = re.search(r"<title>(.*?)</title>", source, flags=re.S).group(1)
        assert re.fullmatch(r"([A-Za-z0-9 #._:-]+ - )?sparkboard", title), (path, title)
        assert "{{" not in source and "{%" not in source
        for kind, body in page.scripts:
            # Inline scripts are the theme's or chart specs; no database text ends up as code.
            assert "alert(" not in body or kind == "application/json", path
            if kind == "application/json":
                assert "<" not in body and json.loads(body)


def test_hostile_titles_survive_verbatim_as_text(built: tuple[Path, Path], small_db: Path) -> None:
    _, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    rows = con.execute(
        "SELECT round_id, pr, title, author, labels FROM prs ORDER BY round_id, pr"
    ).fetchall()
    con.close()
    hostile = [r for r in rows if any(h in r[2] or h == r[3] for h in synthetic.HOSTILE)]
    assert len({h for r in hostile for h in synthetic.HOSTILE if h in r[2]}) == len(
        synthetic.HOSTILE
    ), "every hostile string must appear in some title"
    rounds = {p.stem: Page(p.read_text()).plain for p in (out / "rounds").glob("*.html")}
    for round_id, pr, title, author, labels in hostile:
        # exactly what the one escaping filter shows, no markup taken from it, nothing lost
        shown = [html.unescape(str(text(v))) for v in (title, author, *labels)]
        plain = Page((out / "pr" / f"{pr}.html").read_text()).plain
        assert all(v in plain for v in shown), (pr, shown)  # the synthetic PRs keep them
        assert shown[0] in rounds[round_id] and shown[1] in rounds[round_id]


def test_nothing_is_loaded_from_the_network(built: tuple[Path, Path]) -> None:
    _, out = built
    for path in pages(out):
        for tag, attrs in Page(path.read_text()).tags:
            for name in ("src", "href", "srcset", "data"):
                value = (attrs.get(name) or "").strip().lower()
                if tag == "a" and name == "href":
                    continue  # a link is followed only when clicked
                assert not value.startswith(("http:", "https:", "//")), (path, tag, value)
    for css in out.rglob("*.css"):
        body = css.read_text()
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", body), css
        assert not re.search(r"@import\s+(url\()?['\"]?(https?:)?//", body), css


def test_links_are_relative_and_resolve(built: tuple[Path, Path]) -> None:
    _, out = built
    for path in [out / "index.html", *sorted((out / "pr").glob("*.html"))[:5], out / "data.html"]:
        for tag, attrs in Page(path.read_text()).tags:
            ref = attrs.get("href") if tag in ("a", "link") else attrs.get("src")
            if not ref or ref.startswith(("#", "http:", "https:", "mailto:")):
                continue
            assert not ref.startswith("/"), (path, ref)
            target = (path.parent / ref.split("#")[0]).resolve()
            assert target.exists(), (path, ref)


def test_downloads_per_round(built: tuple[Path, Path], small_db: Path) -> None:
    _, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    rounds = [r[0] for r in con.execute("SELECT round_id FROM rounds").fetchall()]
    con.close()
    for rid in rounds:
        folder = out / "data" / rid
        for ext in ("parquet", "csv", "json"):
            assert (folder / f"verdicts.{ext}").is_file()
        verdicts = json.loads((folder / "verdicts.json").read_text())
        assert verdicts and {v["round_id"] for v in verdicts} == {rid}
    source = (out / "data.html").read_text()
    hrefs = re.findall(r'href="(data/[^"]*)"', source)
    assert hrefs and not any("&" in h for h in hrefs)  # plain paths, no entities
    page = Page(source).plain
    assert "comparisons" in page and "ci_low" in page  # the schema
    assert "duckdb_" not in page and "sqlite_" not in page  # only the database's own tables


def test_rules_page_reads_the_policy(built: tuple[Path, Path]) -> None:
    _, out = built
    plain = Page((out / "rules.html").read_text()).plain
    assert "98.0% of main" in plain
    assert "verdict.tiers.XL" in plain and "0.18" in plain and "≥ 0.93" in plain


def test_same_database_same_files(tmp_path: Path) -> None:
    def digest(folder: Path) -> dict[str, str]:
        return {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    db = synthetic.generate(tmp_path / "d.duckdb", prs=12, rounds=2, aa_rounds=1)
    build_site(db, tmp_path / "a", log=lambda _m: None)
    build_site(db, tmp_path / "b", log=lambda _m: None)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        build, ["--db", str(tmp_path / "none.duckdb"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1 and "no database" in result.output


def test_refuses_to_build_into_the_generator_folder(small_db: Path) -> None:
    import sitegen

    site_dir = Path(sitegen.__file__).resolve().parent.parent
    result = CliRunner().invoke(build, ["--db", str(small_db), "--out", str(site_dir / "out")])
    assert result.exit_code == 1 and "refusing" in result.output
    assert not (site_dir / "out").exists()


def test_page_text_unescaped_once(built: tuple[Path, Path]) -> None:
    """Escaping happens once: no '&amp;#' double escapes anywhere."""
    _, out = built
    for path in pages(out):
        assert "&amp;#" not in path.read_text(), path


def test_refuses_to_wipe_a_folder_that_is_not_a_site(small_db: Path, tmp_path: Path) -> None:
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    result = CliRunner().invoke(build, ["--db", str(small_db), "--out", str(precious)])
    assert result.exit_code == 1 and "refusing to replace" in result.output
    assert (precious / "thesis.tex").read_text() == "years of work"


def test_unexpected_rows_still_build(tmp_path: Path) -> None:
    """Labels, axes and rounds the site does not know are shown as text, never break a page."""
    db = synthetic.generate(tmp_path / "odd.duckdb", prs=9, rounds=2)
    con = duckdb.connect(str(db))
    con.execute("UPDATE verdicts SET label = 'weird<b>' WHERE pr = 101")
    con.execute("DELETE FROM verdicts WHERE pr = 102")
    con.execute("UPDATE comparisons SET axis = 'bogus<i>' WHERE pr = 103 AND axis = 'decode@128'")
    con.execute(
        "INSERT INTO prs SELECT 'no-such-round', pr, title, author, labels, targets, source, "
        "branch, expect FROM prs WHERE pr = 104 LIMIT 1"
    )
    con.close()
    out = tmp_path / "out"
    build_site(db, out, log=lambda _m: None)
    for pr in (101, 102, 103, 104):
        page = (out / "pr" / f"{pr}.html").read_text()
        assert "<b>" not in page and "<i>" not in page
    assert "pending" in Page((out / "pr" / "102.html").read_text()).plain
    assert "no-such-round" in Page((out / "pr" / "104.html").read_text()).plain
    test_links_are_relative_and_resolve((tmp_path, out))
    # the comment and `show` too (collector/report/page_model.py): the odd axis shown as stored
    odd = [ev for (_, pr), ev in Readout.load(db).evaluations.items() if pr == 103]
    assert len(odd) == 2 and all("| – | bogus&lt;i&gt; |" in render_markdown(ev) for ev in odd)


def test_no_emoji_icons_on_pages(built: tuple[Path, Path]) -> None:
    """Status icons are inline SVGs of the theme: a browser without an emoji font shows them."""
    _, out = built
    for path in pages(out):
        body = path.read_text()
        assert not any(e in body for e in ("✅", "❌", "⚠️", "⏭️", "🏁")), path


def test_author_pages_and_find_index(built: tuple[Path, Path], small_db: Path) -> None:
    """A page per author (hostile names escaped, file names safe), linked from the leaderboard
    and PR pages; the find-a-PR index lists every PR with its author."""
    _, out = built
    con = duckdb.connect(str(small_db), read_only=True)
    authors = {a for (a,) in con.execute("SELECT DISTINCT author FROM prs").fetchall()}
    prs = {p for (p,) in con.execute("SELECT DISTINCT pr FROM prs").fetchall()}
    con.close()
    files = sorted((out / "authors").glob("*.html"))
    assert len(files) == len(authors)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+\.html", f.name) for f in files)
    index = (out / "index.html").read_text()
    assert 'href="authors/' in index
    some_pr = sorted((out / "pr").glob("*.html"))[0].read_text()
    assert 'href="../authors/' in some_pr
    for f in files:
        body = f.read_text()
        assert "<script>alert" not in body and "onerror=alert" not in body.replace(" ", "")
    js = (out / "assets" / "find-index.js").read_text()
    entries = json.loads(js[len("window.SB_FIND = ") : -2])
    assert {e["pr"] for e in entries} == prs and "<" not in js
