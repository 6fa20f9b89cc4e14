"""A paired session: `bench sweep|concurrent --baseline-checkout DIR --engine-checkout PR` times
main's engine beside the PR's, turn by turn, in one timing parent (engine/harness/bench.py), and
its document carries both (`baseline`) with what each did while not its turn, the box's canary
and the sandbox. Main's engine failing is never the PR's: exit code 3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine_helpers import REPO, checkout_with

from engine.cli_common import EXIT_BAD_OUTPUT, EXIT_BASELINE
from engine.harness.bench import leg_order
from engine.harness.common import engine_commit
from engine.harness.protocol import (
    SCHEMA_VERSION,
    ConcurrentResult,
    LongContextResult,
    SweepResult,
    parse_document,
)

ENV = {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
BROKEN = "raise SystemExit('this engine cannot start')\n"


def harness(tmp_path: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "engine.harness.bench", command, "--model", "tiny"]
    argv += ["--backend", "numpy", "--min-time", "0.01", *args, "--out", str(tmp_path / "out.json")]
    return subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def paired_sweep(tmp_path: Path, pr: Path, *extra: str) -> SweepResult:
    args = ["--ctx", "16,32", "--tokens", "4", "--reps", "2", "--baseline-checkout", "."]
    res = harness(tmp_path, "sweep", *args, "--engine-checkout", str(pr), *extra)
    assert res.returncode == 0, res.stderr
    return parse_document((tmp_path / "out.json").read_bytes(), "sweep")  # type: ignore[return-value]


def test_a_paired_sweep_carries_mains_engine_beside_the_prs(
    tmp_path: Path, sandbox_kind: str
) -> None:
    pr = checkout_with(tmp_path, name="pr")  # an unchanged copy: the PR's checkout
    scratch = tmp_path / "scratch"
    doc = paired_sweep(tmp_path, pr, "--sandbox", sandbox_kind, "--scratch", str(scratch))
    assert doc.schema_version == SCHEMA_VERSION == 3
    base, measured = doc.baseline, doc.measured
    assert base is not None
    # the same contexts, repetitions and operations, main's commit named
    assert [c.ctx for c in base.contexts] == [c.ctx for c in doc.contexts] == [16, 32]
    assert all(len(c.decode_tok_s) == len(c.prefill_tok_s) == doc.reps == 2 for c in base.contexts)
    assert base.widths == doc.widths == []
    assert base.commit == engine_commit(REPO)
    # A B B A: each engine ran each operation as often as the other, in as many turns
    assert sorted(base.timing.groups) == sorted(measured.timing.groups)
    assert len(base.timing.regions) == len(measured.timing.regions)
    for idle in (base.idle, measured.idle):
        assert idle is not None
        turns = len(idle.after_answer_s)
        # warmed up (its load is no turn); per context 1 + 2 repetitions (the first untimed) of
        # a prefill and a decode, two turns each; then its memory report
        assert turns == len(base.idle.after_answer_s) == 1 + 2 * (3 * 2 * 2) + 2
        assert len(idle.between_s) == len(idle.stop_s) == len(idle.window_s) == turns
        assert len(idle.while_stopped_s) == turns  # every turn began stopped: held from its load
        assert idle.device_busy_s == []
    assert measured.canary is not None and measured.canary.workload.startswith("numpy 128 x 128")
    assert measured.canary.before_s > 0 and measured.canary.after_s > 0
    if sandbox_kind == "bwrap":
        assert measured.sandbox is not None and measured.sandbox.startswith("bubblewrap ")
    else:
        assert measured.sandbox == "none"
    assert base.memory is not None and measured.memory is not None
    # main's outputs are main's own; the PR's are verified (an honest copy: no margin)
    v = measured.verification
    assert v is not None and v.decode_margins and max(v.decode_margins) == 0.0
    # each engine had a home of its own in the scratch folder, beside the tokenized corpus
    assert {"engine-home", "baseline-home"} <= {p.name for p in scratch.iterdir()}
    assert len(list(scratch.glob("corpus-*.npy"))) == 1
    # the document says the same in JSON: the collector's reading of both sides
    raw = json.loads((tmp_path / "out.json").read_text())
    assert set(raw["baseline"]) >= {"commit", "contexts", "widths", "timing", "memory", "idle"}


def test_a_paired_concurrent_session_measures_the_same_widths(tmp_path: Path) -> None:
    res = harness(
        tmp_path, "concurrent", "--widths", "2,3", "--tokens", "4", "--runs", "2",
        "--prompt-len", "8", "--baseline-checkout", ".", "--engine-checkout", str(REPO),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = parse_document((tmp_path / "out.json").read_bytes(), "concurrent")
    assert isinstance(doc, ConcurrentResult) and doc.baseline is not None
    assert [w.width for w in doc.baseline.widths] == [w.width for w in doc.widths] == [2, 3]
    assert all(len(w.runs) == 2 and all(r.complete for r in w.runs) for w in doc.baseline.widths)
    assert doc.measured.idle is not None and doc.measured.canary is not None


def test_a_failing_baseline_is_exit_3_and_a_failing_engine_is_not(tmp_path: Path) -> None:
    broken = checkout_with(tmp_path, append=BROKEN, name="broken")
    common = ["--ctx", "16", "--tokens", "4", "--reps", "1"]
    res = harness(tmp_path, "sweep", *common, "--baseline-checkout", str(broken))
    assert res.returncode == EXIT_BASELINE == 3, res.stderr
    assert "main's engine process exited with code 1" in res.stderr
    assert "this engine cannot start" in res.stderr
    assert not (tmp_path / "out.json").exists()
    # the same failure in the engine under test is the PR's own
    res = harness(
        tmp_path, "sweep", *common, "--baseline-checkout", ".", "--engine-checkout", str(broken)
    )
    assert res.returncode == EXIT_BAD_OUTPUT == 1, res.stderr
    assert "the engine process exited with code 1" in res.stderr
    assert not (tmp_path / "out.json").exists()


def longctx(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "engine.harness.bench", "longctx", "--model", "tiny"]
    argv += ["--backend", "numpy", "--ctx", "64", "--tokens", "4"]
    argv += ["--memory-budget", str(256 * 2**20), *args, "--out", str(tmp_path / "out.json")]
    return subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def test_the_long_context_check_runs_mains_engine_beside_and_its_failure_is_mains(
    tmp_path: Path,
) -> None:
    """Main's engine runs the check in the same session, alone under the same budget (the
    speed the PR's is held against); each process times --runs prefills, the fastest kept. A
    main that cannot complete is main's failure (exit 3), never the PR's."""
    pr = checkout_with(tmp_path, name="pr")
    res = longctx(tmp_path, "--runs", "2", "--engine-checkout", str(pr), "--baseline-checkout", ".")
    assert res.returncode == 0, res.stderr
    doc = parse_document((tmp_path / "out.json").read_bytes(), "longctx")
    assert isinstance(doc, LongContextResult) and doc.completed and doc.runs == 2
    assert doc.main is not None and doc.main.commit == engine_commit(REPO)
    assert doc.main.prefill_tok_s > 0 and doc.main.memory is not None
    v = doc.measured.verification if doc.measured else None
    assert v is not None and v.decode_margins and max(v.decode_margins) == 0.0
    broken = checkout_with(tmp_path, append=BROKEN, name="broken")
    (tmp_path / "out.json").unlink()
    res = longctx(tmp_path, "--engine-checkout", str(pr), "--baseline-checkout", str(broken))
    assert res.returncode == EXIT_BASELINE == 3, res.stderr
    assert "main's engine process exited with code 1" in res.stderr
    assert not (tmp_path / "out.json").exists()


def test_long_context_legs_alternate_the_engines_and_keep_every_legs_evidence(
    tmp_path: Path,
) -> None:
    """`--legs 2`: main's engine and the PR's each run the check in two processes, main PR PR
    main or its mirror; the document keeps each engine's fastest, and every leg's timed regions,
    turns and outputs (all of them verified)."""
    assert leg_order(True, 2, True) == [True, False, False, True]
    assert leg_order(False, 3, True) == [False, True, True, False, False, True]
    assert leg_order(True, 2, False) == [False]  # unpaired: the measured engine alone
    pr = checkout_with(tmp_path, name="pr")
    docs = {}
    for legs in (1, 2):
        res = longctx(
            tmp_path, "--legs", str(legs), "--engine-checkout", str(pr), "--baseline-checkout", "."
        )
        assert res.returncode == 0, res.stderr
        docs[legs] = parse_document((tmp_path / "out.json").read_bytes(), "longctx")
        (tmp_path / "out.json").unlink()
    one, two = docs[1], docs[2]
    assert isinstance(two, LongContextResult) and two.completed and two.legs == 2 and one.legs == 1
    assert two.main is not None and two.main.prefill_tok_s > 0 and two.prefill_tok_s
    assert one.measured and two.measured and one.measured.timing and two.measured.timing
    assert len(two.measured.timing.regions) == 2 * len(one.measured.timing.regions)
    assert two.measured.idle and one.measured.idle
    assert len(two.measured.idle.stop_s) == 2 * len(one.measured.idle.stop_s)
    v1, v2 = one.measured.verification, two.measured.verification
    assert v1 and v2 and len(v2.decode_margins) == 2 * len(v1.decode_margins) > 0


def test_legs_start_the_engines_anew_and_deal_the_repetitions(tmp_path: Path) -> None:
    """`--legs 2`: two pairs of engine processes one after another, the repetitions dealt over
    them; the document is one session's (every leg's values, regions, turns and checks)."""
    args = [
        "--ctx",
        "16",
        "--tokens",
        "4",
        "--reps",
        "3",
        "--baseline-checkout",
        ".",
        "--legs",
        "2",
    ]
    res = harness(tmp_path, "sweep", *args, "--widths", "2", "--width-runs", "1", "--warmup", "0")
    assert res.returncode == 0, res.stderr
    assert "leg 1 of 2" in res.stderr and "leg 2 of 2" in res.stderr
    doc = parse_document((tmp_path / "out.json").read_bytes(), "sweep")
    assert isinstance(doc, SweepResult) and doc.baseline is not None
    assert doc.measured.legs == 2 and doc.reps == 3
    for c in (doc.contexts[0], doc.baseline.contexts[0]):
        assert len(c.decode_tok_s) == len(c.prefill_tok_s) == 3  # 2 in the first leg, 1 after
    # one batched run, in the first leg only
    assert [len(w.runs) for w in doc.widths] == [len(w.runs) for w in doc.baseline.widths] == [1]
    for idle in (doc.measured.idle, doc.baseline.idle):
        assert idle is not None
        # each new process is held from its load: every turn of every leg began stopped
        assert len(idle.while_stopped_s) == len(idle.after_answer_s)
    assert len(doc.measured.timing.regions) == len(doc.baseline.timing.regions)
    phases = doc.measured.phases
    assert phases is not None and list(phases) == [
        "engine_loaded", "warmed", "measured", "engine_stopped", "verified"
    ]  # fmt: skip
    assert list(phases.values()) == sorted(phases.values()) and phases["verified"] <= doc.wall_s
    # every leg's kept outputs verified: 3 repetitions of a prefill and a decode, 1 batched run
    assert doc.measured.verification is not None
    assert len(doc.measured.verification.prefill_margins) >= 3


def test_more_legs_than_repetitions_is_refused(tmp_path: Path) -> None:
    res = harness(tmp_path, "concurrent", "--widths", "2", "--runs", "2", "--legs", "3")
    assert res.returncode != 0 and "--legs 3 exceeds --runs 2" in res.stderr
