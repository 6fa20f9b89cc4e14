"""The store: versioned schema (migrate older, refuse newer), one writer, transactions."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from collector.store import SCHEMA_VERSION, StoreError, open_store


def test_fresh_database_has_every_table(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.duckdb") as s:
        tables = {r[0] for r in s.query("SELECT table_name FROM information_schema.tables")}
        assert {
            "rounds",
            "prs",
            "candidates",
            "sessions",
            "samples",
            "score_dumps",
            "accuracy",
            "prefill_checks",
            "comparisons",
            "gates",
            "verdicts",
            "strikes",
        } <= tables
        assert s.query("SELECT value FROM schema_meta WHERE key = 'version'") == [
            (str(SCHEMA_VERSION),)
        ]


def test_newer_schema_refused(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    open_store(db).close()
    con = duckdb.connect(str(db))
    con.execute("UPDATE schema_meta SET value = '99' WHERE key = 'version'")
    con.close()
    with pytest.raises(StoreError, match="schema version 99, newer than this sparkboard's"):
        open_store(db)


def test_foreign_database_refused(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE stuff (x INT)")
    con.close()
    with pytest.raises(StoreError, match="not a sparkboard database"):
        open_store(db)


def test_version_1_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    open_store(db).close()
    con = duckdb.connect(str(db))  # turn it back into a version 1 database
    con.execute("DROP TABLE score_dumps")
    con.execute("ALTER TABLE sessions DROP COLUMN attempts")
    con.execute("ALTER TABLE comparisons DROP COLUMN n_main")
    con.execute("ALTER TABLE comparisons DROP COLUMN n_pr")
    con.execute("ALTER TABLE sessions DROP COLUMN seed")
    con.execute("UPDATE schema_meta SET value = '1' WHERE key = 'version'")
    con.close()
    with pytest.raises(StoreError, match="open it once for writing"):
        open_store(db, read_only=True)
    with open_store(db) as s:
        assert s.query("SELECT value FROM schema_meta") == [(str(SCHEMA_VERSION),)]
        cols = {
            r[0]
            for r in s.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'sessions'"
            )
        }
        assert {"attempts", "seed"} <= cols
        assert s.query("SELECT count(*) FROM score_dumps") == [(0,)]


def test_second_writer_refused_with_clear_message(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    open_store(db).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from collector.store import open_store; s = open_store({str(db)!r}); print('held', flush=True); "
            "import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=r"in use by process \d+ .*only one collector"):
            open_store(db)
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    open_store(db).close()  # free again once the first one is gone


def test_transaction_rolls_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.duckdb") as s:
        with pytest.raises(RuntimeError), s.transaction() as con:
            con.execute("INSERT INTO strikes VALUES (1, 'c', 'k', 'r', NULL)")
            raise RuntimeError("interrupted")
        assert s.query("SELECT count(*) FROM strikes") == [(0,)]


def test_version_3_is_migrated_with_shard_zero(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    open_store(db).close()
    con = duckdb.connect(str(db))  # turn it back into a version 3 database with one session
    for col in ("shard", "gpu_index", "gpu_uuid", "host"):
        con.execute(f"ALTER TABLE sessions DROP COLUMN {col}")
    con.execute("ALTER TABLE rounds DROP COLUMN shards")
    con.execute(
        "INSERT INTO sessions (session_id, round_id, side, pr, slot, kind, model, commit, "
        "started_at, wall_s, status, fault) VALUES "
        "('r/main/0/0/sweep/tiny', 'r', 'main', 0, 0, 'sweep', 'tiny', 'c', now(), 1.0, 'ok', 'none')"
    )
    con.execute("UPDATE schema_meta SET value = '3' WHERE key = 'version'")
    con.close()
    with open_store(db) as s:
        assert s.query("SELECT shard, gpu_index, gpu_uuid, host FROM sessions") == [
            (0, None, None, None)
        ]
        assert s.query("SELECT value FROM schema_meta") == [(str(SCHEMA_VERSION),)]


def test_a_round_stored_by_an_older_collector_is_judged_as_its_pages_read_it(
    tmp_path: Path,
) -> None:
    """A stored policy that lacks fields an older collector did not write (the harness, the
    timeouts) is read back once, the same way for `sparkboard verdict` as for every page: the
    default policy fills those alone, and the round is judged as before."""
    import json

    from synthetic_round import generate

    from collector.judge.verdict import decide_round
    from collector.store.readout import stored_policy
    from collector.store.writer import set_round_policy

    db = generate(tmp_path / "old.duckdb", prs=6, rounds=1)
    with open_store(db) as s:
        (round_id, raw, profile), *_ = s.query(
            "SELECT round_id, policy_json, profile FROM rounds ORDER BY created_at"
        )
        before = [(v.pr, v.label) for v in decide_round(s, round_id)]
        old = json.loads(raw)
        del old["harness"]
        old["profile"].pop("timeouts")
        set_round_policy(s, round_id, json.dumps(old))
        assert stored_policy(json.dumps(old), profile) is not None
        assert [(v.pr, v.label) for v in decide_round(s, round_id)] == before
