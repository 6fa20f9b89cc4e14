"""The NumPy backend: the reference forward pass every GPU kernel is checked against.

Weights are dequantized once at construction into `dtype` (float32 normally; float64 gives
the high-precision reference). The forward pass follows llama.cpp's graph for GGUF llama and
qwen3 weights: RMSNorm, RoPE (NORM = adjacent pairs for llama, whose converter permuted
q/k; NEOX = half split for qwen3), optional per-head q/k RMSNorm (qwen3), grouped-query
attention, SwiGLU, tied or untied output.

One forward step handles "segments": a segment is consecutive new tokens of one sequence.
Prefill is one segment of many tokens (chunked); a decode step is N segments of one token
each, so the matmuls are batched over all sequences and attention runs per sequence against
its own KV cache length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine import quants
from engine.errors import EngineError
from engine.runner import Runner
from engine.weights import ModelWeights

PREFILL_CHUNK = 512  # tokens per prefill pass: bounds the attention score buffer
DEFAULT_MAX_LEN = 4096


@dataclass
class _Layer:
    attn_norm: np.ndarray
    wqkv: np.ndarray  # [(n_heads + 2 n_kv) * head_dim, dim]: q, k, v rows stacked
    wo: np.ndarray
    q_norm: np.ndarray | None
    k_norm: np.ndarray | None
    ffn_norm: np.ndarray
    w_gate_up: np.ndarray  # [2 ffn_dim, dim]: gate rows, then up rows
    w_down: np.ndarray


def matmul_t(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T for x [n, in] and w [out, in]; OpenBLAS runs W @ x.T faster when n > 1."""
    return x @ w.T if x.shape[0] == 1 else (w @ x.T).T


def rope_neox(arch: str) -> bool:
    """True when the architecture rotates (i, i + d/2) pairs; False for adjacent pairs."""
    return arch == "qwen3"


