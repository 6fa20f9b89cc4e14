"""Each CUDA kernel against a float64 NumPy reference, on fresh random inputs.

Outputs are poisoned with NaN before every launch, so an element a kernel fails to write
fails the test. Error bounds (relative Frobenius norm unless stated), and why:
  mat-vec, float weights (F32, F16):       1e-5  float32 accumulation (F16 on tensor cores:
                                                 each activation as two float16 halves; also
                                                 with RMSNorm applied by the mat-vec)
  mat-vec, quantized weights:              2e-4  activations as two-level int8 blocks (dp4a,
                                                 or Q4_0 on the int8 tensor cores)
  RMSNorm:                                 1e-5
  RoPE q (float32 out):                    1e-5;  K cache (float16):  2e-3
  decode attention (split + combine):      1e-4  (K/V given in float16, exact for the ref)
  prefill attention (tensor cores):        1e-2  q and softmax weights rounded to float16
  argmax, embedding of F32/F16/Q weights:  exact (same float32 arithmetic)
  SwiGLU (float16 out):                    1e-3
Skipped without CuPy and a GPU (tests/conftest.py); the module imports without CuPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import quants
from engine.cuda.geometry import GEOMETRY, ROPE_WARPS, Geometry
from engine.weights import WeightTensor

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng()  # fresh inputs every run
QTYPES = ("Q8_0", "Q4_0", "Q4_1")
NULL = np.uint64(0)  # a null device pointer argument


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert np.all(np.isfinite(a)), "output has unwritten (NaN) or non-finite elements"
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.fixture(scope="module")
def cu():
    import cupy as cp

    from engine.cuda import kernels

    return cp, kernels.get_kernels()


def make_weight(kind: str, rows: int, cols: int) -> tuple[WeightTensor, np.ndarray]:
    """A random weight in `kind` storage and its exact values in float64."""
    vals = RNG.standard_normal((rows, cols)).astype(np.float32) / math.sqrt(cols)
    if kind == "F32":
        data = vals
    elif kind == "F16":
        data = vals.astype(np.float16)
    else:
        data = quants.quantize(vals, kind, np)
    t = WeightTensor(f"w.{kind}", kind, (rows, cols), data)
    return t, quants.dequantize(data, kind, np).reshape(rows, cols).astype(np.float64)


def nan_buffer(cp, shape):
    return cp.full(shape, cp.nan, dtype=cp.float32)


def run_gemv(
    cp, k, w, rows: int, x: np.ndarray, mode: str, w2=None, out0=None, norm=None, geo=None,
    qx=False,
):  # fmt: skip
    """Launch one mat-vec the way the runner does and return the float32 result (norm: (g,
    eps) for the kernel that applies RMSNorm to x itself; geo: launch geometry other than the
    process's, e.g. with an opt-in kernel; qx: a quantized weight's `_qx` kernel, which
    quantizes the float input itself instead of reading quantize_q8's planes)."""
    geo = geo or GEOMETRY
    gemv_launch, gemv_shared_bytes = geo.launch, geo.shared_bytes

    xd = cp.asarray(x, dtype=cp.float32)
    K = w.cols
    if w.quantized and not qx:
        xq = cp.zeros((rows, 2 * K), dtype=cp.int8)
        xs = cp.zeros((rows, K // 32 * 4), dtype=cp.float32)
        nb = rows * K // 32
        g = NULL if norm is None else norm[0]  # quantized norm kernels take x * g
        k["quantize_q8"](
            ((nb * 32 + 255) // 256,), (256,), (xd, g, xq, xs, np.int32(nb), np.int32(K))
        )
        xa = xq
    else:
        xa, xs = xd, NULL
    out = nan_buffer(cp, (rows, w.rows)) if out0 is None else cp.asarray(out0, dtype=cp.float32)
    name, grid, block = gemv_launch(w.wt, w.rows, K, rows, mode, norm=norm is not None, qx=qx)
    mma = name.startswith("gemv_mma")
    if mma:  # the tensor-core kernel reads the tile-order copy, made from q as it is now
        for m in (w, w2):
            if m is not None:
                m.add_tiles()
    q1, s1 = w.kernel_planes(mma)
    q2, s2 = w2.kernel_planes(mma) if w2 is not None else (None, None)
    args = (
        q1, s1 if s1 is not None else NULL, q2 if q2 is not None else NULL,
        s2 if s2 is not None else NULL,
        xa, xs, out, np.int32(w.rows), np.int32(K), np.int32(rows), np.int32(w.rows),
    )  # fmt: skip
    if norm is not None:
        planes = w.quantized and not qx  # quantize_q8 applied g to the planes
        args += (np.float32(norm[1]),) if planes else (norm[0], np.float32(norm[1]))
    k[name](grid, block, args, shared_mem=gemv_shared_bytes(name))
    return cp.asnumpy(out)


@pytest.mark.parametrize("kind", ["F32", "F16", *QTYPES])
@pytest.mark.parametrize("rows", [1, 3, 8, 11])
def test_gemv_matches_reference(cu, kind, rows):
    check_gemv(cu, kind, rows, 576)


@pytest.mark.parametrize("kind", ["F16", "Q4_0"])
@pytest.mark.parametrize("rows", [16, 27, 32, 40])
def test_gemv_matches_reference_at_wide_batches(cu, kind, rows):
    """16 and 32 rows take the float16 kernels with 2 and 4 n-tiles per block (`_n16`,
    `_n32`); 27 leaves a tile part empty, 40 needs a second block row."""
    check_gemv(cu, kind, rows, 576)


@pytest.mark.parametrize("rows", [1, 8])
def test_gemv_f16_rows_of_odd_length_use_the_float_loop(cu, rows):
    """F16 rows that are not whole 32-wide blocks skip the tensor-core mat-vec."""
    from engine.cuda.geometry import WT_F16, gemv_launch

    assert not gemv_launch(WT_F16, 300, 584, rows, "store")[0].startswith("gemv_mma")
    assert gemv_launch(WT_F16, 300, 576, rows, "store")[0].startswith("gemv_mma")
    check_gemv(cu, "F16", rows, 584)


def q4_0_on_tensor_cores():
    """The process's geometry with the opt-in int8 tensor-core Q4_0 mat-vec (GEMV_MMA_Q)."""
    return Geometry({**GEOMETRY.defines, "GEMV_MMA_Q": 1})


@pytest.mark.parametrize("rows", [1, 3, 8, 11])
def test_q4_0_on_the_int8_tensor_cores_matches_reference(cu, rows):
    """GEMV_MMA_Q=1 (off by default: slower at one row, engine/PERF.md) sends Q4_0 rows of
    whole 64-column steps to gemv_mma_q4_0_*: same bounds as the dp4a path."""
    from engine.cuda.geometry import WT_Q4_0

    geo = q4_0_on_tensor_cores()
    assert geo.launch(WT_Q4_0, 300, 576, rows, "store")[0] == "gemv_mma_q4_0_store"
    check_gemv(cu, "Q4_0", rows, 576, geo=geo)


def test_q4_0_on_the_int8_tensor_cores_rows_do_not_depend_on_batch(cu):
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    geo = q4_0_on_tensor_cores()
    t, _ = make_weight("Q4_0", 200, 512)
    w = matrix_to_gpu(t)
    x = RNG.standard_normal((8, 512)).astype(np.float32)
    batch = run_gemv(cp, k, w, 8, x, "store", geo=geo)
    for r in (0, 5, 7):
        alone = run_gemv(cp, k, w, 1, x[r : r + 1], "store", geo=geo)
        assert np.array_equal(batch[r], alone[0])


def check_gemv(cu, kind: str, rows: int, K: int, geo=None) -> None:
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    n_out = 300
    t, ref_w = make_weight(kind, n_out, K)
    t2, ref_w2 = make_weight(kind, n_out, K)
    w, w2 = matrix_to_gpu(t), matrix_to_gpu(t2)
    x = RNG.standard_normal((rows, K)).astype(np.float32)
    bound = 1e-5 if kind in ("F32", "F16") else 2e-4
    # store
    got = run_gemv(cp, k, w, rows, x, "store", geo=geo)
    assert rel(got, x.astype(np.float64) @ ref_w.T) < bound
    # add (fused residual)
    base = RNG.standard_normal((rows, n_out)).astype(np.float32)
    got = run_gemv(cp, k, w, rows, x, "add", out0=base, geo=geo)
    assert rel(got, base + x.astype(np.float64) @ ref_w.T) < bound
    # glu (fused SwiGLU)
    got = run_gemv(cp, k, w, rows, x, "glu", w2=w2, geo=geo)
    g = x.astype(np.float64) @ ref_w.T
    u = x.astype(np.float64) @ ref_w2.T
    assert rel(got, g / (1 + np.exp(-g)) * u) < 2 * bound


@pytest.mark.parametrize("kind", ["F16", "Q4_0", "Q4_1", "Q8_0"])
def test_gemv_row_results_do_not_depend_on_batch(cu, kind):
    """Row r of a 2- to 40-row launch is bit-identical to the same row launched alone (the
    row counts take kernels with different rows per warp, loads in flight and n-tiles)."""
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    t, _ = make_weight(kind, 200, 512)
    w = matrix_to_gpu(t)
    x = RNG.standard_normal((40, 512)).astype(np.float32)
    cases = ((8, (0, 5, 7)), (2, (0, 1)), (16, (0, 9, 15)), (32, (3, 17, 31)), (40, (8, 33, 39)))
    for rows, picks in cases:
        batch = run_gemv(cp, k, w, rows, x[:rows], "store")
        for r in picks:
            alone = run_gemv(cp, k, w, 1, x[r : r + 1], "store")
            assert np.array_equal(batch[r], alone[0]), (rows, r)


@pytest.mark.parametrize("kind", ["F16", *QTYPES])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 11, 16, 32])
def test_gemv_applies_rmsnorm_itself(cu, kind, rows):
    """The `_norm` mat-vecs: W (x / rms(x) * g) from the raw residual x and the norm weight g
    (float16 on the tensor cores; quantized weights from the int8 planes of x * g), with the
    plain kernels' bounds; rows bit-identical alone and in a batch."""
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    K, n_out, eps = 576, 300, 1e-5
    x = (RNG.standard_normal((rows, K)) * 3.0).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, K).astype(np.float32)
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + eps)
    xn = x.astype(np.float64) / rms * g.astype(np.float64)
    (t1, f1), (t2, f2) = make_weight(kind, n_out, K), make_weight(kind, n_out, K)
    w, w2 = matrix_to_gpu(t1), matrix_to_gpu(t2)
    norm = (cp.asarray(g), eps)
    bound = 1e-5 if kind == "F16" else 2e-4
    got = run_gemv(cp, k, w, rows, x, "store", norm=norm)
    assert rel(got, xn @ f1.T) < bound
    if kind == "F16":  # the tensor-core kernel has an add mode too
        base = RNG.standard_normal((rows, n_out)).astype(np.float32)
        got = run_gemv(cp, k, w, rows, x, "add", out0=base, norm=norm)
        assert rel(got, base + xn @ f1.T) < bound
    got = run_gemv(cp, k, w, rows, x, "glu", w2=w2, norm=norm)
    a, u = xn @ f1.T, xn @ f2.T
    assert rel(got, a / (1 + np.exp(-a)) * u) < 2 * bound
    if rows in (2, 8, 16, 32):
        for r in (0, rows - 1):
            alone = run_gemv(cp, k, w, 1, x[r : r + 1], "glu", w2=w2, norm=norm)
            assert np.array_equal(got[r], alone[0])


