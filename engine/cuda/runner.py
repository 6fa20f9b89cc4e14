"""CupyRunner: the engine's GPU backend (kernels in kernels/, launched through CuPy).

Decode: one step for N rows (sequences) is a fixed list of kernel launches over buffers
allocated by reset(); the rows' tokens, sequence slots and positions live in device memory,
so the step is captured once per row count as a CUDA graph and replayed per token.
decode_greedy replays it `steps` times with the argmax fed back on the device and copies
the tokens back once at the end.

Prefill: chunks of up to `prefill_chunk` tokens; the projections are cuBLAS GEMMs
(float16 in, float32 out) on weights dequantized into one reused float16 buffer (F16 weights
are used in place), attention is the tiled causal kernel reading the KV cache.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.geometry import (
    GEOMETRY,
    WT_F16,
    env_flag,
    env_tuning,
    gemv_launch,
    gemv_shared_bytes,
)
from engine.cuda.kernels import HEAD_DIMS, MAX_GROUP, get_kernels
from engine.cuda.launch import PdlLauncher
from engine.cuda.layout import GpuWeight, fuse_rows, matrix_to_gpu, vector_to_gpu
from engine.errors import EngineError
from engine.harness.protocol import VramInfo
from engine.numpy_backend import rope_neox
from engine.runner import Runner

try:  # CuPy >= 13 keeps the library wrappers here
    from cupy_backends.cuda.libs import cublas
except ImportError:  # pragma: no cover - older CuPy
    from cupy.cuda import cublas

DEFAULT_MAX_LEN = 4096
PREFILL_CHUNK = 4096
RMSNORM_SLICE = 256  # elements per block of a quantizing RMSNorm in a decode step

# flash-decoding partitions per sequence at most (fixed: results never depend on N); 32 beat
# 64 at 4k-32k contexts (engine/PERF.md)
ATTN_SPLITS = env_tuning("SPARKBOARD_ATTN_SPLITS", 32)
if ATTN_SPLITS > 64:  # ATT_MAX_SPLITS in kernels/attention.cu: attn_combine's shared arrays
    raise ValueError(f"SPARKBOARD_ATTN_SPLITS={ATTN_SPLITS}: at most 64")
# positions per partition at least (a multiple of 32, the kernel's tile): a short context is
# spread over more blocks, each with fewer dependent tile loads
ATTN_MIN_CHUNK = env_tuning("SPARKBOARD_ATTN_MIN_CHUNK", 32, multiple_of=32)

# RMSNorm inside the q|k|v and gate|up decode mat-vecs (CupyRunner._norms_in_mv); 0: off (A/B)
NORM_IN_MV = env_flag("SPARKBOARD_NORM_IN_MV", True)
ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick
DEQUANT_BUFFER_ELEMENTS = 1 << 27  # float16 scratch for prefill weights: 256 MiB
CUDA_R_16F, CUDA_R_32F = 2, 0
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 68, -1
LOG2E = 1.4426950408889634
NULL = np.uint64(0)


def _i(v: int) -> np.int32:
    return np.int32(v)


def _f(v: float) -> np.float32:
    return np.float32(v)


@dataclass
class _Layer:
    attn_norm: Any
    qkv: list[
        tuple[GpuWeight, int]
    ]  # the q|k|v projection: one fused weight, or three parts at column offsets
    wo: GpuWeight
    q_norm: Any | None
    k_norm: Any | None
    ffn_norm: Any
    wg: GpuWeight
    wu: GpuWeight
    wd: GpuWeight
    wgu: GpuWeight | None = None  # gate|up fused (wg and wu are then views of it)
    # RMSNorm done by the decode mat-vec of q|k|v, gate|up itself
    attn_norm_in_mv: bool = False
    ffn_norm_in_mv: bool = False


class CupyRunner(Runner):
    backend = "cupy"

    def __init__(self, weights: Any, prefill_chunk: int = PREFILL_CHUNK) -> None:
        c: ModelConfig = weights.config
        self.config = c
        self.model_id = weights.model_id
        if c.head_dim not in HEAD_DIMS:
            raise EngineError(f"head dim {c.head_dim} is not supported (kernels: {HEAD_DIMS})")
        if c.n_heads % c.n_kv_heads or c.group_size > MAX_GROUP:
            raise EngineError(f"{c.n_heads} query heads over {c.n_kv_heads} KV heads unsupported")
        self.k = get_kernels()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pdl = PdlLauncher()
        if self.pdl.available():
            try:  # probe: a no-op launch through the driver
                z = cp.zeros(1, dtype=cp.int32)
                self.pdl.launch(self.k["advance_lens"], (1,), (32,), (z, z, _i(0)), self.stream)
                self.stream.synchronize()
            except Exception as exc:
                print(
                    f"warning: programmatic dependent launch unavailable ({exc})", file=sys.stderr
                )
                self.pdl.disable()
        self.prefill_chunk = prefill_chunk
        # The loader made the weights on the default stream, and ours does not wait for it:
        # finish that work before reading them here.
        cp.cuda.Device().synchronize()
        with self.stream:
            t = weights.tensors
            self.tok_embd = matrix_to_gpu(t["token_embd.weight"])
            self.w_out = self.tok_embd if c.tied_embeddings else matrix_to_gpu(t["output.weight"])
            self.out_norm = vector_to_gpu(t["output_norm.weight"])
            self.layers: list[_Layer] = []
            for i in range(c.n_layers):

                def m(part: str, i: int = i) -> GpuWeight:
                    return matrix_to_gpu(t[f"blk.{i}.{part}.weight"])

                def v(part: str, i: int = i) -> Any:
                    return vector_to_gpu(t[f"blk.{i}.{part}.weight"])

                layer = _Layer(
                    attn_norm=v("attn_norm"),
                    qkv=fuse_rows([m("attn_q"), m("attn_k"), m("attn_v")]),
                    wo=m("attn_output"),
                    q_norm=v("attn_q_norm") if c.qk_norm else None,
                    k_norm=v("attn_k_norm") if c.qk_norm else None,
                    ffn_norm=v("ffn_norm"),
                    wg=m("ffn_gate"),
                    wu=m("ffn_up"),
                    wd=m("ffn_down"),
                )
                if layer.wg.wt != layer.wu.wt:
                    raise EngineError(f"layer {i}: ffn_gate and ffn_up differ in type")
                # gate|up as one matrix: one prefill GEMM; decode reads the halves as views
                (gu, _), *rest = fuse_rows([layer.wg, layer.wu])
                if not rest:
                    f = c.ffn_dim
                    layer.wg = GpuWeight(
                        gu.wt, gu.q[:f], None if gu.s is None else gu.s[:f], f, gu.cols
                    )
                    layer.wu = GpuWeight(
                        gu.wt, gu.q[f:], None if gu.s is None else gu.s[f:], f, gu.cols
                    )
                    layer.wgu = gu
                self._norms_in_mv(layer)
                for w in [w for w, _ in layer.qkv] + [layer.wo, layer.wg, layer.wu, layer.wd]:
                    self._add_tiles(w)
                self.layers.append(layer)
            self._add_tiles(self.w_out)
            # RoPE frequencies in float64, computed as the NumPy reference computes them
            self._neox = int(rope_neox(c.arch))  # RoPE pairs i, i + hd/2 (else 2i, 2i + 1)
            half = c.head_dim // 2
            self.inv_freq = cp.asarray(
                c.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / c.head_dim)
            )
        self.stream.synchronize()
        cp.get_default_memory_pool().free_all_blocks()
        free, self._total = cp.cuda.runtime.memGetInfo()
        # measured at the first reset(): by then the caller has dropped the loader's arrays,
        # which q|k|v and gate|up fusion copied
        self._free_after_load: int | None = None
        self._peak = 0
        self.weight_bytes = self._weight_bytes()
        self._graphs: dict[int, Any] = {}
        self._prefill_bufs: dict[str, Any] = {}
        self._deq: Any = None
        self._trace: list | None = None
        self._skip: tuple[str, ...] = ()  # kernel-name prefixes left out (timing ablations)
        # PDL only inside the decode step, where every successor kernel is ours and waits
        # (griddepcontrol.wait); prefill interleaves cuBLAS kernels, which may not
        self._in_step = False
        self._one = np.ones(1, dtype=np.float32)  # host scalars for cuBLAS (pointer mode host)
        self._zero = np.zeros(1, dtype=np.float32)
        self._ready = False

    def _norms_in_mv(self, layer: _Layer) -> None:
        """Let the q|k|v and gate|up decode mat-vecs apply their RMSNorm themselves (their
        `_norm` kernels): float16 weights on the tensor cores take the raw residual and scale
        it by g in float32 as they load it; quantized weights take the int8 planes of x * g
        and scale their result by 1 / rms. One norm kernel less per norm: a measured +7% on
        llama-1b:f16 decode (engine/PERF.md)."""
        if not NORM_IN_MV:
            return
        (qkv, _), *rest = layer.qkv
        layer.attn_norm_in_mv = not rest and GEOMETRY.norm_in_mv(qkv.wt, qkv.cols)
        gu = layer.wgu
        layer.ffn_norm_in_mv = gu is not None and GEOMETRY.norm_in_mv(gu.wt, gu.cols)

    @staticmethod
    def _add_tiles(w: GpuWeight) -> None:
        """The copy of a weight a tensor-core decode mat-vec reads, in its order (prefill's
        cuBLAS GEMMs and dequantization keep the planes): for float16, +15-17% mat-vec
        bandwidth for twice the weight memory (engine/PERF.md)."""
        if GEOMETRY.uses_mma(w.wt, w.cols):
            w.add_tiles()

    # ---- sizes --------------------------------------------------------------------------

    def _weight_bytes(self) -> int:
        total = self.tok_embd.nbytes + int(self.out_norm.nbytes)
        if not self.config.tied_embeddings:
            total += self.w_out.nbytes
        for L in self.layers:
            for w in [w for w, _ in L.qkv] + [L.wo, L.wg, L.wu, L.wd]:
                total += w.nbytes
        return total

    def decode_read_bytes(self) -> int:
        """Weight bytes one decode step reads (all layers, the output head, one embedding row)."""
        c = self.config
        per_row = self.tok_embd.plane_nbytes // c.vocab_size
        total = per_row + self.w_out.decode_nbytes + int(self.out_norm.nbytes)
        for L in self.layers:
            for w in [w for w, _ in L.qkv] + [L.wo, L.wg, L.wu, L.wd]:
                total += w.decode_nbytes
        return total

    @property
    def kv_bytes_per_token(self) -> int:
        c = self.config
        return 2 * c.n_layers * c.n_kv_heads * c.head_dim * 2

    def _note_load(self) -> None:
        free, total = cp.cuda.runtime.memGetInfo()
        self._free_after_load = int(free)
        self._peak = max(self._peak, int(total - free))

    def _sample_memory(self) -> None:
        free, total = cp.cuda.runtime.memGetInfo()
        self._peak = max(self._peak, int(total - free))

    # ---- KV cache and per-step buffers ------------------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        c = self.config
        self._check_shape(n_seqs, max_len)
        self.stream.synchronize()
        if self._ready and (n_seqs, max_len) == (self.n_seqs, self.max_len):
            # same shape: keep the cache buffers and the captured graphs, forget the tokens
            with self.stream:
                self.lens.fill(0)
            self.stream.synchronize()
            self._lens[:] = 0
            return
        self._graphs.clear()
        self.kcache = self.vcache = None
        self._buf = {}
        cp.get_default_memory_pool().free_all_blocks()
        if self._free_after_load is None:
            self._note_load()
        R, hd = n_seqs, c.head_dim
        q_dim, kv_dim = c.n_heads * hd, c.n_kv_heads * hd
        kmax = max(c.dim, c.ffn_dim, q_dim)
        with self.stream:
            shape = (c.n_layers, n_seqs, c.n_kv_heads, max_len, hd)
            self.kcache = cp.zeros(shape, dtype=cp.float16)
            self.vcache = cp.zeros(shape, dtype=cp.float16)
            self.lens = cp.zeros(n_seqs, dtype=cp.int32)
            b = self._buf
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
            b["hist"] = cp.zeros((R, max_len), dtype=cp.int32)
            b["pick_v"] = cp.zeros((R, ARGMAX_BLOCKS), dtype=cp.float32)
            b["pick_i"] = cp.zeros((R, ARGMAX_BLOCKS), dtype=cp.int32)
            b["pick_count"] = cp.zeros(R, dtype=cp.uint32)  # argmax_advance keeps it zero
        self.stream.synchronize()
        self._lens = np.zeros(n_seqs, dtype=np.int64)
        self.n_seqs, self.max_len = n_seqs, max_len
        self._ready = True
        self._capture(n_seqs)  # the usual step shape, captured now so no timed decode pays it
        self._sample_memory()

    def _ensure_ready(self) -> None:
        if not self._ready:
            self.reset(1, min(self.config.max_context, DEFAULT_MAX_LEN))

    def seq_len(self, seq: int) -> int:
        self._ensure_ready()
        self._check_seq(seq)
        return int(self._lens[seq])

    def truncate(self, seq: int, length: int) -> None:
        self._ensure_ready()
        self._check_seq(seq)
        if length < 0:
            raise EngineError(f"cannot truncate to a negative length ({length})")
        new = min(int(self._lens[seq]), int(length))
        self._lens[seq] = new
        with self.stream:
            self.lens[seq] = new

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

    def _check_rows(self, seqs: Sequence[int], tokens: Any, steps: int) -> tuple[list[int], Any]:
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

    # ---- decode -------------------------------------------------------------------------------

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
        weights: their kernel applies 1 / rms to the int8 planes of x * g)."""
        b = self._buf
        if w.quantized:
            if norm is not None or self._quantized_src != src:
                x = b[src]
                nblocks = rows * x.shape[1] // 32
                self._launch(
                    "quantize_q8",
                    ((nblocks * 32 + 255) // 256,),
                    (256,),
                    (x, NULL if norm is None else norm, b["xq"], b["xs"], _i(nblocks),
                     _i(x.shape[1])),
                )  # fmt: skip
                self._quantized_src = src if norm is None else None
            xa, xs = b["xq"], b["xs"]
        else:
            xa, xs = b[src], NULL
        name, grid, block = gemv_launch(w.wt, w.rows, w.cols, rows, mode, norm is not None)
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
            _i(w.rows),
            _i(w.cols),
            _i(rows),
            _i(out.shape[1]),
        )
        if norm is not None:
            args += (_f(self.config.norm_eps),) if w.quantized else (norm, _f(self.config.norm_eps))
        self._launch(name, grid, block, args, gemv_shared_bytes(name))

    def _launch(self, name: str, grid: tuple, block: tuple, args: tuple, shared: int = 0) -> None:
        """Launch one kernel on the runner's stream (`shared`: dynamic shared memory bytes);
        timed per kernel when tracing."""
        fn = self.k[name]
        if self._skip and name.startswith(self._skip):
            return
        if self._trace is None:
            if self._in_step and self.pdl.available():
                self.pdl.launch(fn, grid, block, args, self.stream, shared)
            else:
                fn(grid, block, args, shared_mem=shared)
            return
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(self.stream)
        fn(grid, block, args, shared_mem=shared)
        b.record(self.stream)
        self._trace.append((name, a, b))

    def profile_step(self, rows: int = 1) -> dict[str, float]:
        """Microseconds per kernel name for one eager decode step (advances the rows by one)."""
        self._trace = []
        try:
            with self.stream:
                self._step_kernels(rows)
            self.stream.synchronize()
            out: dict[str, float] = {}
            for name, a, b in self._trace:
                out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b) * 1e3
        finally:
            self._trace = None
        return out

    def time_graph(self, rows: int, skip: tuple[str, ...] = (), reps: int = 50) -> float:
        """Milliseconds per replay of a decode-step graph captured without the `skip` kernels.

        A measuring tool (leave-one-stage-out timings): the results of such a step are wrong,
        and each replay that keeps argmax_advance moves the rows on by one token.
        """
        self._skip = tuple(skip)
        try:
            with self.stream:
                self.stream.begin_capture()
                try:
                    self._step_kernels(rows)
                finally:
                    graph = self.stream.end_capture()
        finally:
            self._skip = ()
        for _ in range(3):
            graph.launch(self.stream)
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(self.stream)
        for _ in range(reps):
            graph.launch(self.stream)
        b.record(self.stream)
        b.synchronize()
        return cp.cuda.get_elapsed_time(a, b) / reps

    def _rmsnorm(self, x: Any, w: Any, y: Any, y16: Any, rows: int, quant: bool = False) -> None:
        """RMSNorm rows of x into y (float32) and/or y16; quant also fills the int8 planes.

        In a decode step the quantizing norm cuts its few rows into slices of RMSNORM_SLICE
        elements, one block each (every block sums its row again: a few KB from L2), so the
        int8 blocks are written by many SMs at once (+3% on llama-8b:q4_0; the float norm lost
        1% that way, engine/PERF.md). Prefill's thousands of rows take one block per row,
        which would otherwise re-read each row dim / slice times."""
        dim = self.config.dim
        b = self._buf
        xq, xs = (b["xq"], b["xs"]) if quant else (NULL, NULL)
        per = min(RMSNORM_SLICE, dim) if self._in_step and quant else dim
        args = (x, w, y, y16, xq, xs, _i(dim), _i(per), _f(self.config.norm_eps))
        self._launch("rmsnorm", (-(-dim // per), rows), (min(1024, per),), args)
        self._quantized_src = "h" if quant else None

    def _rope_kv(self, li: int, L: _Layer, qkv: Any, q: Any, n: int, seq: int, pos0: int) -> None:
        """Prefill: RoPE on the chunk's n rows of q|k|v at positions pos0.., k and v into the
        cache of `seq` (a decode step does this inside its attention kernel)."""
        c = self.config
        b = self._buf
        self._launch(
            "rope_kv",
            (c.n_heads + c.n_kv_heads, n),
            (32,),
            (
                qkv, _i(qkv.shape[1]), q, self.kcache[li], self.vcache[li],
                L.q_norm if L.q_norm is not None else NULL,
                L.k_norm if L.k_norm is not None else NULL,
                b["seq_ids"], self.lens, _i(seq), _i(pos0),
                _i(c.n_heads), _i(c.n_kv_heads), _i(c.head_dim), _i(self.max_len),
                self.inv_freq, _i(self._neox), _f(c.norm_eps),
            ),
        )  # fmt: skip

    def _step_kernels(self, rows: int) -> None:
        """Every launch of one decode step for rows 0..rows-1 (graph-capturable)."""
        self._in_step = True
        try:
            self._step_launches(rows)
        finally:
            self._in_step = False

    def _step_launches(self, rows: int) -> None:
        c = self.config
        b = self._buf
        hd = c.head_dim
        self._quantized_src = None
        e = self.tok_embd
        self._launch(
            "embed",
            (rows,),
            (256,),
            (b["tokens"], _i(e.wt), e.q, e.s if e.s is not None else NULL, b["x"], _i(c.dim)),
        )
        scale = 1.0 / math.sqrt(hd)
        for li, L in enumerate(self.layers):
            if L.attn_norm_in_mv:
                self._mv(L.qkv[0][0], "x", rows, b["qkv"], "store", norm=L.attn_norm)
            else:
                quant = L.qkv[0][0].quantized
                self._rmsnorm(b["x"], L.attn_norm, b["h"], NULL, rows, quant=quant)
                for w, col0 in L.qkv:
                    self._mv(w, "h", rows, b["qkv"], "store", col0=col0)
            # RoPE and the KV-cache write happen inside the split kernel
            self._launch(
                f"attn_split_{hd}",
                (ATTN_SPLITS, c.n_kv_heads, rows),
                (128,),
                (
                    b["qkv"], _i(b["qkv"].shape[1]),
                    L.q_norm if L.q_norm is not None else NULL,
                    L.k_norm if L.k_norm is not None else NULL,
                    self.inv_freq, _i(self._neox), _f(c.norm_eps),
                    self.kcache[li], self.vcache[li], b["seq_ids"], self.lens,
                    b["part_o"], b["part_ml"], _i(c.n_heads), _i(c.n_kv_heads),
                    _i(self.max_len), _i(ATTN_SPLITS), _i(ATTN_MIN_CHUNK), _f(scale),
                ),
            )  # fmt: skip
            quant_o = L.wo.quantized and hd >= 32
            self._launch(
                "attn_combine",
                (c.n_heads, rows),
                (hd,),
                (
                    b["part_o"], b["part_ml"], b["seq_ids"], self.lens, b["att"],
                    b["xq"] if quant_o else NULL, b["xs"] if quant_o else NULL,
                    _i(c.n_heads), _i(hd), _i(ATTN_SPLITS), _i(ATTN_MIN_CHUNK),
                ),
            )  # fmt: skip
            self._quantized_src = "att" if quant_o else None
            self._mv(L.wo, "att", rows, b["x"], "add")
            if L.ffn_norm_in_mv:
                self._mv(L.wg, "x", rows, b["f"], "glu", w2=L.wu, norm=L.ffn_norm)
            else:
                self._rmsnorm(b["x"], L.ffn_norm, b["h"], NULL, rows, quant=L.wg.quantized)
                self._mv(L.wg, "h", rows, b["f"], "glu", w2=L.wu)
            self._mv(L.wd, "f", rows, b["x"], "add")
        # the output head keeps its norm kernel: its mat-vec applying the norm measured 1%
        # slower on llama-1b:f16 (engine/PERF.md)
        self._rmsnorm(b["x"], self.out_norm, b["h"], NULL, rows, quant=self.w_out.quantized)
        self._mv(self.w_out, "h", rows, b["logits"], "store")
        self._launch(
            "argmax_advance",
            (ARGMAX_BLOCKS, rows),
            (256,),
            (
                b["logits"], _i(c.vocab_size), b["tokens"], b["seq_ids"], self.lens,
                b["hist"], _i(self.max_len), _i(1), b["pick_v"], b["pick_i"], b["pick_count"],
            ),
        )  # fmt: skip

    def _launch_step(self, rows: int) -> None:
        graph = self._graphs.get(rows)
        if graph is None:
            graph = self._capture(rows)
        if graph is False:
            with self.stream:
                self._step_kernels(rows)
        else:
            graph.launch(self.stream)

    def _capture(self, rows: int) -> Any:
        """The decode step for `rows` rows as a CUDA graph (False: replay eagerly instead)."""
        try:
            with self.stream:
                self.stream.begin_capture()
                try:
                    self._step_kernels(rows)
                finally:
                    graph = self.stream.end_capture()
        except Exception as exc:  # a CuPy without graph capture: launch the kernels each step
            print(
                f"warning: CUDA graph capture failed ({exc}); decoding without graphs",
                file=sys.stderr,
            )
            graph = False
        self._graphs[rows] = graph
        return graph

    def _set_rows(self, seqs: list[int], ids: np.ndarray) -> None:
        b = self._buf
        n = len(seqs)
        with self.stream:
            b["tokens"][:n].set(ids.astype(np.int32), stream=self.stream)
            b["seq_ids"][:n].set(np.asarray(seqs, dtype=np.int32), stream=self.stream)

    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:
        seqs, ids = self._check_rows(seqs, tokens, 1)
        n = len(seqs)
        self._set_rows(seqs, ids)
        self._launch_step(n)
        with self.stream:
            out = self._buf["logits"][:n].get(stream=self.stream)
        self.stream.synchronize()
        for s in seqs:
            self._lens[s] += 1
        self._sample_memory()
        return out

    def decode_greedy(self, seqs: Sequence[int], tokens: np.ndarray, steps: int) -> np.ndarray:
        if steps < 0:
            raise EngineError(f"cannot decode a negative number of steps ({steps})")
        seqs, ids = self._check_rows(seqs, tokens, steps)
        n = len(seqs)
        if steps == 0:
            return np.empty((0, n), dtype=np.int64)
        start = [int(self._lens[s]) for s in seqs]
        self._set_rows(seqs, ids)
        for _ in range(steps):
            self._launch_step(n)
        with self.stream:
            hist = self._buf["hist"][:n].get(stream=self.stream)
        self.stream.synchronize()
        out = np.empty((steps, n), dtype=np.int64)
        for r, s in enumerate(seqs):
            out[:, r] = hist[r, start[r] : start[r] + steps]
            self._lens[s] += steps
        self._sample_memory()
        return out

    # ---- prefill ------------------------------------------------------------------------------

    def _pbuf(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        a = self._prefill_bufs.get(name)
        size = int(np.prod(shape))
        if a is None or a.size < size or a.dtype != dtype:
            a = cp.zeros(size, dtype=dtype)  # zeros: a stray read of an unwritten row stays finite
            self._prefill_bufs[name] = a
        return a[:size].reshape(shape)

    def _gemm(self, x16: Any, w: GpuWeight, out: Any, beta: float, col0: int = 0) -> None:
        """out[M, col0:col0+N] (float32) = x16[M, K] @ W[N, K]^T + beta * out[...]."""
        m_rows, k = x16.shape
        ldc = out.shape[1]
        handle = cp.cuda.device.get_cublas_handle()
        # CuPy binds its shared handle to a stream only inside its own wrappers: bind it to
        # ours, or the GEMM runs on another stream and races the kernels around it.
        cublas.setStream(handle, self.stream.ptr)
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
                self.k["dequant_f16"](
                    ((total + 255) // 256,),
                    (256,),
                    (_i(w.wt), w.q, w.s if w.s is not None else NULL, w16, _i(r0), _i(nr), _i(k)),
                )
            cublas.gemmEx(
                handle, CUBLAS_OP_T, CUBLAS_OP_N, nr, m_rows, k,
                self._one.ctypes.data, w16.data.ptr, CUDA_R_16F, k,
                x16.data.ptr, CUDA_R_16F, k,
                (self._one if beta else self._zero).ctypes.data,
                out.data.ptr + (col0 + r0) * 4, CUDA_R_32F, ldc,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            )  # fmt: skip

    def _prefill_chunk(self, seq: int, pos0: int, ids: np.ndarray, logits: str) -> Any:
        c = self.config
        n = ids.size
        C = self.prefill_chunk
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
        tok.set(ids.astype(np.int32), stream=self.stream)
        e = self.tok_embd
        self.k["embed"](
            (n,), (256,), (tok, _i(e.wt), e.q, e.s if e.s is not None else NULL, x, _i(c.dim))
        )
        scale_log2 = LOG2E / math.sqrt(hd)
        for li, L in enumerate(self.layers):
            self._rmsnorm(x, L.attn_norm, NULL, h16, n)
            for w, col0 in L.qkv:
                self._gemm(h16, w, qkv, 0.0, col0)
            self._rope_kv(li, L, qkv, q, n, seq, pos0)
            self.k[f"attn_prefill_{hd}"](
                ((n + 63) // 64, c.n_heads),
                (128,),
                (
                    q, self.kcache[li], self.vcache[li], a16, _i(seq), _i(pos0), _i(n),
                    _i(c.n_heads), _i(c.n_kv_heads), _i(self.max_len), _f(scale_log2),
                ),
            )  # fmt: skip
            self._gemm(a16, L.wo, x, 1.0)
            self._rmsnorm(x, L.ffn_norm, NULL, h16, n)
            if L.wgu is not None:
                self._gemm(h16, L.wgu, gu, 0.0)
            else:
                self._gemm(h16, L.wg, gu, 0.0)
                self._gemm(h16, L.wu, gu, 0.0, c.ffn_dim)
            total = n * c.ffn_dim
            self.k["swiglu_f16"](
                ((total + 255) // 256,), (256,), (gu, _i(c.ffn_dim), f16, np.uint64(total))
            )
            self._gemm(f16, L.wd, x, 1.0)
        if logits == "none":
            return None
        rows = x if logits == "all" else x[n - 1 :]
        m = rows.shape[0]
        hn = h16[:m]
        self._rmsnorm(rows, self.out_norm, NULL, hn, m)
        out = cp.empty((m, c.vocab_size), dtype=cp.float32)
        self._gemm(hn, self.w_out, out, 0.0)
        return out

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        self._ensure_ready()
        self._check_seq(seq)
        ids = self._check_tokens(tokens)
        if ids.size == 0:
            raise EngineError("cannot prefill an empty prompt")
        self._check_room(seq, ids.size)
        p0 = int(self._lens[seq])
        outs = []
        with self.stream:
            for a in range(0, ids.size, self.prefill_chunk):
                chunk = ids[a : a + self.prefill_chunk]
                last = a + self.prefill_chunk >= ids.size
                mode = "all" if all_logits else ("last" if last else "none")
                got = self._prefill_chunk(seq, p0 + a, chunk, mode)
                if got is not None:
                    outs.append(got.get(stream=self.stream))
                self._sample_memory()
            self.lens[seq] = p0 + ids.size
        self.stream.synchronize()
        self._lens[seq] = p0 + ids.size
        self._sample_memory()
        return np.concatenate(outs) if all_logits else outs[-1][0]

    # ---- reporting ------------------------------------------------------------------------------

    def synchronize(self) -> None:
        self.stream.synchronize()

    def vram(self, kv_tokens: int = 0) -> VramInfo | None:
        if self._free_after_load is None:
            cp.get_default_memory_pool().free_all_blocks()
            self._note_load()
        self._sample_memory()
        return VramInfo(
            total_bytes=int(self._total),
            free_after_load_bytes=int(self._free_after_load or 0),
            peak_bytes=self._peak,
            kv_cache_bytes=int(kv_tokens) * self.kv_bytes_per_token,
        )
