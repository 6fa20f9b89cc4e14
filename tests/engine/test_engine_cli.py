"""`python -m engine generate` end to end, and its one-line errors on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import assert_one_line_error, run_engine

from engine.gguf_write import write_gguf
from engine.models import load_weights


def test_greedy_generation_knows_the_capital_of_france() -> None:
    proc = run_engine(
        "generate", "--model", "smollm2-135m", "--prompt", "The capital of France is",
        "--max-tokens", "8", "--backend", "numpy",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout


def test_sampled_generation_is_seeded() -> None:
    args = ["generate", "--model", "tiny:q8_0", "--prompt", "Once upon a time", "--max-tokens", "6"]
    a = run_engine(*args, "--temperature", "0.9", "--seed", "3")
    b = run_engine(*args, "--temperature", "0.9", "--seed", "3")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and a.stdout.strip()


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    good = write_gguf(d / "good.gguf", load_weights("tiny:q8_0")).read_bytes()
    (d / "truncated.gguf").write_bytes(good[: len(good) // 3])
    (d / "text.gguf").write_text("hello, I am not a model\n")
    write_gguf(d / "gpt2.gguf", load_weights("tiny:f32"), arch="gpt2")
    import gguf

    w = load_weights("tiny:f32")
    t = w.tensors["blk.0.attn_q.weight"]
    t.data, t.ggml_type = gguf.quants.quantize(t.data, gguf.GGMLQuantizationType.Q5_1), "Q5_1"
    write_gguf(d / "q5.gguf", w)
    return {p.stem: p for p in d.iterdir()}


@pytest.mark.parametrize(
    ("model", "prompt", "extra", "fragments"),
    [
        ("missing", "hi", [], ["not found"]),
        ("truncated", "hi", [], ["truncated"]),
        ("text", "hi", [], ["not a GGUF file"]),
        ("gpt2", "hi", [], ["architecture 'gpt2'"]),
        ("q5", "hi", [], ["blk.0.attn_q.weight", "Q5_1", "q5.gguf"]),
        ("gpt-17", "hi", [], ["unknown model 'gpt-17'", "tiny"]),
        ("tiny:q3_k", "hi", [], ["no format 'q3_k'", "q4_0"]),
        ("tiny", "", [], ["prompt is empty"]),
        ("tiny", "hi", ["--max-tokens", "9000"], ["longer than the model allows"]),
        ("llama-8b:q4_0", "hi", ["--backend", "numpy"], ["--backend cupy"]),
        ("tiny", "hi", ["--max-tokens", "0"], ["--max-tokens"]),
        ("tiny", "hi", ["--temperature", "hot"], ["--temperature"]),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(
    bad_files: dict[str, Path], model: str, prompt: str, extra: list[str], fragments: list[str]
) -> None:
    if model in bad_files or model == "missing":
        model = str(bad_files.get(model, Path(bad_files["gpt2"]).parent / "absent.gguf"))
    proc = run_engine("generate", "--model", model, "--prompt", prompt, *extra)
    assert_one_line_error(proc, *fragments)
    assert proc.stdout == ""


def test_a_gguf_without_a_vocabulary_is_refused_cleanly(bad_files: dict[str, Path]) -> None:
    proc = run_engine(
        "generate", "--model", str(bad_files["good"]), "--prompt", "Hi", "--max-tokens", "3"
    )
    assert_one_line_error(proc, "carries no tokenizer")


def test_a_gguf_path_generates_like_the_named_model(tmp_path: Path, smollm2_path: Path) -> None:
    """tiny:q8_0 written to a GGUF (with SmolLM2's vocabulary) continues text identically."""
    path = write_gguf(
        tmp_path / "tiny.gguf", load_weights("tiny:q8_0"), tokenizer_from=smollm2_path
    )
    args = ["--prompt", "The lighthouse keeper", "--max-tokens", "5", "--backend", "numpy"]
    by_path = run_engine("generate", "--model", str(path), *args)
    by_name = run_engine("generate", "--model", "tiny:q8_0", *args)
    assert by_path.returncode == 0 and by_name.returncode == 0, by_path.stderr + by_name.stderr
    assert by_path.stdout == by_name.stdout and by_path.stdout.strip()


def test_usage_errors_are_one_line() -> None:
    assert_one_line_error(run_engine("generate", "--prompt", "hi"), "missing option '--model'")
    assert_one_line_error(run_engine("summon"), "no such command 'summon'")
