"""Round kinds on the site: one leaderboard per (profile, device) on the home page, the gpu
profile first, A/A rounds never a leaderboard but the rules page's calibration; and the cost of
a round (device minutes per PR) on round pages and leaderboards. Rendered without MkDocs."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
import synthetic_round as synthetic
from sitegen import calibration, fmt, pages, queries

from collector.policy import load_policy, resolve
from collector.store.cost import round_cost
from collector.store.readout import Round, pick_round

TABLES = ["prs", "candidates", "verdicts", "comparisons", "gates", "accuracy", "sessions"]
GPU_ROUND = "2026-06-04-gpu"  # the newest synthetic PR round of rounds=2
AA_ROUND = "aa-2026-05-31-gpu"


def add_cpu_round(db: Path, round_id: str = "local-cpu", device: str = "Test <CPU>") -> None:
    """A CPU round a day after the newest gpu round, with that round's PRs and rows."""
    con = duckdb.connect(str(db))
    created = con.execute(
        "SELECT created_at FROM rounds WHERE round_id = ?", [GPU_ROUND]
    ).fetchone()[0]
    con.execute(
        "INSERT INTO rounds SELECT * REPLACE (? AS round_id, 'cpu' AS profile, ? AS device_name, "
        "? AS created_at) FROM rounds WHERE round_id = ?",
        [round_id, device, created + timedelta(days=1), GPU_ROUND],
    )
    for table in TABLES:
        extra = f", '{round_id}/' || session_id AS session_id" if table == "sessions" else ""
        con.execute(
            f"INSERT INTO {table} SELECT * REPLACE (? AS round_id{extra}) FROM {table} "
            "WHERE round_id = ?",
            [round_id, GPU_ROUND],
        )
    con.close()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> pages.Site:
    db = synthetic.generate(
        tmp_path_factory.mktemp("mixed") / "m.duckdb", prs=12, rounds=2, aa_rounds=2
    )
    add_cpu_round(db)
    return pages.Site(queries.load(db))


def _round(created: datetime, **r: str) -> Round:
    return Round(
        **r,
        created_at=created,
        finished_at=None,
        main_commit=None,
        base_ref=None,
        driver=None,
        policy=None,
        policy_raw={},
        row={},
    )


def test_leaderboard_rounds_newest_per_profile_and_device_gpu_first() -> None:
    t = datetime(2026, 11, 30)
    rounds = [
        {"round_id": "g1", "profile": "gpu", "device_name": "H200", "kind": "round"},
        {"round_id": "c1", "profile": "cpu", "device_name": "EPYC", "kind": "round"},
        {"round_id": "g2", "profile": "gpu", "device_name": "H200", "kind": "round"},
        {"round_id": "aa", "profile": "gpu", "device_name": "H200", "kind": "aa"},
        {"round_id": "c2", "profile": "cpu", "device_name": "Xeon", "kind": "round"},
        {"round_id": "c3", "profile": "cpu", "device_name": "EPYC", "kind": "round"},
    ]
    rounds = [_round(t + timedelta(hours=i), **r) for i, r in enumerate(rounds)]
    assert [r.round_id for r in pages.leaderboard_rounds(rounds)] == ["g2", "c3", "c2"]
    assert pages.leaderboard_rounds([r for r in rounds if r.kind == "aa"]) == []


def test_round_kinds_read_from_the_manifest(mixed: pages.Site) -> None:
    kinds = {r.round_id: r.kind for r in mixed.rounds}
    assert kinds[AA_ROUND] == "aa" and kinds["aa-2026-05-30-gpu"] == "aa"
    assert kinds[GPU_ROUND] == "round" and kinds["local-cpu"] == "round"


