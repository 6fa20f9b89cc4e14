"""The NumPy forward pass: against a naive float64 reference, its own KV cache, and float64."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import kl_top1

from engine import numpy_backend
from engine.errors import EngineError
from engine.models import load_weights
from engine.numpy_backend import NumpyRunner


def naive_forward(weights, ids: list[int]) -> np.ndarray:  # noqa: ANN001
    """Logits of every position, one token and one head at a time, in float64.

    Written from the model definition, independently of engine.numpy_backend: llama rotates
    adjacent pairs (2i, 2i+1) (GGUF llama q/k are permuted for it), qwen3 pairs (i, i+d/2).
    """
    c = weights.config

    def w(name: str) -> np.ndarray:
        return weights.tensors[name].dequantize(np).astype(np.float64)

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x) + c.norm_eps) * g

    def rotate(vec: np.ndarray, pos: int) -> np.ndarray:
        out = vec.copy()
        for i in range(c.head_dim // 2):
            theta = pos * c.rope_base ** (-2.0 * i / c.head_dim)
            a, b = (i, i + c.head_dim // 2) if c.arch == "qwen3" else (2 * i, 2 * i + 1)
            out[a] = vec[a] * np.cos(theta) - vec[b] * np.sin(theta)
            out[b] = vec[a] * np.sin(theta) + vec[b] * np.cos(theta)
        return out

    embd = w("token_embd.weight")
    out_w = embd if c.tied_embeddings else w("output.weight")
    keys: list[list[list[np.ndarray]]] = [[] for _ in range(c.n_layers)]
    values: list[list[list[np.ndarray]]] = [[] for _ in range(c.n_layers)]
    logits = []
    for pos, tok in enumerate(ids):
        x = embd[tok].copy()
        for li in range(c.n_layers):
            p = f"blk.{li}."
            xn = rms(x, w(p + "attn_norm.weight"))
            q = (w(p + "attn_q.weight") @ xn).reshape(c.n_heads, c.head_dim)
            k = (w(p + "attn_k.weight") @ xn).reshape(c.n_kv_heads, c.head_dim)
            v = (w(p + "attn_v.weight") @ xn).reshape(c.n_kv_heads, c.head_dim)
            if c.qk_norm:
                q = np.stack([rms(h, w(p + "attn_q_norm.weight")) for h in q])
                k = np.stack([rms(h, w(p + "attn_k_norm.weight")) for h in k])
            q = np.stack([rotate(h, pos) for h in q])
            keys[li].append([rotate(h, pos) for h in k])
            values[li].append(list(v))
            heads = []
            for h in range(c.n_heads):
                kv = h // (c.n_heads // c.n_kv_heads)
                s = np.array([q[h] @ keys[li][t][kv] for t in range(pos + 1)]) / np.sqrt(c.head_dim)
                a = np.exp(s - s.max())
                a /= a.sum()
                heads.append(sum(a[t] * values[li][t][kv] for t in range(pos + 1)))
            x = x + w(p + "attn_output.weight") @ np.concatenate(heads)
            xn = rms(x, w(p + "ffn_norm.weight"))
            gate, up = w(p + "ffn_gate.weight") @ xn, w(p + "ffn_up.weight") @ xn
            x = x + w(p + "ffn_down.weight") @ (gate / (1 + np.exp(-gate)) * up)
        logits.append(out_w @ rms(x, w("output_norm.weight")))
    return np.array(logits)


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen3:q4_1"])
def test_forward_matches_a_naive_reference(name: str) -> None:
    weights = load_weights(name)
    ids = [int(i) for i in np.random.default_rng(5).integers(0, 49152, size=24)]
    ref = naive_forward(weights, ids)
    ours64 = NumpyRunner(weights, dtype=np.float64).prefill(0, np.array(ids), all_logits=True)
    ours32 = NumpyRunner(weights).prefill(0, np.array(ids), all_logits=True)
    assert ours32.dtype == np.float32 and ours32.shape == (24, 49152)
    assert np.abs(ours64 - ref).max() < 1e-4  # float32 rounding of the returned logits only
    assert np.abs(ours32 - ref).max() < 1e-2
    assert np.array_equal(ours32.argmax(-1), ref.argmax(-1))


def test_rope_conventions() -> None:
    """llama (NORM) rotates element 0 into element 1; qwen3 (NEOX) into element d/2."""
    for name, partner in (("tiny", 1), ("tiny-qwen3", 16)):
        r = NumpyRunner(load_weights(name + ":f32"))
        x = np.zeros((1, 1, r.config.head_dim), dtype=np.float32)
        x[..., 0] = 1.0
        y = r._rope(x, np.array([1]))[0, 0]
        assert y[0] == pytest.approx(np.cos(1.0)) and y[partner] == pytest.approx(np.sin(1.0))
        assert np.count_nonzero(y) == 2


def _decode_one_by_one(runner: NumpyRunner, seq: int, ids: np.ndarray, start: int) -> np.ndarray:
    runner.prefill(seq, ids[:start])
    return np.stack([runner.decode([seq], ids[i : i + 1])[0] for i in range(start, len(ids))])


@pytest.mark.parametrize("name", ["smollm2-135m", "tiny-qwen3"])
def test_decode_equals_prefill(name: str, corpus_ids: np.ndarray, request) -> None:  # noqa: ANN001
    if name == "smollm2-135m":
        runner = request.getfixturevalue("smollm2_runner")
    else:
        runner = NumpyRunner(load_weights(name))
    ids = corpus_ids[:24]
    runner.reset(1, 64)
    full = runner.prefill(0, ids, all_logits=True)
    runner.reset(1, 64)
    stepped = _decode_one_by_one(runner, 0, ids, 16)
    assert runner.seq_len(0) == 24
    assert np.abs(stepped - full[16:]).max() < 2e-3 * np.abs(full).max()
    assert np.array_equal(stepped.argmax(-1), full[16:].argmax(-1))


def test_chunked_and_split_prefill_equal_one_pass(monkeypatch, corpus_ids) -> None:  # noqa: ANN001
    runner = NumpyRunner(load_weights("tiny"))
    ids = corpus_ids[:40]
    whole = runner.prefill(0, ids, all_logits=True)
    monkeypatch.setattr(numpy_backend, "PREFILL_CHUNK", 7)
    runner.reset(1, 64)
    chunked = runner.prefill(0, ids, all_logits=True)
    runner.reset(1, 64)
    split = np.concatenate([runner.prefill(0, ids[:13], True), runner.prefill(0, ids[13:], True)])
    assert np.allclose(chunked, whole, atol=1e-4) and np.allclose(split, whole, atol=1e-4)


@pytest.mark.parametrize("name", ["smollm2-135m", "tiny-qwen3:q8_0"])
def test_batched_decode_equals_each_alone(name: str, corpus_ids, request) -> None:  # noqa: ANN001
    runner = (
        request.getfixturevalue("smollm2_runner")
        if name == "smollm2-135m"
        else NumpyRunner(load_weights(name))
    )
    lengths = [3, 17, 9]
    starts = [0, 50, 100]
    prompts = [corpus_ids[s : s + n] for s, n in zip(starts, lengths, strict=True)]
    runner.reset(4, 64)  # sequence 3 stays empty
    for seq, p in enumerate(prompts):
        runner.prefill(seq, p)
    steps = np.stack([corpus_ids[s + n : s + n + 2] for s, n in zip(starts, lengths, strict=True)])
    # sequences out of order in the batch, two steps
    order = [2, 0, 1]
    batched = [runner.decode(order, steps[order, i]) for i in range(2)]
    assert runner.seq_len(3) == 0
    for seq in range(3):
        runner.reset(1, 64)
        runner.prefill(0, prompts[seq])
        for i in range(2):
            alone = runner.decode([0], steps[seq, i : i + 1])[0]
            got = batched[i][order.index(seq)]
            assert np.abs(got - alone).max() < 1e-3 * np.abs(alone).max(), (seq, i)


def test_truncate_then_continue_equals_fresh(corpus_ids) -> None:  # noqa: ANN001
    runner = NumpyRunner(load_weights("tiny"))
    runner.prefill(0, corpus_ids[:30])
    runner.truncate(0, 12)
    assert runner.seq_len(0) == 12
    again = runner.prefill(0, corpus_ids[12:20])
    runner.reset(1, 64)
    fresh = runner.prefill(0, corpus_ids[:20])
    assert np.allclose(again, fresh, atol=1e-4)


@pytest.mark.slow
def test_float32_matches_float64_on_smollm2(smollm2_weights, smollm2_runner, corpus_ids) -> None:  # noqa: ANN001
    ids = corpus_ids[:300]
    smollm2_runner.reset(1, 300)
    f32 = smollm2_runner.prefill(0, ids, all_logits=True)
    f64 = NumpyRunner(smollm2_weights, dtype=np.float64).prefill(0, ids, all_logits=True)
    top1, kl_mean, _ = kl_top1(f64, f32)
    assert top1 >= 0.995
    assert kl_mean <= 1e-4


def test_limits_are_enforced() -> None:
    runner = NumpyRunner(load_weights("tiny"))
    with pytest.raises(EngineError, match="longer than the model allows"):
        runner.reset(1, runner.config.max_context + 1)
    runner.reset(2, 16)
    with pytest.raises(EngineError, match="longer than the KV cache holds"):
        runner.prefill(0, np.arange(17))
    runner.prefill(0, np.arange(16))
    with pytest.raises(EngineError, match="17 tokens"):
        runner.decode([0], np.array([1]))
    with pytest.raises(EngineError, match="empty"):
        runner.prefill(1, np.array([], dtype=np.int64))
    with pytest.raises(EngineError, match="outside the vocabulary"):
        runner.prefill(1, np.array([49152]))
    with pytest.raises(EngineError, match="same sequence twice"):
        runner.decode([1, 1], np.array([1, 2]))
    with pytest.raises(EngineError, match="does not exist"):
        runner.seq_len(2)
