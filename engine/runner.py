"""The interface every backend implements; bench and score talk only to this.

A runner owns a model's weights on its device and a KV cache of `n_seqs` independent
sequences of up to `max_len` tokens each. Token ids in, float32 logits (or argmax ids) out,
always as NumPy arrays on the host. The sequence bookkeeping (tokens cached per sequence and
the checks on it) is here, shared by every backend; the engine imports nothing from the
harness (engine/harness/ turns a `VramReport` into its JSON).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.config import ModelConfig
from engine.errors import EngineError


@dataclass(frozen=True)
class VramReport:
    """GPU memory in bytes (the harness's VramInfo has the same fields)."""

    total_bytes: int
    free_after_load_bytes: int
    peak_bytes: int  # peak in use by this process so far
    kv_cache_bytes: int  # KV cache for the context asked about


class Runner(ABC):
    config: ModelConfig
    backend: str  # "numpy" or "cupy"
    # set by reset(): the cache's shape and the tokens cached per sequence (host side)
    n_seqs: int
    max_len: int
    _lens: Sequence[int]

    @abstractmethod
    def reset(self, n_seqs: int, max_len: int) -> None:
        """(Re)allocate the KV cache: n_seqs empty sequences of up to max_len tokens."""

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

    # ---- sequences ------------------------------------------------------------------------

    def seq_len(self, seq: int) -> int:
        """Tokens currently cached for a sequence."""
        self._ensure_ready()
        self._check_seq(seq)
        return int(self._lens[seq])

    def truncate(self, seq: int, length: int) -> None:
        """Forget a sequence's cached tokens beyond `length` (0 empties it)."""
        self._ensure_ready()
        self._check_seq(seq)
        if length < 0:
            raise EngineError(f"cannot truncate to a negative length ({length})")
        new = min(int(self._lens[seq]), int(length))
        self._lens[seq] = new
        self._store_len(seq, new)

    def _ensure_ready(self) -> None:  # noqa: B027 (optional hook)
        """Make the default cache if reset() has not run (a backend that allocates lazily)."""

    def _store_len(self, seq: int, length: int) -> None:  # noqa: B027 (optional hook)
        """Copy a sequence's new length to where the device reads it (a no-op on the CPU)."""

    def _check_seq(self, seq: int) -> None:
        if not 0 <= seq < self.n_seqs:
            raise EngineError(f"sequence {seq} does not exist (the cache holds {self.n_seqs})")

    def _check_room(self, seq: int, n_new: int) -> None:
        total = int(self._lens[seq]) + n_new
        if total > self.max_len:
            limit = (
                "the model allows"
                if self.max_len == self.config.max_context
                else "the KV cache holds"
            )
            raise EngineError(
                f"a context of {total} tokens is longer than {limit} ({self.max_len} tokens)"
            )

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

    def _check_rows(
        self, seqs: Sequence[int], tokens: np.ndarray, steps: int
    ) -> tuple[list[int], np.ndarray]:
        """A decode step's sequences and token ids, checked: one token per distinct existing
        sequence, each with room for `steps` more tokens."""
        self._ensure_ready()
        seqs = [int(s) for s in seqs]
        ids = self._check_tokens(tokens)
        if len(seqs) != ids.size:
            raise EngineError(f"decode got {len(seqs)} sequences but {ids.size} tokens")
        if not seqs:
            raise EngineError("decode got no sequences")
        if len(set(seqs)) != len(seqs):
            raise EngineError("decode got the same sequence twice in one step")
        for s in seqs:
            self._check_seq(s)
            self._check_room(s, steps)
        return seqs, ids

    # ---- reporting ------------------------------------------------------------------------

    def synchronize(self) -> None:  # noqa: B027 (optional hook: a no-op on the CPU)
        """Wait for queued device work (a no-op on the CPU)."""

    def vram(self, kv_tokens: int = 0) -> VramReport | None:
        """GPU memory report; None on the CPU."""
        return None
