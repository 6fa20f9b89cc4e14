"""The bench-protocol commands end to end on the `tiny` dummy model (NumPy backend).

The command line is the interface the collector uses, so the document tests run real
subprocesses; the many bad-input cases run the same click groups in-process (same code path,
without paying a Python start-up each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli_common import run_group as run_cli
from engine.harness.bench import bench
from engine.harness.protocol import parse_document
from engine.harness.score import score_group

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def _env() -> dict[str, str]:
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def harness(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env()
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def document(path: Path, kind: str, proc: subprocess.CompletedProcess[str]):
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return parse_document(path.read_text(), kind)


def test_sweep_of_tiny(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    proc = harness(
        "engine.harness.bench", "sweep", "--model", "tiny", "--ctx", "16,48", "--tokens", "5",
        "--reps", "3", "--backend", "numpy", "--out", str(out),
    )  # fmt: skip
    doc = document(out, "sweep", proc)
    assert doc.model == "tiny" and doc.model_id.startswith("dummy:tiny")
    assert doc.device.backend == "numpy" and doc.device.runtime.startswith("numpy ")
    assert doc.tokens == 5 and doc.reps == 3
    assert [c.ctx for c in doc.contexts] == [16, 48]
    for c in doc.contexts:
        assert len(c.decode_tok_s) == 3 and len(c.prefill_tok_s) == 3
        assert c.vram is None  # no GPU memory on the CPU
    assert doc.engine_commit == "unknown" or len(doc.engine_commit) == 40
    assert not (tmp_path / "sweep.json.tmp").exists()
    # one engine (no --baseline-checkout): no baseline; its turns, the canary, its sandbox
    assert doc.schema_version == 3 and doc.baseline is None
    m = doc.measured
    # held from its load (no reading there): every turn began stopped
    assert m.idle is not None and len(m.idle.while_stopped_s) == len(m.idle.after_answer_s)
    assert m.canary is not None and m.canary.before_s > 0 and m.canary.after_s > 0
    assert m.sandbox == "none" or (m.sandbox or "").startswith("bubblewrap")


def test_concurrent_of_tiny(tmp_path: Path) -> None:
    out = tmp_path / "concurrent.json"
    proc = harness(
        "engine.harness.bench", "concurrent", "--model", "tiny", "--widths", "2,3", "--tokens", "6",
        "--runs", "2", "--prompt-len", "10", "--backend", "numpy", "--out", str(out),
    )  # fmt: skip
    doc = document(out, "concurrent", proc)
    assert doc.tokens == 6
    assert [(w.width, w.prompt_len, len(w.runs)) for w in doc.widths] == [(2, 10, 2), (3, 10, 2)]
    for w in doc.widths:
        for r in w.runs:
            assert r.tokens_expected == w.width * 6
            assert r.tokens_decoded == r.tokens_expected and r.complete


def test_score_of_a_tokens_file(tmp_path: Path) -> None:
    tokens = [1, 504, 3022, 28, 1168, 314, 260, 1500, 30, 9, 4000, 17]
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    out = tmp_path / "score.json"
    proc = harness(
        "engine.harness.score", "score", "--model", "tiny", "--tokens-file",
        str(tmp_path / "tokens.json"), "--topk", "4", "--backend", "numpy", "--out", str(out),
    )  # fmt: skip
    doc = document(out, "score", proc)
    assert doc.tokens == tokens and doc.topk == 4
    assert len(doc.positions) == len(tokens) - 1
    for i, p in enumerate(doc.positions):
        lps = [lp for _, lp in p.topk]
        assert len(p.topk) == 4 and lps == sorted(lps, reverse=True)
        assert all(lp <= 0 for lp in lps) and p.target_logprob <= 0
        assert p.topk[0][0] == p.argmax
        if tokens[i + 1] == p.argmax:
            assert p.target_logprob == p.topk[0][1]
        else:
            assert p.target_logprob <= p.topk[0][1]


def test_score_defaults_to_the_corpus_from_any_directory(tmp_path: Path) -> None:
    env = _env()
    proc = subprocess.run(
        [sys.executable, "-m", "engine.harness.score", "score", "--model", "tiny", "--topk", "2",
         "--backend", "numpy", "--out", "-"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = parse_document(proc.stdout, "score")
    from engine.models import open_tokenizer

    corpus = (REPO / "data" / "corpus.txt").read_text(encoding="utf-8")
    assert doc.tokens == open_tokenizer("tiny").encode(corpus)
    assert len(doc.positions) == len(doc.tokens) - 1


def test_prefill_check_of_tiny(tmp_path: Path) -> None:
    out = tmp_path / "pc.json"
    proc = harness(
        "engine.harness.score", "prefill-check", "--model", "tiny", "--prefix", "16,64",
        "--positions", "12", "--backend", "numpy", "--out", str(out),
    )  # fmt: skip
    doc = document(out, "prefill-check", proc)
    assert [(p.prefix, p.positions) for p in doc.prefixes] == [(16, 12), (64, 12)]
    for p in doc.prefixes:
        assert p.top1 == 1.0
        assert p.kl_max < 1e-4  # the same float32 model through two paths: round-off only


def test_bad_input_is_one_line_and_exit_2_in_a_subprocess(tmp_path: Path) -> None:
    proc = harness("engine.harness.bench", "sweep", "--model", "no-such-model", "--out", "-")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""


def test_unwritable_out_is_a_one_line_error(tmp_path: Path) -> None:
    out = tmp_path / "no-such-dir" / "sweep.json"
    proc = harness(
        "engine.harness.bench", "sweep", "--model", "tiny", "--ctx", "8", "--tokens", "2", "--reps", "1",
        "--backend", "numpy", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot write") and proc.stderr.count("\n") == 1
    assert not out.parent.exists()


BAD_BENCH = [
    ["sweep", "--model", "no-such-model"],
    ["sweep", "--model", "tiny", "--ctx", "8190", "--tokens", "16"],
    ["sweep", "--model", "tiny", "--ctx", "128,abc"],
    ["sweep", "--model", "tiny", "--ctx", ""],
    ["sweep", "--model", "tiny", "--reps", "0"],
    ["sweep", "--model", "tiny", "--warmup", "-1"],
    ["sweep", "--model", "tiny", "--min-time", "-0.5"],
    ["sweep", "--model", "tiny", "--tokens", "many"],
    ["sweep", "--model", "tiny", "--backend", "tpu"],
    ["concurrent", "--model", "tiny", "--widths", "2,,4"],
    ["concurrent", "--model", "tiny", "--widths", "4", "--prompt-len", "8190"],
    ["sweep"],
    ["nonsense"],
]


@pytest.mark.parametrize("args", BAD_BENCH, ids=lambda a: " ".join(a))
def test_bad_bench_input(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(bench, [*args, "--out", "-"] if len(args) > 1 else args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""


def _bad_score_cases(tmp: Path) -> list[list[str]]:
    (tmp / "empty.txt").write_text("  \n\n")
    (tmp / "not-json.json").write_text("[1, 2,")
    (tmp / "dict.json").write_text('{"tokens": [1, 2]}')
    (tmp / "range.json").write_text("[1, 2, 49152]")
    (tmp / "neg.json").write_text("[1, -3, 4]")
    (tmp / "long.json").write_text(json.dumps([5] * 8193))
    (tmp / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp / "ok.json").write_text("[1, 2, 3]")
    (tmp / "one-token.txt").write_text("a")
    return [
        ["score", "--model", "tiny", "--text-file", str(tmp / "empty.txt")],
        ["score", "--model", "tiny", "--text-file", str(tmp / "absent.txt")],
        ["score", "--model", "tiny", "--text-file", str(tmp / "bin.txt")],
        ["score", "--model", "tiny", "--text-file", str(tmp / "one-token.txt")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "absent.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "not-json.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "dict.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "range.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "neg.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "long.json")],
        ["score", "--model", "no-such-model", "--tokens-file", str(tmp / "ok.json")],
        ["score", "--model", "tiny", "--tokens-file", str(tmp / "ok.json"), "--topk", "0"],
        [
            "score",
            "--model",
            "tiny",
            "--tokens-file",
            str(tmp / "ok.json"),
            "--text-file",
            str(tmp / "empty.txt"),
        ],  # fmt: skip
        ["prefill-check", "--model", "tiny", "--prefix", "8190", "--positions", "64"],
        ["prefill-check", "--model", "tiny", "--prefix", "12x"],
        ["prefill-check", "--model", "tiny", "--positions", "-1"],
    ]


def test_bad_score_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in _bad_score_cases(tmp_path):
        assert run_cli(score_group, [*args, "--out", "-"]) == 2, args
        captured = capsys.readouterr()
        assert captured.err.startswith("error: "), (args, captured.err)
        assert captured.err.count("\n") == 1, (args, captured.err)
        assert captured.out == "", args


def test_corpus_size() -> None:
    """1,200+ tokens for the accuracy gates, and room for BOS in a 2,048-token context."""
    from engine.models import open_tokenizer

    ids = open_tokenizer("smollm2-135m").encode((REPO / "data" / "corpus.txt").read_text())
    assert 1200 <= len(ids) <= 2047


def test_help_on_every_command() -> None:
    for group, names in (
        (bench, ("sweep", "concurrent", "longctx")),
        (score_group, ("score", "prefill-check")),
    ):
        for name in names:
            command = group.commands[name]
            assert command.help, name
            for param in command.params:
                assert getattr(param, "help", None), (name, param.name)


@pytest.mark.gpu
def test_every_command_on_the_gpu(tmp_path: Path) -> None:
    """The same commands on the CuPy backend: documents validate and say they ran on the GPU."""
    runs = {
        "sweep": (
            "engine.harness.bench",
            "sweep",
            "--ctx",
            "16,64",
            "--tokens",
            "8",
            "--reps",
            "2",
        ),
        "concurrent": ("engine.harness.bench", "concurrent", "--widths", "2,4", "--tokens", "8"),
        "score": ("engine.harness.score", "score", "--topk", "5"),
        "prefill-check": (
            "engine.harness.score",
            "prefill-check",
            "--prefix",
            "16,64",
            "--positions",
            "8",
        ),
    }
    for kind, (module, *args) in runs.items():
        out = tmp_path / f"{kind}.json"
        proc = harness(module, *args, "--model", "tiny", "--backend", "cupy", "--out", str(out))
        doc = document(out, kind, proc)
        assert doc.device.backend == "cupy" and doc.device.driver, kind
        if kind == "concurrent":
            assert all(r.complete for w in doc.widths for r in w.runs)
        if kind == "prefill-check":
            # different kernels on the two paths: agreement, not bit-identity (a loose bound)
            assert all(p.top1 >= 0.9 for p in doc.prefixes), doc.prefixes
