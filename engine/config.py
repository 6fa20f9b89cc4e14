"""Model hyper-parameters, read from GGUF metadata or from a dummy model's spec."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ModelConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    arch: Literal["llama", "qwen3"]
    n_layers: int = Field(gt=0)
    dim: int = Field(gt=0)  # hidden size
    ffn_dim: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_context: int = Field(gt=0)
    rope_base: float = Field(gt=0)
    norm_eps: float = Field(gt=0)
    tied_embeddings: bool
    qk_norm: bool  # Qwen3: RMSNorm over each head of q and k before RoPE

    @property
    def group_size(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads
