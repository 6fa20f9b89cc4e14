"""The tensor-core mat-vec's weight order: 16-row by 32-column tiles, each 1 KB contiguous.

A float16 weight [N, K] is stored for decode as [ceil(N / 16), K / 32, 16, 32]: tile
(b, j) holds rows 16b .. 16b + 15 of columns 32j .. 32j + 31, row-major inside, and the
tiles of one 16-row band follow each other along K. One warp's K block of the band is then
one 1 KB run of memory and a block's 16 warps read 16 KB in a row, where the row-major
matrix gave them 64-byte pieces of 16 rows 2K bytes apart: the mat-vec alone moves 15-17%
more bytes per second that way on the H200 (engine/PERF.md). Rows past N are zeros.

No CuPy here: `xp` is numpy or cupy, so the order is checked on the CPU.
"""

from __future__ import annotations

from typing import Any

TILE_ROWS, TILE_COLS = 16, 32  # MMA_M rows of the tensor-core mat-vec by one K block


def mma_tiles(w: Any, xp: Any) -> Any:
    """The [N, K] matrix `w` in tile order, as a new contiguous [ceil(N/16), K/32, 16, 32]."""
    n, k = w.shape
    if k % TILE_COLS:
        raise ValueError(f"tile order needs whole 32-column blocks, got {k} columns")
    pad = -n % TILE_ROWS
    if pad:
        w = xp.concatenate([w, xp.zeros((pad, k), dtype=w.dtype)])
    bands = w.reshape(-1, TILE_ROWS, k // TILE_COLS, TILE_COLS)
    return xp.ascontiguousarray(bands.transpose(0, 2, 1, 3))


def tile_offset(n: int, k: int, cols: int) -> int:
    """Element offset of W[n, k] in tile order (what the kernel computes)."""
    band, row = divmod(n, TILE_ROWS)
    block, col = divmod(k, TILE_COLS)
    return ((band * (cols // TILE_COLS) + block) * TILE_ROWS + row) * TILE_COLS + col


# Q4_0 weights on the int8 tensor cores (mma m16n8k32): two K blocks (64 columns) of a band
# per step, stored so each lane's fragments are one 16-byte piece. Lane (g = lane / 4,
# t = lane % 4) holds bytes 4t .. 4t + 3 of the 16 nibble bytes of rows g and g + 8 in each of
# the two blocks: their low nibbles are elements 4t .. 4t + 3 and the high nibbles elements
# 16 + 4t .. 16 + 4t + 3, exactly the A-fragment registers a0 / a2 (row g) and a1 / a3
# (row g + 8). The order of the four words: (block 0, row g), (block 0, row g + 8),
# (block 1, row g), (block 1, row g + 8); the scales, per g, are d in the same order.
Q4_STEP_COLS = 64


def q4_0_fragments(nibbles: Any, scales: Any, xp: Any) -> tuple[Any, Any]:
    """A Q4_0 weight's planes (uint8 [N, K/2] in GGUF nibble order, float16 [N, K/32]) in
    the int8 tensor-core mat-vec's order: nibble words [ceil(N/16), K/64, 32 lanes, 16 bytes]
    and scales [ceil(N/16), K/64, 8 groups, 4]. Rows past N have zero scales (they add 0)."""
    n, half_k = nibbles.shape
    k = 2 * half_k
    if k % Q4_STEP_COLS or scales.shape != (n, k // 32):
        raise ValueError(f"q4_0 fragment order needs whole 64-column steps, got {k} columns")
    pad = -n % TILE_ROWS
    if pad:
        nibbles = xp.concatenate([nibbles, xp.zeros((pad, half_k), dtype=nibbles.dtype)])
        scales = xp.concatenate([scales, xp.zeros((pad, k // 32), dtype=scales.dtype)])
    steps = k // Q4_STEP_COLS
    # row = 8 * half + g inside a band; a block's 16 bytes = 4 words of 4 bytes (word t)
    q = nibbles.reshape(-1, 2, 8, steps, 2, 4, 4)  # band, half, g, step, block, t, byte
    q = xp.ascontiguousarray(q.transpose(0, 3, 2, 5, 4, 1, 6))  # band, step, g, t, block, half
    s = scales.reshape(-1, 2, 8, steps, 2)  # band, half, g, step, block
    s = xp.ascontiguousarray(s.transpose(0, 3, 2, 4, 1))  # band, step, g, block, half
    bands = q.shape[0]
    return q.reshape(bands, steps, 32, 16), s.reshape(bands, steps, 8, 4)