class NumpyRunner(Runner):
    backend = "numpy"

    def __init__(self, weights: ModelWeights, dtype: type = np.float32) -> None:
        self.config = c = weights.config
        self.model_id = weights.model_id
        self.dtype = np.dtype(dtype)

        def deq(name: str) -> np.ndarray:
            t = weights[name]
            data = t.data if isinstance(t.data, np.ndarray) else t.data.get()  # CuPy -> host
            values = quants.dequantize(data, t.ggml_type, np).reshape(t.shape)
            return np.ascontiguousarray(values, dtype=self.dtype)

        self.embd = deq("token_embd.weight")
        self.w_out = self.embd if c.tied_embeddings else deq("output.weight")
        self.output_norm = deq("output_norm.weight")
        self.layers: list[_Layer] = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            self.layers.append(
                _Layer(
                    attn_norm=deq(p + "attn_norm.weight"),
                    wqkv=np.concatenate(
                        [
                            deq(p + "attn_q.weight"),
                            deq(p + "attn_k.weight"),
                            deq(p + "attn_v.weight"),
                        ]
                    ),
                    wo=deq(p + "attn_output.weight"),
                    q_norm=deq(p + "attn_q_norm.weight") if c.qk_norm else None,
                    k_norm=deq(p + "attn_k_norm.weight") if c.qk_norm else None,
                    ffn_norm=deq(p + "ffn_norm.weight"),
                    w_gate_up=np.concatenate(
                        [deq(p + "ffn_gate.weight"), deq(p + "ffn_up.weight")]
                    ),
                    w_down=deq(p + "ffn_down.weight"),
                )
            )
        half = c.head_dim // 2
        self._inv_freq = c.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / c.head_dim)
        self._neox = rope_neox(c.arch)
        self.reset(1, min(c.max_context, DEFAULT_MAX_LEN))

    # ---- KV cache -------------------------------------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        c = self.config
        self._check_shape(n_seqs, max_len)
        shape = (n_seqs, c.n_kv_heads, max_len, c.head_dim)
        # np.zeros is backed lazily by the OS: untouched cache costs no memory
        self._k = [np.zeros(shape, dtype=self.dtype) for _ in range(c.n_layers)]
        self._v = [np.zeros(shape, dtype=self.dtype) for _ in range(c.n_layers)]
        self._lens = [0] * n_seqs
        self.n_seqs, self.max_len = n_seqs, max_len

    def seq_len(self, seq: int) -> int:
        self._check_seq(seq)
        # Runner.seq_len, kept as written: data/demo/patches/ anchor their edits on these lines
        return self._lens[seq]

    # ---- Runner API -----------------------------------------------------------------------

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        self._check_seq(seq)
        ids = self._check_tokens(tokens)
        if ids.size == 0:
            raise EngineError("cannot prefill an empty prompt")
        self._check_room(seq, ids.size)
        outs = []
        for a in range(0, ids.size, PREFILL_CHUNK):
            chunk = ids[a : a + PREFILL_CHUNK]
            last = a + PREFILL_CHUNK >= ids.size
            h = self._forward(chunk, [(seq, 0, chunk.size)])
            if all_logits:
                outs.append(self._logits(h))
            elif last:
                outs.append(self._logits(h[-1:])[0])
        return np.concatenate(outs) if all_logits else outs[0]

    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:
        seqs = [int(s) for s in seqs]
        ids = self._check_tokens(tokens)
        if len(seqs) != ids.size:
            raise EngineError(f"decode got {len(seqs)} sequences but {ids.size} tokens")
        if len(set(seqs)) != len(seqs):
            raise EngineError("decode got the same sequence twice in one step")
        for s in seqs:
            self._check_seq(s)
            self._check_room(s, 1)
        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])
        return self._logits(h)

    # ---- the forward pass -------------------------------------------------------------------

    # Every matrix product and every KV-cache write goes through these two, so a subclass can
    # round what they see (engine/tools/emulation.py: the GPU's float16 inputs, on the CPU).
    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return matmul_t(x, w)

    def _cache_rows(self, kv: np.ndarray) -> np.ndarray:
        return kv

    def _rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x * (1.0 / np.sqrt(ms + self.config.norm_eps)).astype(self.dtype) * w

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Rotate x [n, heads, head_dim] by each row's position."""
        ang = positions.astype(np.float64)[:, None] * self._inv_freq[None, :]
        cos = np.cos(ang).astype(self.dtype)[:, None, :]
        sin = np.sin(ang).astype(self.dtype)[:, None, :]
        if self._neox:
            half = x.shape[-1] // 2
            x0, x1 = x[..., :half], x[..., half:]
            return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def _forward(self, ids: np.ndarray, segments: list[tuple[int, int, int]]) -> np.ndarray:
        """Hidden states [n, dim] of new tokens; segments are (seq, first row, n rows)."""
        c = self.config
        hd, nq, nkv, g = c.head_dim, c.n_heads, c.n_kv_heads, c.group_size
        n = ids.size
        positions = np.empty(n, dtype=np.int64)
        for seq, r0, m in segments:
            positions[r0 : r0 + m] = np.arange(self._lens[seq], self._lens[seq] + m)
        x = self.embd[ids]
        scale = self.dtype.type(1.0 / np.sqrt(hd))
        for li, L in enumerate(self.layers):
            xn = self._rms_norm(x, L.attn_norm)
            qkv = self._matmul(xn, L.wqkv)
            q = qkv[:, : nq * hd].reshape(n, nq, hd)
            k = qkv[:, nq * hd : (nq + nkv) * hd].reshape(n, nkv, hd)
            v = qkv[:, (nq + nkv) * hd :].reshape(n, nkv, hd)
            if L.q_norm is not None:
                q = self._rms_norm(q, L.q_norm)
                k = self._rms_norm(k, L.k_norm)
            q = self._rope(q, positions)
            k = self._rope(k, positions)
            attn = np.empty((n, nq * hd), dtype=self.dtype)
            kc, vc = self._k[li], self._v[li]
            for seq, r0, m in segments:
                p0 = self._lens[seq]
                kc[seq, :, p0 : p0 + m] = self._cache_rows(k[r0 : r0 + m].transpose(1, 0, 2))
                vc[seq, :, p0 : p0 + m] = self._cache_rows(v[r0 : r0 + m].transpose(1, 0, 2))
                t = p0 + m
                # q rows of this segment, grouped by kv head: [nkv, m * g, hd]
                qs = (
                    q[r0 : r0 + m]
                    .reshape(m, nkv, g, hd)
                    .transpose(1, 0, 2, 3)
                    .reshape(nkv, m * g, hd)
                )
                scores = (qs @ kc[seq, :, :t].transpose(0, 2, 1)) * scale  # [nkv, m*g, t]
                if m > 1:  # causal: row i sits at position p0 + i and sees keys 0..p0+i
                    future = np.arange(t)[None, :] > (p0 + np.arange(m))[:, None]  # [m, t]
                    scores = scores.reshape(nkv, m, g, t)
                    scores[np.broadcast_to(future[None, :, None, :], scores.shape)] = -np.inf
                    scores = scores.reshape(nkv, m * g, t)
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=-1, keepdims=True)
                o = scores @ vc[seq, :, :t]  # [nkv, m*g, hd]
                attn[r0 : r0 + m] = (
                    o.reshape(nkv, m, g, hd).transpose(1, 0, 2, 3).reshape(m, nq * hd)
                )
            x = x + self._matmul(attn, L.wo)
            xn = self._rms_norm(x, L.ffn_norm)
            gu = self._matmul(xn, L.w_gate_up)
            gate, up = gu[:, : c.ffn_dim], gu[:, c.ffn_dim :]
            with np.errstate(over="ignore"):
                act = gate / (1.0 + np.exp(-gate))  # SiLU; exp overflow gives the right 0
            x = x + self._matmul(act * up, L.w_down)
        for seq, _, m in segments:
            self._lens[seq] += m
        return x

    def _logits(self, h: np.ndarray) -> np.ndarray:
        hn = self._rms_norm(h, self.output_norm)
        return self._matmul(hn, self.w_out).astype(np.float32)
