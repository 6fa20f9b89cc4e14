"""A model's weights as every backend receives them: GGUF tensor names, GGUF layouts.

`ModelWeights` is the hand-off between loading (a GGUF file or a dummy generator) and a
backend. Tensors keep the file's format: quantized tensors are uint8 rows of GGUF blocks,
so a GPU backend can upload them as they are and read them with quantized kernels.

Tensor names (per layer i): token_embd.weight, output_norm.weight, output.weight (only when
the embeddings are untied), blk.{i}.attn_norm.weight, blk.{i}.attn_q.weight,
blk.{i}.attn_k.weight, blk.{i}.attn_v.weight, blk.{i}.attn_output.weight,
blk.{i}.attn_q_norm.weight and blk.{i}.attn_k_norm.weight (qk-norm models only),
blk.{i}.ffn_norm.weight, blk.{i}.ffn_gate.weight, blk.{i}.ffn_up.weight,
blk.{i}.ffn_down.weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine import quants
from engine.config import ModelConfig
from engine.errors import EngineError


@dataclass
class WeightTensor:
    """One tensor in its stored format.

    shape is the logical shape in NumPy order: (out_features, in_features) for matrices,
    (n,) for vectors. data is a NumPy or CuPy array:
      F32 float32, F16 float16, BF16 uint16 (raw bits), each of the logical shape;
      Q8_0/Q4_0/Q4_1 uint8 (rows, bytes_per_row), GGUF block layout exactly as in the file.
    """

    name: str
    ggml_type: str  # "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"
    shape: tuple[int, ...]
    data: Any

    def dequantize(self, xp: ModuleType = np) -> Any:
        """Float32 values of the logical shape, on the array module of `xp`."""
        return quants.dequantize(self.data, self.ggml_type, xp).reshape(self.shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass
class ModelWeights:
    config: ModelConfig
    model_id: str  # file sha256 prefix, or the dummy spec
    tensors: dict[str, WeightTensor]

    def layer(self, i: int, part: str) -> WeightTensor:
        """blk.{i}.{part}.weight"""
        return self[f"blk.{i}.{part}.weight"]

    def __getitem__(self, name: str) -> WeightTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise EngineError(f"model {self.model_id} has no tensor {name}") from None

    @property
    def output(self) -> WeightTensor:
        """The output projection: output.weight, or the token embedding when tied."""
        if self.config.tied_embeddings:
            return self["token_embd.weight"]
        return self["output.weight"]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def expected_tensors(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name a model of this config has, with its logical shape."""
    c = config
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (c.vocab_size, c.dim),
        "output_norm.weight": (c.dim,),
    }
    if not c.tied_embeddings:
        shapes["output.weight"] = (c.vocab_size, c.dim)
    for i in range(c.n_layers):
        p = f"blk.{i}."
        shapes[p + "attn_norm.weight"] = (c.dim,)
        shapes[p + "attn_q.weight"] = (q_dim, c.dim)
        shapes[p + "attn_k.weight"] = (kv_dim, c.dim)
        shapes[p + "attn_v.weight"] = (kv_dim, c.dim)
        shapes[p + "attn_output.weight"] = (c.dim, q_dim)
        if c.qk_norm:
            shapes[p + "attn_q_norm.weight"] = (c.head_dim,)
            shapes[p + "attn_k_norm.weight"] = (c.head_dim,)
        shapes[p + "ffn_norm.weight"] = (c.dim,)
        shapes[p + "ffn_gate.weight"] = (c.ffn_dim, c.dim)
        shapes[p + "ffn_up.weight"] = (c.ffn_dim, c.dim)
        shapes[p + "ffn_down.weight"] = (c.dim, c.ffn_dim)
    return shapes


def parameter_count(config: ModelConfig) -> int:
    total = 0
    for shape in expected_tensors(config).values():
        n = 1
        for s in shape:
            n *= s
        total += n
    return total
