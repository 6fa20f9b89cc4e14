"""The decode step: one step for N rows (sequences) is a fixed list of kernel launches over
buffers allocated with the step; the rows' tokens, sequence slots and positions live in
device memory, so the step is captured once per row count as a CUDA graph and replayed per
token (argmax_advance feeds each pick back and moves the rows on, on the device).

A step whose rows are all short (one_split positions at most) takes a second graph, in
which each layer's attention is one block per (kv head, row) writing its output directly, with
no attn_combine launch. A short row is one split in either graph, and the combine of one split
only divides it by its sum, so which graph a step takes changes no row's result: only launches.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.geometry import (
    attn_block,
    attn_shared_bytes,
    env_tuning,
    gemv_launch,
    gemv_shared_bytes,
    one_split_positions,
    quantizes_in_mv,
)
from engine.cuda.kv_cache import KvCache
from engine.cuda.launch import NULL, KernelLauncher, f32, i32
from engine.cuda.layout import GpuWeight
from engine.cuda.weights_gpu import GpuLayer, GpuModel

RMSNORM_SLICE = 256  # elements per block of a quantizing RMSNorm in a decode step
# flash-decoding partitions per sequence at most (fixed: results never depend on N); 32 beat
# 64 at 4k-32k contexts (engine/PERF.md)
ATTN_SPLITS = env_tuning("SPARKBOARD_ATTN_SPLITS", 32)
if ATTN_SPLITS > 64:  # ATT_MAX_SPLITS in kernels/attention.cu: attn_combine's shared arrays
    raise ValueError(f"SPARKBOARD_ATTN_SPLITS={ATTN_SPLITS}: at most 64")
# positions per partition at least (a multiple of 32, the kernel's tile): a short context is
# spread over more blocks, each with fewer dependent tile loads
ATTN_MIN_CHUNK = env_tuning("SPARKBOARD_ATTN_MIN_CHUNK", 32, multiple_of=32)
# a row of at most this many positions at head dim 64 (one_split_positions scales it: 256 at
# head dim 128) is one split (split_chunk, kernels/attention.cu), and a step whose rows all are
# launches one split block per (kv head, row) that writes the output itself: no attn_combine
# (0: every row splits by ATTN_MIN_CHUNK). 512 beat 256 by 0.5-1.2% on llama-8b, 1,024 lost
# 0.5-0.8% (engine/PERF.md)
ATTN_ONE_SPLIT = env_tuning("SPARKBOARD_ATTN_ONE_SPLIT", 512, multiple_of=32, zero=True)
ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick


def rmsnorm(
    launch: KernelLauncher,
    c: ModelConfig,
    x: Any,
    w: Any,
    y: Any,
    y16: Any,
    rows: int,
    per: int,
    xq: Any = NULL,
    xs: Any = NULL,
) -> None:
    """RMSNorm rows of x into y (float32) and/or y16 (float16); with xq, xs also the int8
    planes. A block normalises `per` elements of a row (the whole row: per = dim)."""
    dim = c.dim
    args = (x, w, y, y16, xq, xs, i32(dim), i32(per), f32(c.norm_eps))
    launch("rmsnorm", (-(-dim // per), rows), (min(1024, per),), args)


class DecodeStep:
    """The decode step's buffers for up to `n_rows` rows, its launches and its graphs."""

    def __init__(
        self, c: ModelConfig, model: GpuModel, cache: KvCache, launch: KernelLauncher
    ) -> None:
        self.config, self.model, self.cache, self.launch = c, model, cache, launch
        self.graphs: dict[tuple[int, bool], Any] = {}  # by (rows, short)
        self.one_split = one_split_positions(ATTN_ONE_SPLIT, c.head_dim)  # 0: no row is short
        self._quantized_src: str | None = None  # the buffer whose int8 planes are in xq, xs
        R, hd = cache.n_seqs, c.head_dim
        q_dim, kv_dim = c.n_heads * hd, c.n_kv_heads * hd
        kmax = max(c.dim, c.ffn_dim, q_dim)
        self.buf = b = {}
        b["tokens"] = cp.zeros(R, dtype=cp.int32)
        b["seq_ids"] = cp.zeros(R, dtype=cp.int32)
        b["x"] = cp.zeros((R, c.dim), dtype=cp.float32)
        b["h"] = cp.zeros((R, c.dim), dtype=cp.float32)
        b["xq"] = cp.zeros((R, 2 * kmax), dtype=cp.int8)
        b["xs"] = cp.zeros((R, kmax // 32 * 4), dtype=cp.float32)
        b["qkv"] = cp.zeros((R, q_dim + 2 * kv_dim), dtype=cp.float32)
        b["att"] = cp.zeros((R, q_dim), dtype=cp.float32)
        b["f"] = cp.zeros((R, c.ffn_dim), dtype=cp.float32)
        b["logits"] = cp.zeros((R, c.vocab_size), dtype=cp.float32)
        b["part_o"] = cp.zeros((R, c.n_heads, ATTN_SPLITS, hd), dtype=cp.float32)
        b["part_ml"] = cp.zeros((R, c.n_heads, ATTN_SPLITS, 2), dtype=cp.float32)
        b["hist"] = cp.zeros((R, cache.max_len), dtype=cp.int32)
        b["pick_v"] = cp.zeros((R, ARGMAX_BLOCKS), dtype=cp.float32)
        b["pick_i"] = cp.zeros((R, ARGMAX_BLOCKS), dtype=cp.int32)
        b["pick_count"] = cp.zeros(R, dtype=cp.uint32)  # argmax_advance keeps it zero

    # ---- running ----------------------------------------------------------------------------

    def set_rows(self, seqs: list[int], ids: np.ndarray) -> None:
        """The rows' tokens and sequence slots, for the next step."""
        b, stream = self.buf, self.launch.stream
        n = len(seqs)
        with stream:
            b["tokens"][:n].set(ids.astype(np.int32), stream=stream)
            b["seq_ids"][:n].set(np.asarray(seqs, dtype=np.int32), stream=stream)

    def run(self, rows: int, longest: int | None = None) -> None:
        """One step for rows 0..rows-1, the longest of which holds `longest` positions after it
        (None: not known, so not short): the captured graph, captured at first use."""
        short = self.is_short(longest)
        graph = self.graphs.get((rows, short))
        if graph is None:
            graph = self.capture(rows, short)
        if graph is False:
            with self.launch.stream:
                self.issue(rows, short)
        else:
            graph.launch(self.launch.stream)

    def is_short(self, longest: int | None) -> bool:
        """Whether a step whose longest row holds `longest` positions after it is one split a
        row (the attention writes its output; no combine)."""
        return longest is not None and longest <= self.one_split

    def capture(self, rows: int, short: bool = False) -> Any:
        """The decode step for `rows` rows as a CUDA graph (False: replay eagerly instead);
        short: every row will hold at most one_split positions (is_short)."""
        stream = self.launch.stream
        try:
            with stream:
                stream.begin_capture()
                try:
                    self.issue(rows, short)
                finally:
                    graph = stream.end_capture()
        except Exception as exc:  # a CuPy without graph capture: launch the kernels each step
            print(
                f"warning: CUDA graph capture failed ({exc}); decoding without graphs",
                file=sys.stderr,
            )
            graph = False
        self.graphs[rows, short] = graph
        return graph

    def capture_all(self, rows: int) -> None:
        """Both graphs a step of `rows` rows may take (only the long one where no row is ever
        short: one_split 0)."""
        if self.one_split:
            self.capture(rows, short=True)
        self.capture(rows)

    def issue(self, rows: int, short: bool = False) -> None:
        """Every launch of one decode step for rows 0..rows-1 (graph-capturable)."""
        self.launch.in_step = True
        try:
            self._launches(rows, short)
        finally:
            self.launch.in_step = False

    # ---- the step's launches ----------------------------------------------------------------

    def _launches(self, rows: int, short: bool) -> None:
        c, m, b = self.config, self.model, self.buf
        self._quantized_src = None
        e = m.tok_embd
        self.launch(
            "embed",
            (rows,),
            (256,),
            (b["tokens"], i32(e.wt), e.q, e.s if e.s is not None else NULL, b["x"], i32(c.dim)),
        )
        for li, L in enumerate(m.layers):
            self._layer(li, L, rows, short)
        # the output head keeps its norm kernel: its mat-vec applying the norm measured 1%
        # slower on llama-1b:f16 (engine/PERF.md)
        self._rmsnorm(b["x"], m.out_norm, b["h"], rows, quant=m.w_out.quantized)
        self._mv(m.w_out, "h", rows, b["logits"], "store")
        self.launch(
            "argmax_advance",
            (ARGMAX_BLOCKS, rows),
            (256,),
            (
                b["logits"], i32(c.vocab_size), b["tokens"], b["seq_ids"], self.cache.lens,
                b["hist"], i32(self.cache.max_len), i32(1), b["pick_v"], b["pick_i"],
                b["pick_count"],
            ),
        )  # fmt: skip

    def _layer(self, li: int, L: GpuLayer, rows: int, short: bool) -> None:
        c, m, b, kv = self.config, self.model, self.buf, self.cache
        hd = c.head_dim
        scale = 1.0 / math.sqrt(hd)
        if L.attn_norm_in_mv:
            self._mv(L.qkv[0][0], "x", rows, b["qkv"], "store", norm=L.attn_norm)
        else:
            quant = L.qkv[0][0].quantized
            self._rmsnorm(b["x"], L.attn_norm, b["h"], rows, quant=quant)
            for w, col0 in L.qkv:
                self._mv(w, "h", rows, b["qkv"], "store", col0=col0)
        # the int8 planes of the attention's output for a quantized output projection
        quant_o = L.wo.quantized and hd >= 32
        xq, xs = (b["xq"], b["xs"]) if quant_o else (NULL, NULL)
        # RoPE and the KV-cache write happen inside the split kernel; a short step's one split
        # a row writes the output (out, xq, xs), else the partials that attn_combine merges
        self.launch(
            f"attn_split_{hd}",
            (1 if short else ATTN_SPLITS, c.n_kv_heads, rows),
            attn_block(),
            (
                b["qkv"], i32(b["qkv"].shape[1]),
                L.q_norm if L.q_norm is not None else NULL,
                L.k_norm if L.k_norm is not None else NULL,
                m.inv_freq, i32(m.neox), f32(c.norm_eps),
                kv.k[li], kv.v[li], b["seq_ids"], kv.lens,
                b["part_o"], b["part_ml"], i32(c.n_heads), i32(c.n_kv_heads),
                i32(kv.max_len), i32(ATTN_SPLITS), i32(ATTN_MIN_CHUNK), i32(self.one_split),
                f32(scale), b["att"] if short else NULL, xq if short else NULL,
                xs if short else NULL,
            ),
            attn_shared_bytes(hd),
        )  # fmt: skip
        if not short:
            self.launch(
                "attn_combine",
                (c.n_heads, rows),
                (hd,),
                (
                    b["part_o"], b["part_ml"], b["seq_ids"], kv.lens, b["att"], xq, xs,
                    i32(c.n_heads), i32(hd), i32(ATTN_SPLITS), i32(ATTN_MIN_CHUNK),
                    i32(self.one_split),
                ),
            )  # fmt: skip
        self._quantized_src = "att" if quant_o else None
        self._mv(L.wo, "att", rows, b["x"], "add")
        if L.ffn_norm_in_mv:
            self._mv(L.wg, "x", rows, b["f"], "glu", w2=L.wu, norm=L.ffn_norm)
        else:
            self._rmsnorm(b["x"], L.ffn_norm, b["h"], rows, quant=L.wg.quantized)
            self._mv(L.wg, "h", rows, b["f"], "glu", w2=L.wu)
        self._mv(L.wd, "f", rows, b["x"], "add")

    def _rmsnorm(self, x: Any, w: Any, y: Any, rows: int, quant: bool) -> None:
        """RMSNorm of the step's rows into y; quant also fills the int8 planes.

        The quantizing norm cuts its few rows into slices of RMSNORM_SLICE elements, one
        block each (every block sums its row again: a few KB from L2), so the int8 blocks are
        written by many SMs at once (+3% on llama-8b:q4_0; the float norm lost 1% that way,
        engine/PERF.md). Prefill's thousands of rows take one block per row, which would
        otherwise re-read each row dim / slice times."""
        dim = self.config.dim
        b = self.buf
        if quant:
            per = min(RMSNORM_SLICE, dim)
            rmsnorm(self.launch, self.config, x, w, y, NULL, rows, per, b["xq"], b["xs"])
        else:
            rmsnorm(self.launch, self.config, x, w, y, NULL, rows, dim)
        self._quantized_src = "h" if quant else None

    def _mv(
        self,
        w: GpuWeight,
        src: str,
        rows: int,
        out: Any,
        mode: str,
        w2: GpuWeight | None = None,
        col0: int = 0,
        norm: Any = None,
    ) -> None:
        """out[:rows, col0:] (=, +=, silu-glu) W @ buf[src][:rows]; quantizes the input once.
        norm: an RMSNorm weight the kernel applies to buf[src], the raw residual (quantized
        weights: their kernel applies 1 / rms to the int8 planes of x * g).
        A quantized weight whose int8 planes are not there yet takes them from a quantize_q8
        launch, or, for a mat-vec small enough (quantizes_in_mv), from its own lanes."""
        b = self.buf
        eps = self.config.norm_eps
        qx = False
        if w.quantized and (norm is not None or self._quantized_src != src):
            qx = quantizes_in_mv(w.wt, w.rows, w.cols, rows)
            if not qx:
                x = b[src]
                nblocks = rows * x.shape[1] // 32
                self.launch(
                    "quantize_q8",
                    ((nblocks * 32 + 255) // 256,),
                    (256,),
                    (x, NULL if norm is None else norm, b["xq"], b["xs"], i32(nblocks),
                     i32(x.shape[1])),
                )  # fmt: skip
                self._quantized_src = src if norm is None else None
        if w.quantized and not qx:
            xa, xs = b["xq"], b["xs"]
        else:
            xa, xs = b[src], NULL
        name, grid, block = gemv_launch(w.wt, w.rows, w.cols, rows, mode, norm is not None, qx)
        mma = name.startswith("gemv_mma")
        q1, s1 = w.kernel_planes(mma)
        q2, s2 = w2.kernel_planes(mma) if w2 is not None else (None, None)
        args = (
            q1,
            s1 if s1 is not None else NULL,
            q2 if q2 is not None else NULL,
            s2 if s2 is not None else NULL,
            xa,
            xs,
            out[:, col0:] if col0 else out,
            i32(w.rows),
            i32(w.cols),
            i32(rows),
            i32(out.shape[1]),
        )
        if norm is not None:  # the int8 planes of x * g already hold the norm weight
            args += (f32(eps),) if w.quantized and not qx else (norm, f32(eps))
        self.launch(name, grid, block, args, gemv_shared_bytes(name))
