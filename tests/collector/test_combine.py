"""Merging rounds from several databases: every row once, a round never twice."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.judge.verdict import adopt_policy, decide_round
from collector.policy import default_policy_path, load_policy
from collector.store import StoreError, open_store
from collector.store.combine import combine_rounds


def _db(path: Path, round_id: str, n_samples: int) -> Path:
    with open_store(path) as s, s.transaction() as con:
        con.execute(
            "INSERT INTO rounds (round_id, created_at, engine_repo, base_ref, main_commit, profile,"
            " policy_json, manifest_toml) VALUES (?, ?, '.', 'HEAD', 'abc', 'gpu', ?, '')",
            [round_id, datetime.now(UTC), json.dumps({"x": 1})],
        )
        for i in range(n_samples):
            con.execute(
                "INSERT INTO samples VALUES (?, ?, 'main', 0, 'tiny', 'decode@128', ?, ?)",
                [f"{round_id}/s", round_id, i, 100.0 + i],
            )
    return path


def _count(path: Path, table: str) -> int:
    with open_store(path, read_only=True) as s:
        return s.query(f"SELECT count(*) FROM {table}")[0][0]


def test_merge_copies_every_round_once(tmp_path: Path) -> None:
    a = _db(tmp_path / "a.duckdb", "r-a", 3)
    b = _db(tmp_path / "b.duckdb", "r-b", 5)
    dst = tmp_path / "all.duckdb"
    assert combine_rounds(dst, [a, b]) == ["r-a", "r-b"]
    assert _count(dst, "rounds") == 2 and _count(dst, "samples") == 8
    with open_store(dst, read_only=True) as s:
        got = s.query("SELECT round_id, sum(value) FROM samples GROUP BY 1 ORDER BY 1")
    assert got == [("r-a", 303.0), ("r-b", 510.0)]
    # the same round again is refused, and nothing is half-copied
    with pytest.raises(StoreError, match="round r-a is already in"):
        combine_rounds(dst, [a])
    assert _count(dst, "samples") == 8


def test_merge_refuses_itself(tmp_path: Path) -> None:
    a = _db(tmp_path / "a.duckdb", "r-a", 1)
    with pytest.raises(StoreError, match="is the destination itself"):
        combine_rounds(a, [a])


def test_a_published_database_leaves_the_dumps_out_and_keeps_its_verdicts(tmp_path: Path) -> None:
    a = _db(tmp_path / "a.duckdb", "r-a", 2)
    with open_store(a) as s, s.transaction() as con:
        con.execute(
            "INSERT INTO score_dumps VALUES ('r-a/s', 'r-a', 'main', 0, 'tiny', 1, ?)",
            [json.dumps({"logits": [1, 2, 3]})],
        )
    pub = tmp_path / "pub.duckdb"
    res = CliRunner().invoke(main, ["combine", str(a), "--into", str(pub), "--without-dumps"])
    assert res.exit_code == 0, res.output
    assert "added r-a" in res.output
    assert _count(pub, "score_dumps") == 0 and _count(pub, "samples") == 2
    assert _count(a, "score_dumps") == 1  # the source keeps them
    with open_store(pub) as s, pytest.raises(LookupError, match="published without score dumps"):
        decide_round(s, "r-a")
    res = CliRunner().invoke(main, ["verdict", "--db", str(pub), "--round", "r-a"])
    assert res.exit_code != 0 and "stand as stored" in res.output
    # nor is it given another policy: its stored policy is the one its verdicts were made under
    with open_store(pub) as s:
        before = s.query("SELECT policy_json FROM rounds WHERE round_id = 'r-a'")
    args = ["verdict", "--db", str(pub), "--round", "r-a", "--policy", str(default_policy_path())]
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and "stand as stored" in res.output
    with open_store(pub) as s:
        assert s.query("SELECT policy_json FROM rounds WHERE round_id = 'r-a'") == before
    # a round collected into a copy of the published file later (make demo) is judged as usual
    b = _db(tmp_path / "b.duckdb", "r-b", 1)
    combine_rounds(pub, [b])
    with open_store(pub) as s:
        assert s.query("SELECT key FROM schema_meta WHERE key LIKE 'score_dumps%'") == [
            ("score_dumps_left_out:r-a",)
        ]


def test_a_collected_round_adopts_a_recalibrated_policy(tmp_path: Path) -> None:
    """`verdict --policy` (adopt_policy): the round then records the policy it is judged under."""
    a = _db(tmp_path / "a.duckdb", "r-a", 1)
    f = tmp_path / "p.toml"
    f.write_text('extends = "default"\n[profiles.gpu]\nmin_noise = 0.05\n')
    with open_store(a) as s:
        adopt_policy(s, "r-a", load_policy(f))
        (pj,) = s.query("SELECT policy_json FROM rounds WHERE round_id = 'r-a'")[0]
        with pytest.raises(LookupError, match="no round 'r-b'"):
            adopt_policy(s, "r-b", load_policy(f))
    assert json.loads(pj)["profile"]["min_noise"] == 0.05
    assert json.loads(pj)["profile_name"] == "gpu"
