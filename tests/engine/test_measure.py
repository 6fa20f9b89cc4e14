"""The timing parent's measurement loops and its verification, against in-process engine doubles,
and the whole parent/child path on the real `tiny` model (patched clock, shortcut, honest)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_harness_units import VOCAB, FakeRunner, corpus

from collector.forgery import ForgeryRules, clock_problem, timing_problem
from collector.policy import load_policy, resolve
from engine.errors import EngineOutputError
from engine.harness.common import log_softmax_rows, top_k
from engine.harness.measure import Bench, measure_context, measure_widths, warm_up
from engine.harness.protocol import parse_document
from engine.harness.timing import QUIT_GRACE_S, Challenges, Region, Sample, Timeline
from engine.harness.verify import digest_kl, pick_margins, verify

REPO = Path(__file__).resolve().parents[2]


class InProcessEngine:
    """EngineProcess's interface over a runner in this process (what serve.py does, minus pipes)."""

    def __init__(self, runner: FakeRunner) -> None:
        self.runner = runner
        self.vocab = runner.config.vocab_size
        self.timeline = Timeline()
        self.prefills: list[tuple[int, ...]] = []
        self.truncates = 0

    def reset(self, n_seqs: int, max_len: int) -> None:
        self.runner.reset(n_seqs, max_len)

    def truncate(self, seq: int, length: int) -> None:
        self.truncates += 1
        self.runner.truncate(seq, length)

    def prefill(self, seq: int, ids: np.ndarray, timed: bool = True) -> tuple[Sample, float]:
        self.prefills.append(tuple(int(t) for t in ids))
        t0 = time.perf_counter()
        logits = self.runner.prefill(seq, ids)
        seconds = time.perf_counter() - t0 + 1e-6
        if timed:
            self.timeline.regions.append(Region(seconds, seconds))
        lp = log_softmax_rows(np.asarray(logits).reshape(1, -1))[0]
        topk = [(i, float(lp[i])) for i in top_k(lp, 8)]
        return Sample(prompt=ids, argmax=int(np.argmax(logits)), topk=topk), seconds

    def decode(
        self, seqs: list[int], first: np.ndarray, steps: int, timed: bool = True
    ) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        ids = np.asarray(self.runner.decode_greedy(seqs, first, steps))
        seconds = time.perf_counter() - t0 + 1e-6
        if timed:
            self.timeline.regions.append(Region(seconds, seconds))
        if ((ids < 0) | (ids >= self.vocab)).any():
            raise EngineOutputError("decode produced ids outside the vocabulary")
        return ids, seconds

    def vram(self, kv_tokens: int) -> None:
        return None


def bench(runner: FakeRunner, min_time: float = 0.0) -> tuple[Bench, InProcessEngine]:
    engine = InProcessEngine(runner)
    b = Bench(engine, Challenges(seed=3), np.asarray(corpus()), min_time)  # type: ignore[arg-type]
    return b, engine


def test_every_repetition_is_recorded_and_its_fastest_run_is_kept_for_checking() -> None:
    b, engine = bench(FakeRunner())
    warm_up(b)
    sample = measure_context(b, ctx=50, tokens=7, reps=4, warmup=2)
    assert len(sample.decode_tok_s) == 4 and len(sample.prefill_tok_s) == 4
    assert sample.ctx == 50 and sample.decode_tokens == 7
    assert engine.runner.seq_len(0) == 50 + 7  # the prompt and the decoded tokens, nothing more
    # one prefill and one decode per timed repetition (one run each at min_time 0)
    assert len(b.checks.groups) == 2 * 4


def test_inner_runs_get_fresh_challenges() -> None:
    b, engine = bench(FakeRunner(), min_time=0.02)
    measure_context(b, ctx=30, tokens=5, reps=2, warmup=0)
    assert len(engine.prefills) >= 4  # tiny work: several inner runs per repetition
    # a fresh prompt each time (a 300-token corpus and 40 ids: a rare repeat by chance)
    assert len(set(engine.prefills)) > 0.9 * len(engine.prefills)
    assert len({p[0] for p in engine.prefills}) > 1  # the first id is drawn too
    assert engine.truncates >= 2
    # each repetition keeps its fastest run and up to two more for verification
    assert 4 <= len(b.checks.groups) <= 12


