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
