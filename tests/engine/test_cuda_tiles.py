"""The tensor-core mat-vec's tile order, checked with NumPy (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cuda.tiles import mma_tiles, q4_0_fragments, tile_offset


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


def _lane_dot(frag_q: np.ndarray, frag_s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """W @ x rebuilt the way the int8 tensor-core kernel reads the fragments: lane (g, t)
    word w of step j is row g + 8 * (w % 2), block 2j + w // 2; its 4 bytes' low nibbles are
    elements 4t .. 4t + 3 of that block, the high nibbles elements 16 + 4t .. 16 + 4t + 3."""
    bands, steps = frag_q.shape[:2]
    out = np.zeros(bands * 16)
    for b in range(bands):
        for j in range(steps):
            for lane in range(32):
                g, t = divmod(lane, 4)
                words = frag_q[b, j, lane].reshape(4, 4)
                for w in range(4):
                    row, blk = 16 * b + g + 8 * (w % 2), 2 * j + w // 2
                    d = float(frag_s[b, j, g, w])
                    for i, byte in enumerate(words[w]):
                        for e, nib in ((4 * t + i, byte & 15), (16 + 4 * t + i, byte >> 4)):
                            out[row] += d * (int(nib) - 8) * x[32 * blk + e]
    return out


@pytest.mark.parametrize("n", [16, 21])
def test_q4_0_fragments_give_the_matrix_product(n: int) -> None:
    from engine import quants

    rng = np.random.default_rng(1)
    k = 128
    w = rng.standard_normal((n, k)).astype(np.float32)
    blocks = np.asarray(quants.quantize(w, "Q4_0", np)).reshape(n, k // 32, 18)
    scales = blocks[:, :, :2].copy().view(np.float16).reshape(n, k // 32)
    nibbles = blocks[:, :, 2:].reshape(n, k // 2)
    dense = quants.dequantize(blocks.reshape(-1), "Q4_0", np).reshape(n, k).astype(np.float64)
    fq, fs = q4_0_fragments(nibbles, scales, np)
    assert fq.shape == (-(-n // 16), k // 64, 32, 16) and fs.shape == (-(-n // 16), k // 64, 8, 4)
    x = rng.standard_normal(k)
    got = _lane_dot(fq, fs, x)
    assert np.allclose(got[:n], dense @ x, rtol=1e-9, atol=1e-9)
    assert np.all(got[n:] == 0)  # padding rows: zero scales


def test_q4_0_fragments_need_whole_64_column_steps() -> None:
    with pytest.raises(ValueError, match="64-column"):
        q4_0_fragments(np.zeros((16, 16), np.uint8), np.zeros((16, 1), np.float16), np)
