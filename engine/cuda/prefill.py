"""Prefill: a chunk of up to `chunk` tokens of one sequence in one pass. The projections
are cuBLAS GEMMs (float16 in, float32 out, the residual added with beta = 1) on weights
dequantized by `dequant_f16` into one reused float16 buffer (F16 weights are used in place);
rope_kv writes the chunk into the KV cache and attn_prefill_<HD>, the tiled causal kernel,
attends over it.
"""

from __future__ import annotations

import math
from typing import Any

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.geometry import ROPE_WARPS, WT_F16, prefill_attention
from engine.cuda.kv_cache import KvCache
from engine.cuda.launch import NULL, KernelLauncher, f32, i32
from engine.cuda.layout import GpuWeight
from engine.cuda.weights_gpu import GpuLayer, GpuModel

try:  # CuPy >= 13 keeps the library wrappers here
    from cupy_backends.cuda.libs import cublas
except ImportError:  # pragma: no cover - older CuPy
    from cupy.cuda import cublas

PREFILL_CHUNK = 4096
DEQUANT_BUFFER_ELEMENTS = 1 << 27  # float16 scratch for prefill weights: 256 MiB
CUDA_R_16F, CUDA_R_32F = 2, 0
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 68, -1
LOG2E = 1.4426950408889634
RMSNORM_F16_THREADS = 256  # a block per row (kernels/layers.cu rmsnorm_f16)


