"""`sparkboard demo` with a published database: the local round is collected into a copy of
it (the published file is never written) and the site shows both, the GPU board first. The
round itself is faked here (test_demo.py runs the real one); the site is really built."""

from __future__ import annotations

import hashlib
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
import synthetic_round as synthetic
from click.testing import CliRunner

from collector.cli import main
from collector.store import open_store

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "demo.toml"
HEAD = subprocess.run(
    ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
).stdout.strip()
TABLES = ["prs", "candidates", "verdicts", "comparisons", "gates", "accuracy", "sessions"]


def fake_collect(calls: list[Path]):
    """Stands in for collector.run.collect.collect: writes a finished 'demo-cpu' round (the newest
    synthetic gpu round's rows, relabelled as a CPU round a day later) into the database."""

    def collect(manifest: Path, db: Path, **_kw: object) -> int:
        calls.append(Path(db))
        with open_store(db) as store, store.transaction() as con:
            if con.execute("SELECT 1 FROM rounds WHERE round_id = 'demo-cpu'").fetchall():
                return 0  # resumed: the round is finished
            src = con.execute(
                "SELECT round_id, created_at FROM rounds WHERE manifest_toml NOT LIKE '%aa%' "
                "ORDER BY created_at DESC LIMIT 1"
            ).fetchone()
            con.execute(
                "INSERT INTO rounds SELECT * REPLACE ('demo-cpu' AS round_id, 'cpu' AS profile, "
                "'Test CPU' AS device_name, ? AS created_at, ? AS finished_at, "
                "? AS main_commit, ? AS manifest_toml) FROM rounds WHERE round_id = ?",
                [
                    src[1] + timedelta(days=1),
                    src[1] + timedelta(days=1, hours=1),
                    HEAD,
                    DEMO.read_text(encoding="utf-8"),
                    src[0],
                ],
            )
            for table in TABLES:
                extra = ", 'demo-cpu/' || session_id AS session_id" if table == "sessions" else ""
                con.execute(
                    f"INSERT INTO {table} SELECT * REPLACE ('demo-cpu' AS round_id{extra}) "
                    f"FROM {table} WHERE round_id = ?",
                    [src[0]],
                )
        return 0

    return collect


@pytest.fixture
def published(tmp_path: Path) -> Path:
    return synthetic.generate(tmp_path / "published.duckdb", prs=6, rounds=1, aa_rounds=1)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_demo(out: Path, published: Path) -> str:
    args = ["demo", "--out", str(out), "--manifest", str(DEMO), "--published", str(published)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.slow
def test_demo_builds_the_published_rounds_and_the_local_one(
    tmp_path: Path, published: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []
    monkeypatch.setattr("collector.run.collect.collect", fake_collect(calls))
    before = sha(published)
    out = tmp_path / "out"
    run_demo(out, published)
    assert sha(published) == before  # never written
    assert calls == [out / "demo.duckdb"]
    con = duckdb.connect(str(out / "demo.duckdb"), read_only=True)
    rounds = dict(con.execute("SELECT round_id, profile FROM rounds").fetchall())
    con.close()
    assert rounds == {
        "aa-2026-05-31-gpu": "gpu",
        "2026-06-01-gpu": "gpu",
        "demo-cpu": "cpu",
    }
    home = (out / "site" / "index.html").read_text()
    gpu = home.index("NVIDIA H200 · gpu profile: round 2026-06-01-gpu")
    cpu = home.index("Test CPU · cpu profile: round demo-cpu")
    assert gpu < cpu  # the published GPU round first, though the local round is newer
    # the A/A round is no leaderboard of the home page, only a link to the calibration
    assert "profile: round aa-" not in home and 'href="rules.html#calibration"' in home
    rules = (out / "site" / "rules.html").read_text()
    assert 'id="calibration-gpu"' in rules and "aa-2026-05-31-gpu" in rules
    assert (out / "site" / "rounds" / "demo-cpu.html").is_file()

    # again: the same copy, the local round resumed in it
    assert "resuming the local round" in run_demo(out, published)
    assert len(calls) == 2 and sha(published) == before
    # main moved since the local round was measured: measured afresh in a fresh copy
    con = duckdb.connect(str(out / "demo.duckdb"))
    con.execute("UPDATE rounds SET main_commit = 'old' WHERE round_id = 'demo-cpu'")
    con.close()
    said = run_demo(out, published)
    assert "measured afresh (it was measured at main old" in said and "copied" in said
    con = duckdb.connect(str(out / "demo.duckdb"), read_only=True)
    assert (
        con.execute("SELECT main_commit FROM rounds WHERE round_id = 'demo-cpu'").fetchone()[0]
        == HEAD
    )
    con.close()
    # the published file changes: a fresh copy (the local round starts over)
    con = duckdb.connect(str(published))
    con.execute("UPDATE rounds SET driver = 'changed' WHERE round_id = '2026-06-01-gpu'")
    con.close()
    run_demo(out, published)
    con = duckdb.connect(str(out / "demo.duckdb"), read_only=True)
    assert (
        con.execute("SELECT driver FROM rounds WHERE round_id = '2026-06-01-gpu'").fetchone()[0]
        == "changed"
    )
    con.close()


def test_demo_without_a_published_database_is_local_only(
    tmp_path: Path, published: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No published file: the round goes into a database of its own; a copy left from a
    published file that is gone is dropped first, not resumed."""
    seen: list[bool] = []

    def collect(manifest: Path, db: Path, **_kw: object) -> int:
        seen.append(Path(db).exists())
        synthetic.generate(Path(db), prs=4, rounds=1)  # a local round of its own
        return 0

    monkeypatch.setattr("collector.run.collect.collect", collect)
    out = tmp_path / "out"
    out.mkdir()
    (out / "demo.duckdb").write_bytes(published.read_bytes())
    (out / "demo.duckdb.published").write_text(sha(published) + "\n")
    run_demo(out, tmp_path / "missing.duckdb")
    assert seen == [False] and not (out / "demo.duckdb.published").exists()
    home = (out / "site" / "index.html").read_text()
    assert "round 2026-06-01-gpu" in home and "aa-2026" not in home


def test_demo_refuses_a_published_round_with_the_local_id(
    tmp_path: Path, published: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = duckdb.connect(str(published))
    con.execute("UPDATE rounds SET round_id = 'demo-cpu' WHERE round_id = '2026-06-01-gpu'")
    con.close()
    monkeypatch.setattr("collector.run.collect.collect", fake_collect([]))
    args = ["demo", "--out", str(tmp_path / "o"), "--manifest", str(DEMO)]
    r = CliRunner().invoke(main, [*args, "--published", str(published)])
    assert r.exit_code == 1 and re.search(r"already holds a round 'demo-cpu'", r.output)
