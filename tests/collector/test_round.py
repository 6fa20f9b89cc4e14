"""Whole rounds against the fake engine: verdicts, failure classification, strikes, resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_repo import FakeRepo, git, pr, test_policy_text

from collector.cli import main
from collector.manifest import ManifestError
from collector.policy import load_policy, resolve
from collector.run.collect import collect
from collector.run.outcome import TIMED
from collector.schedule import CONFIRM_SLOTS
from collector.store import open_store
from collector.store.export import TABLES


def show_json(db: Path, round_id: str | None = None) -> dict[int, dict]:
    args = ["show", "--db", str(db), "--json"] + (["--round", round_id] if round_id else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return {d["pr"]: d for d in json.loads(r.output)}


def sessions(db: Path, round_id: str) -> dict[tuple, tuple]:
    with open_store(db, read_only=True) as s:
        return {
            (r[0], r[1], r[2]): (r[3], r[4], r[5])
            for r in s.query(
                "SELECT pr, kind, model, status, fault, detail FROM sessions "
                "WHERE round_id = ? AND side = 'pr' AND slot = (SELECT min(slot) FROM sessions x "
                "WHERE x.round_id = sessions.round_id AND x.pr = sessions.pr AND x.side = 'pr')",
                [round_id],
            )
        }


def counts(db: Path) -> dict[str, int]:
    with open_store(db, read_only=True) as s:
        return {t: s.query(f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


@pytest.mark.slow
def test_verdicts_of_a_mixed_round(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    r.branch("fast", 'SPEED = {"tiny/decode": 1.12}')
    r.branch("held", 'SPEED = {"tiny/decode": 1.30}')
    r.branch("floor", 'SPEED = {"tiny/decode": 1.10, "tiny/prefill": 0.90}')
    r.branch("inaccurate", 'SPEED = {"tiny/decode": 1.20}\nACCURACY_BROKEN = True')
    r.branch("guard", 'SPEED = {"tiny/decode": 1.10, "tiny:q8_0/decode": 0.85}')
    r.branch("prefill-path", 'SPEED = {"tiny/prefill": 1.10}\nPREFILL_KL = 0.2')
    r.edit_branch("harness", "engine/harness/bench.py", "print('I measure myself')\n")
    r.edit_branch("conflict", "engine/tuning.py", "N_SPLITS = 160\n")
    (r.path / "engine" / "tuning.py").write_text("N_SPLITS = 128\n")
    git(r.path, "add", "engine/tuning.py")
    git(r.path, "commit", "-qm", "main moves on")
    fb = r.path / "engine" / "fake_behavior.py"
    fb.write_text(fb.read_text().replace("SPEED: dict", "# a neutral refactor\nSPEED: dict"))
    (r.path / "neutral.patch").write_text(git(r.path, "diff") + "\n")
    git(r.path, "checkout", "--", "engine/fake_behavior.py")
    m = r.manifest(
        "mixed",
        [
            pr(1, "fast", expect="L"),
            pr(2, "held", labels=["hold"], expect="XL"),
            pr(3, "floor", expect="REJECT"),
            pr(4, "inaccurate", expect="REJECT"),
            pr(5, "guard", expect="REJECT"),
            pr(6, "prefill-path", expect="REJECT"),
            pr(7, "harness", expect="harness-touched"),
            pr(8, "conflict", expect="needs-rebase"),
            pr(9, patch="neutral.patch", expect="none"),
        ],
    )
    db = tmp_path / "m.duckdb"
    assert collect(m, db, progress=False) == 0
    out = show_json(db)
    assert {n: d["label"] for n, d in out.items()} == {n: d["expect"] for n, d in out.items()}
    assert [n for n, d in out.items() if d["merge_first"]] == [1]  # #2 is faster but held
    assert "floor" in out[3]["reason"] and "prefill@" in out[3]["reason"]
    assert "accuracy" in out[4]["reason"]
    assert "guard tiny:q8_0" in out[5]["reason"]
    assert "batched prefill" in out[6]["reason"]
    assert "engine/harness/bench.py" in out[7]["reason"]
    assert "engine/tuning.py" in out[8]["reason"]
    assert all(d["reason"] for d in out.values())
    assert all({"pr", "commit", "label", "reason", "merge_first"} <= set(d) for d in out.values())
    assert out[1]["best"]["axis"] in ("decode@32", "decode@128")
    assert out[1]["best"]["ci_low"] <= out[1]["best"]["delta"] <= out[1]["best"]["ci_high"]
    with open_store(db, read_only=True) as s:
        # raw samples kept: every repetition of both engines of every session, in pairs
        n = (
            "SELECT side, count(*) FROM samples WHERE pr = 1 AND axis = 'decode@128' "
            "AND model = ? GROUP BY side ORDER BY side"
        )
        # two planned sessions of the cpu profile's repetitions, and a confirmation session
        reps = 3 * resolve(load_policy(), "cpu").profile.reps
        assert s.query(n, ["tiny"]) == [("main", reps), ("pr", reps)]
        assert s.query(n, ["tiny:q8_0"]) == [("main", reps), ("pr", reps)]  # the guard too
        # main's own sessions time nothing: its speed is in the PRs' sessions, beside theirs
        mains = "SELECT DISTINCT kind FROM sessions WHERE side = 'main' ORDER BY kind"
        assert [k for (k,) in s.query(mains)] == ["prefill-check", "score"]
        # confirmed: the verdicts that rest on speed (tiers, losses), none of the others
        confirmed = "SELECT DISTINCT pr FROM sessions WHERE side = 'pr' AND slot >= 10000"
        assert sorted(r[0] for r in s.query(confirmed)) == [1, 2, 3, 5]
        assert s.query("SELECT count(*) FROM sessions WHERE pr IN (7, 8)")[0][0] == 0
        c = s.query("SELECT pr_commit, merged_commit, main_commit FROM candidates WHERE pr = 1")[0]
        assert all(len(x) == 40 for x in c) and len({*c}) == 3
        # main-vs-main calibration: the target and the guard model (guards are scored too)
        assert s.query("SELECT count(*) FROM accuracy WHERE pr = 0")[0][0] == 2
    # the verdict command recomputes the same labels from the stored evidence
    r2 = CliRunner().invoke(main, ["verdict", "--db", str(db)])
    assert r2.exit_code == 0 and "#3\tREJECT" in r2.output
    assert {n: d["label"] for n, d in show_json(db).items()} == {
        n: d["label"] for n, d in out.items()
    }
    # terminal table and Markdown render for every PR
    for n in out:
        t = CliRunner().invoke(main, ["show", "--db", str(db), "--pr", str(n)])
        assert t.exit_code == 0 and f"PR #{n}" in t.output
        c = CliRunner().invoke(main, ["comment", "--db", str(db), "--pr", str(n)])
        assert c.exit_code == 0 and "sparkboard auto-eval" in c.output


@pytest.mark.slow
def test_failure_classification(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    cases = {
        11: ("garbage", 'FAIL = {"sweep": "garbage"}', "malformed", "REJECT"),
        12: ("nojson", 'FAIL = {"sweep": "nojson"}', "malformed", "REJECT"),
        13: ("hang", 'FAIL = {"sweep": "hang"}', "timeout", "pending"),
        14: ("segv", 'FAIL = {"sweep": "segfault"}', "crash", "pending"),
        15: ("boast", 'SPEED = {"tiny/decode": 1000.0}', "implausible", "REJECT"),
        16: ("raise", 'FAIL = {"sweep": "crash"}', "crash", "REJECT"),
        17: ("lossy", 'FAIL = {"concurrent": "lossy"}', "incomplete", "pending"),
        18: ("other", 'FAIL = {"sweep": "wrong-model"}', "malformed", "REJECT"),
        19: ("good", 'SPEED = {"tiny/decode": 1.08}', "ok", "M"),
    }
    for _n, (branch, behaviour, _s, _l) in cases.items():
        r.branch(branch, behaviour)
    m = r.manifest("fails", [pr(n, b) for n, (b, *_rest) in cases.items()])
    db = tmp_path / "f.duckdb"
    assert collect(m, db, progress=False) == 0  # the round goes on; nothing is infrastructure
    got = sessions(db, "fails")
    for n, (_b, _beh, status, _l) in cases.items():
        kind = "concurrent" if status == "incomplete" else "sweep"
        assert got[(n, kind, "tiny")][0] == status, (n, got[(n, kind, "tiny")])
        assert got[(n, kind, "tiny")][1] == ("none" if status == "ok" else "pr")
    assert "SIGSEGV" in got[(14, "sweep", "tiny")][2]
    assert "without writing" in got[(12, "sweep", "tiny")][2]
    assert re.search(r"claims \d+x main", got[(15, "sweep", "tiny")][2])
    assert "boom" in got[(16, "sweep", "tiny")][2]
    out = show_json(db)
    assert {n: out[n]["label"] for n in cases} == {n: c[3] for n, c in cases.items()}
    assert "broken measurement" in out[15]["reason"]
    assert "strike 1 of 2" in out[14]["reason"]
    assert out[19]["merge_first"]

    # The same commits in a second round: the possibly-flaky failures now count twice.
    m2 = r.manifest(
        "fails-2",
        [pr(n, b) for n, (b, *_rest) in cases.items() if n in (14, 17, 19)],
        name="round2.toml",
    )
    assert collect(m2, db, progress=False) == 0
    out2 = show_json(db, "fails-2")
    assert out2[14]["label"] == "REJECT" and "2 rounds at this commit" in out2[14]["reason"]
    assert out2[17]["label"] == "REJECT"
    with open_store(db, read_only=True) as s:
        assert s.query("SELECT count(DISTINCT round_id) FROM strikes WHERE pr = 14")[0][0] == 2


def test_infrastructure_failure_is_never_a_reject(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    r.branch("disk", 'FAIL = {"concurrent": "enospc"}')
    m = r.manifest("infra", [pr(21, "disk")])
    db = tmp_path / "i.duckdb"
    assert collect(m, db, progress=False) > 0
    out = show_json(db)
    assert out[21]["label"] == "pending" and "infrastructure" in out[21]["reason"]
    with open_store(db, read_only=True) as s:
        st = s.query(
            "SELECT status, fault, attempts FROM sessions WHERE pr = 21 AND kind = 'concurrent'"
        )
        assert {x[:2] for x in st} == {("infra", "infra")} and all(x[2] == 2 for x in st)
        assert s.query("SELECT finished_at FROM rounds")[0][0] is None


def test_main_failing_is_infrastructure(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    good = r.edit_branch("good", "engine/notes.py", "# notes\n")
    # main itself crashes on concurrent: commit the breakage on main after branching
    (r.path / "engine" / "fake_behavior.py").write_text(
        (r.path / "engine" / "fake_behavior.py").read_text() + '\nFAIL = {"concurrent": "crash"}\n'
    )
    git(r.path, "commit", "-qam", "main breaks")
    m = r.manifest("main-broken", [pr(22, good)])
    db = tmp_path / "b.duckdb"
    assert collect(m, db, progress=False) > 0
    out = show_json(db)
    assert out[22]["label"] == "pending" and "main's engine beside it failed" in out[22]["reason"]
    with open_store(db, read_only=True) as s:
        # main's engine runs inside the PR's own session: that session is the box's, retried
        assert s.query(
            "SELECT DISTINCT status, fault FROM sessions WHERE pr = 22 AND kind = 'concurrent'"
        ) == [("infra", "infra")]


@pytest.mark.slow
def test_verdicts_that_rest_on_speed_are_measured_again(
    fake_repo: FakeRepo, tmp_path: Path
) -> None:
    """A burst of load that slowed only the PR's turns of its planned sessions (pairing cancels
    what reaches both engines) is not a regression: the confirmation session, after the plan,
    has the PR at main's speed. A real loss and a real
    gain hold in it; a PR with nothing at stake gets no confirmation session."""
    r = fake_repo
    # main's code, its two planned sweeps slow
    r.branch("burst", 'SLOW_RUNS = {"sweep": 2}\nBURST = 0.7')
    r.branch("slow", 'SPEED = {"tiny/decode": 0.85}')
    r.branch("fast", 'SPEED = {"tiny/decode": 1.12}')
    m = r.manifest(
        "again",
        [pr(1, "burst"), pr(2, "slow"), pr(3, "fast"), pr(4, "main")],
    )
    db = tmp_path / "c.duckdb"
    assert collect(m, db, progress=False) == 0
    out = show_json(db)
    assert {n: d["label"] for n, d in out.items()} == {1: "none", 2: "REJECT", 3: "L", 4: "none"}
    floor = {n: next(g for g in d["gates"] if g["gate"] == "floor") for n, d in out.items()}
    # why #1's loss does not stand: its pooled median is still the burst's (6 of 9 samples)
    assert "its confirmation session at" in floor[1]["reason"] and floor[1]["status"] == "pass"
    # its guard's sweeps ran in the same burst: that loss does not stand either
    guard = next(g for g in out[1]["gates"] if g["gate"] == "guard:tiny:q8_0")
    assert guard["status"] == "pass" and "its confirmation session at" in guard["reason"]
    assert "confirmed at" in out[2]["reason"] and floor[2]["status"] == "fail"
    with open_store(db, read_only=True) as s:
        confirmed = "SELECT pr, count(DISTINCT slot) FROM sessions WHERE side = 'pr' AND slot >= ? GROUP BY pr ORDER BY pr"
        assert s.query(confirmed, [CONFIRM_SLOTS]) == [(1, 1), (2, 1), (3, 1)]
        # main's engine is timed inside each of them: no main slot of its own (none rechecks
        # a long-context check)
        mains = "SELECT count(DISTINCT slot) FROM sessions WHERE side = 'main' AND slot >= ?"
        assert s.query(mains, [CONFIRM_SLOTS])[0][0] == 0
        before = counts(db)
    # judged on the planned sessions, #1 would have been a REJECT (what confirmation was for)
    assert collect(m, db, progress=False) == 0  # a resume: the same plan, nothing new to run
    assert counts(db)["sessions"] == before["sessions"]
    assert show_json(db)[1]["label"] == "none"


@pytest.mark.slow
def test_a_long_context_prefill_that_fell_short_is_measured_again(
    fake_repo: FakeRepo, tmp_path: Path
) -> None:
    """The long-context prefill is a timing: a PR whose one run there fell in a burst of load
    runs the check again in a confirmation session (main's beside it again) and is judged on its
    best session; a slower path stays slow there and stays a REJECT."""
    r = fake_repo
    (r.path / "policy-longctx.toml").write_text(test_policy_text(long_context=True))
    r.branch("burst", 'SLOW_RUNS = {"longctx": 1}\nBURST = 0.4')  # main's code
    r.branch("slower", 'SPEED = {"tiny/longctx": 0.4}')
    m = r.manifest("lc", [pr(1, "burst"), pr(2, "slower")], policy="policy-longctx.toml")
    db = tmp_path / "lc.duckdb"
    assert collect(m, db, progress=False) == 0
    out = show_json(db)
    assert {n: d["label"] for n, d in out.items()} == {1: "none", 2: "REJECT"}
    gate = {
        n: next(g for g in d["gates"] if g["gate"] == "long-context:tiny") for n, d in out.items()
    }
    assert gate[1]["status"] == "pass" and "its best of 2 sessions" in gate[1]["reason"]
    assert gate[2]["status"] == "fail" and "its best of 2 sessions" in gate[2]["reason"]
    with open_store(db, read_only=True) as s:
        again = (
            "SELECT side, pr, count(*) FROM sessions WHERE kind = 'longctx' AND slot >= ? "
            "GROUP BY side, pr ORDER BY side, pr"
        )
        assert s.query(again, [CONFIRM_SLOTS]) == [("pr", 1, 1), ("pr", 2, 1)]


@pytest.mark.slow
def test_main_against_itself_three_times(fake_repo: FakeRepo, tmp_path: Path) -> None:
    db = tmp_path / "aa.duckdb"
    for i in range(3):
        m = fake_repo.manifest(
            f"aa-{i}", [pr(1, "main"), pr(2, "main", targets=["tiny:q8_0"])], name=f"aa{i}.toml"
        )
        assert collect(m, db, progress=False) == 0
        out = show_json(db, f"aa-{i}")
        assert {d["label"] for d in out.values()} == {"none"}
        with open_store(db, read_only=True) as s:
            tiers = s.query(
                "SELECT DISTINCT tier, below_floor FROM comparisons WHERE round_id = ?", [f"aa-{i}"]
            )
            assert tiers == [("none", False)]


def test_bad_manifests_fail_before_measuring(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    db = tmp_path / "bad.duckdb"
    m = r.manifest("bad-ref", [pr(1, "no-such-branch")])
    with pytest.raises(ManifestError, match=r"PR #1: ref: 'no-such-branch' is not a commit"):
        collect(m, db, progress=False)
    (r.path / "junk.patch").write_text("this is not a patch\n")
    m = r.manifest("bad-patch", [pr(2, patch="junk.patch")])
    with pytest.raises(ManifestError, match=r"PR #2: patch: .*junk.patch is not a patch"):
        collect(m, db, progress=False)
    m = r.manifest("bad-base", [pr(3, "main")], base_ref="nope")
    with pytest.raises(ManifestError, match="base_ref: 'nope' is not a commit"):
        collect(m, db, progress=False)
    m = r.manifest("bad-model", [pr(4, "main", targets=["llama-70b"])])
    res = CliRunner().invoke(main, ["collect", str(m), "--db", str(db)])
    assert (
        res.exit_code == 1 and "PR #4" in res.output and "unknown model 'llama-70b'" in res.output
    )
    res = CliRunner().invoke(main, ["manifest", "check", str(r.manifest("ok", [pr(5, "main")]))])
    assert res.exit_code == 0 and res.output.startswith("ok: round ok")
    with open_store(db, read_only=True) as s:
        assert s.query("SELECT count(*) FROM sessions")[0][0] == 0
        assert s.query("SELECT count(*) FROM rounds")[0][0] == 0


def test_hostile_strings_verbatim_and_escaped(fake_repo: FakeRepo, tmp_path: Path) -> None:
    title = "perf: `rm -rf /` | <img src=x onerror=alert(1)> @maintainers [x](http://evil) \x1b[31mred\n#1"
    author = "@root"
    labels = ["hold | me", "<b>", "@team"]
    m = fake_repo.manifest(
        "hostile",
        [pr(1, "main", title=title, author=author, labels=labels, branch="$(touch pwned)")],
    )
    db = tmp_path / "h.duckdb"
    collect(m, db, progress=False)
    with open_store(db, read_only=True) as s:
        assert s.query("SELECT title, author, labels, branch FROM prs") == [
            (title, author, labels, "$(touch pwned)")
        ]
    assert show_json(db)[1]["title"] == title
    md = CliRunner().invoke(main, ["comment", "--db", str(db), "--pr", "1"]).output
    for raw in ("<img", "@maintainers", "@root", "@team", "[x](", "\x1b", "<b>", "http://"):
        assert raw not in md, raw
    assert re.search(r"(?<!\\)`rm", md) is None  # every backtick of the title is escaped
    assert "&lt;img" in md and "&#64;maintainers" in md and "\\|" in md
    table_rows = [ln for ln in md.splitlines() if ln.startswith("| title")]
    assert (
        len(table_rows) == 1 and table_rows[0].count(" | ") == 1
    )  # one cell break: no injected column
    term = CliRunner().invoke(main, ["show", "--db", str(db)]).output
    assert "\x1b" not in term
    assert not (tmp_path / "pwned").exists() and not (fake_repo.path / "pwned").exists()


def test_export_every_format(fake_repo: FakeRepo, tmp_path: Path) -> None:
    m = fake_repo.manifest("exp", [pr(1, "main")])
    db = tmp_path / "e.duckdb"
    collect(m, db, progress=False)
    for fmt in ("parquet", "csv", "json"):
        out = tmp_path / f"x-{fmt}"
        res = CliRunner().invoke(
            main, ["export", "--db", str(db), "--round", "exp", "--format", fmt, "--out", str(out)]
        )
        assert res.exit_code == 0, res.output
        assert (out / f"samples.{fmt}").stat().st_size > 0
    rows = json.loads((tmp_path / "x-json" / "verdicts.json").read_text())
    assert rows[0]["pr"] == 1
    res = CliRunner().invoke(
        main, ["export", "--db", str(db), "--round", "nope", "--format", "csv"]
    )
    assert res.exit_code == 1 and "no round 'nope'" in res.output


def _collect_cmd(manifest: Path, db: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from collector.cli import main; main()",
        "collect",
        str(manifest),
        "--db",
        str(db),
        "--quiet",
    ]


@pytest.mark.slow
def test_resume_after_sigkill(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    r.branch("fast", 'SPEED = {"tiny/decode": 1.12}')
    m = r.manifest("resume", [pr(1, "fast"), pr(2, "main")])
    ref_db = tmp_path / "ref.duckdb"
    subprocess.run(_collect_cmd(m, ref_db), check=True, capture_output=True)

    db = tmp_path / "killed.duckdb"
    ledger = tmp_path / "ledger.txt"
    env = {**os.environ, "FAKE_ENGINE_LEDGER": str(ledger)}
    proc = subprocess.Popen(
        _collect_cmd(m, db),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ledger.exists() and len(ledger.read_text().splitlines()) >= 7:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with open_store(db, read_only=True) as s:
        before = dict(s.query("SELECT session_id, started_at FROM sessions"))
        assert s.query("SELECT count(*) FROM verdicts")[0][0] == 0
    total = counts(ref_db)["sessions"]
    assert 0 < len(before) < total
    ledger.unlink()
    subprocess.run(_collect_cmd(m, db), env=env, check=True, capture_output=True)
    with open_store(db, read_only=True) as s:
        after = dict(s.query("SELECT session_id, started_at FROM sessions"))
    assert all(after[k] == v for k, v in before.items())  # finished sessions were not re-run
    # the ledger hears the timing parents only (a sealed score cannot write outside its folders)
    timed = [k for k in after if k not in before and k.split("/")[4] in TIMED]
    assert len(ledger.read_text().splitlines()) == len(timed)
    assert counts(db) == counts(ref_db)
    assert show_json(db)[1]["label"] == show_json(ref_db)[1]["label"]
    # and once more: nothing left to do, nothing duplicated
    ledger.unlink()
    subprocess.run(_collect_cmd(m, db), env=env, check=True, capture_output=True)
    assert not ledger.exists()
    assert counts(db) == counts(ref_db)


def test_second_collector_refused(fake_repo: FakeRepo, tmp_path: Path) -> None:
    m = fake_repo.manifest("two", [pr(1, "main")])
    db = tmp_path / "two.duckdb"
    env = {**os.environ, "FAKE_ENGINE_SLEEP": "1"}
    first = subprocess.Popen(
        _collect_cmd(m, db), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(1.0)
        while not db.exists():
            time.sleep(0.1)
        second = subprocess.run(_collect_cmd(m, db), capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "in use by process" in second.stderr and "only one collector" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_changed_manifest_for_same_round_refused(fake_repo: FakeRepo, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    collect(fake_repo.manifest("same", [pr(1, "main")]), db, progress=False)
    with pytest.raises(Exception, match="different manifest"):
        collect(fake_repo.manifest("same", [pr(1, "main"), pr(2, "main")]), db, progress=False)


def test_help_on_every_command() -> None:
    runner = CliRunner()
    for cmd in (
        ["--help"],
        ["collect", "--help"],
        ["verdict", "--help"],
        ["show", "--help"],
        ["comment", "--help"],
        ["export", "--help"],
        ["manifest", "--help"],
        ["manifest", "from-gh", "--help"],
        ["manifest", "check", "--help"],
        ["demo", "--help"],
        ["build", "--help"],
    ):
        res = runner.invoke(main, cmd)
        assert res.exit_code == 0, (cmd, res.output)
        assert "Usage:" in res.output


def test_engine_repo_as_url(fake_repo: FakeRepo, tmp_path: Path) -> None:
    """A URL engine repo is cloned into the scratch folder; a PR named by its commit resolves."""
    tip = git(
        fake_repo.path, "rev-parse", fake_repo.branch("fast", 'SPEED = {"tiny/decode": 1.15}')
    )
    m = fake_repo.manifest("url", [pr(1, tip)])
    m.write_text(
        m.read_text().replace('engine_repo = "."', f'engine_repo = "file://{fake_repo.path}"')
    )
    db = tmp_path / "u.duckdb"
    assert collect(m, db, progress=False) == 0
    assert show_json(db)[1]["label"] == "L"
    assert not (tmp_path / ".u.duckdb.scratch").exists()  # the scratch folder is gone