def test_the_challenges_cannot_be_predicted_from_the_seedless_side() -> None:
    a, b = Challenges(), Challenges()
    assert a.seed != b.seed
    assert [a.below(1000) for _ in range(8)] != [b.below(1000) for _ in range(8)]
    same = Challenges(seed=a.seed)
    assert Challenges(seed=a.seed).below(10**9) == same.below(10**9)


def test_widths_decode_together_and_keep_groups() -> None:
    b, engine = bench(FakeRunner())
    samples = measure_widths(b, [3], prompt_len=20, tokens=9, runs=2, warmup=1)
    run = samples[0].runs[0]
    assert run.tokens_expected == 27 and run.tokens_decoded == 27
    assert [engine.runner.seq_len(i) for i in range(3)] == [29, 30, 31]
    assert all(len(g) == 3 for g in b.checks.groups) and len(b.checks.groups) == 2


def test_verification_of_honest_outputs_has_zero_margins() -> None:
    b, _ = bench(FakeRunner())
    measure_context(b, ctx=20, tokens=6, reps=2, warmup=0)
    measure_widths(b, [2], prompt_len=10, tokens=4, runs=1, warmup=0)
    report = verify(FakeRunner(), b.checks.groups, "test")
    assert report.decode_margins and max(report.decode_margins) == 0.0
    assert report.prefill_margins and max(report.prefill_margins) == 0.0
    assert max(report.prefill_kl) < 1e-9


class CountsPrefills(FakeRunner):
    def __init__(self) -> None:
        super().__init__()
        self.prefilled = 0

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        self.prefilled += len(tokens)
        return super().prefill(seq, tokens, all_logits)


def test_verification_shares_a_prompts_prefill_and_keeps_every_margin() -> None:
    """A context's prefill sample and the decodes that continued from its prompt are checked
    with one prefill (the cache cut back in between), with the margins group by group verifying
    alone gives; a decode the engine made up still shows."""
    b, _ = bench(FakeRunner())
    measure_context(b, ctx=40, tokens=6, reps=2, warmup=0)
    measure_widths(b, [2], prompt_len=10, tokens=4, runs=1, warmup=0)
    groups = b.checks.groups
    first = groups[1][0]  # a decode of the first repetition, from its prefill's prompt
    forged = Sample(prompt=first.prompt, first=first.first, ids=(first.ids + 1) % VOCAB)
    groups = [*groups[:2], [forged], *groups[2:]]
    runner = CountsPrefills()
    shared = verify(runner, groups, "test")
    alone = [verify(FakeRunner(), [g], "test") for g in groups]
    assert shared.decode_margins == [m for r in alone for m in r.decode_margins]
    assert shared.prefill_margins == [m for r in alone for m in r.prefill_margins]
    assert shared.prefill_kl == [k for r in alone for k in r.prefill_kl]
    every = sum(len(s.prompt) for g in groups for s in g)
    assert runner.prefilled < every / 2  # each 40-token prompt prefilled once, not per sample
    assert max(shared.decode_margins) > 0.0 and min(alone[2].decode_margins) > 0.0


class SkipsWork(FakeRunner):
    """A 'fast' decode that does not feed its tokens back: other tokens than the model's."""

    def decode_greedy(self, seqs, tokens, steps):  # type: ignore[no-untyped-def]
        return np.tile(np.asarray(tokens) % VOCAB, (steps, 1))


def test_verification_sees_a_decode_that_computed_something_else() -> None:
    b, _ = bench(SkipsWork())
    measure_context(b, ctx=20, tokens=6, reps=3, warmup=0)
    report = verify(FakeRunner(), b.checks.groups, "test")
    agree = sum(m <= 1e-3 for m in report.decode_margins)
    assert agree < 0.5 * len(report.decode_margins)


