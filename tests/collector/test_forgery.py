"""Evidence a PR's process could forge: the clock, the outputs, main's checkout, the box."""

from __future__ import annotations

import json
import os
import random
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_repo import FakeRepo, pr
from pydantic import ValidationError

from collector.cli import main
from collector.errors import RoundError
from collector.judge.forgery import (
    clock_problem,
    cores_problem,
    output_problem,
    regions_by_group,
    timing_problem,
    upper_bound,
)
from collector.policy import ForgeryRules, load_policy
from collector.run.collect import collect
from collector.store import open_store
from engine.harness.protocol import IdleReport, SweepResult, TimingReport

RULES = ForgeryRules()


def test_an_honest_clock_is_a_little_short_of_the_collectors() -> None:
    regions = [(0.00126, 0.00120)] * 50 + [(0.020, 0.001)] * 3  # a few bursts of load
    assert timing_problem(regions, RULES) is None


def test_a_slowed_clock_is_forged() -> None:
    why = timing_problem([(0.0013, 0.00065)] * 40, RULES)
    assert why and "50% of the collector's" in why and "clock was changed" in why


def test_a_fast_clock_is_forged() -> None:
    why = timing_problem([(0.0010, 0.0013)] * 40, RULES)
    assert why and "longer than the interval" in why


def test_sub_tolerance_gaps_on_tiny_regions_are_not_forgery() -> None:
    # 30% short but only 0.1 ms: pipe hops on a loaded box, not a patched clock
    assert timing_problem([(0.00033, 0.00023)] * 40, RULES) is None


def _sweep_regions(
    slow: str = "", factor: float = 0.5, seed: int = 7
) -> tuple[list[tuple[float, float]], list[str]]:
    """A sweep's timed regions in its groups, each with honest noise: the engine's figure 1-10%
    (and 0.05-0.15 ms) short of the parent's, a few regions caught in a burst of load (the
    parent's read 2-5x long). The group `slow` gets a clock running at `factor`."""
    rng = random.Random(seed)
    shapes = {
        "prefill n=32": (0.0006, 120),
        "decode ctx=32 w=1": (0.0013, 80),
        "prefill n=128": (0.0013, 120),
        "decode ctx=128 w=1": (0.0013, 100),
        "decode ctx=16 w=4": (0.007, 40),
        "prefill n=8000": (0.76, 3),  # too few to judge alone: one in a burst proves nothing
    }
    regions, groups = [], []
    for group, (base, n) in shapes.items():
        for _ in range(n):
            own = base * rng.uniform(0.9, 1.1)
            parent = own * rng.uniform(1.01, 1.10) + rng.uniform(0.00005, 0.00015)
            if rng.random() < 0.05:
                parent *= rng.uniform(2, 5)
            regions.append((parent, own * factor if group == slow else own))
            groups.append(group)
    return regions, groups


def test_a_clock_patched_around_one_group_only_is_forged_in_that_group() -> None:
    regions, groups = _sweep_regions(slow="decode ctx=32 w=1")
    assert timing_problem(regions, RULES) is None  # a fifth of the regions: the median hides it
    why = timing_problem(regions, RULES, groups)
    assert why and "in the quietest quarter of 80 timed regions of decode ctx=32 w=1" in why
    assert "clock was changed" in why
    regions, groups = _sweep_regions(slow="decode ctx=16 w=4", factor=1.3)
    why = timing_problem(regions, RULES, groups)
    assert why and "of 40 timed regions of decode ctx=16 w=4" in why and "longer than" in why


def test_honest_groups_with_noise_are_clean() -> None:
    for seed in range(20):
        regions, groups = _sweep_regions(seed=seed)
        assert timing_problem(regions, RULES, groups) is None
    # a group too small to judge alone, all of it in a burst of load: only the document judges it
    regions, groups = _sweep_regions()
    regions += [(0.010, 0.001)] * (RULES.timing_min_group - 1)
    groups += ["decode ctx=32768 w=1"] * (RULES.timing_min_group - 1)
    assert timing_problem(regions, RULES, groups) is None
    regions += [(0.010, 0.001)]
    groups += ["decode ctx=32768 w=1"]
    assert "of decode ctx=32768 w=1" in (timing_problem(regions, RULES, groups) or "")


