"""Dummy-weight models at real shapes, deterministic from a seed, on NumPy or CuPy.

Every weight is a counter-based hash of (seed, tensor name, element index) in uint32
arithmetic, so NumPy and CuPy produce bit-identical tensors: a GPU-vs-NumPy test on a dummy
model compares the same weights. Values are uniform, scaled per tensor:

- q/k/v/gate/up: std 1/sqrt(fan_in), so activations stay near unit size;
- attn_output and ffn_down: std RESIDUAL_GAIN/sqrt(fan_in): the blocks, not the raw token
  embedding, dominate the residual stream (with tied embeddings a dominant embedding would
  make every model predict its own input token);
- token_embd and output: std 1/sqrt(dim), and output_norm = LOGIT_STD[vocab], so a logit
  has standard deviation ~LOGIT_STD: that sets how peaked the next-token distribution is
  (measured entropies are in engine/README.md);
- norms: 1 +- 0.1.

Tensors are generated in row chunks (bounded scratch memory) directly in the requested
format: f32, f16, q8_0, q4_0 or q4_1 (quantized with the llama.cpp reference rounding).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine import quants
from engine.config import ModelConfig
from engine.weights import ModelWeights, WeightTensor, expected_tensors

DUMMY_VERSION = 1  # bump when the generator changes the weights it produces
RESIDUAL_GAIN = 1.0
# vocabulary size -> logit standard deviation giving ~2 nats of next-token entropy
LOGIT_STD: dict[int, float] = {49152: 6.0, 128256: 6.5, 151936: 6.5}
_CHUNK_ELEMENTS = 1 << 24  # scratch per generation step


@dataclass(frozen=True)
class DummyModel:
    name: str
    config: ModelConfig
    formats: tuple[str, ...]  # lower-case format suffixes: "f16", "q8_0", ...
    default_format: str = "f16"
    seed: int = 0

    def model_id(self, fmt: str) -> str:
        return f"dummy:{self.name}:{fmt}:seed{self.seed}:v{DUMMY_VERSION}"


# norm epsilons as a GGUF file stores them (float32), so a dummy written to GGUF reads back equal
_F32_1E5 = float(np.float32(1e-5))
_F32_1E6 = float(np.float32(1e-6))


def _config(**kw: Any) -> ModelConfig:
    return ModelConfig(**kw)


DUMMY_MODELS: dict[str, DummyModel] = {
    "tiny": DummyModel(
        "tiny",
        _config(
            arch="llama", n_layers=2, dim=64, ffn_dim=192, n_heads=4, n_kv_heads=2, head_dim=16,
            vocab_size=49152, max_context=8192, rope_base=10000.0, norm_eps=_F32_1E5,
            tied_embeddings=True, qk_norm=False,
        ),
        formats=("f16", "f32", "q8_0", "q4_0", "q4_1"),
    ),
    "tiny-qwen3": DummyModel(  # tiny with Qwen3's qk-norm and NEOX rope, for tests
        "tiny-qwen3",
        _config(
            arch="qwen3", n_layers=2, dim=64, ffn_dim=192, n_heads=4, n_kv_heads=2, head_dim=32,
            vocab_size=49152, max_context=8192, rope_base=1000000.0, norm_eps=_F32_1E6,
            tied_embeddings=False, qk_norm=True,
        ),
        formats=("f16", "f32", "q8_0", "q4_0", "q4_1"),
    ),
    "llama-135m": DummyModel(  # SmolLM2-135M shape: its kernels and launches, without the file
        "llama-135m",
        _config(
            arch="llama", n_layers=30, dim=576, ffn_dim=1536, n_heads=9, n_kv_heads=3,
            head_dim=64, vocab_size=49152, max_context=8192, rope_base=100000.0,
            norm_eps=_F32_1E5, tied_embeddings=True, qk_norm=False,
        ),
        formats=("q4_1", "q8_0", "q4_0", "f16"),
        default_format="q4_1",
    ),
    "llama-1b": DummyModel(  # Llama-3.2-1B shape
        "llama-1b",
        _config(
            arch="llama", n_layers=16, dim=2048, ffn_dim=8192, n_heads=32, n_kv_heads=8,
            head_dim=64, vocab_size=128256, max_context=131072, rope_base=500000.0,
            norm_eps=_F32_1E5, tied_embeddings=True, qk_norm=False,
        ),
        formats=("f16", "q8_0", "q4_0", "q4_1"),
    ),
    "llama-8b": DummyModel(  # Llama-3.1-8B shape
        "llama-8b",
        _config(
            arch="llama", n_layers=32, dim=4096, ffn_dim=14336, n_heads=32, n_kv_heads=8,
            head_dim=128, vocab_size=128256, max_context=131072, rope_base=500000.0,
            norm_eps=_F32_1E5, tied_embeddings=False, qk_norm=False,
        ),
        formats=("f16", "q8_0", "q4_0", "q4_1"),
    ),
    "qwen3-8b": DummyModel(  # Qwen3-8B-like: qk-norm, NEOX rope
        "qwen3-8b",
        _config(
            arch="qwen3", n_layers=36, dim=4096, ffn_dim=12288, n_heads=32, n_kv_heads=8,
            head_dim=128, vocab_size=151936, max_context=40960, rope_base=1000000.0,
            norm_eps=_F32_1E6, tied_embeddings=False, qk_norm=True,
        ),
        formats=("f16", "q8_0", "q4_0", "q4_1"),
    ),
}  # fmt: skip


def tensor_key(seed: int, name: str) -> int:
    """The uint32 stream key of one tensor."""
    return zlib.crc32(f"{seed}:{name}".encode()) & 0xFFFFFFFF


def hash_uniform(xp: ModuleType, start: int, count: int, key: int) -> Any:
    """Uniform float32 in [-1, 1) for element indices start..start+count-1 of a stream.

    lowbias32 (Wellons) over (index * golden + key): only uint32 multiply/xor/shift, so
    NumPy and CuPy agree bit for bit.
    """
    if start + count > 1 << 32:
        raise ValueError("dummy tensors are limited to 2**32 elements")
    x = xp.arange(start, start + count, dtype=xp.uint32)
    x = x * xp.uint32(0x9E3779B9) + xp.uint32(key)
    x ^= x >> xp.uint32(16)
    x *= xp.uint32(0x7FEB352D)
    x ^= x >> xp.uint32(15)
    x *= xp.uint32(0x846CA68B)
    x ^= x >> xp.uint32(16)
    # top 24 bits -> exact float32 in [0, 2), minus 1
    return (x >> xp.uint32(8)).astype(xp.float32) * xp.float32(2.0**-23) - xp.float32(1.0)


def _init(name: str, shape: tuple[int, ...], config: ModelConfig) -> tuple[float, float]:
    """(mean, half-width) of the uniform distribution of one tensor's values."""
    sqrt3 = math.sqrt(3.0)
    if len(shape) == 1:
        if name == "output_norm.weight":
            return LOGIT_STD.get(config.vocab_size, 6.0), 0.0
        return 1.0, 0.1
    fan_in = shape[1]
    std = 1.0 / math.sqrt(fan_in)
    if name.endswith(("attn_output.weight", "ffn_down.weight")):
        std *= RESIDUAL_GAIN
    return 0.0, std * sqrt3