class Prefill:
    """Prefill's scratch buffers (kept across resets) and its launches."""

    def __init__(
        self, c: ModelConfig, model: GpuModel, launch: KernelLauncher, chunk: int = PREFILL_CHUNK
    ) -> None:
        self.config, self.model, self.launch, self.chunk = c, model, launch, chunk
        self._bufs: dict[str, Any] = {}
        self._deq: Any = None
        self._one = np.ones(1, dtype=np.float32)  # host scalars for cuBLAS (pointer mode host)
        self._zero = np.zeros(1, dtype=np.float32)

    def _pbuf(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        a = self._bufs.get(name)
        size = int(np.prod(shape))
        if a is None or a.size < size or a.dtype != dtype:
            a = cp.zeros(size, dtype=dtype)  # zeros: a stray read of an unwritten row stays finite
            self._bufs[name] = a
        return a[:size].reshape(shape)

    def run_chunk(
        self, cache: KvCache, seq_ids: Any, seq: int, pos0: int, ids: np.ndarray, logits: str
    ) -> Any:
        """Append `ids` (at most `chunk`) to `seq` at positions pos0..; returns the logits of
        "all" rows, of the "last" row, or None ("none"). seq_ids: the decode step's buffer,
        which rope_kv takes as its argument list does (it uses `seq`)."""
        c, m, k = self.config, self.model, self.launch
        n = ids.size
        C = self.chunk
        hd = c.head_dim
        q_dim, kv_dim = c.n_heads * hd, c.n_kv_heads * hd
        tok = self._pbuf("tok", (C,), cp.int32)[:n]
        x = self._pbuf("x", (C, c.dim), cp.float32)[:n]
        h16 = self._pbuf("h16", (C, c.dim), cp.float16)[:n]
        qkv = self._pbuf("qkv", (C, q_dim + 2 * kv_dim), cp.float32)[:n]
        q = self._pbuf("q", (C, q_dim), cp.float32)[:n]
        a16 = self._pbuf("a16", (C, q_dim), cp.float16)[:n]
        gu = self._pbuf("gu", (C, 2 * c.ffn_dim), cp.float32)[:n]
        f16 = self._pbuf("f16", (C, c.ffn_dim), cp.float16)[:n]
        tok.set(ids.astype(np.int32), stream=k.stream)
        e = m.tok_embd
        k(
            "embed",
            (n,),
            (256,),
            (tok, i32(e.wt), e.q, e.s if e.s is not None else NULL, x, i32(c.dim)),
        )
        scale_log2 = LOG2E / math.sqrt(hd)
        att_grid, att_block, att_shared = prefill_attention(hd, n, c.n_heads)
        for li, L in enumerate(m.layers):
            self._rmsnorm_f16(x, L.attn_norm, h16, n)
            for w, col0 in L.qkv:
                self._gemm(h16, w, qkv, 0.0, col0)
            self._rope_kv(cache, seq_ids, li, L, qkv, q, n, seq, pos0)
            k(
                f"attn_prefill_{hd}",
                att_grid,
                att_block,
                (
                    q, cache.k[li], cache.v[li], a16, i32(seq), i32(pos0), i32(n),
                    i32(c.n_heads), i32(c.n_kv_heads), i32(cache.max_len), f32(scale_log2),
                ),
                att_shared,
            )  # fmt: skip
            self._gemm(a16, L.wo, x, 1.0)
            self._rmsnorm_f16(x, L.ffn_norm, h16, n)
            if L.wgu is not None:
                self._gemm(h16, L.wgu, gu, 0.0)
            else:
                self._gemm(h16, L.wg, gu, 0.0)
                self._gemm(h16, L.wu, gu, 0.0, c.ffn_dim)
            k("swiglu_f16", (-(-c.ffn_dim // 1024), n), (256,), (gu, i32(c.ffn_dim), f16))
            self._gemm(f16, L.wd, x, 1.0)
        if logits == "none":
            return None
        rows = x if logits == "all" else x[n - 1 :]
        nr = rows.shape[0]
        hn = h16[:nr]
        self._rmsnorm_f16(rows, m.out_norm, hn, nr)
        out = cp.empty((nr, c.vocab_size), dtype=cp.float32)
        self._gemm(hn, m.w_out, out, 0.0)
        return out

    def _rmsnorm_f16(self, x: Any, w: Any, y16: Any, rows: int) -> None:
        """RMSNorm of x's rows into y16, the float16 input of the next GEMM."""
        c = self.config
        args = (x, w, y16, i32(c.dim), f32(c.norm_eps))
        self.launch("rmsnorm_f16", (rows,), (RMSNORM_F16_THREADS,), args)

    def _rope_kv(
        self,
        cache: KvCache,
        seq_ids: Any,
        li: int,
        L: GpuLayer,
        qkv: Any,
        q: Any,
        n: int,
        seq: int,
        pos0: int,
    ) -> None:
        """RoPE on the chunk's n rows of q|k|v at positions pos0.., k and v into the cache of
        `seq` (a decode step does this inside its attention kernel)."""
        c, m = self.config, self.model
        self.launch(
            "rope_kv",
            (n,),
            (ROPE_WARPS * 32,),
            (
                qkv, i32(qkv.shape[1]), q, cache.k[li], cache.v[li],
                L.q_norm if L.q_norm is not None else NULL,
                L.k_norm if L.k_norm is not None else NULL,
                seq_ids, cache.lens, i32(seq), i32(pos0),
                i32(c.n_heads), i32(c.n_kv_heads), i32(c.head_dim), i32(cache.max_len),
                m.inv_freq, i32(m.neox), f32(c.norm_eps),
            ),
        )  # fmt: skip

    def _gemm(self, x16: Any, w: GpuWeight, out: Any, beta: float, col0: int = 0) -> None:
        """out[M, col0:col0+N] (float32) = x16[M, K] @ W[N, K]^T + beta * out[...]."""
        m_rows, k = x16.shape
        ldc = out.shape[1]
        handle = cp.cuda.device.get_cublas_handle()
        # CuPy binds its shared handle to a stream only inside its own wrappers: bind it to
        # ours, or the GEMM runs on another stream and races the kernels around it.
        cublas.setStream(handle, self.launch.stream.ptr)
        if w.wt == WT_F16:
            slices = [(0, w.rows, w.q)]
        else:
            per = max(1, DEQUANT_BUFFER_ELEMENTS // k)
            if self._deq is None:
                self._deq = cp.empty(DEQUANT_BUFFER_ELEMENTS, dtype=cp.float16)
            slices = [(r0, min(per, w.rows - r0), None) for r0 in range(0, w.rows, per)]
        for r0, nr, w16 in slices:
            if w16 is None:
                w16 = self._deq[: nr * k].reshape(nr, k)
                total = nr * (k // 8)
                self.launch(
                    "dequant_f16",
                    ((total + 255) // 256,),
                    (256,),
                    (
                        i32(w.wt),
                        w.q,
                        w.s if w.s is not None else NULL,
                        w16,
                        i32(r0),
                        i32(nr),
                        i32(k),
                    ),
                )
            self.launch.library_call(
                f"gemm n={nr} k={k}",
                cublas.gemmEx,
                handle, CUBLAS_OP_T, CUBLAS_OP_N, nr, m_rows, k,
                self._one.ctypes.data, w16.data.ptr, CUDA_R_16F, k,
                x16.data.ptr, CUDA_R_16F, k,
                (self._one if beta else self._zero).ctypes.data,
                out.data.ptr + (col0 + r0) * 4, CUDA_R_32F, ldc,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            )  # fmt: skip