def test_home_shows_the_gpu_board_first_and_no_aa_board(mixed: pages.Site) -> None:
    md = mixed.home_page(headline_svg=True)
    heads = re.findall(r"^## (.*)$", md, flags=re.M)
    assert heads[0].startswith(f"NVIDIA H200 · gpu profile: round {GPU_ROUND}")
    assert heads[1].startswith("Test &#60;CPU&#62; · cpu profile: round local-cpu")  # escaped
    assert heads[2] == "Calibration" and len(heads) == 3
    assert md.count("| rank | PR | author |") == 2
    assert md.count("leaderboard-light.svg") == 1  # the headline SVG is the gpu board's
    ids = re.findall(r'<figure class="sb-chart" id="([^"]+)"', md)
    assert len(ids) == 2 and len(set(ids)) == 2
    assert "#board-" in md and f"rounds/{AA_ROUND}.html" in md and "rules.md#calibration" in md


def test_comment_svgs_belong_to_the_first_board(mixed: pages.Site) -> None:
    measured = {ev.pr for ev in mixed.data.by_round[GPU_ROUND] if ev.comparisons}
    assert measured and set(mixed.comment_round) == measured
    assert set(mixed.comment_round.values()) == {GPU_ROUND}
    ev = mixed.data.evaluations[(GPU_ROUND, min(measured))]
    assert mixed.has_comment_svg(ev)
    assert not mixed.has_comment_svg(mixed.data.evaluations[("local-cpu", min(measured))])


def test_aa_rounds_stay_out_of_tiers_and_are_marked(mixed: pages.Site) -> None:
    members = mixed.tier_members()
    seen = {ev.round_id for rows in members.values() for r in rows for ev in r["evs"]}
    assert seen and not any(rid.startswith("aa-") for rid in seen)
    page = mixed.round_page(mixed.round_by_id[AA_ROUND])
    assert "An **A/A round**" in page and "## A/A PRs" in page
    assert "A/A round" not in mixed.round_page(mixed.round_by_id[GPU_ROUND])
    index = mixed.rounds_index()
    assert re.search(rf"{AA_ROUND}</a> \| A/A \|", index)
    assert re.search(rf"{GPU_ROUND}</a> \| PRs \|", index)
    data = mixed.data_page({}, None)
    assert f"### {AA_ROUND} (A/A) {{ #round-{AA_ROUND} }}" in data
    assert f"### {GPU_ROUND} {{ #round-{GPU_ROUND} }}" in data


def calibrated_db(tmp_path: Path) -> Path:
    """One A/A round with known numbers planted in it, and a newer PR round whose policy is the
    gate in force."""
    db = synthetic.generate(tmp_path / "c.duckdb", prs=6, rounds=1, aa_rounds=1)
    con = duckdb.connect(str(db))
    aa = con.execute("SELECT round_id FROM rounds WHERE manifest_toml LIKE '%aa%'").fetchone()[0]
    model = synthetic.MODELS[0]  # PR 1's target
    con.execute(  # every axis quiet (whatever the random rounds drew), then the planted ones
        "UPDATE comparisons SET noise = 0.01, delta = 0.001, tier = 'none', significant = false, "
        "below_floor = false WHERE round_id = ?",
        [aa],
    )
    con.execute(
        "UPDATE comparisons SET noise = 0.0437 WHERE round_id = ? AND model = ? AND axis = 'decode@512'",
        [aa, model],
    )
    con.execute(
        "UPDATE comparisons SET delta = -0.0333, tier = 'XS' WHERE round_id = ? AND model = ? "
        "AND axis = 'prefill@4096' AND pr = 1",
        [aa, model],
    )
    con.execute(
        "UPDATE accuracy SET top1 = 0.9123, kl = 0.0042, ppl_main = 4.0, ppl_pr = 4.1 "
        "WHERE round_id = ? AND pr = 0 AND model = ?",
        [aa, model],
    )
    # PR 1's paired sessions (slots 1 and 3: main's engine beside the PR's) all at 100 tok/s on
    # both sides but the PR's decode@128 of its second session at 110: ratios 1.0 and 1.1, a
    # spread of 10% between its sessions; every other axis of every PR 0
    con.execute("UPDATE samples SET value = 100 WHERE round_id = ?", [aa])
    con.execute(
        "UPDATE samples SET value = 110 WHERE session_id = ? AND axis = 'decode@128' "
        "AND side = 'pr'",
        [f"{aa}/pr/1/3/sweep/{model}"],
    )
    con.execute(
        "UPDATE rounds SET policy_json = json_merge_patch(policy_json, "
        """'{"profile": {"min_noise": 0.015}, "verdict": {"noise_multiplier": 2.0}}') """
        "WHERE round_id NOT LIKE 'aa-%'"
    )
    con.close()
    return db


