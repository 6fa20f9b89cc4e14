"""The synthetic-round generator (tests/support/synthetic_round.py): the store's schema, verdicts
from collector.judge.verdict for every PR, each planted case present, deterministic, and a site builds
from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
import synthetic_round
from click.testing import CliRunner
from sitegen.cli import build

from collector.judge.verdict import decide_round
from collector.manifest import round_kind
from collector.store import SCHEMA_VERSION, open_store

TABLES = ["rounds", "prs", "candidates", "sessions", "samples", "score_dumps", "prefill_checks",
          "comparisons", "gates", "verdicts", "accuracy", "strikes"]  # fmt: skip


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "s.duckdb"
    return synthetic_round.generate(path, prs=12, rounds=2, aa_rounds=1)


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_schema_version_is_the_stores(db: Path) -> None:
    assert rows(db, "SELECT value FROM schema_meta WHERE key = 'version'") == [
        (str(SCHEMA_VERSION),)
    ]


def test_every_pr_has_the_verdict_the_rules_give(db: Path, tmp_path: Path) -> None:
    prs = rows(db, "SELECT round_id, pr FROM prs ORDER BY ALL")
    stored = rows(db, "SELECT round_id, pr, label, merge_first FROM verdicts ORDER BY ALL")
    assert [r[:2] for r in stored] == prs
    again = tmp_path / "again.duckdb"
    shutil.copy(db, again)
    with open_store(again) as store:
        store.con.execute("DELETE FROM strikes")  # decide_round writes them: judge afresh, in order
        round_ids = [r[0] for r in store.query("SELECT round_id FROM rounds ORDER BY created_at")]
        judged = {
            (rid, v.pr): (v.label, v.merge_first)
            for rid in round_ids
            for v in decide_round(store, rid)
        }
    assert {(r[0], r[1]): (r[2], r[3]) for r in stored} == judged


def test_each_planted_case_is_there(db: Path) -> None:
    verdicts = rows(db, "SELECT label, reason FROM verdicts")
    labels = {label for label, _ in verdicts}
    assert {"none", "REJECT", "pending", "needs-rebase", "harness-touched"} <= labels
    assert labels & {"XS", "S", "M", "L", "XL"}
    reasons = " ".join(reason for _, reason in verdicts)
    for why in ("below the 98% floor", "accuracy vs main broke", "infrastructure",
                "strike 1 of 2", "in 2 rounds at this commit"):  # fmt: skip
        assert why in reasons, why
    assert rows(db, "SELECT count(*) FROM verdicts WHERE merge_first")[0][0] >= 1
    assert rows(db, "SELECT count(DISTINCT round_id) FROM strikes")[0][0] == 2
    kinds = [round_kind(m) for (m,) in rows(db, "SELECT manifest_toml FROM rounds")]
    assert sorted(kinds) == ["aa", "round", "round"]
    assert rows(db, "SELECT count(*) FROM sessions WHERE wall_s <= 0") == [(0,)]
    # a PR measured in several rounds, at several commits
    assert rows(db, "SELECT max(n) FROM (SELECT count(DISTINCT pr_commit) n FROM candidates "
                    "GROUP BY pr)")[0][0] >= 2  # fmt: skip
    titles = " ".join(t for (t,) in rows(db, "SELECT title FROM prs"))
    assert sum(h in titles for h in synthetic_round.HOSTILE) >= 4


def test_same_seed_same_database(db: Path, tmp_path: Path) -> None:
    other = synthetic_round.generate(tmp_path / "o.duckdb", prs=12, rounds=2, aa_rounds=1)
    for table in TABLES:
        sql = f"SELECT * FROM {table} ORDER BY ALL"
        assert rows(db, sql) == rows(other, sql), table


def test_the_site_builds_from_it(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(build, ["--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for pr in (n for (n,) in rows(db, "SELECT DISTINCT pr FROM prs")):
        assert (out / "pr" / f"{pr}.html").is_file()
    assert (out / "rules.html").is_file() and (out / "index.html").is_file()