def test_pick_margins_are_log_prob_margins_without_the_softmax() -> None:
    """max log-prob - log-prob of the token made, from the logits alone (the normaliser
    cancels): equal to the log-softmax difference, 0 for the argmax, positive otherwise."""
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((6, 5000)) * 8).astype(np.float32)
    logits[2, 10] = logits[2, 11] = logits[2].max() + 1.0  # a tie at the top
    made = np.array([int(np.argmax(logits[0])), 3, 11, 4999, 0, int(np.argmin(logits[5]))])
    got = pick_margins(logits, made)
    lp = log_softmax_rows(logits)
    want = lp.max(axis=1) - lp[np.arange(6), made]
    assert np.allclose(got, want, atol=1e-9, rtol=0)
    assert got[0] == 0.0 and got[2] == 0.0 and (got[[1, 3, 4, 5]] > 0).all()


def test_digest_kl_is_zero_for_the_same_distribution_and_grows_when_it_moves() -> None:
    lp = log_softmax_rows(np.array([[3.0, 1.0, 0.5, -1.0, 2.0]]))[0]
    same = [(i, float(lp[i])) for i in top_k(lp, 3)]
    assert digest_kl(lp, same) == pytest.approx(0.0, abs=1e-12)
    moved = [(1, -0.1), (0, -3.0), (4, -4.0)]
    assert digest_kl(lp, moved) > 0.5


# --- the whole path: a timing parent and a real engine process ------------------------------