def _loaded_box(factor: float = 1.0, seed: int = 3) -> tuple[list[tuple[float, float]], list[str]]:
    """Regions on a loaded 2-core box, where each pipe hop pair costs ~0.3 ms: 16% of a 1.9 ms
    prefill (measured: a test suite's load read main itself at 84-85% of the parent's clock)."""
    rng = random.Random(seed)
    regions, groups = [], []
    for group, base, n in (("prefill n=32", 0.0016, 200), ("decode ctx=32 w=1", 0.0019, 120)):
        for _ in range(n):
            own = base * rng.uniform(0.95, 1.05)
            regions.append((own + rng.uniform(0.00026, 0.00036), own * factor))
            groups.append(group)
    return regions, groups


def test_the_gap_counts_beyond_mains_on_the_same_box() -> None:
    main_regions, labels = _loaded_box(seed=1)
    main = {}
    for r, g in zip(main_regions, labels, strict=True):
        main.setdefault(g, []).append(r)
    honest, groups = _loaded_box(seed=2)
    # alone, the box's hops look like a slowed clock to a tighter tolerance than the policy's
    why = timing_problem(honest, RULES.model_copy(update={"timing_rel_gap": 0.12}), groups)
    assert why and "clock was changed" in why
    assert timing_problem(honest, RULES, groups, main) is None  # main's own gap is the same
    slowed, groups = _loaded_box(factor=0.7, seed=2)  # a clock patched to run 1.43x slow
    why = timing_problem(slowed, RULES, groups, main)
    assert why and "main's own 8" in why and "clock was changed" in why
    # a group main never ran is judged by the rule alone (here: its hops, at a tight tolerance)
    tight = RULES.model_copy(update={"timing_rel_gap": 0.12})
    assert timing_problem(honest, tight, groups, {"decode ctx=32 w=1": main["decode ctx=32 w=1"]})


def test_a_burst_of_load_over_most_of_a_session_is_not_a_slow_clock() -> None:
    """Load lengthens only the parent's side of a region, in bursts a session can mostly fall
    into (a 2-core round read two honest sessions at 65-73% of the parent's clock in the median
    region of prefill n=128, main at 91%): the quietest quarter still reads the box's own gap,
    and a clock patched to run 1.43x slow shows there through the same burst."""
    rng = random.Random(5)
    quiet = [0.002 * rng.uniform(0.95, 1.05) for _ in range(200)]
    main = {"prefill n=128": [(own + 0.0002, own) for own in quiet]}
    burst = []
    for i in range(120):
        own = 0.0027 * rng.uniform(0.95, 1.05)
        late = rng.uniform(0.0005, 0.0015) if i % 10 < 7 else 0.0  # 70% of the regions
        burst.append((own + 0.0002 + late, own))
    groups = ["prefill n=128"] * len(burst)
    assert statistics.median((p - o) / p for p, o in burst) > 0.25  # the median reads ~70%
    assert timing_problem(burst, RULES, groups, main) is None
    slowed = [(p, o * 0.7) for p, o in burst]
    assert "clock was changed" in (timing_problem(slowed, RULES, groups, main) or "")


def test_mains_regions_come_from_the_baseline_beside_it() -> None:
    """The box's own gaps are main's engine's, timed beside the PR's in the same session: a
    loaded box that stretches main's gap as much as the PR's is not a slow clock."""
    honest = [(0.0013, 0.0012)] * 40
    stretched = [(0.0013, 0.0008)] * 40
    doc = _doc([0.0], [0.0], [0.0])

    def with_regions(pr: list, main: list) -> SweepResult:
        base = {
            "commit": "main",
            "contexts": [c.model_dump() for c in doc.contexts],
            "timing": {"regions": main},
            "idle": {"after_answer_s": [], "while_stopped_s": [], "stop_s": []},
        }
        return SweepResult.model_validate(
            {**doc.model_dump(), "measured": {**doc.measured.model_dump(), "timing": {"regions": pr}},
             "baseline": base, "schema_version": 3}
        )  # fmt: skip

    assert "clock was changed" in (clock_problem(with_regions(stretched, honest), RULES) or "")
    assert clock_problem(with_regions(stretched, stretched), RULES) is None
    assert regions_by_group(TimingReport(regions=honest)) == {"": honest}


def test_documents_without_groups_are_judged_as_before() -> None:
    doc = _doc([0.0], [0.0], [0.0])
    assert doc.measured.timing.groups == []
    minority, _ = _sweep_regions(slow="decode ctx=32 w=1")
    for regions in (minority, [(0.0013, 0.00065)] * 40, [(0.0010, 0.0013)] * 40):
        assert timing_problem(regions, RULES, []) == timing_problem(regions, RULES)
    why = timing_problem([(0.0013, 0.00065)] * 40, RULES)
    assert why and "quarter of 40 timed regions (" in why  # the document's words, no group


def test_group_labels_match_the_regions() -> None:
    TimingReport(regions=[(0.01, 0.01)] * 2, groups=["prefill n=32", "decode ctx=32 w=1"])
    with pytest.raises(ValidationError, match="1 group labels for 2 regions"):
        TimingReport(regions=[(0.01, 0.01)] * 2, groups=["prefill n=32"])
    with pytest.raises(ValueError, match="1 group labels for 2 timed regions"):
        timing_problem([(0.01, 0.01)] * 2, RULES, ["prefill n=32"])
    assert load_policy().forgery.timing_min_group == RULES.timing_min_group


def test_wilson_bound() -> None:
    assert upper_bound(0, 24, 2.33) < 0.25
    assert upper_bound(22, 24, 2.33) > 0.93
    assert upper_bound(10, 10, 2.33) == pytest.approx(1.0)


def _doc(
    decode: list[float],
    prefill: list[float],
    kl: list[float],
    decode_kl: list[float] | None = None,
    batched: list[float] | None = None,
) -> SweepResult:
    raw = {
        "schema_version": 2,
        "model": "tiny",
        "model_id": "x",
        "engine_commit": "unknown",
        "device": {"backend": "numpy", "name": "cpu"},
        "started_at": "2026-12-01T00:00:00Z",
        "wall_s": 1.0,
        "kind": "sweep",
        "tokens": 4,
        "reps": 1,
        "contexts": [
            {"ctx": 32, "decode_tokens": 4, "decode_tok_s": [1.0], "prefill_tok_s": [1.0]}
        ],
        "measured": {
            "seed": 1,
            "timing": {"regions": [[0.01, 0.01]]},
            "verification": {
                "reference": "main",
                "decode_margins": decode,
                "prefill_margins": prefill,
                "prefill_kl": kl,
                "decode_kl": decode_kl or [],
                "batched_decode_kl": batched or [],
            },
        },
    }
    return SweepResult.model_validate(raw)


def test_outputs_that_agree_within_ties_pass() -> None:
    doc = _doc([0.0] * 30 + [0.005, 0.5], [0.0] * 6, [1e-5] * 6)
    assert output_problem(doc, 0.93, 0.03, RULES) is None


def test_outputs_of_another_computation_are_forged() -> None:
    why = output_problem(_doc([2.0] * 20 + [0.0] * 4, [0.0] * 6, [0.0] * 6), 0.93, 0.03, RULES)
    assert why and why.startswith("the timed run computed something else")
    assert "4 of 24" in why
    why = output_problem(_doc([0.0] * 24, [0.0] * 6, [0.9] * 6), 0.93, 0.03, RULES)
    assert why and "prefill logits KL 0.9000" in why
    # a served engine's decode path, held to the same bar as its prefills
    assert (
        output_problem(_doc([0.0] * 24, [0.0] * 6, [0.0] * 6, [0.02] * 8), 0.93, 0.03, RULES)
        is None
    )
    why = output_problem(_doc([0.0] * 24, [0.0] * 6, [0.0] * 6, [0.05] * 8), 0.93, 0.03, RULES)
    assert why and "decode-path logits KL 0.0500" in why and "prefill" not in why
    # the batched decode on its own: its steps are not averaged with the single sequence's
    why = output_problem(
        _doc([0.0] * 24, [0.0] * 6, [0.0] * 6, [0.0] * 60, [0.05] * 8), 0.93, 0.03, RULES
    )
    assert why and "batched decode logits KL 0.0500" in why and "decode-path" not in why


