"""Prefill: a chunk of up to `chunk` tokens of one sequence in one pass. The projections
are cuBLAS GEMMs (float16 in, float32 out, the residual added with beta = 1) on weights
dequantized by `dequant_f16` into one reused float16 buffer (F16 weights are used in place);
rope_kv writes the chunk into the KV cache and attn_prefill_<HD>, the tiled causal kernel,
attends over it.

A short chunk (at most GRAPH_TOKENS, the benchmarks' 128- and 512-token prompts) is a few
milliseconds of host-bound launches on a small model, and how fast the host issues them is what
moved a 1B's prefill@128 between processes (data/demo/gpu/README.md). Such a chunk is captured as
a CUDA graph at its first use, per (length, sequence, position, logits): the scalars of its
launches are the graph's, its tokens come through a device buffer, and every buffer it touches
is allocated before the capture and kept, so a replay launches the same kernels on the same
memory. The graphs die with the KV cache they write (forget_graphs, at a reset that reallocates).
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from typing import Any

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.blas import Blas
from engine.cuda.geometry import ROPE_WARPS, WT_F16, env_flag, prefill_attention
from engine.cuda.kv_cache import KvCache
from engine.cuda.launch import NULL, KernelLauncher, f32, i32
from engine.cuda.layout import GpuWeight
from engine.cuda.weights_gpu import GpuLayer, GpuModel

PREFILL_CHUNK = 4096
DEQUANT_BUFFER_ELEMENTS = 1 << 27  # float16 scratch for prefill weights: 256 MiB
LOG2E = 1.4426950408889634
RMSNORM_F16_THREADS = 256  # a block per row (kernels/layers.cu rmsnorm_f16)
GRAPH_TOKENS = 1024  # chunks up to this long replay a captured graph (longer: the GPU bounds them)
MAX_GRAPHS = 64  # captured chunks kept, least recently used dropped (a concurrent run's 32 rows)


class Prefill:
    """Prefill's scratch buffers (kept across resets) and its launches."""

    def __init__(
        self, c: ModelConfig, model: GpuModel, launch: KernelLauncher, chunk: int = PREFILL_CHUNK
    ) -> None:
        self.config, self.model, self.launch, self.chunk = c, model, launch, chunk
        self._bufs: dict[str, Any] = {}
        self._deq: Any = None  # made at the first chunk of a model with quantized matrices
        m = model
        matrices = [w for L in m.layers for w in L.matrices] + [m.w_out]
        self._needs_deq = any(w.wt != WT_F16 for w in matrices)
        self.blas = Blas(launch.stream)
        # (n, seq, pos0, logits) -> (graph, its logits buffer), or (False, None): capture failed
        self.graphs: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        self.use_graphs = env_flag("SPARKBOARD_PREFILL_GRAPHS", True)

    def forget_graphs(self) -> None:
        """Drop the captured chunks (their KV cache and sequence buffers are going away)."""
        self.graphs.clear()

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
        "all" rows, of the "last" row (a buffer the next chunk overwrites: copy it first), or
        None ("none"). seq_ids: the decode step's buffer, which rope_kv takes as its argument
        list does (it uses `seq`)."""
        n = ids.size
        bufs = self._chunk_buffers(n, logits)
        bufs["tok"].set(ids.astype(np.int32), stream=self.launch.stream)
        if not self._graphable(n, logits):
            return self._forward(cache, seq_ids, seq, pos0, n, logits, bufs)
        key = (n, seq, pos0, logits)
        graph, out = self.graphs.pop(key, None) or self._capture(
            cache, seq_ids, seq, pos0, n, logits, bufs
        )
        self.graphs[key] = (graph, out)  # the most recently used last
        if len(self.graphs) > MAX_GRAPHS:
            self.graphs.popitem(last=False)
        if graph is False:
            return self._forward(cache, seq_ids, seq, pos0, n, logits, bufs)
        graph.launch(self.launch.stream)
        return out

    def _graphable(self, n: int, logits: str) -> bool:
        """A short chunk with its last row's logits or none, launched as is (not profiled)."""
        k = self.launch
        return (
            self.use_graphs
            and n <= GRAPH_TOKENS
            and logits != "all"
            and k.trace is None
            and not k.skip
        )

    def _capture(
        self, cache: KvCache, seq_ids: Any, seq: int, pos0: int, n: int, logits: str, bufs: dict
    ) -> tuple[Any, Any]:
        """The chunk's launches as a CUDA graph (False: run it eagerly, as without graphs)."""
        stream = self.launch.stream
        try:
            stream.begin_capture()
            try:
                out = self._forward(cache, seq_ids, seq, pos0, n, logits, bufs)
            finally:
                graph = stream.end_capture()
        except Exception as exc:  # a CuPy or cuBLAS without graph capture
            print(
                f"warning: CUDA graph capture of a prefill failed ({exc}); prefilling without",
                file=sys.stderr,
            )
            self.use_graphs = False
            return False, None
        return graph, out

    def _chunk_buffers(self, n: int, logits: str) -> dict[str, Any]:
        """Views of the kept scratch buffers for a chunk of n tokens, allocated before any
        capture (an allocation is not a launch a graph can replay)."""
        c, C = self.config, self.chunk
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        shapes = {
            "tok": ((C,), cp.int32),
            "x": ((C, c.dim), cp.float32),
            "h16": ((C, c.dim), cp.float16),
            "qkv": ((C, q_dim + 2 * kv_dim), cp.float32),
            "q": ((C, q_dim), cp.float32),
            "a16": ((C, q_dim), cp.float16),
            "gu": ((C, 2 * c.ffn_dim), cp.float32),
            "f16": ((C, c.ffn_dim), cp.float16),
        }
        bufs = {k: self._pbuf(k, shape, dtype)[:n] for k, (shape, dtype) in shapes.items()}
        if logits == "last":
            bufs["logits"] = self._pbuf("logits", (1, c.vocab_size), cp.float32)
        if self._deq is None and self._needs_deq:
            self._deq = cp.empty(DEQUANT_BUFFER_ELEMENTS, dtype=cp.float16)
        return bufs

    def _forward(
        self, cache: KvCache, seq_ids: Any, seq: int, pos0: int, n: int, logits: str, bufs: dict
    ) -> Any:
        """The chunk's launches, on the tokens already in bufs["tok"] (graph-capturable for
        "last" and "none")."""
        c, m, k = self.config, self.model, self.launch
        hd = c.head_dim
        tok, x, h16, qkv = bufs["tok"], bufs["x"], bufs["h16"], bufs["qkv"]
        q, a16, gu, f16 = bufs["q"], bufs["a16"], bufs["gu"], bufs["f16"]
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
        out = bufs["logits"] if logits == "last" else cp.empty((nr, c.vocab_size), cp.float32)
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
        k = x16.shape[1]
        ldc = out.shape[1]
        if w.wt == WT_F16:
            slices = [(0, w.rows, w.q)]
        else:
            per = max(1, DEQUANT_BUFFER_ELEMENTS // k)
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
                self.blas.gemm_f16,
                w16.data.ptr, nr, x16, out.data.ptr + (col0 + r0) * 4, ldc, beta,
            )  # fmt: skip
