"""GGUF tensor formats: block constants, dequantizers and reference quantizers.

Every function takes the array module `xp` (numpy or cupy) so the same code runs on the host
and on the device. Quantized data is uint8 in GGUF block layout, one row of blocks per matrix
row: shape (rows, bytes_per_row). Dequantizers reproduce `gguf.quants.dequantize` bit for bit
(same float32 operations in the same order); quantizers reproduce llama.cpp's reference
rounding (`quantize_row_*_ref`, as mirrored by `gguf.quants.quantize`).

Block layouts (little-endian):
  Q8_0: f16 d, int8 q[32]                 x = q * d
  Q4_0: f16 d, u8 qs[16]                  x = ((qs[j] & 15) - 8) * d for j < 16,
                                          ((qs[j-16] >> 4) - 8) * d for j >= 16
  Q4_1: f16 d, f16 m, u8 qs[16]           x = q * d + m (nibbles as in Q4_0, no offset)
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from engine.errors import EngineError

Array = Any  # numpy.ndarray or cupy.ndarray

QK = 32  # elements per block for every block format here

# ggml type name -> (elements per block, bytes per block)
BLOCK_SIZES: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (QK, 2 + QK),
    "Q4_0": (QK, 2 + QK // 2),
    "Q4_1": (QK, 4 + QK // 2),
}
QUANTIZED_TYPES = ("Q8_0", "Q4_0", "Q4_1")
SUPPORTED_TYPES = tuple(BLOCK_SIZES)


def bytes_per_row(ggml_type: str, n_cols: int) -> int:
    """Bytes one row of `n_cols` elements takes in the given format."""
    block, nbytes = BLOCK_SIZES[ggml_type]
    if n_cols % block:
        raise EngineError(f"a {ggml_type} row needs a multiple of {block} elements, got {n_cols}")
    return n_cols // block * nbytes


def _f16_at(blocks: Array, offset: int, xp: ModuleType) -> Array:
    """The little-endian float16 at byte `offset` of every block, as float32 [n_blocks, 1]."""
    bits = blocks[:, offset].astype(xp.uint16) | (blocks[:, offset + 1].astype(xp.uint16) << 8)
    return xp.ascontiguousarray(bits).view(xp.float16).astype(xp.float32)[:, None]


def _nibbles(qs: Array, xp: ModuleType) -> Array:
    """Unpack [n_blocks, 16] bytes into [n_blocks, 32] values: low nibbles first, then high."""
    return xp.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _as_blocks(data: Array, ggml_type: str) -> tuple[Array, int]:
    block, nbytes = BLOCK_SIZES[ggml_type]
    rows = data.shape[0] if data.ndim > 1 else 1
    return data.reshape(-1, nbytes), rows


def dequantize(data: Array, ggml_type: str, xp: ModuleType = np) -> Array:
    """Float32 values of a tensor stored as `ggml_type`.

    Quantized types take uint8 [rows, bytes_per_row] (or flat bytes) and give
    float32 [rows, cols]; F32/F16 take their own dtype, BF16 takes raw uint16 bits, any shape.
    """
    if ggml_type == "F32":
        return data.astype(xp.float32, copy=False)
    if ggml_type == "F16":
        return data.astype(xp.float32)
    if ggml_type == "BF16":
        return (data.view(xp.uint16).astype(xp.uint32) << 16).view(xp.float32)
    if ggml_type not in QUANTIZED_TYPES:
        raise EngineError(f"no dequantizer for tensor type {ggml_type}")
    blocks, rows = _as_blocks(data, ggml_type)
    if ggml_type == "Q8_0":
        d = _f16_at(blocks, 0, xp)
        q = blocks[:, 2:].view(xp.int8).astype(xp.float32)
        out = q * d
    elif ggml_type == "Q4_0":
        d = _f16_at(blocks, 0, xp)
        q = (_nibbles(blocks[:, 2:], xp).astype(xp.int8) - 8).astype(xp.float32)
        out = d * q
    else:  # Q4_1
        d = _f16_at(blocks, 0, xp)
        m = _f16_at(blocks, 2, xp)
        q = _nibbles(blocks[:, 4:], xp).astype(xp.float32)
        out = (d * q) + m
    return out.reshape(rows, -1) if data.ndim > 1 else out.reshape(-1)


def _roundf(x: Array, xp: ModuleType) -> Array:
    """C roundf (half away from zero), exactly as gguf.quants.np_roundf computes it."""
    a = xp.abs(x)
    floored = xp.floor(a)
    return xp.sign(x) * (floored + xp.floor(2 * (a - floored)))


def _f16_bytes(v: Array, xp: ModuleType) -> Array:
    """[n_blocks, 1] float32 -> [n_blocks, 2] little-endian float16 bytes."""
    bits = xp.ascontiguousarray(v.astype(xp.float16)).view(xp.uint16)
    return xp.concatenate([(bits & 0xFF).astype(xp.uint8), (bits >> 8).astype(xp.uint8)], axis=1)


def _inverse(d: Array, xp: ModuleType) -> Array:
    safe = xp.where(d == 0, xp.float32(1), d)
    return xp.where(d == 0, xp.float32(0), xp.float32(1) / safe).astype(xp.float32)


def quantize(values: Array, ggml_type: str, xp: ModuleType = np) -> Array:
    """Quantize float values [rows, cols] (cols a multiple of 32) into uint8 [rows, bytes]."""
    if ggml_type not in QUANTIZED_TYPES:
        raise EngineError(f"no quantizer for tensor type {ggml_type}")
    x = values.astype(xp.float32, copy=False)
    rows = x.shape[0] if x.ndim > 1 else 1
    blocks = x.reshape(-1, QK)
    if ggml_type == "Q8_0":
        d = xp.abs(blocks).max(axis=1, keepdims=True) / xp.float32(127)
        q = _roundf(blocks * _inverse(d, xp), xp).astype(xp.int8).view(xp.uint8)
        out = xp.concatenate([_f16_bytes(d, xp), q], axis=1)
    elif ggml_type == "Q4_0":
        imax = xp.abs(blocks).argmax(axis=1)[:, None]
        vmax = xp.take_along_axis(blocks, imax, axis=1)
        d = vmax / xp.float32(-8)
        q = xp.trunc(blocks * _inverse(d, xp) + xp.float32(8.5))
        q = xp.clip(q.astype(xp.uint8), 0, 15)
        out = xp.concatenate([_f16_bytes(d, xp), q[:, :16] | (q[:, 16:] << 4)], axis=1)
    else:  # Q4_1
        vmax = blocks.max(axis=1, keepdims=True)
        vmin = blocks.min(axis=1, keepdims=True)
        d = (vmax - vmin) / xp.float32(15)
        q = xp.trunc((blocks - vmin) * _inverse(d, xp) + xp.float32(0.5))
        q = xp.clip(q.astype(xp.uint8), 0, 15)
        out = xp.concatenate(
            [_f16_bytes(d, xp), _f16_bytes(vmin, xp), q[:, :16] | (q[:, 16:] << 4)], axis=1
        )
    return out.reshape(rows, -1) if x.ndim > 1 else out.reshape(-1)