@pytest.mark.parametrize("rows", [27, 32, 40])
def test_banded_n32_kernels_match_one_band_bit_for_bit(cu, rows):
    """The `_n32b` kernels (MMA_MB_N32 bands a block, for large matrices at 32 rows; forced
    here on a small one) run each column through the same mmas as the one-band `_n32`
    kernels: the same bits in add, add with the norm and store with the norm."""
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    banded = Geometry({**GEOMETRY.defines, "MMA_MB_N32_MIN": 1})
    one_band = Geometry({**GEOMETRY.defines, "MMA_MB_N32_MIN": 10**9})
    K, n_out, eps = 576, 300, 1e-5
    t, f = make_weight("F16", n_out, K)
    w = matrix_to_gpu(t)
    x = RNG.standard_normal((rows, K)).astype(np.float32)
    base = RNG.standard_normal((rows, n_out)).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, K).astype(np.float32)
    norm = (cp.asarray(g), eps)
    for mode, out0, nm in (("add", base, None), ("add", base, norm), ("store", None, norm)):
        name = banded.launch(w.wt, n_out, K, rows, mode, norm=nm is not None)[0]
        assert name.endswith("_n32b"), name
        got = run_gemv(cp, k, w, rows, x, mode, out0=out0, norm=nm, geo=banded)
        want = run_gemv(cp, k, w, rows, x, mode, out0=out0, norm=nm, geo=one_band)
        assert np.array_equal(got, want), (mode, nm is not None)
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + eps)
    xn = x.astype(np.float64) / rms * g.astype(np.float64)
    assert rel(run_gemv(cp, k, w, rows, x, "store", norm=norm, geo=banded), xn @ f.T) < 1e-5


