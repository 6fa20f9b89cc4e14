"""The GPU KV cache: float16 k and v `[layer][seq][kv_head][max_len][head_dim]`, and each
sequence's cached length in device memory, where the decode step's kernels read and advance
it (the host copy is Runner._lens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy as cp

from engine.config import ModelConfig


@dataclass
class KvCache:
    k: Any
    v: Any
    lens: Any  # int32 [n_seqs]
    n_seqs: int
    max_len: int

    @classmethod
    def allocate(cls, c: ModelConfig, n_seqs: int, max_len: int) -> KvCache:
        """An empty cache (call inside the runner's stream)."""
        shape = (c.n_layers, n_seqs, c.n_kv_heads, max_len, c.head_dim)
        k = cp.zeros(shape, dtype=cp.float16)
        v = cp.zeros(shape, dtype=cp.float16)
        lens = cp.zeros(n_seqs, dtype=cp.int32)
        return cls(k, v, lens, n_seqs, max_len)


def kv_bytes_per_token(c: ModelConfig) -> int:
    """KV-cache bytes per token of context (float16 k and v of every layer)."""
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * 2
