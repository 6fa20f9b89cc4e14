"""A model's weights on the GPU, grouped as the decode step and prefill read them, and the
bytes they take.

Per layer, q|k|v and gate|up are fused row-wise (one launch or GEMM reads each group; decode
reads gate and up as views of the fused matrix), weights a tensor-core decode mat-vec reads
get their second copy in its order (tiles.py), and the layer records whether its q|k|v and
gate|up mat-vecs apply their RMSNorm themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.geometry import GEOMETRY, env_flag
from engine.cuda.layout import GpuWeight, fuse_rows, matrix_to_gpu, vector_to_gpu
from engine.errors import EngineError
from engine.numpy_backend import rope_neox
from engine.weights import ModelWeights

# RMSNorm inside the q|k|v and gate|up decode mat-vecs (norms_in_mv); 0: off (A/B)
NORM_IN_MV = env_flag("SPARKBOARD_NORM_IN_MV", True)


@dataclass
class GpuLayer:
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

    @property
    def matrices(self) -> list[GpuWeight]:
        """Every matrix of the layer once (gate and up as their views)."""
        return [w for w, _ in self.qkv] + [self.wo, self.wg, self.wu, self.wd]


@dataclass
class GpuModel:
    tok_embd: GpuWeight
    w_out: GpuWeight  # tok_embd itself when the embeddings are tied
    out_norm: Any
    layers: list[GpuLayer]
    inv_freq: Any  # RoPE frequencies, float64 on the device
    neox: int  # 1: RoPE pairs i, i + hd/2 (else 2i, 2i + 1)


def load_model(weights: ModelWeights) -> GpuModel:
    """The model's tensors on the GPU (call inside the runner's stream)."""
    c = weights.config
    t = weights.tensors
    tok_embd = matrix_to_gpu(t["token_embd.weight"])
    w_out = tok_embd if c.tied_embeddings else matrix_to_gpu(t["output.weight"])
    out_norm = vector_to_gpu(t["output_norm.weight"])
    layers = [_load_layer(t, c, i) for i in range(c.n_layers)]
    add_tiles(w_out)
    # RoPE frequencies in float64, computed as the NumPy reference computes them
    neox = int(rope_neox(c.arch))
    half = c.head_dim // 2
    inv_freq = cp.asarray(c.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / c.head_dim))
    return GpuModel(tok_embd, w_out, out_norm, layers, inv_freq, neox)


def _load_layer(t: dict[str, Any], c: ModelConfig, i: int) -> GpuLayer:
    def m(part: str) -> GpuWeight:
        return matrix_to_gpu(t[f"blk.{i}.{part}.weight"])

    def v(part: str) -> Any:
        return vector_to_gpu(t[f"blk.{i}.{part}.weight"])

    layer = GpuLayer(
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
        layer.wg = GpuWeight(gu.wt, gu.q[:f], None if gu.s is None else gu.s[:f], f, gu.cols)
        layer.wu = GpuWeight(gu.wt, gu.q[f:], None if gu.s is None else gu.s[f:], f, gu.cols)
        layer.wgu = gu
    norms_in_mv(layer)
    for w in layer.matrices:
        add_tiles(w)
    return layer


def norms_in_mv(layer: GpuLayer) -> None:
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


def add_tiles(w: GpuWeight) -> None:
    """The copy of a weight a tensor-core decode mat-vec reads, in its order (prefill's
    cuBLAS GEMMs and dequantization keep the planes): for float16, +15-17% mat-vec
    bandwidth for twice the weight memory (engine/PERF.md)."""
    if GEOMETRY.uses_mma(w.wt, w.cols):
        w.add_tiles()


# ---- sizes ------------------------------------------------------------------------------


def weight_bytes(model: GpuModel, config: ModelConfig) -> int:
    """Bytes of the weights as loaded (planes and tensor-core copies)."""
    total = model.tok_embd.nbytes + int(model.out_norm.nbytes)
    if not config.tied_embeddings:
        total += model.w_out.nbytes
    for L in model.layers:
        for w in L.matrices:
            total += w.nbytes
    return total


def decode_read_bytes(model: GpuModel, config: ModelConfig) -> int:
    """Weight bytes one decode step reads (all layers, the output head, one embedding row)."""
    per_row = model.tok_embd.plane_nbytes // config.vocab_size
    total = per_row + model.w_out.decode_nbytes + int(model.out_norm.nbytes)
    for L in model.layers:
        for w in L.matrices:
            total += w.decode_nbytes
    return total