@pytest.mark.parametrize("kind", QTYPES)
@pytest.mark.parametrize("K", [576, 1536])
def test_gemv_quantizing_its_own_input_matches_quantize_q8_bit_for_bit(cu, kind, K):
    """The `_qx` mat-vecs (one row of float input, each lane quantizing the blocks it
    multiplies) give the bits of quantize_q8 followed by the plain kernel, in every mode and
    with RMSNorm applied; so they keep that path's bounds against float64 too."""
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    n_out, eps, rows = 300, 1e-5, 1
    (t1, f1), (t2, f2) = make_weight(kind, n_out, K), make_weight(kind, n_out, K)
    w, w2 = matrix_to_gpu(t1), matrix_to_gpu(t2)
    x = (RNG.standard_normal((rows, K)) * 3.0).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block: both scales 0
    x[0, 32:64] *= 1e-3  # a block far below its neighbours
    base = RNG.standard_normal((rows, n_out)).astype(np.float32)
    g = cp.asarray(RNG.uniform(0.2, 2.0, K).astype(np.float32))
    cases = (
        ("store", None, None, None),
        ("add", None, base, None),
        ("glu", w2, None, None),
        ("store", None, None, (g, eps)),
        ("glu", w2, None, (g, eps)),
    )
    for mode, second, out0, norm in cases:
        planes = run_gemv(cp, k, w, rows, x, mode, w2=second, out0=out0, norm=norm)
        own = run_gemv(cp, k, w, rows, x, mode, w2=second, out0=out0, norm=norm, qx=True)
        assert np.array_equal(own, planes), (mode, norm is not None)
    want = x.astype(np.float64) @ f1.T
    assert rel(run_gemv(cp, k, w, rows, x, "store", qx=True), want) < 2e-4
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + eps)
    xn = x.astype(np.float64) / rms * cp.asnumpy(g).astype(np.float64)
    a, u = xn @ f1.T, xn @ f2.T
    got = run_gemv(cp, k, w, rows, x, "glu", w2=w2, norm=(g, eps), qx=True)
    assert rel(got, a / (1 + np.exp(-a)) * u) < 4e-4


