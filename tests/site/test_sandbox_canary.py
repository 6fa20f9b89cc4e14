"""What sealed a round's PR code and the box's canary over it, on the site.

A round collected with `--unsandboxed` (rounds.sandbox 'none') says so at the head of every page
of it: its round page, its board on the home page, the PR pages of its PRs (at the top and in
that round's section), and the rounds index; a sealed round's page names what sealed it. A
round's page plots the canary of its speed sessions (sessions.canary_before_s / _after_s), in
the order they started. Rounds from before either column show neither, and a database whose
schema predates them still reads. Rendered without MkDocs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
import synthetic_round as synthetic
from sitegen import pages, queries

from collector.store.readout import Readout

BARE = "2026-06-01-gpu"  # the synthetic database's first PR round: collected --unsandboxed
SEALED = "2026-06-04-gpu"
WARNING = 'class="admonition danger sb-unsandboxed"'
TITLE = "PR code ran unsandboxed (--unsandboxed)"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic.generate(
        tmp_path_factory.mktemp("sandbox") / "s.duckdb", prs=8, rounds=2, aa_rounds=1
    )


@pytest.fixture(scope="module")
def site(db: Path) -> pages.Site:
    return pages.Site(queries.load(db))


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_the_round_reads_what_sealed_it(site: pages.Site) -> None:
    seals = {r.round_id: r.sandbox for r in site.rounds}
    assert seals[BARE] == "none" and site.round_by_id[BARE].unsandboxed
    assert seals[SEALED] == synthetic.SANDBOX and not site.round_by_id[SEALED].unsandboxed
    assert all(s == synthetic.SANDBOX for rid, s in seals.items() if rid != BARE)


def test_unsandboxed_round_page_warns_in_its_header(site: pages.Site) -> None:
    page = site.round_page(site.round_by_id[BARE])
    assert page.count(WARNING) == 1 and TITLE in page
    # in the header: right under the title, before the round's table and everything else
    assert page.index("# Round") < page.index(WARNING) < page.index("| round | main baseline")
    assert "with the collector's own rights" in page and "../rules.html#boundary" in page
    assert "PR code sealed by" not in page


def test_sealed_round_page_names_its_sandbox(site: pages.Site) -> None:
    page = site.round_page(site.round_by_id[SEALED])
    assert WARNING not in page and "unsandboxed" not in page
    assert f"PR code sealed by {synthetic.SANDBOX} (" in page


def test_pr_pages_of_an_unsandboxed_round_warn(site: pages.Site) -> None:
    bare = {ev.pr for ev in site.data.by_round[BARE]}
    sealed_only = {ev.pr for ev in site.data.by_round[SEALED]} - bare
    assert bare and sealed_only
    for pr in bare:
        page = site.pr_page(pr)
        # at the top of the page, and in that round's section
        top = page.index(WARNING)
        assert page.index(f"# #{pr} ") < top < page.index("## History"), pr
        section = page.split(f"{{ #round-{BARE} }}")[1].split("\n## Round ")[0]
        assert section.count(WARNING) == 1, pr
        assert page.count(WARNING) == 2 and f">{BARE}</a>" in page[top:]
    for pr in sealed_only:
        assert WARNING not in site.pr_page(pr), pr


def test_home_board_and_rounds_index_warn(db: Path, tmp_path: Path) -> None:
    site = pages.Site(queries.load(db))
    index = site.rounds_index()
    bare = next(ln for ln in index.splitlines() if f">{BARE}</a>" in ln)
    sealed = next(ln for ln in index.splitlines() if f">{SEALED}</a>" in ln)
    assert "**unsandboxed**" in bare and f"| {synthetic.SANDBOX} |" in sealed
    assert WARNING not in site.home_page(headline_svg=False)  # the board is the sealed round
    # the newest round collected --unsandboxed too: its board on the home page says so
    copy = tmp_path / "bare.duckdb"
    copy.write_bytes(db.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("UPDATE rounds SET sandbox = 'none' WHERE round_id = ?", [SEALED])
    con.close()
    home = pages.Site(queries.load(copy)).home_page(headline_svg=False)
    board = home.split(f"round {SEALED} {{ #board-")[1]
    assert board.index(WARNING) < board.index("| round | main baseline")


def test_round_from_before_sandboxes_says_nothing_of_them(db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "old.duckdb"
    copy.write_bytes(db.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("UPDATE rounds SET sandbox = NULL")
    con.close()
    site = pages.Site(queries.load(copy))
    for rnd in site.rounds:
        page = site.round_page(rnd)
        assert WARNING not in page and "sealed by" not in page
    assert "**unsandboxed**" not in site.rounds_index()


def canary_spec(page: str) -> dict:
    figure = re.search(
        r'<figure class="sb-chart" id="chart-canary">.*?<script type="application/json">(.*?)'
        r"</script>",
        page,
        re.S,
    )
    assert figure, "no canary chart"
    return json.loads(figure.group(1))


def test_round_page_plots_the_canary(db: Path, site: pages.Site) -> None:
    page = site.round_page(site.round_by_id[SEALED])
    canary = page[page.index("## Canary") : page.index("## Cost")]
    assert (
        "The canary is a fixed workload timed right before and after each speed session with no "
        "engine\nrunning; a session whose canary moved more than the profile's canary_limit"
    ) in canary
    assert "was measured again." in canary
    stored = rows(
        db,
        "SELECT kind, pr, canary_before_s, canary_after_s FROM sessions WHERE round_id = ? "
        "AND canary_before_s IS NOT NULL ORDER BY started_at, slot, session_id",
        [SEALED],
    )
    # every speed session (the gpu profile measures a target's concurrent decode in its sweep)
    assert stored and {k for k, *_ in stored} == {"sweep", "guard"}
    spec = canary_spec(canary)
    data = spec["datasets"]["rows"]
    assert len(data) == 2 * len(stored)
    for n, (kind, pr, before, after) in enumerate(stored, start=1):
        mine = {r["moment"]: r for r in data if r["n"] == n}
        assert mine["before"]["ms"] == pytest.approx(before * 1e3, abs=1e-3)
        assert mine["after"]["ms"] == pytest.approx(after * 1e3, abs=1e-3)
        assert mine["before"]["session"].startswith(f"#{pr} {kind} ")
    whens = [r["when"] for r in data if r["moment"] == "before"]
    assert whens == sorted(whens)  # in the order the sessions started
    assert f"{len(stored)} speed sessions, the canary between" in canary
    largest = max(max(a / b, b / a) - 1 for *_, b, a in stored)
    assert f"the largest move within one session {largest * 100:.1f}%." in canary
    text = json.dumps(spec)
    assert "__AFTER__" not in text and "http" not in text
    assert spec["encoding"]["y"]["field"] == "ms" and spec["encoding"]["x"]["field"] == "n"


def test_round_without_a_canary_says_so(db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "nocanary.duckdb"
    copy.write_bytes(db.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("UPDATE sessions SET canary_before_s = NULL, canary_after_s = NULL")
    con.close()
    site = pages.Site(queries.load(copy))
    page = site.round_page(site.round_by_id[SEALED])
    assert "chart-canary" not in page and "No canary was recorded in this round" in page


def test_a_database_before_these_columns_still_reads(db: Path, tmp_path: Path) -> None:
    """A schema-4 database (no rounds.sandbox, no canary columns, an A/A round whose PR sessions
    hold no main samples): no warning, no canary, no measured spread; nothing breaks."""
    copy = tmp_path / "v4.duckdb"
    copy.write_bytes(db.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("ALTER TABLE rounds DROP COLUMN sandbox")
    con.execute("ALTER TABLE sessions DROP COLUMN canary_before_s")
    con.execute("ALTER TABLE sessions DROP COLUMN canary_after_s")
    # the A/A round's PR sessions hold the PR's samples alone (main's were in its own sessions)
    con.execute("DELETE FROM samples WHERE side = 'main' AND round_id LIKE 'aa-%'")
    con.close()
    rd = Readout.load(copy)
    assert rd.canaries == {} and rd.aa_pairs == {}
    assert all(r.sandbox is None for r in rd.rounds)
    site = pages.Site(queries.load(copy))
    for rnd in site.rounds:
        page = site.round_page(rnd)
        assert WARNING not in page and "No canary was recorded" in page
    rules = site.rules_page()
    assert "Largest spread between an A/A PR's paired sessions" not in rules
    row = next(ln for ln in rules.splitlines() if ln.startswith('| <a href="models/'))
    assert row.split(" | ")[-2].strip() == "–"  # measured: nothing paired to spread


def test_aa_pairs_are_the_verdicts_pairs(db: Path, site: pages.Site) -> None:
    """Readout.aa_pairs: per (A/A round, PR, model, axis), both engines' values of each
    repetition of the PR's speed sessions, one pair per (session, rep)."""
    aa = next(r.round_id for r in site.rounds if r.kind == "aa")
    n = rows(
        db,
        "SELECT count(*) FROM samples s JOIN sessions x USING (session_id) "
        "WHERE s.round_id = ? AND x.side = 'pr' AND s.side = 'pr'",
        [aa],
    )[0][0]
    pairs = {k: v for k, v in site.data.aa_pairs.items() if k[0] == aa}
    assert n and sum(len(v) for v in pairs.values()) == n
    assert {k[1] for k in pairs} == {1, 2}
    assert all(k[0].startswith("aa-") for k in site.data.aa_pairs)
    key = next(k for k in pairs if k[3] == "decode@128")
    main = rows(
        db,
        "SELECT x.slot, s.value FROM samples s JOIN sessions x USING (session_id) WHERE "
        "s.round_id = ? AND x.pr = ? AND s.model = ? AND s.axis = ? AND s.side = 'main' "
        "ORDER BY x.slot, s.rep",
        list(key),
    )
    assert [(slot, m) for slot, m, _ in pairs[key]] == main
    assert len({slot for slot, _, _ in pairs[key]}) == synthetic.POLICY.profile.pr_sessions
