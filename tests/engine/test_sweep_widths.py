"""`bench sweep --widths`: a guard's batched decode, measured after the contexts in the same engine
process and verified with them, so a PR whose multi-sequence decode breaks only a model it does
not target (the red team's "quantized models skip the last layer, only in batched decode") shows
in the guard session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import checkout_with

from collector.judge.forgery import diverged_evidence
from collector.policy import load_policy, resolve
from engine.cli_common import run_group as run_cli
from engine.harness.bench import bench
from engine.harness.protocol import SweepResult, parse_document

REPO = Path(__file__).resolve().parents[2]
CPU = resolve(load_policy(), "cpu")
ENV = {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def sweep(tmp_path: Path, model: str, *extra: str, checkout: Path | None = None) -> SweepResult:
    out = tmp_path / "sweep.json"
    argv = [sys.executable, "-m", "engine.harness.bench", "sweep", "--model", model]
    argv += ["--ctx", "32", "--tokens", "6", "--reps", "2", "--min-time", "0.02"]
    argv += ["--backend", "numpy", *extra, "--out", str(out)]
    argv += ["--engine-checkout", str(checkout)] if checkout else []
    res = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return parse_document(out.read_bytes(), "sweep")  # type: ignore[return-value]


def test_a_plain_sweep_has_no_widths(tmp_path: Path) -> None:
    doc = sweep(tmp_path, "tiny")
    assert doc.widths == [] and doc.width_tokens is None
    raw = json.loads(doc.model_dump_json())
    # a document written before the option (no such keys) is still a valid sweep
    del raw["widths"], raw["width_tokens"]
    assert SweepResult.model_validate(raw).widths == []


def test_widths_are_decoded_after_the_contexts_and_verified_with_them(tmp_path: Path) -> None:
    # one run per turn (--min-time 0): how many runs fit in a turn is the box's speed, and the
    # verified samples' count with it (measure.py's choice of them: test_measure.py)
    plain = sweep(tmp_path, "tiny:q8_0", "--min-time", "0")
    doc = sweep(
        tmp_path, "tiny:q8_0", "--widths", "2", "--width-tokens", "5", "--width-runs", "2",
        "--prompt-len", "12", "--min-time", "0",
    )  # fmt: skip
    assert [c.ctx for c in doc.contexts] == [32] and doc.width_tokens == 5
    assert [(w.width, w.prompt_len, len(w.runs)) for w in doc.widths] == [(2, 12, 2)]
    assert all(r.tokens_expected == 10 and r.complete for r in doc.widths[0].runs)
    v, v0 = doc.measured.verification, plain.measured.verification
    assert v is not None and v0 is not None
    # a context's 2 repetitions keep their decode of 6 tokens; each of the 2 width runs its
    # decode of 2 sequences x 5 tokens
    assert len(v0.decode_margins) == 2 * 6
    assert len(v.decode_margins) - len(v0.decode_margins) == 2 * 2 * 5
    assert max(v.decode_margins) == 0.0  # main's engine against main's model
    assert len(v.prefill_margins) == len(v0.prefill_margins)  # the widths' prefills are untimed
    assert diverged_evidence(doc, "tiny:q8_0", CPU) is None


@pytest.mark.parametrize(
    "args",
    [
        ["--widths", "2,,4"],
        ["--widths", "0"],
        ["--widths", "2", "--width-tokens", "0"],
        ["--widths", "2", "--width-runs", "0"],
        ["--widths", "2", "--prompt-len", "8190"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_widths_of_a_sweep(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(bench, ["sweep", "--model", "tiny", *args, "--out", "-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_bad_width_options_are_named_in_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--model", "tiny", "--widths", "2", "--width-runs", "0", "--out", "-"]
    assert run_cli(bench, argv) == 2
    assert "--width-runs must be positive" in capsys.readouterr().err


# --- the red team's PR, on the real engine ---------------------------------------------------

# quantized models skip the last layer, and only when several sequences decode in one step
BATCHED_SHORTCUT = [
    (
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n",
        "        self._short = len(seqs) > 1 and ':q8_0:' in str(self.model_id)\n"
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n"
        "        self._short = False\n",
    ),
    (
        "        for li, L in enumerate(self.layers):\n",
        "        for li, L in enumerate(self.layers[:-1] if getattr(self, '_short', 0) else "
        "self.layers):\n",
    ),
]


def _checkout(tmp_path: Path) -> Path:
    return checkout_with(tmp_path, *BATCHED_SHORTCUT)


@pytest.mark.slow
def test_a_batched_decode_broken_only_for_the_guard_is_diverged(tmp_path: Path) -> None:
    pr = _checkout(tmp_path)
    # the guard sweep as it was (single-sequence decode and prefill only): nothing to see
    before = sweep(tmp_path, "tiny:q8_0", checkout=pr)
    assert diverged_evidence(before, "tiny:q8_0", CPU) is None
    # with its batched decode, the same engine is caught
    prof = CPU.profile
    args = ["--widths", ",".join(map(str, prof.guard_widths))]
    args += ["--width-tokens", str(prof.concurrent_tokens), "--width-runs"]
    args += [str(prof.guard_width_runs), "--prompt-len", str(prof.prompt_len)]
    doc = sweep(tmp_path, "tiny:q8_0", *args, checkout=pr)
    found = diverged_evidence(doc, "tiny:q8_0", CPU)
    assert found and "generated tokens agree" in found, found
    # the float16 model (no shortcut) decodes together honestly
    f16 = sweep(tmp_path, "tiny", *args, checkout=pr)
    assert diverged_evidence(f16, "tiny", CPU) is None
