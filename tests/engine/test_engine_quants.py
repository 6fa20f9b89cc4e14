"""Dequantizers equal gguf.quants.dequantize bit for bit; quantizers follow llama.cpp."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from engine import quants


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_every_tensor_of_the_real_file(smollm2_weights, smollm2_path) -> None:
    reader = gguf.GGUFReader(smollm2_path)
    seen: set[str] = set()
    for t in reader.tensors:
        ours = smollm2_weights.tensors[t.name]
        assert ours.ggml_type == t.tensor_type.name
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ours.shape)
        assert same_bits(ours.dequantize(np), ref), t.name
        seen.add(ours.ggml_type)
    assert seen == {"F32", "Q4_1", "Q8_0"}  # what the SmolLM2 file is made of


def _hard_values(rng: np.random.Generator, rows: int = 48, cols: int = 256) -> np.ndarray:
    """Blocks with every awkward case: zeros, one spike, all-negative, tiny and huge scales."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= rng.uniform(1e-3, 1e3, size=(rows, 1)).astype(np.float32)
    x[0, :32] = 0.0
    x[1, :32] = 0.0
    x[1, 5] = -3.0
    x[2, :32] = -np.abs(x[2, :32])
    x[3, :32] = 1e-6 * rng.standard_normal(32)  # scale lands in float16 subnormals
    x[4, :32] = 7.0  # constant block
    x[5, :32] = np.linspace(-1, 1, 32)  # exact .5 roundings
    return x


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1"])
def test_quantize_and_dequantize_match_gguf(name: str) -> None:
    x = _hard_values(np.random.default_rng(1))
    ref_q = gguf.quants.quantize(x, T[name])
    ours_q = quants.quantize(x, name, np)
    assert ours_q.dtype == np.uint8 and ours_q.shape == ref_q.shape
    assert np.array_equal(ours_q, ref_q)
    assert same_bits(quants.dequantize(ref_q, name, np), gguf.quants.dequantize(ref_q, T[name]))


def test_float_formats_match_gguf() -> None:
    x = _hard_values(np.random.default_rng(2))
    f16 = gguf.quants.quantize(x, T.F16)
    assert same_bits(quants.dequantize(f16, "F16"), gguf.quants.dequantize(f16, T.F16))
    bf16 = gguf.quants.quantize(x, T.BF16)  # uint8 bytes; the engine keeps uint16 bits
    ours = quants.dequantize(bf16.view(np.uint16), "BF16")
    assert same_bits(ours, gguf.quants.dequantize(bf16, T.BF16))
    assert same_bits(quants.dequantize(x, "F32"), x)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1"])
def test_random_bytes_dequantize_like_gguf(name: str) -> None:
    """Any bit pattern (NaN/inf scales included) decodes exactly as gguf decodes it."""
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, size=(16, quants.bytes_per_row(name, 128)), dtype=np.uint8)
    with np.errstate(all="ignore"):
        ref = gguf.quants.dequantize(raw, T[name])
        ours = quants.dequantize(raw, name)
    assert same_bits(ours, ref)


@pytest.mark.parametrize(
    ("name", "max_steps"),
    [("Q8_0", 0.5), ("Q4_0", 1.0), ("Q4_1", 0.5)],
)
def test_round_trip_error_is_within_one_quantization_step(name: str, max_steps: float) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 512)).astype(np.float32) * 3
    back = quants.dequantize(quants.quantize(x, name), name)
    blocks, err = x.reshape(-1, 32), np.abs(back - x).reshape(-1, 32)
    span = blocks.max(1) - blocks.min(1)
    amax = np.abs(blocks).max(1)
    step = {"Q8_0": amax / 127, "Q4_0": amax / 8, "Q4_1": span / 15}[name]
    # float16 storage of the scale (and Q4_1's minimum) adds a relative 2**-11 of the range
    slack = 16 * amax * 2.0**-11
    assert np.all(err.max(1) <= max_steps * step + slack)
    assert err.mean() < 0.5 * step.mean()  # and typically well inside it


def test_bytes_per_row_and_refusals() -> None:
    assert quants.bytes_per_row("Q8_0", 64) == 68
    assert quants.bytes_per_row("Q4_0", 64) == 36
    assert quants.bytes_per_row("Q4_1", 64) == 40
    from engine.errors import EngineError

    with pytest.raises(EngineError, match="multiple of 32"):
        quants.bytes_per_row("Q4_0", 48)
    with pytest.raises(EngineError, match="Q5_0"):
        quants.dequantize(np.zeros((1, 22), np.uint8), "Q5_0")