def generate_tensor(
    name: str, shape: tuple[int, ...], fmt: str, config: ModelConfig, seed: int, xp: ModuleType
) -> WeightTensor:
    """One dummy tensor in format `fmt` (vectors are always F32, as in GGUF files)."""
    mean, half = _init(name, shape, config)
    key = tensor_key(seed, name)
    if len(shape) == 1:
        values = xp.float32(mean) + hash_uniform(xp, 0, shape[0], key) * xp.float32(half)
        return WeightTensor(name, "F32", shape, values.astype(xp.float32))
    rows, cols = shape
    ggml_type = fmt.upper()
    if ggml_type in quants.QUANTIZED_TYPES:
        out = xp.empty((rows, quants.bytes_per_row(ggml_type, cols)), dtype=xp.uint8)
    else:
        out = xp.empty(shape, dtype=xp.float16 if ggml_type == "F16" else xp.float32)
    step = max(1, _CHUNK_ELEMENTS // cols)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        chunk = hash_uniform(xp, r0 * cols, (r1 - r0) * cols, key).reshape(r1 - r0, cols)
        chunk *= xp.float32(half)
        if mean:
            chunk += xp.float32(mean)
        if ggml_type in quants.QUANTIZED_TYPES:
            out[r0:r1] = quants.quantize(chunk, ggml_type, xp)
        else:
            out[r0:r1] = chunk.astype(out.dtype)
    return WeightTensor(name, ggml_type, shape, out)


def generate_weights(model: DummyModel, fmt: str, xp: ModuleType = np) -> ModelWeights:
    """All tensors of a dummy model, made directly with `xp` (on the GPU for cupy)."""
    tensors = {
        name: generate_tensor(name, shape, fmt, model.config, model.seed, xp)
        for name, shape in expected_tensors(model.config).items()
    }
    return ModelWeights(config=model.config, model_id=model.model_id(fmt), tensors=tensors)