def test_calibration_shows_the_planted_numbers(tmp_path: Path) -> None:
    site = pages.Site(queries.load(calibrated_db(tmp_path)))
    md = site.rules_page()
    cal = md[md.index("## Calibration") : md.index("## Cost of a round")]
    assert "### gpu profile" in cal
    model = str(pages.text(synthetic.MODELS[0]))
    # the gate in force: the newest round's policy, not the A/A round's
    assert "min_noise 1.5%" in cal and "noise multiplier 2.0" in cal
    assert "min_noise 1.5% (band +3.0%)" in cal  # 1.015 ** 2 - 1
    row = next(
        ln for ln in cal.splitlines() if ln.startswith('| <a href="models/') and f">{model}<" in ln
    )
    cells = [c.strip() for c in row.split(" | ")]
    assert cells[2] == "1.0% / 4.4%"  # decode noise: median / max, not at the floor
    assert cells[4] == "1.0% / ≤1.0%"  # prefill: every axis at the A/A round's min_noise
    assert cells[5] == "-3.3% &#64;4k"  # the largest A/A delta of prefill
    assert "sb-fail" in cells[-1] and "XS prefill@4k #1" in html.unescape(cells[-1])
    # measured from PR 1's pairs, before the floor
    assert cells[-2] == "10.0% decode@128 #1"
    assert f"before any floor: 10.0% ({model} decode@128, #1, round {AA_ROUND})" in cal
    other = next(
        ln
        for ln in cal.splitlines()
        if ln.startswith('| <a href="models/') and f">{pages.text(synthetic.MODELS[1])}<" in ln
    )
    assert other.split(" | ")[-2].strip().startswith("0.0% ")  # PR 2's pairs: all at 100
    assert "Largest noise** any A/A round stored: 4.4%" in cal
    assert f"tier, below the floor or implausible**: 1 {fmt.icon('fail')}" in cal
    acc = next(ln for ln in cal.splitlines() if f">{model}<" in ln and "0.9123" in ln)
    assert "0.9123 · 0.00420 · ×1.0250" in acc and acc.rstrip().endswith(f"| {fmt.icon('fail')} |")
    assert "≥0.93 · ≤0.03 · ≤1.02" in acc


def floored_db(tmp_path: Path) -> tuple[Path, str, str]:
    """calibrated_db with per-axis floors: the A/A round's policy credits prefill@4096 with 20%,
    the gate in force credits prefill@128 and prefill@4096 with 30%. The A/A round stored 20% on
    prefill@4096 (its floor), a -30% delta there and +4% on decode@512 (at min_noise 1.5%, band
    +3.0%)."""
    db = calibrated_db(tmp_path)
    con = duckdb.connect(str(db))
    aa = con.execute("SELECT round_id FROM rounds WHERE round_id LIKE 'aa-%'").fetchone()[0]
    model = synthetic.MODELS[0]
    con.execute(
        "UPDATE rounds SET policy_json = json_merge_patch(policy_json, "
        """'{"profile": {"min_noise_axes": {"prefill@4096": 0.2}}}') WHERE round_id = ?""",
        [aa],
    )
    con.execute(
        "UPDATE rounds SET policy_json = json_merge_patch(policy_json, "
        """'{"profile": {"min_noise_axes": {"prefill@4096": 0.3, "prefill@128": 0.3}}}') """
        "WHERE round_id NOT LIKE 'aa-%'"
    )
    con.execute(
        "UPDATE comparisons SET noise = 0.2 WHERE round_id = ? AND model = ? "
        "AND axis = 'prefill@4096'",
        [aa, model],
    )
    con.execute(
        "UPDATE comparisons SET delta = -0.3, tier = 'none' WHERE round_id = ? AND model = ? "
        "AND axis = 'prefill@4096' AND pr = 1",
        [aa, model],
    )
    con.execute(
        "UPDATE comparisons SET delta = 0.04 WHERE round_id = ? AND model = ? "
        "AND axis = 'decode@512' AND pr = 1",
        [aa, model],
    )
    con.close()
    return db, aa, model


def test_calibration_judges_each_axis_at_its_own_floor(tmp_path: Path) -> None:
    db, aa, model = floored_db(tmp_path)
    md = pages.Site(queries.load(db)).rules_page()
    cal = md[md.index("## Calibration") : md.index("## Cost of a round")]
    # every floor of the gate in force, each with its band: 1.015 ** 2 - 1, 1.3 ** 2 - 1
    floors = "min_noise 1.5% (band +3.0%); prefill@128 and prefill@4096: 30.0% (band +69.0%)"
    assert f"noise floors {floors}," in cal
    # the rules list states the same floors, from the same policy
    assert f"never taken below its floor: {floors}." in md[: md.index("## Tiers")]
    # the largest delta is judged at its own axis's floor, not at min_noise
    assert "**Largest A/A delta**: -30.0% (" in cal
    assert "prefill@4096, #1, round" in cal
    assert "inside the band at prefill@4096's floor 30.0% (+69.0%)." in cal
    # and the largest on an axis at min_noise is not hidden behind it
    assert "**Largest A/A delta on an axis at min_noise**: +4.0% (" in cal
    assert "beyond the band at min_noise 1.5% (+3.0%)." in cal
    # the largest noise, against its axis's floor in force
    assert "stored: 20.0% (" in cal and "not above prefill@4096's floor 30.0% in force." in cal
    row = next(
        ln
        for ln in cal.splitlines()
        if ln.startswith('| <a href="models/') and f">{pages.text(model)}<" in ln
    )
    cells = [c.strip() for c in row.split(" | ")]
    assert cells[4] == "1.0% / ≤20.0%"  # at the A/A round's own floor for prefill@4096
    assert cells[2] == "1.0% / 4.4%"  # decode: above min_noise, no mark


def test_no_per_axis_floors_no_second_delta(tmp_path: Path) -> None:
    md = pages.Site(queries.load(calibrated_db(tmp_path))).rules_page()
    assert "on an axis at min_noise" not in md
    assert "never taken below its floor: min_noise 1.5% (band +3.0%)." in md


def test_noise_floors_are_escaped_and_grouped() -> None:
    pol = resolve(load_policy(), "gpu")
    axes = {"prefill@64": 0.5, "prefill@128": 0.1, "decode@8": 0.1}
    prof = pol.profile.model_copy(update={"min_noise": 0.02, "min_noise_axes": axes})
    rules = pol.verdict.model_copy(update={"noise_multiplier": 1.0})
    out = str(fmt.noise_floors(pol.model_copy(update={"profile": prof, "verdict": rules})))
    assert out == (
        "min_noise 2.0% (band +2.0%); decode@8 and prefill@128: 10.0% (band +10.0%); "
        "prefill@64: 50.0% (band +50.0%)"
    )
    assert str(fmt.noise_floors(None)) == "min_noise –"