def test_a_served_engine_may_disagree_twice_as_often_as_main_does_with_its_own_server() -> None:
    """Measured 2026-12-06 on an H100 (data/demo/llama/README.md, "On the GPU"): llama.cpp's
    CUDA server flips its own near-ties beyond the tie where its decode runs in another batch
    shape than main's continuation: main's own outputs read 1,886-1,897 of 1,920 generated
    tokens against its server, runtime no-ops 1,864-1,890 in the same sessions. Where main's
    own fail the model's bar, the PR may disagree twice as often (at the ends of both
    intervals); where they pass it, the bar stands."""

    def doc(pr: list[float], main: list[float]) -> SweepResult:
        d = _doc(pr, [0.0] * 6, [0.0] * 6)
        v = d.measured.verification.model_copy(update={"baseline_decode_margins": main})
        return d.model_copy(update={"measured": d.measured.model_copy(update={"verification": v})})

    main = [0.0] * 1890 + [0.5] * 30
    honest = [0.0] * 1864 + [0.5] * 56  # the unluckiest no-op session, beside that main
    why = output_problem(doc(honest, []), 0.995, 0.03, RULES)
    assert why and "1864 of 1920" in why and "bar ≥ 0.995)" in why  # without main's own: REJECT
    assert output_problem(doc(honest, main), 0.995, 0.03, RULES) is None
    # another computation disagrees far more than twice as often as main does with itself
    why = output_problem(doc([0.0] * 1780 + [0.5] * 140, main), 0.995, 0.03, RULES)
    assert why and "1780 of 1920" in why and "agreed with its server on 1890 of 1920" in why
    # main agreeing with itself within the bar leaves it as it is: a PR gets no slack from it
    why = output_problem(doc([0.0] * 440 + [0.5] * 8, [0.0] * 448), 0.995, 0.03, RULES)
    assert why and "bar ≥ 0.995)" in why


def test_unverified_outputs_are_refused() -> None:
    doc = _doc([], [], []).model_copy(
        update={"measured": _doc([], [], []).measured.model_copy(update={"verification": None})}
    )
    assert "not verified" in (output_problem(doc, 0.93, 0.03, RULES) or "")