def quantized_planes(cp, k, x):
    """The reference int8 planes of x [rows, K] from the standalone quantize kernel."""
    rows, K = x.shape
    xq = cp.zeros((rows, 2 * K), dtype=cp.int8)
    xs = nan_buffer(cp, (rows, K // 32 * 4))
    nb = rows * K // 32
    k["quantize_q8"](
        ((nb * 32 + 255) // 256,), (256,), (cp.asarray(x), NULL, xq, xs, np.int32(nb), np.int32(K))
    )
    return cp.asnumpy(xq), cp.asnumpy(xs)


@pytest.mark.parametrize(
    "dim,per", [(2048, 2048), (2048, 256), (576, 256), (576, 576), (96, 64)]
)  # one block per row (prefill) or slices of a row (decode), a last slice cut short
def test_rmsnorm_and_fused_quantization(cu, dim, per):
    cp, k = cu
    rows, eps = 5, 1e-5
    x = RNG.standard_normal((rows, dim)).astype(np.float32) * 3
    w = (1 + 0.1 * RNG.standard_normal(dim)).astype(np.float32)
    y = nan_buffer(cp, (rows, dim))
    y16 = cp.full((rows, dim), cp.nan, dtype=cp.float16)
    xq = cp.zeros((rows, 2 * dim), dtype=cp.int8)
    xs = nan_buffer(cp, (rows, dim // 32 * 4))
    args = (cp.asarray(x), cp.asarray(w), y, y16, xq, xs, np.int32(dim), np.int32(per))
    k["rmsnorm"]((-(-dim // per), rows), (min(1024, per),), (*args, np.float32(eps)))
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w
    got = cp.asnumpy(y)
    assert rel(got, ref) < 1e-5
    assert rel(cp.asnumpy(y16), ref) < 1e-3
    want_q, want_s = quantized_planes(cp, k, got)
    assert np.array_equal(cp.asnumpy(xq), want_q)
    assert np.array_equal(cp.asnumpy(xs), want_s)


@pytest.mark.parametrize("dim", [4096, 2048, 576, 96])
def test_prefill_rmsnorm_f16(cu, dim):
    cp, k = cu
    rows, eps = 7, 1e-5
    x = RNG.standard_normal((rows, dim)).astype(np.float32) * 3
    w = (1 + 0.1 * RNG.standard_normal(dim)).astype(np.float32)
    y16 = cp.full((rows + 1, dim), cp.nan, dtype=cp.float16)  # the row after stays untouched
    args = (cp.asarray(x), cp.asarray(w), y16, np.int32(dim), np.float32(eps))
    k["rmsnorm_f16"]((rows,), (256,), args)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w
    got = cp.asnumpy(y16)
    assert rel(got[:rows], ref) < 1e-3
    assert np.isnan(got[rows]).all()


def rope_ref(x: np.ndarray, pos: np.ndarray, base: float, neox: bool) -> np.ndarray:
    """x [rows, heads, hd] float64 rotated by each row's position."""
    hd = x.shape[-1]
    inv = base ** (-np.arange(hd // 2, dtype=np.float64) * 2.0 / hd)
    ang = pos.astype(np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = np.empty_like(x)
    if neox:
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        out[..., : hd // 2], out[..., hd // 2 :] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


@pytest.mark.parametrize(
    "hd,neox,qk_norm", [(64, False, False), (128, True, True), (16, False, False)]
)
def test_rope_kv_decode_positions_from_device(cu, hd, neox, qk_norm):
    cp, k = cu
    n_heads, n_kv, n_seqs, max_len, rows = 8, 2, 3, 300, 3
    eps, base = 1e-6, 500000.0
    q = RNG.standard_normal((rows, n_heads, hd)).astype(np.float32)
    kk = RNG.standard_normal((rows, n_kv, hd)).astype(np.float32)
    vv = RNG.standard_normal((rows, n_kv, hd)).astype(np.float32)
    qkv = np.concatenate([q.reshape(rows, -1), kk.reshape(rows, -1), vv.reshape(rows, -1)], 1)
    qn = (1 + 0.1 * RNG.standard_normal(hd)).astype(np.float32)
    kn = (1 + 0.1 * RNG.standard_normal(hd)).astype(np.float32)
    seq_ids = np.array([2, 0, 1], dtype=np.int32)
    lens = RNG.integers(0, max_len, n_seqs).astype(np.int32)
    kc = cp.full((n_seqs, n_kv, max_len, hd), cp.nan, dtype=cp.float16)
    vc = cp.full((n_seqs, n_kv, max_len, hd), cp.nan, dtype=cp.float16)
    qd = nan_buffer(cp, (rows, n_heads, hd))
    k["rope_kv"](
        (rows,),
        (ROPE_WARPS * 32,),
        (
            cp.asarray(qkv), np.int32(qkv.shape[1]), qd, kc, vc,
            cp.asarray(qn) if qk_norm else NULL, cp.asarray(kn) if qk_norm else NULL,
            cp.asarray(seq_ids), cp.asarray(lens), np.int32(0), np.int32(-1),
            np.int32(n_heads), np.int32(n_kv), np.int32(hd), np.int32(max_len),
            cp.asarray(base ** (-np.arange(hd // 2, dtype=np.float64) * 2.0 / hd)),
            np.int32(int(neox)), np.float32(eps),
        ),
    )  # fmt: skip
    pos = lens[seq_ids]

    def norm(x, w):
        x = x.astype(np.float64)
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w if qk_norm else x

    q_ref = rope_ref(norm(q, qn), pos, base, neox)
    k_ref = rope_ref(norm(kk, kn), pos, base, neox)
    assert rel(cp.asnumpy(qd), q_ref) < 1e-5
    kc_h, vc_h = cp.asnumpy(kc), cp.asnumpy(vc)
    for r in range(rows):
        s, p = seq_ids[r], pos[r]
        assert rel(kc_h[s, :, p], k_ref[r]) < 2e-3
        assert rel(vc_h[s, :, p], vv[r]) < 2e-3


def attention_ref(q, kc, vc, n, scale):
    """q [heads, hd]; kc/vc [n_kv, len, hd] -> [heads, hd] over the first n keys."""
    heads, n_kv = q.shape[0], kc.shape[0]
    g = heads // n_kv
    out = np.empty(q.shape, dtype=np.float64)
    for h in range(heads):
        kv = h // g
        s = kc[kv, :n].astype(np.float64) @ q[h].astype(np.float64) * scale
        p = np.exp(s - s.max())
        out[h] = p @ vc[kv, :n].astype(np.float64) / p.sum()
    return out


def head_norm_ref(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """Qwen3's per-head RMSNorm (none when w is None), float64."""
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w if w is not None else x


def run_one_split(cp, k, pre, kc, vc, seq_ids, lens, n_heads, hd, scale, one_split) -> list:
    """The split kernel as a short step launches it (one split block per kv head, `out` set;
    `pre`: its arguments before the cache, the q|k|v rows first), each row alone (its q|k|v
    row and sequence as the launch's row 0) on a copy of the cache (the kernel
    writes the current k and v): per row its output and the int8 planes it wrote (hd >= 32)."""
    n_kv, max_len = kc.shape[1], kc.shape[2]
    quant = hd >= 32
    res = []
    for r in range(len(seq_ids)):
        out = nan_buffer(cp, (1, n_heads * hd))
        xq = cp.zeros((1, 2 * n_heads * hd), dtype=cp.int8)
        xs = nan_buffer(cp, (1, n_heads * hd // 32 * 4))
        k[f"attn_split_{hd}"](
            (1, n_kv, 1),
            GEOMETRY.attn_block(),
            (
                pre[0][r : r + 1], *pre[1:], kc.copy(), vc.copy(),  # row r's q|k|v at row 0
                cp.asarray(seq_ids[r : r + 1]), cp.asarray(lens),
                NULL, NULL, np.int32(n_heads), np.int32(n_kv), np.int32(max_len), np.int32(64),
                np.int32(32), np.int32(one_split), np.float32(scale), out,
                xq if quant else NULL, xs if quant else NULL,
            ),
            shared_mem=GEOMETRY.attn_shared_bytes(hd),
        )  # fmt: skip
        res.append((cp.asnumpy(out)[0], cp.asnumpy(xq)[0], cp.asnumpy(xs)[0]))
    return res


@pytest.mark.parametrize("min_chunk,one_split", [(32, 0), (128, 0), (32, 256)])
@pytest.mark.parametrize(
    "hd,n_heads,n_kv,neox,qk_norm",
    [(64, 9, 3, False, False), (128, 32, 8, True, True), (16, 4, 2, False, False),
     (32, 8, 1, False, True)],
)  # fmt: skip
def test_decode_attention_split_and_combine(
    cu, hd, n_heads, n_kv, neox, qk_norm, min_chunk, one_split
):
    """The split kernel rotates q and k from the q|k|v rows itself (rope_kv's arithmetic) and
    writes the current k and v into the cache; split + combine then equal softmax attention
    over the cache up to and including the current position. A row of at most one_split
    positions is one split, whose output (and int8 planes) the kernel writes itself in a
    short step's launch, bit for bit the combine's."""
    cp, k = cu
    n_seqs, max_len, splits, eps, base = 3, 5000, 64, 1e-6, 10000.0
    lens = np.array([RNG.integers(4000, max_len - 1), 0, RNG.integers(30, 90)], dtype=np.int32)
    seq_ids = np.array([1, 2, 0], dtype=np.int32)
    rows = 3
    kc = (RNG.standard_normal((n_seqs, n_kv, max_len, hd))).astype(np.float16)
    vc = (RNG.standard_normal((n_seqs, n_kv, max_len, hd))).astype(np.float16)
    for s, n in enumerate(lens):  # the current position and past it: never read unwritten
        kc[s, :, n:] = np.nan
        vc[s, :, n:] = np.nan
    q = RNG.standard_normal((rows, n_heads, hd)).astype(np.float32)
    kk = RNG.standard_normal((rows, n_kv, hd)).astype(np.float32)
    vv = RNG.standard_normal((rows, n_kv, hd)).astype(np.float32)
    qkv = np.concatenate([q.reshape(rows, -1), kk.reshape(rows, -1), vv.reshape(rows, -1)], 1)
    qn = (1 + 0.1 * RNG.standard_normal(hd)).astype(np.float32) if qk_norm else None
    kn = (1 + 0.1 * RNG.standard_normal(hd)).astype(np.float32) if qk_norm else None
    inv_freq = base ** (-np.arange(hd // 2, dtype=np.float64) * 2.0 / hd)
    scale = 1 / math.sqrt(hd)
    part_o = nan_buffer(cp, (rows, n_heads, splits, hd))
    part_ml = nan_buffer(cp, (rows, n_heads, splits, 2))
    out = nan_buffer(cp, (rows, n_heads * hd))
    kcd, vcd, sd, ld = cp.asarray(kc), cp.asarray(vc), cp.asarray(seq_ids), cp.asarray(lens)
    # the kernel's arguments before the cache (the same in the one-split launches below)
    pre = (
        cp.asarray(qkv), np.int32(qkv.shape[1]),
        cp.asarray(qn) if qk_norm else NULL, cp.asarray(kn) if qk_norm else NULL,
        cp.asarray(inv_freq), np.int32(int(neox)), np.float32(eps),
    )  # fmt: skip
    k[f"attn_split_{hd}"](
        (splits, n_kv, rows),
        GEOMETRY.attn_block(),
        (
            *pre, kcd, vcd, sd, ld,
            part_o, part_ml, np.int32(n_heads), np.int32(n_kv), np.int32(max_len),
            np.int32(splits), np.int32(min_chunk), np.int32(one_split), np.float32(scale),
            NULL, NULL, NULL,
        ),
        shared_mem=GEOMETRY.attn_shared_bytes(hd),
    )  # fmt: skip
    xq = cp.zeros((rows, 2 * n_heads * hd), dtype=cp.int8)
    xs = nan_buffer(cp, (rows, n_heads * hd // 32 * 4))
    quant = hd >= 32
    k["attn_combine"](
        (n_heads, rows),
        (hd,),
        (
            part_o, part_ml, sd, ld, out, xq if quant else NULL, xs if quant else NULL,
            np.int32(n_heads), np.int32(hd), np.int32(splits), np.int32(min_chunk),
            np.int32(one_split),
        ),
    )  # fmt: skip
    flat = cp.asnumpy(out)
    if quant:  # the fused quantization equals the standalone kernel's
        want_q, want_s = quantized_planes(cp, k, flat)
        assert np.array_equal(cp.asnumpy(xq), want_q)
        assert np.array_equal(cp.asnumpy(xs), want_s)
    if one_split:  # the short rows' step: their one split writes the combine's output
        direct = run_one_split(cp, k, pre, kcd, vcd, seq_ids, lens, n_heads, hd, scale, one_split)
        for r in range(rows):
            if lens[seq_ids[r]] + 1 <= one_split:
                assert np.array_equal(direct[r][0], flat[r]), r
                if quant:
                    assert np.array_equal(direct[r][1], cp.asnumpy(xq)[r]), r
                    assert np.array_equal(direct[r][2], cp.asnumpy(xs)[r]), r
            else:  # a row too long for one split: NaN, never a partial as the output
                assert np.isnan(direct[r][0]).all(), r
    pos = lens[seq_ids]
    q_ref = rope_ref(head_norm_ref(q, qn, eps), pos, base, neox)
    k_ref = rope_ref(head_norm_ref(kk, kn, eps), pos, base, neox)
    kc_after, vc_after = cp.asnumpy(kcd), cp.asnumpy(vcd)
    got = flat.reshape(rows, n_heads, hd)
    for r in range(rows):
        s, p = seq_ids[r], pos[r]
        assert rel(kc_after[s, :, p], k_ref[r]) < 2e-3
        assert np.array_equal(vc_after[s, :, p], vv[r].astype(np.float16))
        assert np.isnan(kc_after[s, :, p + 1 :]).all()  # nothing written past it
        ref = attention_ref(q_ref[r], kc_after[s], vc_after[s], int(p) + 1, scale)
        assert rel(got[r], ref) < 1e-4, (r, int(p))


@pytest.mark.parametrize(
    "hd,n_heads,n_kv,p0,T",
    [
        (64, 9, 3, 0, 200),
        (128, 8, 2, 100, 130),
        (128, 4, 4, 64, 300),  # key tiles before, across and after each warp's diagonal
        (32, 4, 2, 3, 64),
        (16, 4, 1, 0, 5),
    ],
)
def test_prefill_attention_causal(cu, hd, n_heads, n_kv, p0, T):
    cp, k = cu
    n_seqs, max_len, seq = 2, 512, 1
    kc = RNG.standard_normal((n_seqs, n_kv, max_len, hd)).astype(np.float16)
    vc = RNG.standard_normal((n_seqs, n_kv, max_len, hd)).astype(np.float16)
    kc[seq, :, p0 + T :] = np.nan  # keys past the prompt must never be read into the result
    vc[seq, :, p0 + T :] = np.nan
    q = RNG.standard_normal((T, n_heads, hd)).astype(np.float32)
    scale = 1 / math.sqrt(hd)
    out = cp.full((T, n_heads * hd), cp.nan, dtype=cp.float16)
    grid, block, shared = GEOMETRY.prefill_attention(hd, T, n_heads)
    k[f"attn_prefill_{hd}"](
        grid,
        block,
        (
            cp.asarray(q), cp.asarray(kc), cp.asarray(vc), out, np.int32(seq), np.int32(p0),
            np.int32(T), np.int32(n_heads), np.int32(n_kv), np.int32(max_len),
            np.float32(scale * 1.4426950408889634),
        ),
        shared_mem=shared,
    )  # fmt: skip
    got = cp.asnumpy(out).astype(np.float64).reshape(T, n_heads, hd)
    ref = np.stack([attention_ref(q[i], kc[seq], vc[seq], p0 + i + 1, scale) for i in range(T)])
    assert rel(got, ref) < 1e-2


def test_argmax_advance(cu):
    cp, k = cu
    rows, vocab, max_len, nb = 4, 128256, 64, 64
    seq_ids = np.array([3, 1, 0, 2], dtype=np.int32)
    lens = np.array([5, 6, 7, 8], dtype=np.int32)
    ld = cp.asarray(lens)
    count = cp.zeros(rows, dtype=cp.uint32)
    # twice over the same counters: the last block of each row must leave its count at zero
    for launch in range(2):
        logits = RNG.standard_normal((rows, vocab)).astype(np.float32)
        logits[2, [7, 99000]] = 50.0  # a tie across blocks: the first index wins, as in numpy
        logits[1, 5000:6000] = np.nan  # NaN never wins
        tokens = cp.full(rows, -1, dtype=cp.int32)
        hist = cp.full((rows, max_len), -1, dtype=cp.int32)
        part_v = nan_buffer(cp, (rows, nb))
        part_i = cp.full((rows, nb), -1, dtype=cp.int32)
        k["argmax_advance"](
            (nb, rows),
            (256,),
            (
                cp.asarray(logits), np.int32(vocab), tokens, cp.asarray(seq_ids), ld, hist,
                np.int32(max_len), np.int32(1), part_v, part_i, count,
            ),
        )  # fmt: skip
        want = np.where(np.isnan(logits), -np.inf, logits).argmax(-1)
        assert np.array_equal(cp.asnumpy(tokens), want), launch
        assert not cp.asnumpy(count).any(), launch
        h = cp.asnumpy(hist)
        for r in range(rows):
            assert h[r, lens[seq_ids[r]] + launch] == want[r]
    expect = lens.copy()
    expect[seq_ids] += 2
    assert np.array_equal(cp.asnumpy(ld), expect)


@pytest.mark.parametrize("ffn", [1000, 1002, 5])  # 16-byte rows, and rows with a tail
def test_swiglu_f16(cu, ffn):
    """Prefill SwiGLU over [gate | up] rows (the GEMM's float32 output), float16 out."""
    cp, k = cu
    rows = 7
    gu = (RNG.standard_normal((rows, 2 * ffn)) * 3).astype(np.float32)
    out = cp.full((rows, ffn), cp.nan, dtype=cp.float16)
    k["swiglu_f16"]((-(-ffn // 1024), rows), (256,), (cp.asarray(gu), np.int32(ffn), out))
    g, u = gu[:, :ffn].astype(np.float64), gu[:, ffn:].astype(np.float64)
    assert rel(cp.asnumpy(out), g / (1 + np.exp(-g)) * u) < 1e-3  # float16 output


@pytest.mark.parametrize("kind", ["F32", "F16", *QTYPES])
def test_embed_and_dequant(cu, kind):
    cp, k = cu
    from engine.cuda.layout import matrix_to_gpu

    vocab, dim = 100, 256
    t, ref = make_weight(kind, vocab, dim)
    w = matrix_to_gpu(t)
    toks = RNG.integers(0, vocab, 7).astype(np.int32)
    out = nan_buffer(cp, (7, dim))
    k["embed"](
        (7,),
        (256,),
        (
            cp.asarray(toks),
            np.int32(w.wt),
            w.q,
            w.s if w.s is not None else NULL,
            out,
            np.int32(dim),
        ),
    )
    assert np.array_equal(cp.asnumpy(out), ref[toks].astype(np.float32))
    r0, nr = 10, 50
    d16 = cp.full((nr, dim), cp.nan, dtype=cp.float16)
    total = nr * dim // 8
    k["dequant_f16"](
        ((total + 255) // 256,),
        (256,),
        (
            np.int32(w.wt),
            w.q,
            w.s if w.s is not None else NULL,
            d16,
            np.int32(r0),
            np.int32(nr),
            np.int32(dim),
        ),
    )
    assert np.array_equal(cp.asnumpy(d16), ref[r0 : r0 + nr].astype(np.float16))


def test_quantize_q8_blocks(cu):
    cp, k = cu
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    xq = cp.zeros((3, 512), dtype=cp.int8)
    xs = nan_buffer(cp, (3, 32))
    nb = 3 * 256 // 32
    args = (cp.asarray(x), NULL, xq, xs, np.int32(nb), np.int32(256))
    k["quantize_q8"](((nb * 32 + 255) // 256,), (256,), args)
    q = cp.asnumpy(xq).reshape(-1, 2, 32).astype(np.float64)
    s = cp.asnumpy(xs).reshape(-1, 4).astype(np.float64)
    xb = x.reshape(-1, 32).astype(np.float64)
    assert np.allclose(s[:, 0], np.abs(xb).max(-1) / 127, rtol=1e-6)
    assert np.allclose(s[:, 2], xb.sum(-1), rtol=1e-5, atol=1e-5)
    approx = q[:, 0] * s[:, :1] + q[:, 1] * s[:, 1:2]
    # the second level leaves at most half a level-2 step
    assert np.all(np.abs(approx - xb) <= 0.5 * s[:, 1:2] + 1e-6)
    assert np.max(np.abs(approx - xb)) < 1e-3 * np.abs(xb).max()


def test_quantize_q8_with_a_norm_weight(cu):
    """With g: the planes of x * g (as float32 multiplies it), and each block's sum of
    squares of the raw x in the scales' fourth lane (the NORM mat-vecs' 1 / rms)."""
    cp, k = cu
    rows, K = 3, 320
    x = (RNG.standard_normal((rows, K)) * 2).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, K).astype(np.float32)
    xq = cp.zeros((rows, 2 * K), dtype=cp.int8)
    xs = nan_buffer(cp, (rows, K // 32 * 4))
    nb = rows * K // 32
    args = (cp.asarray(x), cp.asarray(g), xq, xs, np.int32(nb), np.int32(K))
    k["quantize_q8"](((nb * 32 + 255) // 256,), (256,), args)
    want_q, want_s = quantized_planes(cp, k, x * g)
    got_s = cp.asnumpy(xs).reshape(-1, 4)
    assert np.array_equal(cp.asnumpy(xq), want_q)
    assert np.array_equal(got_s[:, :3], want_s.reshape(-1, 4)[:, :3])
    ss = (x.astype(np.float64).reshape(-1, 32) ** 2).sum(-1)
    assert np.allclose(got_s[:, 3], ss, rtol=1e-5)
