"""Memory of the guard models: a PR that keeps memory resident only for the models it does not
target (the red team's "fast decode on tiny, plus a float64 copy of the output matrix kept only
for quantized models") is held to main's guard sweeps of that model by the same memory rule as
its targets (collector/judge/gates/memory.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from fake_repo import FakeRepo, pr
from sitegen import pages, queries

from collector.cli import main
from collector.judge.compare import compare_memory
from collector.judge.gates import GateContext
from collector.judge.gates.memory import memory_gate
from collector.policy import load_policy, resolve
from collector.run.collect import collect
from collector.store import open_store

_CPU = resolve(load_policy(), "cpu")
CPU = _CPU.model_copy(update={"profile": _CPU.profile.model_copy(update={"memory_growth": 0.25})})
MIB = 2**20


def gates_of(targets: list[str], guards: list[str], comps: list) -> dict[str, tuple[str, str]]:
    ctx = GateContext(SimpleNamespace(policy=CPU), 1, "c0ffee", targets, guards, comps)
    out = memory_gate(ctx)
    return {g.gate: (g.status, g.reason) for g in out.gates} | {"REJECT": ("", "; ".join(out.hard))}


def test_a_guard_is_held_to_the_memory_rule_of_a_target() -> None:
    main_mem, grown = [100 * MIB, 101 * MIB], [140 * MIB, 141 * MIB]
    comps = [
        compare_memory(CPU, "tiny", "mem-load", main_mem, main_mem),
        compare_memory(CPU, "tiny:q8_0", "mem-load", main_mem, main_mem),
        compare_memory(CPU, "tiny:q8_0", "mem-peak@128", main_mem, grown),
    ]
    got = gates_of(["tiny"], ["tiny:q8_0"], comps)
    assert got["memory:tiny"][0] == "pass"
    status, text = got["memory:tiny:q8_0"]
    assert status == "fail"
    assert text == (
        "more than 25% above main's memory in its guard sweeps (against main's), beyond main's "
        "own range: mem-peak@128 140.5 MiB against main's 100.5 MiB (+39.8%)"
    )
    assert got["REJECT"][1] == (
        "guard tiny:q8_0 uses more memory than main allows (bar +25%): "
        "mem-peak@128 140.5 MiB against main's 100.5 MiB (+39.8%)"
    )
    # the same numbers on the target read the same, without 'guard'
    target = [compare_memory(CPU, "tiny:q8_0", "mem-peak@128", main_mem, grown)]
    as_target = gates_of(["tiny:q8_0"], [], target)
    assert as_target["REJECT"][1] == got["REJECT"][1].removeprefix("guard ")
    assert as_target["memory:tiny:q8_0"][1] == text.replace(
        " in its guard sweeps (against main's)", ""
    )
    # within main's own range it passes, for a guard as for a target
    near = [compare_memory(CPU, "tiny:q8_0", "mem-load", main_mem, [101 * MIB, 140 * MIB])]
    status, text = gates_of(["tiny"], ["tiny:q8_0"], near)["memory:tiny:q8_0"]
    assert status == "pass" and text.startswith(
        "no memory axis more than 25% above main's in its guard sweeps (against main's) "
        "beyond its range (1 compared): most mem-load"
    )


def test_memory_kept_only_for_the_guard_is_a_reject(
    fake_repo: FakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = fake_repo
    monkeypatch.setenv("FAKE_ENGINE_MEMORY", str(40 * MIB))  # the fake engine reads memory
    r.branch("honest", 'SPEED = {"tiny/decode": 1.12}')
    r.branch("hoard", 'SPEED = {"tiny/decode": 1.12}\nMEMORY = {"tiny:q8_0": 25 * 2**20}')
    m = r.manifest("guard-memory", [pr(1, "honest", expect="L"), pr(2, "hoard", expect="REJECT")])
    db = tmp_path / "g.duckdb"
    assert collect(m, db, progress=False) == 0
    with open_store(db, read_only=True) as s:
        verdicts = dict(s.query("SELECT pr, label FROM verdicts WHERE round_id = 'guard-memory'"))
        reason = s.query("SELECT reason FROM verdicts WHERE pr = 2")[0][0]
        gates = {
            (n, g): (st, why)
            for n, g, st, why in s.query("SELECT pr, gate, status, reason FROM gates")
        }
        mem = s.query(
            "SELECT pr, model, axis, below_floor FROM comparisons WHERE role = 'memory' "
            "ORDER BY pr, model, axis"
        )
        # main's engine ran the guard sweep of tiny:q8_0 beside the PR's, in the PR's guard
        # session: the memory compared is its, read from outside its process
        guard_axes = s.query(
            "SELECT DISTINCT s.axis FROM samples s JOIN sessions x USING (session_id) "
            "WHERE s.side = 'main' AND x.kind = 'guard' AND s.model = 'tiny:q8_0' "
            "AND s.axis LIKE 'mem-%' ORDER BY 1"
        )
    assert verdicts == {1: "L", 2: "REJECT"}
    assert guard_axes == [("mem-load",), ("mem-peak@128",)]
    # both PRs compared on both models; only the hoarding PR's guard is over
    assert mem == [
        (n, model, ax, n == 2 and model == "tiny:q8_0")
        for n in (1, 2)
        for model, axes in (
            ("tiny", ["mem-load", "mem-peak@128", "mem-peak@32"]),
            ("tiny:q8_0", ["mem-load", "mem-peak@128"]),
        )  # fmt: skip
        for ax in axes
    ]
    assert gates[(2, "memory:tiny:q8_0")][0] == "fail"
    assert gates[(2, "memory:tiny")][0] == "pass"
    assert gates[(2, "guard:tiny:q8_0")][0] == "pass"  # its speed is main's
    assert "guard tiny:q8_0 uses more memory than main allows" in reason
    assert "mem-load" in reason and "MiB against main's" in reason and "(+6" in reason
    # the honest PR: what it was, every memory gate passed
    assert {g: st for (n, g), (st, _) in gates.items() if n == 1 and g.startswith("memory")} == {
        "memory:tiny": "pass",
        "memory:tiny:q8_0": "pass",
    }
    # the terminal and the PR page name it too
    shown = CliRunner().invoke(main, ["show", "--db", str(db), "--pr", "2"])
    assert shown.exit_code == 0 and "memory:tiny:q8_0" in shown.output
    page = pages.Site(queries.load(db)).pr_page(2)
    rows = [ln for ln in page.splitlines() if "q8&#95;0 (guard)</td><td>mem-" in ln]
    assert len(rows) == 2 and all("over</td>" in ln for ln in rows)
