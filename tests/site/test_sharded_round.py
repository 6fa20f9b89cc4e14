"""A round cut into shards, one per GPU (collector/run/cluster.py): its page shows main's speed per
GPU (main's engine, timed beside each PR's in the PR's sessions on that GPU) with the spread
between GPUs, and which shard's main each PR was compared with; its cost shares each shard's
main among that shard's PRs. A round on one GPU shows none of it. The synthetic round's rows are
moved onto two GPUs directly, as a sharded collect writes them. Rendered without MkDocs."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
import synthetic_round as synthetic
from sitegen import pages, queries

SHARD_OF = {100: 0, 103: 0, 104: 1, 105: 1}  # the measured PRs of the synthetic round
HOSTS = {0: "node-a", 1: "<b>node|b</b>"}  # a host name is shown escaped


def shard_round(db: Path, gpus_per_shard: bool = True) -> str:
    """Main's sessions of even slots and PRs 100, 103 on shard 0 (GPU 0), the rest on shard 1
    (GPU 1); main's samples (in the PRs' paired sessions) 100 tok/s on shard 0 and 110 on shard
    1; main's sessions 60 s each, a PR's 30 s. Without `gpus_per_shard`: one shard, its sessions
    on two GPUs."""
    con = duckdb.connect(str(db))
    rid = con.execute("SELECT round_id FROM rounds").fetchone()[0]
    con.execute(
        "UPDATE sessions SET shard = CASE WHEN side = 'main' THEN slot % 2 "
        "ELSE CASE WHEN pr IN (104, 105) THEN 1 ELSE 0 END END, "
        "wall_s = CASE WHEN side = 'main' THEN 60 ELSE 30 END"
    )
    con.execute(
        "UPDATE sessions SET gpu_index = shard, gpu_uuid = 'GPU-' || shard || 'abc', "
        "host = CASE WHEN shard = 0 THEN ? ELSE ? END",
        [HOSTS[0], HOSTS[1]],
    )
    con.execute(
        "UPDATE samples SET value = 100 + 10 * (SELECT shard FROM sessions x "
        "WHERE x.session_id = samples.session_id) WHERE side = 'main'"
    )
    if not gpus_per_shard:
        con.execute("UPDATE sessions SET shard = 0")
    con.close()
    return rid


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[pages.Site, str]:
    db = synthetic.generate(tmp_path_factory.mktemp("sharded") / "s.duckdb", prs=6, rounds=1)
    rid = shard_round(db)
    return pages.Site(queries.load(db)), rid


def test_each_pr_knows_its_shard(sharded: tuple[pages.Site, str]) -> None:
    site, rid = sharded
    shards = {ev.pr: ev.shard for ev in site.data.by_round[rid]}
    assert shards == {**SHARD_OF, 101: None, 102: None}  # 101, 102 were never measured
    assert site.shard_prs(rid) == {0: [100, 103], 1: [104, 105]}


def test_round_page_shows_main_per_gpu_and_the_spread(sharded: tuple[pages.Site, str]) -> None:
    site, rid = sharded
    page = site.round_page(site.round_by_id[rid])
    assert "## main per GPU" in page
    section = page.split("## main per GPU")[1].split("## Cost")[0]
    assert re.search(
        r"^\| 0 \| <a href=\"\.\./pr/100\.html\">#100</a>, .*#103</a> \|$", section, re.M
    )
    assert re.search(
        r"^\| 1 \| <a href=\"\.\./pr/104\.html\">#104</a>, .*#105</a> \|$", section, re.M
    )
    # every model, of the axes both GPUs timed main on: each model is a target on one shard
    # (a full sweep) and a guard on the other (its guard context, 4096), so decode and prefill
    # at 4096
    assert section.count("| shard | host | GPU | decode@4k | prefill@4k |") == 3
    assert section.count("| 0 | node-a | GPU 0 &#40;GPU-0abc&#41; | 100.0 | 100.0 |") == 3
    assert section.count("| **spread** | | | 10.0% | 10.0% |") == 3
    assert "plus its share of main's (of its own shard's main, among that shard's PRs)" in page
    assert "<b>" not in section and "node&#124;b" in section  # the host is text, never markup
    assert (
        section.count(
            "| 1 | &#60;b&#62;node&#124;b&#60;/b&#62; | GPU 1 &#40;GPU-1abc&#41; | 110.0 | 110.0 |"
        )
        == 3
    )


def test_sharded_cost_shares_each_shards_main(sharded: tuple[pages.Site, str]) -> None:
    site, rid = sharded
    cost = site.data.costs[rid]
    assert sorted(cost.prs) == sorted(SHARD_OF)
    # main's sessions per shard, counted from the page's own numbers: 2 PRs a shard, 60 s each
    main_n = {c.shard: round(c.main_share_s * 2 / 60) for c in cost.prs.values()}
    assert main_n[0] + main_n[1] == cost.main_sessions and main_n[0] != main_n[1]
    for pr, c in cost.prs.items():
        assert c.shard == SHARD_OF[pr] and c.main_share_s == 60 * main_n[c.shard] / 2
        assert c.own_s == 30 * c.sessions
    # main's time is shared out exactly: the PRs' totals add up to the round's
    assert sum(c.total_s for c in cost.prs.values()) == pytest.approx(cost.total_s)


def test_gpu_axes_are_those_every_gpu_measured() -> None:
    """decode at the smallest and largest context and prefill at the largest, of the axes every
    GPU measured; of any when the GPUs share none."""
    full = {f"{k}@{n}" for k in ("decode", "prefill") for n in (128, 4096, 32768)}
    site = pages.Site.__new__(pages.Site)
    site.models = ["m"]
    rows = []
    for gpu, axes in ((0, full), (1, {"decode@4096", "prefill@4096"}), (2, full)):
        rows += [
            {"model": "m", "axis": a, "shard": 0, "host": "h", "gpu_index": gpu, "gpu_uuid": None,
             "value": 100.0 + gpu}
            for a in axes
        ]  # fmt: skip
    site.data = type("D", (), {"main_by_gpu": {"r": rows}})()
    assert site.main_per_gpu("r")[0]["axes"] == ["decode@4096", "prefill@4096"]
    site.data.main_by_gpu = {"r": [r for r in rows if r["gpu_index"] != 1]}
    assert site.main_per_gpu("r")[0]["axes"] == ["decode@128", "decode@32768", "prefill@32768"]
    site.data.main_by_gpu = {"r": [r for r in rows if r["gpu_index"] != 1 or "decode" in r["axis"]]
                             + [{**rows[0], "gpu_index": 3, "axis": "concurrent@8"}]}  # fmt: skip
    assert site.main_per_gpu("r")[0]["axes"] == ["decode@128", "decode@32768", "prefill@32768"]


def test_one_shard_on_two_gpus_shows_the_gpus_not_shards(tmp_path: Path) -> None:
    db = synthetic.generate(tmp_path / "g.duckdb", prs=6, rounds=1)
    rid = shard_round(db, gpus_per_shard=False)
    site = pages.Site(queries.load(db))
    page = site.round_page(site.round_by_id[rid])
    assert "## main per GPU" in page and "| **spread** | | | 10.0% |" in page
    assert "PRs compared with its main" not in page and site.shard_prs(rid) == {}


def test_a_one_gpu_round_shows_nothing_new(tmp_path: Path) -> None:
    db = synthetic.generate(tmp_path / "o.duckdb", prs=6, rounds=1)
    site = pages.Site(queries.load(db))
    rid = site.rounds[0].round_id
    assert site.data.main_by_gpu == {} and site.main_per_gpu(rid) == []
    assert {ev.shard for ev in site.data.by_round[rid]} == {0, None}
    page = site.round_page(site.round_by_id[rid])
    assert "main per GPU" not in page and "cut into" not in page and "| shard |" not in page
    assert "its share of main's, and by kind" in page
