"""The interface every backend implements; bench and score talk only to this.

A runner owns a model's weights on its device and a KV cache of `n_seqs` independent
sequences of up to `max_len` tokens each. Token ids in, float32 logits (or argmax ids) out,
always as NumPy arrays on the host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from engine.config import ModelConfig
from engine.errors import EngineError
from engine.harness.protocol import VramInfo


class Runner(ABC):
    config: ModelConfig
    backend: str  # "numpy" or "cupy"

    @abstractmethod
    def reset(self, n_seqs: int, max_len: int) -> None:
        """(Re)allocate the KV cache: n_seqs empty sequences of up to max_len tokens."""

    @abstractmethod
    def seq_len(self, seq: int) -> int:
        """Tokens currently cached for a sequence."""

    @abstractmethod
    def truncate(self, seq: int, length: int) -> None:
        """Forget a sequence's cached tokens beyond `length` (0 empties it)."""

    @abstractmethod
    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        """Append `tokens` to a sequence in one batched pass.

        Returns float32 logits of the last position [vocab], or of every new position
        [len(tokens), vocab] when all_logits is true.
        """

    @abstractmethod
    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:
        """Append one token to each of `seqs` in one step; returns logits [len(seqs), vocab]."""

    def decode_greedy(self, seqs: Sequence[int], tokens: np.ndarray, steps: int) -> np.ndarray:
        """Decode `steps` tokens per sequence, feeding each argmax back; returns [steps, N].

        Backends override this to keep the loop on the device.
        """
        out = np.empty((steps, len(seqs)), dtype=np.int64)
        cur = np.asarray(tokens, dtype=np.int64)
        for i in range(steps):
            cur = self.decode(seqs, cur).argmax(axis=-1)
            out[i] = cur
        return out

    def _check_shape(self, n_seqs: int, max_len: int) -> None:
        """Refuse a KV cache reset() cannot make, with a one-line error."""
        if n_seqs < 1:
            raise EngineError(f"need at least one sequence, got {n_seqs}")
        if max_len < 1:
            raise EngineError(f"the KV cache needs room for at least one token, got {max_len}")
        if max_len > self.config.max_context:
            raise EngineError(
                f"a context of {max_len} tokens is longer than the model allows "
                f"({self.config.max_context})"
            )

    def _check_tokens(self, tokens: np.ndarray) -> np.ndarray:
        """Token ids as int64, refused with a one-line error when not ids of this vocabulary."""
        ids = np.asarray(tokens).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise EngineError("token ids must be integers")
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.config.vocab_size)][0]
            raise EngineError(
                f"token id {bad} is outside the vocabulary (0..{self.config.vocab_size - 1})"
            )
        return ids

    def synchronize(self) -> None:  # noqa: B027 (optional hook: a no-op on the CPU)
        """Wait for queued device work (a no-op on the CPU)."""

    def vram(self, kv_tokens: int = 0) -> VramInfo | None:
        """GPU memory report; None on the CPU."""
        return None