def test_unfinished_round_shows_the_device_it_was_timed_on(tmp_path: Path) -> None:
    db = synthetic.generate(tmp_path / "u.duckdb", prs=4, rounds=1, aa_rounds=1)
    con = duckdb.connect(str(db))
    aa = con.execute("SELECT round_id FROM rounds WHERE round_id LIKE 'aa-%'").fetchone()[0]
    con.execute(
        "UPDATE rounds SET finished_at = NULL, device_name = NULL, driver = NULL "
        "WHERE round_id = ?",
        [aa],
    )
    con.execute("UPDATE sessions SET device_name = 'Other', driver = 'd0' WHERE round_id = ?", [aa])
    # the round's device is where it was timed: its first timed session (main's and the PR's
    # engines timed side by side), not a scoring session that ran before it elsewhere (a
    # served engine's tool may run on the CPU)
    con.execute(
        "UPDATE sessions SET device_name = 'Scorer', started_at = started_at - INTERVAL 1 DAY "
        "WHERE round_id = ? AND kind = 'score'",
        [aa],
    )
    first = con.execute(
        "SELECT session_id FROM sessions WHERE round_id = ? "
        "AND kind NOT IN ('score', 'prefill-check') ORDER BY side <> 'main', started_at, slot LIMIT 1",
        [aa],
    ).fetchone()[0]
    con.execute(
        "UPDATE sessions SET device_name = 'First <GPU>', driver = 'drv|1' WHERE session_id = ?",
        [first],
    )
    con.close()
    site = pages.Site(queries.load(db))
    device = "First &#60;GPU&#62;"
    rules = site.rules_page()
    row = next(ln for ln in rules.splitlines() if ln.startswith(f'| <a href="rounds/{aa}.html">'))
    assert f"| {device} |" in row and row.endswith("| unfinished |")
    head = site.round_page(site.round_by_id[aa])
    assert f"| {device} · driver drv&#124;1 |" in head and "| unfinished |" in head
    index = site.rounds_index()
    row = next(ln for ln in index.splitlines() if f"{aa}</a>" in ln)
    assert f"| {device} |" in row and row.endswith("| unfinished |")
    for page in (rules, head, index):
        assert "in progress" not in page and "Other" not in page and "Scorer" not in page


def test_rules_without_aa_rounds_say_so(tmp_path: Path) -> None:
    db = synthetic.generate(tmp_path / "n.duckdb", prs=4, rounds=1)
    md = pages.Site(queries.load(db)).rules_page()
    assert "No A/A round has been recorded yet" in md and "## Cost of a round { #cost }" in md


def test_cost_on_round_pages_and_leaderboards(tmp_path: Path) -> None:
    db = synthetic.generate(tmp_path / "k.duckdb", prs=8, rounds=1)
    con = duckdb.connect(str(db))
    con.execute("UPDATE sessions SET wall_s = CASE WHEN side = 'main' THEN 60 ELSE 30 END")
    rid = con.execute("SELECT round_id FROM rounds").fetchone()[0]
    n_main = con.execute("SELECT count(*) FROM sessions WHERE side = 'main'").fetchone()[0]
    own = dict(
        con.execute("SELECT pr, count(*) FROM sessions WHERE side = 'pr' GROUP BY pr").fetchall()
    )
    con.close()
    site = pages.Site(queries.load(db))
    share = 60 * n_main / len(own)
    expected = {pr: (30 * k + share) / 60 for pr, k in own.items()}
    cost = site.data.costs[rid]
    assert {pr: c.total_s / 60 for pr, c in cost.prs.items()} == pytest.approx(expected)
    page = site.round_page(site.round_by_id[rid])
    for pr, minutes in expected.items():
        assert re.search(rf"\| <a href=\"\.\./pr/{pr}\.html\">#{pr}</a> \| {minutes:.1f} \|", page)
        # the leaderboard's last column
        assert re.search(rf"#{pr}</a> .*\| {minutes:.1f} \|$", page, flags=re.M)
        pr_page = site.pr_page(pr)
        assert f"<td>device time</td><td>{minutes:.1f} min: its own sessions" in pr_page
    total = (60 * n_main + 30 * sum(own.values())) / 60
    assert f"{total:.1f} device minutes in all" in page
    assert f"| **all** | {60 * n_main / 60:.1f} |" in page
    # an unmeasured PR (needs-rebase, harness-touched) has no cost
    unmeasured = [ev for ev in site.data.by_round[rid] if ev.pr not in own]
    for ev in unmeasured:
        assert str(site.pr_cost(ev)) == "–"
    assert round_cost(rid, []).per_pr_s is None