def _checkout_with(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """A copy of this repo's engine/ and data/ with text edits in numpy_backend.py."""
    dst = tmp_path / "checkout"
    shutil.copytree(REPO / "engine", dst / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "data", dst / "data", ignore=shutil.ignore_patterns("*.duckdb"))
    nb = dst / "engine" / "numpy_backend.py"
    for old, new in edits:
        text = nb.read_text()
        assert text.count(old) == 1
        nb.write_text(text.replace(old, new))
    return dst


def _sweep(tmp_path: Path, checkout: Path, ctx: str = "32") -> dict:
    out = tmp_path / "sweep.json"
    argv = [sys.executable, "-m", "engine.harness.bench", "sweep", "--model", "tiny"]
    argv += ["--ctx", ctx, "--tokens", "4", "--reps", "2", "--min-time", "0.02", "--backend"]
    argv += ["numpy", "--engine-checkout", str(checkout), "--out", str(out)]
    env = {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    parse_document(out.read_bytes(), "sweep")
    return doc


@pytest.mark.slow
def test_a_patched_clock_does_not_change_the_parents_numbers(tmp_path: Path) -> None:
    slow_clock = (
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\nimport time as _t\n_r = _t.perf_counter\n"
        "_s = _r()\n_t.perf_counter = lambda: _s + (_r() - _s) * 0.5\n",
    )
    doc = _sweep(tmp_path, _checkout_with(tmp_path, slow_clock))
    regions = np.array(doc["measured"]["timing"]["regions"])
    ratio = np.median(regions[:, 1] / regions[:, 0])
    assert 0.3 < ratio < 0.6  # the engine's own clock ran at half speed; the parent's did not
    assert max(doc["measured"]["verification"]["decode_margins"]) == 0.0


@pytest.mark.slow
def test_a_clock_patched_around_one_context_only_is_seen_in_its_group(tmp_path: Path) -> None:
    """The red team's #201: the engine process's clock runs at half speed only while it decodes
    one sequence from a cache of 32 tokens, a minority of the sweep's regions."""
    lagging_clock = (
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\nimport time as _t\n_real = _t.perf_counter\n"
        "_lag = [0.0]\n_t.perf_counter = lambda: _real() - _lag[0]\n",
    )
    slow_at_32 = (
        "    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:\n",
        "    def decode_greedy(self, seqs, tokens, steps):  # type: ignore[no-untyped-def]\n"
        "        slow, t0 = len(seqs) == 1 and self._lens[int(seqs[0])] == 32, _real()\n"
        "        out = super().decode_greedy(seqs, tokens, steps)\n"
        "        if slow:\n"
        "            _lag[0] += 0.5 * (_real() - t0)\n"
        "        return out\n\n"
        "    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:\n",
    )
    checkout = _checkout_with(tmp_path, lagging_clock, slow_at_32)
    doc = _sweep(tmp_path, checkout, ctx="32,64")
    timing = doc["measured"]["timing"]
    regions = [tuple(r) for r in timing["regions"]]
    groups = timing["groups"]
    shapes = ["prefill n=32", "decode ctx=32 w=1", "prefill n=64", "decode ctx=64 w=1"]
    assert sorted(set(groups)) == sorted(shapes)
    slowed = [o / p for (p, o), g in zip(regions, groups, strict=True) if g == shapes[1]]
    assert len(slowed) < 0.5 * len(regions) and 0.3 < float(np.median(slowed)) < 0.6
    rules = ForgeryRules()
    assert timing_problem(regions, rules) is None  # the document's median alone misses it
    why = timing_problem(regions, rules, groups)
    assert why and f"of {len(slowed)} timed regions of decode ctx=32 w=1" in why
    parsed = parse_document(json.dumps(doc).encode(), "sweep")
    assert clock_problem(parsed, resolve(load_policy(), "cpu").forgery, {}) == why


@pytest.mark.slow
def test_a_shortcut_taken_while_timed_is_seen_by_verification(tmp_path: Path) -> None:
    skip_last_layer = (
        "        for li, L in enumerate(self.layers):\n",
        "        for li, L in enumerate(self.layers[:-1]):\n",
    )
    doc = _sweep(tmp_path, _checkout_with(tmp_path, skip_last_layer))
    margins = doc["measured"]["verification"]["decode_margins"]
    assert sum(m <= 1e-3 for m in margins) < 0.5 * len(margins)
    timing = doc["measured"]["timing"]
    regions = [tuple(r) for r in timing["regions"]]
    # an honest clock, by the collector's own rule (a fixed ratio bound failed on a busy
    # 2-core machine, where 0.6 ms regions carry ~0.15 ms of the pipe's overhead)
    assert timing_problem(regions, ForgeryRules(), timing["groups"]) is None


def _phases_in_order(doc: dict) -> list[float]:
    phases = doc["measured"]["phases"]
    names = ["engine_loaded", "warmed", "measured", "engine_stopped", "verified"]
    assert list(phases) == names
    ends = [phases[n] for n in names]
    assert ends == sorted(ends) and ends[0] > 0 and ends[-1] <= doc["wall_s"]
    return ends


@pytest.mark.slow
def test_speed_documents_record_when_each_phase_of_the_session_ended(tmp_path: Path) -> None:
    """The timing parent's own clock marks load, warm-up, timed work, stop and verification
    (`sparkboard cost` shows where a session's time goes from them): sweep and longctx."""
    _phases_in_order(_sweep(tmp_path, REPO))
    out = tmp_path / "longctx.json"
    argv = [sys.executable, "-m", "engine.harness.bench", "longctx", "--model", "tiny"]
    argv += ["--ctx", "600", "--tokens", "4", "--memory-budget", str(512 * 2**20)]
    argv += ["--backend", "numpy", "--out", str(out)]
    env = {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["completed"]
    _phases_in_order(doc)


@pytest.mark.slow
def test_an_engine_that_lingers_after_quit_is_killed_within_the_grace(tmp_path: Path) -> None:
    """An engine process that goes on running once every answer is in (here an exit handler
    that sleeps a minute; on a GPU it could keep the card busy and hot until main's next
    session) is killed QUIT_GRACE_S after it was asked to quit."""
    linger = (
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\nimport atexit as _a, time as _t\n"
        "_a.register(_t.sleep, 60)\n",
    )
    doc = _sweep(tmp_path, _checkout_with(tmp_path, linger))
    ends = _phases_in_order(doc)
    measured, stopped = ends[2], ends[3]
    assert QUIT_GRACE_S <= stopped - measured < 15  # not the minute it asked for, nor 30 s