@pytest.mark.slow
def test_forgeries_in_a_round(fake_repo: FakeRepo, tmp_path: Path) -> None:
    r = fake_repo
    pidfile = tmp_path / "daemon.pid"
    cases = {
        21: ("slow-clock", "FORGE_CLOCK = 0.5", "REJECT"),
        22: ("other-work", "WRONG_WORK = True", "REJECT"),
        # the timing parent runs from main's checkout: write a start-up hook there
        23: (
            "tamper",
            "import pathlib as _p\n_p.Path('sitecustomize.py').write_text('# evil\\n')",
            "REJECT",
        ),
        # its accuracy commands run in its own checkout: rewrite a pinned harness file there
        25: (
            "rewrite-harness",
            "import pathlib as _p, sys as _y\n"
            "_h = _p.Path('engine/harness/score.py')\n"
            "if _h.exists() and any('score' in a for a in _y.argv):\n"
            "    _h.write_text(_h.read_text() + '# mine now\\n')",
            "REJECT",
        ),
        # a daemon that outlives its session: killed, and the PR is judged on its numbers
        24: (
            "daemon",
            "import subprocess as _s\n"
            f"_d = _s.Popen(['sleep', '300'], start_new_session=True)\n"
            f"open({str(pidfile)!r}, 'a').write(str(_d.pid) + '\\n')",
            "none",
        ),
    }
    for branch, behaviour, _label in cases.values():
        r.branch(branch, behaviour)
    m = r.manifest("forge", [pr(n, b) for n, (b, *_rest) in cases.items()])
    db = tmp_path / "f.duckdb"
    assert collect(m, db, progress=False) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(db), "--round", "forge", "--json"])
    out = {d["pr"]: d for d in json.loads(res.output)}
    assert {n: out[n]["label"] for n in cases} == {n: c[2] for n, c in cases.items()}
    assert "clock was changed" in out[21]["reason"]
    assert "computed something else" in out[22]["reason"]
    assert "main's checkout" in out[23]["reason"] and "sitecustomize.py" in out[23]["reason"]
    # sealed, its checkout is read-only: the rewrite fails inside its own sandbox
    assert "Read-only file system" in out[25]["reason"]
    with open_store(db, read_only=True) as s:
        statuses = {
            (row[0], row[1])
            for row in s.query("SELECT pr, status FROM sessions WHERE pr IN (21, 22, 23)")
        }
    assert {(21, "forged"), (22, "diverged"), (23, "forged")} <= statuses
    with open_store(db, read_only=True) as s:
        # caught once, a PR's later sessions are skipped (policy.failures.stop_after), not run,
        # and the gates they leave without evidence say so instead of 'pending'
        for n in (21, 22):
            kinds = s.query(
                "SELECT status, count(*), sum(wall_s) FROM sessions WHERE pr = ? GROUP BY status",
                [n],
            )
            by = {k: (c, w) for k, c, w in kinds}
            assert by["skipped"][0] > 0 and by["skipped"][1] == 0
            assert set(by) <= {"ok", "forged", "diverged", "skipped"}
            gates = s.query("SELECT status, reason FROM gates WHERE pr = ?", [n])
            assert "warn" not in {g for g, _ in gates}
            assert any(g == "skip" and "later sessions" in r for g, r in gates)
        # a PR that was never caught ran every session
        assert not s.query("SELECT 1 FROM sessions WHERE pr = 24 AND status = 'skipped'")
    for pid in map(int, pidfile.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_files_every_process_trusts(
    fake_repo: FakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PR that adds a start-up hook to the interpreter's site folder is `forged` and the hook
    removed; one that rewrites a file there is `forged` and stops the round (recorded first:
    the round resumes after it once the box is restored)."""
    lib = tmp_path / "site-packages"
    lib.mkdir()
    trusted = lib / "numpy_like.py"
    trusted.write_text("VALUE = 1\n")
    monkeypatch.setattr("collector.run.sandbox.trusted_roots", lambda: [lib])
    r = fake_repo
    r.branch("hook", f"open({str(lib / 'evil.pth')!r}, 'w').write('import os\\n')")
    r.branch("bytecode", f"open({str(lib / 'cache.pyc')!r}, 'wb').write(b'')")
    r.branch("rewrite", f"open({str(trusted)!r}, 'a').write('VALUE = 2\\n')")
    m = r.manifest("trust", [pr(31, "hook"), pr(32, "bytecode"), pr(33, "main")])
    # sealed, none of it can happen: each write fails inside the PR's own sandbox
    sealed = tmp_path / "sealed.duckdb"
    assert collect(m, sealed, progress=False) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(sealed), "--round", "trust", "--json"])
    out = {d["pr"]: d for d in json.loads(res.output)}
    unreachable = ("Read-only file system", "No such file or directory")  # not in its world
    assert all(any(w in out[n]["reason"] for w in unreachable) for n in (31, 32))
    for p in lib.iterdir():  # the fake timing parent runs the PR's code in itself (the real one
        if p != trusted:  # never does: tests/engine), unsealed: what it wrote goes
            p.unlink()
    # unsealed (--unsandboxed), the box guard is what catches it
    db = tmp_path / "t.duckdb"
    assert collect(m, db, progress=False, unsandboxed=True) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(db), "--round", "trust", "--json"])
    out = {d["pr"]: d for d in json.loads(res.output)}
    assert {n: out[n]["label"] for n in (31, 32, 33)} == {31: "REJECT", 32: "none", 33: "none"}
    assert "evil.pth" in out[31]["reason"] and "forged" in out[31]["reason"]
    assert sorted(p.name for p in lib.iterdir()) == ["numpy_like.py"]  # both removed

    m2 = r.manifest("trust-2", [pr(34, "rewrite"), pr(35, "main")])
    db2 = tmp_path / "t2.duckdb"
    with pytest.raises(RoundError, match="numpy_like.py"):
        collect(m2, db2, progress=False, unsandboxed=True)
    with open_store(db2, read_only=True) as s:
        (status,) = s.query("SELECT status FROM sessions WHERE pr = 34")[0]
    assert status == "forged"
    trusted.write_text("VALUE = 1\n")  # restored by hand; the round resumes (the PR's later
    # sessions are skipped: it was caught)
    assert collect(m2, db2, progress=False, unsandboxed=True) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(db2), "--round", "trust-2", "--json"])
    out = {d["pr"]: d["label"] for d in json.loads(res.output)}
    assert out == {34: "REJECT", 35: "none"}


@pytest.mark.slow
def test_a_pr_that_slows_a_competitor_s_checkout_is_forged(
    fake_repo: FakeRepo, tmp_path: Path
) -> None:
    """Another PR's checkout is not the PR's to change: writing a slower engine into a
    competitor's checkout (to take its merge-first) is `forged`, and the competitor's is
    restored before its next session, so it keeps its own verdict."""
    r = fake_repo
    r.branch("fast", 'SPEED = {"tiny/decode": 1.30}')
    r.branch(
        "saboteur",
        "import pathlib as _p\n"
        "for _d in _p.Path.cwd().parent.glob('pr-*'):\n"
        "    if _d != _p.Path.cwd() and (_d / 'engine' / 'fake_behavior.py').exists():\n"
        "        with open(_d / 'engine' / 'fake_behavior.py', 'a') as _f:\n"
        "            _f.write('\\nSPEED = {\"tiny/decode\": 0.5}\\n')",
    )
    m = r.manifest("sabotage", [pr(51, "fast"), pr(52, "saboteur")])
    db = tmp_path / "s.duckdb"
    assert collect(m, db, progress=False) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(db), "--round", "sabotage", "--json"])
    out = {d["pr"]: d for d in json.loads(res.output)}
    assert out[52]["label"] == "REJECT" and "another PR's checkout pr-51" in out[52]["reason"]
    assert out[51]["label"] == "XL"


@pytest.mark.slow
def test_a_pr_that_rewrites_mains_compiled_kernels_is_forged(
    fake_repo: FakeRepo, tmp_path: Path
) -> None:
    """A cached binary is what a process runs for a kernel's source. Each side compiles into
    its own cache and main's harness (the clock, the verifier) reads main's: a PR whose engine
    replaces a binary of main's (to slow main's sessions, or to make the verifier agree with
    its own wrong outputs) is `forged`, and what it added there is removed."""
    seen = tmp_path / "seen.txt"
    # main's sessions compile nothing on NumPy: stand in for a kernel they cache (CuPy writes a
    # binary only where none is cached)
    main_sessions = fake_repo.branch(
        "main-compiles",
        "import os as _o, pathlib as _p\n"
        "_k = _p.Path(_o.environ['CUPY_CACHE_DIR']) / 'main-kernel.cubin'\n"
        "if _k.parent.name == 'main' and not _k.exists():\n"
        "    _k.write_text('compiled by main')\n",
    )
    fake_repo.branch(
        "poison",
        "import os as _o, pathlib as _p, sys as _y\n"
        "_d = _p.Path(_o.environ['CUPY_CACHE_DIR'])\n"
        "_served = _p.Path(_y.argv[0]).name == 'bench.py'  # a timed session's engine (the\n"
        "# fake harness runs it in the timing parent, with the child's environment)\n"
        f"open({str(seen)!r}, 'a').write(f'{{_served}} {{_d.name}}\\n')\n"
        "if _served:\n"
        "    (_d.parent / 'main' / 'added.cubin').write_text('x')\n"
        "    for _f in (_d.parent / 'main').glob('main-*.cubin'):\n"
        "        _f.write_text('evil')\n",
        base=main_sessions,
    )
    m = fake_repo.manifest("kcache", [pr(71, "poison")], base_ref=main_sessions)
    db = tmp_path / "k.duckdb"
    # unsealed: sealed, the PR's engine sees no cache but its own (tests/engine: the sandbox)
    assert collect(m, db, progress=False, unsandboxed=True) == 0
    res = CliRunner().invoke(main, ["show", "--db", str(db), "--round", "kcache", "--json"])
    (out,) = json.loads(res.output)
    assert out["label"] == "REJECT" and "compiled kernels of main" in out["reason"]
    # the PR's processes, in-process (score) and the engine child of a timed session: its own
    assert set(seen.read_text().splitlines()) == {"False pr-71", "True pr-71"}
    cache = tmp_path / ".k.duckdb.scratch" / "kcache" / "work" / "kernel-cache"
    assert not (cache / "main" / "added.cubin").exists()


def test_more_cpu_in_its_requests_than_its_cores_can_run_is_forged_and_one_cores_worth_is_not() -> (
    None
):
    """The parent's readings bracket each request, so on one core the CPU can only reach the wall
    time; the rule allows core_slack and idle_cpu_s beyond it, and reads nothing into documents
    written before the readings (no `cores`)."""
    rules = ForgeryRules()

    def idle(cpu: float, wall: float, cores: int | None = 1) -> IdleReport:
        return IdleReport(
            after_answer_s=[0.0], while_stopped_s=[0.0], stop_s=[0.0],
            request_cpu_s=[cpu / 2, cpu / 2], request_wall_s=[wall / 2, wall / 2], cores=cores,
        )  # fmt: skip

    assert cores_problem(idle(0.98, 1.0), rules) is None  # an honest engine: under 1x
    assert cores_problem(idle(1.025, 1.0), rules) is None  # within the slack
    assert "1.20x" in (cores_problem(idle(1.2, 1.0), rules) or "")
    assert cores_problem(idle(1.9, 1.0, cores=2), rules) is None  # two cores given: 2x is fine
    assert cores_problem(idle(5.0, 1.0, cores=None), rules) is None  # read before the rule