PUBLISHED = Path(__file__).resolve().parents[2] / "data" / "sparkboard.duckdb"


@pytest.mark.skipif(not PUBLISHED.is_file(), reason="no published database")
def test_published_calibration_states_its_floors() -> None:
    """The published database: the gate's per-axis floors with their bands, and every
    unfinished round shown as such with the device its main sessions ran on."""
    con = duckdb.connect(str(PUBLISHED), read_only=True)
    aa_rounds = con.execute(
        "SELECT round_id, finished_at, policy_json FROM rounds WHERE round_id LIKE '%-aa%' "
        "ORDER BY created_at"
    ).fetchall()
    devices = dict(
        con.execute(
            "SELECT round_id, first(device_name ORDER BY started_at, slot, session_id) "
            "FROM sessions WHERE side = 'main' AND device_name IS NOT NULL GROUP BY round_id"
        ).fetchall()
    )
    con.close()
    if not aa_rounds:
        pytest.skip("no A/A round published")
    site = pages.Site(queries.load(PUBLISHED))
    rules = site.rules_page()
    cal = rules[rules.index("## Calibration") : rules.index("## Cost of a round")]
    gate = next(c for c in calibration.profiles(site.data) if c.profile == "gpu")
    for axis, floor in gate.policy.profile.min_noise_axes.items():
        band = (1 + floor) ** gate.policy.verdict.noise_multiplier - 1
        assert re.search(
            rf"{axis}((, | and )[a-z]+@[0-9]+)*: {floor * 100:.1f}% \(band \+{band * 100:.1f}%\)",
            cal,
        )
    for rid, finished, _ in aa_rounds:
        row = next(
            ln for ln in cal.splitlines() if ln.startswith(f'| <a href="rounds/{rid}.html">')
        )
        assert row.endswith("| unfinished |") == (finished is None)
        assert f"| {pages.text(devices[rid])} |" in row
    assert "in progress" not in rules and "in progress" not in site.rounds_index()


def test_default_round_is_the_newest_leaderboard_round(tmp_path: Path) -> None:
    """collector.store.readout.pick_round on a constructed database whose newest round is an A/A
    round: commands default to the newest leaderboard round; --pr N alone to the newest round
    that measured N (a leaderboard round before an A/A one); --round as asked."""
    db = synthetic.generate(tmp_path / "d.duckdb", prs=4, rounds=2, aa_rounds=1)
    con = duckdb.connect(str(db))
    con.execute(
        "UPDATE rounds SET created_at = created_at + INTERVAL 30 DAY WHERE round_id LIKE 'aa-%'"
    )
    aa = con.execute("SELECT round_id FROM rounds WHERE round_id LIKE 'aa-%'").fetchone()[0]
    aa_pr = con.execute("SELECT min(pr) FROM prs WHERE round_id = ?", [aa]).fetchone()[0]
    only_old = con.execute(
        "SELECT min(pr) FROM prs WHERE round_id = '2026-06-01-gpu' AND pr NOT IN "
        "(SELECT pr FROM prs WHERE round_id = ?)",
        [GPU_ROUND],
    ).fetchone()[0]
    con.close()
    con = duckdb.connect(str(db), read_only=True)
    assert pick_round(con) == GPU_ROUND
    assert pick_round(con, pr=aa_pr) == aa
    if only_old is not None:
        assert pick_round(con, pr=only_old) == "2026-06-01-gpu"
    assert pick_round(con, aa) == aa
    con.close()
