"""Weights on the GPU in the layouts the kernels read.

Quantized tensors stay quantized: the same blocks, split into two planes so the mat-vec
kernels load 16 bytes at a time (a GGUF block of 18, 20 or 34 bytes is only 2-byte aligned):
  Q8_0: q int8 [rows, K]      s float16 [rows, K/32]       (d)
  Q4_0: q uint8 [rows, K/2]   s float16 [rows, K/32]       (d; nibbles as in GGUF)
  Q4_1: q uint8 [rows, K/2]   s float16 [rows, K/32, 2]    (d, m)
Float tensors: F16 as float16 [rows, K]; F32 and BF16 as float32 [rows, K] (BF16 widens
exactly). Float16 and Q4_0 weights that a tensor-core decode mat-vec reads get a second copy
in its order (tiles.py), made by the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from engine.cuda.geometry import WT_F16, WT_F32, WT_Q4_0, WT_Q4_1, WT_Q8_0
from engine.cuda.tiles import mma_tiles, q4_0_fragments
from engine.errors import EngineError

# ggml type -> (kernel type id, bytes per 32-element block, header bytes)
_QUANT = {"Q8_0": (WT_Q8_0, 34, 2), "Q4_0": (WT_Q4_0, 18, 2), "Q4_1": (WT_Q4_1, 20, 4)}


@dataclass
class GpuWeight:
    wt: int  # WT_* of kernels/common.cuh
    q: Any  # cupy array: quants or float values
    s: Any | None  # cupy float16 scales plane (quantized types only)
    rows: int
    cols: int
    # weights of the tensor-core decode mat-vecs: a second copy in their order (tiles.py;
    # Q4_0: nibble words and scales); q and s stay as they are for prefill and embedding
    tiled: Any | None = None
    tiled_s: Any | None = None

    @property
    def plane_nbytes(self) -> int:
        """Bytes of q and s (the layout prefill and the embedding lookup read)."""
        return int(self.q.nbytes) + (int(self.s.nbytes) if self.s is not None else 0)

    def _tile_bytes(self) -> int:
        if self.tiled is None:
            return 0
        return int(self.tiled.nbytes) + (
            int(self.tiled_s.nbytes) if self.tiled_s is not None else 0
        )

    @property
    def nbytes(self) -> int:
        """Bytes on the GPU, every copy."""
        return self.plane_nbytes + self._tile_bytes()

    @property
    def decode_nbytes(self) -> int:
        """Bytes the decode mat-vec reads: the tensor-core copy where there is one."""
        return self._tile_bytes() or self.plane_nbytes

    def kernel_planes(self, mma: bool) -> tuple[Any, Any | None]:
        """(quants or values, scales or None) as a mat-vec kernel takes them: the
        tensor-core copy for the tensor-core kernels (mma), the planes for the others."""
        if not mma:
            return self.q, self.s
        if self.tiled is None:
            raise EngineError("a tensor-core mat-vec needs the weight's tensor-core copy")
        return self.tiled, self.tiled_s

    def add_tiles(self) -> None:
        """Make the copy the tensor-core mat-vecs read (float16 and Q4_0 weights), from the
        planes as they are now."""
        if self.wt == WT_F16:
            self.tiled = mma_tiles(self.q, cp)
        elif self.wt == WT_Q4_0:
            self.tiled, self.tiled_s = q4_0_fragments(self.q, self.s, cp)
        else:
            raise EngineError("only float16 and Q4_0 weights have a tensor-core order")

    @property
    def quantized(self) -> bool:
        return self.s is not None


def _float32(data: Any, ggml_type: str) -> Any:
    arr = cp.asarray(data)
    if ggml_type == "BF16":
        return (arr.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)
    return arr.astype(cp.float32, copy=False)


def matrix_to_gpu(t: Any) -> GpuWeight:
    """A WeightTensor matrix (rows, K) in kernel layout."""
    rows, cols = int(t.shape[0]), int(t.shape[1])
    kind = t.ggml_type
    if kind == "F16":
        q = cp.ascontiguousarray(cp.asarray(t.data).view(cp.float16).reshape(rows, cols))
        return GpuWeight(WT_F16, q, None, rows, cols)
    if kind in ("F32", "BF16"):
        q = cp.ascontiguousarray(_float32(t.data, kind).reshape(rows, cols))
        return GpuWeight(WT_F32, q, None, rows, cols)
    if kind not in _QUANT:
        raise EngineError(f"tensor {t.name}: type {kind} is not supported by the cupy backend")
    if cols % 32:
        raise EngineError(f"tensor {t.name}: {cols} columns is not a whole number of blocks")
    wt, block, head = _QUANT[kind]
    nb = cols // 32
    blocks = cp.asarray(t.data).view(cp.uint8).reshape(rows, nb, block)
    s = cp.ascontiguousarray(blocks[:, :, :head]).view(cp.float16).reshape(rows, -1)
    q = cp.ascontiguousarray(blocks[:, :, head:]).reshape(rows, -1)
    if wt == WT_Q8_0:
        q = q.view(cp.int8)
    return GpuWeight(wt, q, s, rows, cols)


def vector_to_gpu(t: Any) -> Any:
    """A norm weight as float32 on the GPU."""
    if t.ggml_type not in ("F32", "F16", "BF16"):
        data = t.dequantize(np)
        return cp.asarray(np.asarray(data, dtype=np.float32).reshape(-1))
    return cp.ascontiguousarray(_float32(t.data, t.ggml_type).reshape(-1))


def fuse_rows(parts: list[GpuWeight]) -> list[tuple[GpuWeight, int]]:
    """Weights that share the input (q, k, v) as one matrix, so one launch reads them all.

    Returns [(fused, 0)], or the parts at their output column offsets when their storage
    types differ.
    """
    offsets, col = [], 0
    for p in parts:
        offsets.append(col)
        col += p.rows
    if len({(p.wt, p.cols) for p in parts}) != 1:
        return list(zip(parts, offsets, strict=True))
    q = cp.concatenate([p.q for p in parts], axis=0)
    s = None if parts[0].s is None else cp.concatenate([p.s for p in parts], axis=0)
    return [(GpuWeight(parts[0].wt, q, s, col, parts[0].cols), 0)]
