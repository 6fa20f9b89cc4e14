"""The cost of a round: device minutes per PR from sessions.wall_s (own sessions plus an even
share of main's, of its own shard's main in a sharded round), and where the time goes; the
`sparkboard cost` command."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.store import open_store
from collector.store.cost import STEPS, round_cost, session_steps, steps_by_kind

# (side, pr, kind, wall_s): main 3 sweeps of 60 s + 1 score of 120 s = 300 s; PR 7 and PR 8
# measured, PR 9 never ran (needs-rebase).
SESSIONS = [
    ("main", 0, "sweep", 60.0),
    ("main", 0, "sweep", 60.0),
    ("main", 0, "sweep", 60.0),
    ("main", 0, "score", 120.0),
    ("pr", 7, "sweep", 30.0),
    ("pr", 7, "sweep", 90.0),
    ("pr", 7, "guard", 12.0),
    ("pr", 8, "concurrent", 240.0),
]


def rows(round_id: str = "r1") -> list[dict]:
    return [
        {"round_id": round_id, "side": s, "pr": p, "kind": k, "wall_s": w}
        for s, p, k, w in SESSIONS
    ]


def test_each_pr_pays_its_sessions_and_an_even_share_of_main() -> None:
    c = round_cost("r1", rows() + rows("other"))
    assert c.main_s == 300.0 and c.pr_s == 372.0 and c.total_s == 672.0
    assert sorted(c.prs) == [7, 8]  # 9 never ran: no cost, no share
    assert c.prs[7].own_s == 132.0 and c.prs[7].main_share_s == 150.0
    assert c.prs[7].total_s == 282.0 and c.prs[8].total_s == 240.0 + 150.0
    assert c.prs[7].by_kind() == {"sweep": 120.0 + 90.0, "score": 60.0, "guard": 12.0}
    assert c.prs[8].by_kind() == {"sweep": 90.0, "concurrent": 240.0, "score": 60.0}
    # main's time is shared out exactly: the PRs' totals add up to the round's
    assert sum(p.total_s for p in c.prs.values()) == pytest.approx(c.total_s)
    assert c.per_pr_s == 336.0
    assert c.main_by_kind == {"sweep": 180.0, "score": 120.0}
    assert c.pr_by_kind == {"sweep": 120.0, "concurrent": 240.0, "guard": 12.0}


def test_a_round_without_measured_prs_keeps_mains_time_unshared() -> None:
    c = round_cost("r1", [r for r in rows() if r["side"] == "main"])
    assert c.prs == {} and c.per_pr_s is None and c.main_s == 300.0


def test_pre_aggregated_rows_give_the_same_cost() -> None:
    agg: dict[tuple, dict] = {}
    for r in rows():
        key = (r["side"], r["pr"], r["kind"])
        a = agg.setdefault(key, {**r, "wall_s": 0.0, "n": 0})
        a["wall_s"] += r["wall_s"]
        a["n"] += 1
    c, d = round_cost("r1", rows()), round_cost("r1", agg.values())
    assert c.to_json() == d.to_json()
    assert d.main_sessions == 4 and d.prs[7].sessions == 3


def test_one_shard_gives_exactly_the_unsharded_cost() -> None:
    on_shard_0 = [{**r, "shard": 0} for r in rows()]
    assert round_cost("r1", on_shard_0).to_json() == round_cost("r1", rows()).to_json()


def test_a_sharded_round_shares_each_shards_main_among_its_prs() -> None:
    # shard 0: main's 3 sweeps (180 s), PRs 7 and 8; shard 1: main's score (120 s), PR 10
    sharded = [{**r, "shard": 1 if r["kind"] == "score" else 0} for r in rows()]
    sharded.append({"round_id": "r1", "side": "pr", "pr": 10, "kind": "sweep", "wall_s": 6.0,
                    "shard": 1})  # fmt: skip
    c = round_cost("r1", sharded)
    assert {pr: p.shard for pr, p in c.prs.items()} == {7: 0, 8: 0, 10: 1}
    assert c.prs[7].main_share_by_kind == c.prs[8].main_share_by_kind == {"sweep": 90.0}
    assert c.prs[10].main_share_by_kind == {"score": 120.0}
    assert c.prs[10].total_s == 126.0 and c.prs[7].total_s == 132.0 + 90.0
    assert c.main_by_kind == {"sweep": 180.0, "score": 120.0} and c.main_sessions == 4
    assert sum(p.total_s for p in c.prs.values()) == pytest.approx(c.total_s)
    # main of a shard whose PRs were never measured stays unshared
    alone = [{**r, "shard": 2} if r["side"] == "main" and r["kind"] == "score" else r
             for r in sharded]  # fmt: skip
    c = round_cost("r1", alone)
    assert c.prs[10].main_share_s == 0.0 and c.prs[7].main_share_s == 90.0


PHASES = {
    "engine_loaded": 2.0,
    "warmed": 3.5,
    "measured": 8.0,
    "engine_stopped": 8.5,
    "verified": 13.5,
}


def test_a_sessions_phases_become_steps_that_add_up_to_its_wall_time() -> None:
    steps = session_steps(PHASES, 15.0)
    assert steps == dict(zip(STEPS, [2.0, 1.5, 4.5, 0.5, 5.0, 1.5], strict=True))
    assert sum(steps.values()) == 15.0
    assert session_steps({**PHASES, "warmed": 9.0}, 15.0) is None  # out of order
    assert session_steps({k: v for k, v in PHASES.items() if k != "warmed"}, 15.0) is None
    assert session_steps(PHASES, 10.0) is None  # ends after the session did
    assert session_steps({**PHASES, "measured": "soon"}, 15.0) is None
    assert session_steps({**PHASES, "measured": float("nan")}, 15.0) is None


def test_steps_are_medians_per_kind_over_sessions_that_recorded_phases() -> None:
    later = {k: v + 1.0 for k, v in PHASES.items()}
    rows = [
        {"kind": "sweep", "wall_s": 15.0, "phases": json.dumps(PHASES)},
        {"kind": "sweep", "wall_s": 16.0, "phases": later},
        {"kind": "sweep", "wall_s": 99.0, "phases": json.dumps(PHASES)},
        {"kind": "score", "wall_s": 7.0, "phases": None},  # no timing parent: no phases
        {"kind": "concurrent", "wall_s": 9.0, "phases": "{not json"},
    ]
    got = steps_by_kind(rows)
    assert list(got) == ["sweep"]
    assert got["sweep"]["start and load"] == 2.0 and got["sweep"]["outside"] == 1.5


def make_db(path: Path) -> Path:
    with open_store(path) as store, store.transaction() as con:
        con.execute(
            "INSERT INTO rounds (round_id, created_at, engine_repo, base_ref, main_commit, "
            "profile, policy_json, manifest_toml) VALUES ('r1', ?, '.', 'main', 'abc', 'gpu', "
            "'{}', 'round = \"r1\"')",
            [datetime(2026, 11, 30, 9)],
        )
        for i, (side, pr, kind, wall) in enumerate(SESSIONS):
            # the sweeps' documents carry the harness's phases; the rest have none
            doc = json.dumps({"measured": {"phases": PHASES}}) if kind == "sweep" else None
            con.execute(
                "INSERT INTO sessions (session_id, round_id, side, pr, slot, kind, model, commit, "
                "started_at, wall_s, status, fault, document) VALUES (?, 'r1', ?, ?, ?, ?, "
                "'tiny', 'c', ?, ?, 'ok', 'none', ?)",
                [f"r1/{i}", side, pr, i, kind, datetime(2026, 11, 30, 9, i), wall, doc],
            )
    return path


def test_cost_command_prints_minutes_and_json(tmp_path: Path) -> None:
    db = make_db(tmp_path / "c.duckdb")
    r = CliRunner().invoke(main, ["cost", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "round r1: 11.2 device minutes, 2 PRs measured, 5.6 min per PR" in r.output
    assert "main 5.0 min over 4 sessions" in r.output
    line7 = next(ln for ln in r.output.splitlines() if ln.startswith("#7"))
    assert line7.split()[:4] == ["#7", "4.7", "2.2", "2.5"]  # total, own, main share
    r = CliRunner().invoke(main, ["cost", "--db", str(db), "--round", "r1", "--json"])
    data = json.loads(r.output)
    assert data["per_pr"][1]["pr"] == 8 and data["per_pr"][1]["total_min"] == 6.5
    assert data["prs_by_kind_min"]["concurrent"] == 4.0
    # inside the sweeps (main's three of 60 s, PR 7's of 30 and 90 s): median outside 46.5 s
    assert data["session_steps_median_s"]["sweep"]["outside"] == 60.0 - 13.5
    assert list(data["session_steps_median_s"]) == ["sweep"]
    r = CliRunner().invoke(main, ["cost", "--db", str(db)])
    assert "Inside a speed session (median seconds" in r.output
    sweep_row = next(ln for ln in r.output.splitlines() if ln.startswith("sweep") and "46.5" in ln)
    assert sweep_row.split()[1:4] == ["2.0", "1.5", "4.5"]


def test_cost_command_errors_are_one_line(tmp_path: Path) -> None:
    db = make_db(tmp_path / "c.duckdb")
    r = CliRunner().invoke(main, ["cost", "--db", str(db), "--round", "nope"])
    assert r.exit_code == 1 and "no round 'nope'" in r.output
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["cost", "--help"])
    assert r.exit_code == 0 and "sessions.wall_s" in r.output
