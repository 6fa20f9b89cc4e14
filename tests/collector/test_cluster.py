"""A round cut into shards on a local Ray instance with logical GPUs (collector/run/cluster.py):
the same verdicts as one process, and a worker killed mid-shard loses and duplicates nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_repo import FakeRepo, pr

from collector.cli import main
from collector.policy import load_policy, resolve
from collector.run.cluster import Handed, device_problem, here
from collector.run.collect import collect
from collector.schedule import Task, plan_confirmation, plan_shards
from collector.store import open_store

pytest.importorskip("ray")


def labels(db: Path, round_id: str) -> dict[int, str]:
    r = CliRunner().invoke(main, ["show", "--db", str(db), "--round", round_id, "--json"])
    assert r.exit_code == 0, r.output
    return {d["pr"]: d["label"] for d in json.loads(r.output)}


def rows(db: Path, sql: str) -> list[tuple]:
    with open_store(db, read_only=True) as s:
        return s.query(sql)


def test_two_shards_give_the_single_process_verdicts(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    r.branch("fast", 'SPEED = {"tiny/decode": 1.30}')
    r.branch("floor", 'SPEED = {"tiny/decode": 1.10, "tiny/prefill": 0.80}')
    r.branch("slow-clock", "FORGE_CLOCK = 0.5")
    m = r.manifest("sharded", [pr(1, "fast"), pr(2, "floor"), pr(3, "main"), pr(4, "slow-clock")])
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    assert collect(m, one, progress=False) == 0  # before Ray: nothing of it in this process
    assert collect(m, two, progress=False, cluster="local", gpus=2) == 0
    assert (
        labels(two, "sharded")
        == labels(one, "sharded")
        == {
            1: "XL",
            2: "REJECT",
            3: "none",
            4: "REJECT",
        }
    )
    # the forged PR's later sessions are skipped on its shard's worker too, never run
    skipped = "SELECT count(*) FROM sessions WHERE pr = 4 AND status = 'skipped' AND wall_s = 0"
    assert rows(two, skipped) == rows(one, skipped) != [(0,)]
    assert rows(one, "SELECT DISTINCT shard FROM sessions") == [(0,)]
    # each shard: its own main sessions, on its own GPU, ids '<round>/s<shard>/…'
    by_shard = rows(
        two,
        "SELECT shard, list(DISTINCT gpu_index), list(DISTINCT pr ORDER BY pr), "
        "bool_and(starts_with(session_id, 'sharded/s' || shard || '/')), count(*) FILTER "
        "(WHERE side = 'main') FROM sessions GROUP BY shard ORDER BY shard",
    )
    assert [(k, len(g), set(p) - {0}, ok) for k, g, p, ok, _ in by_shard] == [
        (0, 1, {1, 3}, True),
        (1, 1, {2, 4}, True),
    ]
    assert by_shard[0][1] != by_shard[1][1] and all(n > 0 for *_, n in by_shard)
    assert rows(two, "SELECT shards FROM rounds") == [(2,)]
    assert rows(two, "SELECT count(DISTINCT host) FROM sessions") == [(1,)]


def test_a_worker_killed_mid_shard_loses_and_duplicates_nothing(
    fake_repo: FakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = fake_repo
    r.branch("fast", 'SPEED = {"tiny/decode": 1.30}')
    m = r.manifest("killed", [pr(1, "fast"), pr(2, "main")])
    monkeypatch.setenv("FAKE_ENGINE_SLEEP", "0.5")  # every session long enough to die inside
    db = tmp_path / "k.duckdb"
    workers: list[int] = []  # shard 1's worker pid at each session it handed back

    def hook(shard: int, task: Task, got: Handed) -> None:
        if shard != 1:
            return
        workers.append(got.placement.pid)
        if len(workers) == 3:  # its fourth session is running now: kill the worker inside it
            threading.Timer(0.25, os.kill, (got.placement.pid, signal.SIGKILL)).start()

    if collect(m, db, progress=False, cluster="local", gpus=2, hook=hook):
        # Ray's restarts ran out: the next collect finishes the shard from the database
        assert collect(m, db, progress=False, cluster="local", gpus=2) == 0
    assert len(set(workers)) == 2  # a new worker took over shard 1
    profile = resolve(load_policy(r.path / "policy.toml"), "cpu").profile
    plans = plan_shards("killed", [(1, ["tiny"]), (2, ["tiny"])], profile, 2)
    # #1's tier rests on speed: one session more in its shard (0), main beside it
    plans.append(plan_confirmation("killed", [(1, ["tiny"])], profile, shard=0))
    planned = sorted(t.session_id for plan in plans for s in plan for t in s.tasks)
    assert sorted(x[0] for x in rows(db, "SELECT session_id FROM sessions")) == planned
    assert rows(db, "SELECT DISTINCT status FROM sessions") == [("ok",)]
    assert rows(db, "SELECT finished_at IS NOT NULL FROM rounds") == [(True,)]
    assert labels(db, "killed") == {1: "XL", 2: "none"}


def test_without_a_cluster_ray_is_never_imported() -> None:
    code = (
        "import sys; import collector.cli, collector.run.collect, collector.judge.verdict; "
        "from collector.run.cluster import here, device_problem; here(); "
        "assert device_problem('numpy') is None; assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_placement_and_device_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    p = here()
    assert p.gpu_index == 3 and p.host and p.pid == os.getpid()
    monkeypatch.setattr(
        "collector.run.cluster.DEVICE_CHECKS", {"cupy": "raise SystemExit('no GPU here')"}
    )
    assert device_problem("cupy") == "device check failed: no GPU here"
