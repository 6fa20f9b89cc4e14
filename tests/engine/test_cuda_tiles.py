"""The tensor-core mat-vec's tile order, checked with NumPy (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cuda.tiles import mma_tiles, tile_offset


@pytest.mark.parametrize("n,k", [(48, 64), (37, 96), (16, 32), (5, 32)])
def test_every_element_lands_at_its_tile_offset(n: int, k: int) -> None:
    w = np.random.default_rng(0).standard_normal((n, k)).astype(np.float16)
    tiled = mma_tiles(w, np)
    assert tiled.shape == (-(-n // 16), k // 32, 16, 32)
    assert tiled.flags.c_contiguous
    flat = tiled.reshape(-1)
    for i in range(n):
        for j in range(k):
            assert flat[tile_offset(i, j, k)] == w[i, j]
    # the padding rows of the last band are zeros, and nothing else is there
    assert flat.size == tiled.shape[0] * 16 * k
    assert np.count_nonzero(tiled[-1, :, n - 16 * (tiled.shape[0] - 1) :, :]) == 0


def test_one_k_block_of_a_band_is_one_contiguous_kilobyte() -> None:
    w = np.arange(32 * 128, dtype=np.float16).reshape(32, 128)
    flat = mma_tiles(w, np).reshape(-1)
    start = tile_offset(16, 64, 128)  # band 1, K block 2
    run = flat[start : start + 16 * 32].reshape(16, 32)
    assert np.array_equal(run, w[16:32, 64:96])


def test_columns_must_be_whole_blocks() -> None:
    with pytest.raises(ValueError, match="32-column"):
        mma_tiles(np.zeros((16, 40), dtype=np.float16), np)
