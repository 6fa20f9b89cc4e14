// Decode mat-vec: out[r, n] = sum_k W[n, k] * x[r, k] for up to RB activation rows at once,
// so each weight byte is read once for RB rows. GEMV_KSPLIT warps own NR output rows (a row
// group) and split their K in runs of 32 chunks (a chunk is one 32-element block for
// quantized weights, 8 elements for float weights): warp p of the group takes runs p,
// p + KSPLIT, ..., lane i chunk i of each, loading U runs before using any; the group's
// partial sums meet in shared memory in a fixed order. The per-row arithmetic (lane
// assignment, accumulation order) depends on neither RB nor NR nor U nor the other rows: a
// sequence decoded in a batch gets bit-identical results to one decoded alone.
//
// Quantized weights are read as int8 dp4a dot products against activations quantized to
// two-level int8 blocks of 32 (quantize_q8.cu); the block sum of x folds the Q4_0
// offset (-8) and the Q4_1 minimum (m) into one multiply per block.
// NORM (quantized weights, store and glu): the input is x * g of the raw residual x, and
// the kernel applies RMSNorm's 1 / rms itself, from the blocks' sums of squares of x that
// quantize_q8 left beside their scales (quantization commutes with the positive scale, so
// the int8 codes are those of the normalised row): the decode step needs no norm kernel.
// QX (the `_qx` kernels: quantized weights, one activation row): the input is float32 (for
// NORM the raw x, with the norm weight g an argument) and each lane quantizes the 32-element
// blocks it multiplies itself (quant_chunk, common.cuh: quantize_q8's blocks bit for bit), so
// the decode step needs no quantize_q8 launch before a small mat-vec; every row group repeats
// that work, which Geometry.quantizes_in_mv weighs against the launch it saves.
// Float weights (F16, F32) multiply float32 activations directly.
// PDL (common.cuh): at one activation row a lane's first U chunks of weights load before
// griddepcontrol.wait (GEMV_EARLY: weights never depend on the previous kernel; the activations
// are read with ld_input4, which stays after it), so a launch's first round trip to DRAM
// overlaps its predecessor (wider launches, not measured with it, wait first). The `_qx`
// kernels (the launch-bound small models' mat-vecs) let their dependants launch right after
// the wait, the others once their weights are read (GEMV_TRIGGER): an early trigger in every
// mat-vec cost llama-8b:q4_0 4% at 32k (engine/PERF.md).
//
// MODE_* and GEMV_ARGS, the mat-vecs' modes and argument list, are in common.cuh.

#ifndef GEMV_WARPS
#define GEMV_WARPS 4
#endif
#ifndef GEMV_U
#define GEMV_U 8  // chunks in flight per lane, shared among a warp's weight rows
#endif
#ifndef GEMV_NR1
#define GEMV_NR1 1  // output rows per warp for a single activation row, float weights
#endif
#ifndef GEMV_KSPLIT
#define GEMV_KSPLIT 2  // warps splitting one row group's K: 2 beat 1 by 2.6% and 4 (q4_0 decode)
#endif
#ifndef GEMV_NR1_Q
#define GEMV_NR1_Q 4  // the same for quantized weights
#endif
#ifndef GEMV_EARLY
#define GEMV_EARLY 1  // a lane's first U chunks of weights load before the PDL wait
#endif
#ifndef GEMV_TRIGGER
#define GEMV_TRIGGER 2  // dependants launch right after the wait: 0 never, 1 always, 2 `_qx` only
#endif

// Raw weight data of one chunk (loaded first, for U chunks at once, so a lane has U
// independent 16-byte loads in flight whatever the row length).
template <int WT> struct WChunk;
template <> struct WChunk<WT_F32> { float4 a, b; };
template <> struct WChunk<WT_F16> { uint4 v; };
template <> struct WChunk<WT_Q8_0> { int4 lo, hi; __half d; };
template <> struct WChunk<WT_Q4_0> { uint4 v; __half d; };
template <> struct WChunk<WT_Q4_1> { uint4 v; __half2 dm; };

template <int WT>
__device__ __forceinline__ WChunk<WT> load_chunk(const void* __restrict__ wq, const void* __restrict__ ws,
                                                 size_t row, int K, int c) {
    WChunk<WT> w;
    if constexpr (WT == WT_F32) {
        const float4* p = reinterpret_cast<const float4*>(wq) + row * (K / 4) + 2 * c;
        w.a = __ldg(p);
        w.b = __ldg(p + 1);
    } else if constexpr (WT == WT_F16) {
        w.v = __ldg(reinterpret_cast<const uint4*>(wq) + row * (K / 8) + c);
    } else if constexpr (WT == WT_Q8_0) {
        const int4* p = reinterpret_cast<const int4*>(reinterpret_cast<const i8*>(wq) + row * K) + 2 * c;
        w.lo = __ldg(p);
        w.hi = __ldg(p + 1);
        w.d = __ldg(reinterpret_cast<const __half*>(ws) + row * (K / 32) + c);
    } else if constexpr (WT == WT_Q4_0) {
        w.v = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const u8*>(wq) + row * (K / 2)) + c);
        w.d = __ldg(reinterpret_cast<const __half*>(ws) + row * (K / 32) + c);
    } else {
        w.v = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const u8*>(wq) + row * (K / 2)) + c);
        w.dm = __ldg(reinterpret_cast<const __half2*>(ws) + row * (K / 32) + c);
    }
    return w;
}

// Float weights: 8 values of the chunk.
template <int WT>
__device__ __forceinline__ void chunk_floats(const WChunk<WT>& w, float (&f)[8]) {
    if constexpr (WT == WT_F32) {
        f[0] = w.a.x; f[1] = w.a.y; f[2] = w.a.z; f[3] = w.a.w;
        f[4] = w.b.x; f[5] = w.b.y; f[6] = w.b.z; f[7] = w.b.w;
    } else if constexpr (WT == WT_F16) {
        const __half2* h = reinterpret_cast<const __half2*>(&w.v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 t = __half22float2(h[i]);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    }
}

// Quantized weights: int8 lanes of elements 0..15 (lo) and 16..31 (hi), scale d, min m.
template <int WT>
__device__ __forceinline__ void chunk_ints(const WChunk<WT>& w, int4& lo, int4& hi, float& d, float& m) {
    m = 0.f;
    if constexpr (WT == WT_Q8_0) {
        lo = w.lo;
        hi = w.hi;
        d = __half2float(w.d);
    } else if constexpr (WT == WT_Q4_0 || WT == WT_Q4_1) {
        lo.x = w.v.x & 0x0F0F0F0F; lo.y = w.v.y & 0x0F0F0F0F;
        lo.z = w.v.z & 0x0F0F0F0F; lo.w = w.v.w & 0x0F0F0F0F;
        hi.x = (w.v.x >> 4) & 0x0F0F0F0F; hi.y = (w.v.y >> 4) & 0x0F0F0F0F;
        hi.z = (w.v.z >> 4) & 0x0F0F0F0F; hi.w = (w.v.w >> 4) & 0x0F0F0F0F;
        if constexpr (WT == WT_Q4_0) {
            d = __half2float(w.d);
        } else {
            d = __low2float(w.dm);
            m = __high2float(w.dm);
        }
    }
}

__device__ __forceinline__ int dot32(const int4& lo, const int4& hi, const int4& a, const int4& b) {
    int s = __dp4a(lo.x, a.x, 0);
    s = __dp4a(lo.y, a.y, s);
    s = __dp4a(lo.z, a.z, s);
    s = __dp4a(lo.w, a.w, s);
    s = __dp4a(hi.x, b.x, s);
    s = __dp4a(hi.y, b.y, s);
    s = __dp4a(hi.z, b.z, s);
    return __dp4a(hi.w, b.w, s);
}

// acc[r][j] += weight row j's chunk c . activation row r0 + r, for NW weight rows (NR output
// rows, times two matrices for GLU) against RB activation rows; each activation chunk is
// loaded once for all NW weight rows.
template <int WT, int RB, int NW, bool NORM, bool QX>
__device__ __forceinline__ void chunk_dot(const WChunk<WT> (&w)[NW], const void* __restrict__ x,
                                          const float4* __restrict__ xs, const float* __restrict__ g,
                                          int K, int c, int r0, int nr, float (&acc)[RB][NW],
                                          float (&ss)[RB]) {
    if constexpr (WT == WT_F16 || WT == WT_F32) {
        float wf[NW][8];
#pragma unroll
        for (int j = 0; j < NW; ++j) chunk_floats<WT>(w[j], wf[j]);
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
                const float* xr = reinterpret_cast<const float*>(x) + (size_t)(r0 + r) * K + 8 * c;
                const float4 a = ld_input4(xr), b = ld_input4(xr + 4);
#pragma unroll
                for (int j = 0; j < NW; ++j) {
                    float t = wf[j][0] * a.x;
                    t = fmaf(wf[j][1], a.y, t);
                    t = fmaf(wf[j][2], a.z, t);
                    t = fmaf(wf[j][3], a.w, t);
                    t = fmaf(wf[j][4], b.x, t);
                    t = fmaf(wf[j][5], b.y, t);
                    t = fmaf(wf[j][6], b.z, t);
                    t = fmaf(wf[j][7], b.w, t);
                    acc[r][j] += t;
                }
            }
        }
    } else {
        int4 lo[NW], hi[NW];
        float d[NW], m[NW];
#pragma unroll
        for (int j = 0; j < NW; ++j) chunk_ints<WT>(w[j], lo[j], hi[j], d[j], m[j]);
        const int nb = K / 32;
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
                // activation block c of row r0 + r: 32 bytes of level-1 codes, 32 of level 2,
                // and {d1, d2, sum x, sum of squares of the raw x (NORM)}
                int4 a, b, a2, b2;
                float4 sc;
                if constexpr (QX) {
                    const float* xr = reinterpret_cast<const float*>(x) + (size_t)(r0 + r) * K + 32 * c;
                    sc = quant_chunk(xr, NORM ? g + 32 * c : nullptr, a, b, a2, b2);
                } else {
                    const i8* xr = reinterpret_cast<const i8*>(x) + (size_t)(r0 + r) * 2 * K + 64 * c;
                    a = ld_input4(xr);
                    b = ld_input4(xr + 16);
                    a2 = ld_input4(xr + 32);
                    b2 = ld_input4(xr + 48);
                    sc = ld_input4(reinterpret_cast<const float*>(xs + (size_t)(r0 + r) * nb + c));
                }
                if constexpr (NORM) ss[r] += sc.w;
#pragma unroll
                for (int j = 0; j < NW; ++j) {
                    const int s = dot32(lo[j], hi[j], a, b);
                    const int s2 = dot32(lo[j], hi[j], a2, b2);
                    const float dot = fmaf(sc.x, (float)s, sc.y * (float)s2);
                    if constexpr (WT == WT_Q8_0) {
                        acc[r][j] += d[j] * dot;
                    } else if constexpr (WT == WT_Q4_0) {
                        acc[r][j] += d[j] * fmaf(-8.f, sc.z, dot);
                    } else {
                        acc[r][j] += fmaf(d[j], dot, m[j] * sc.z);
                    }
                }
            }
        }
    }
}

// Loads chunks c0, c0 + step, ..., c0 + step * (U - 1) of the warp's NR weight rows (and of
// the second matrix's for GLU) into w; rows past N read row N - 1 (never stored).
template <int WT, int U, int NR, int MODE, int NW>
__device__ __forceinline__ void load_chunks(WChunk<WT> (&w)[U][NW], const void* __restrict__ wq,
                                            const void* __restrict__ ws, const void* __restrict__ wq2,
                                            const void* __restrict__ ws2, int row0, int N, int K,
                                            int c0, int step, int nchunks) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = c0 + step * u;
        if (c < nchunks) {
#pragma unroll
            for (int j = 0; j < NR; ++j) {
                const size_t row = (size_t)min(row0 + j, N - 1);
                w[u][j] = load_chunk<WT>(wq, ws, row, K, c);
                if constexpr (MODE == MODE_GLU) w[u][NR + j] = load_chunk<WT>(wq2, ws2, row, K, c);
            }
        }
    }
}

// How a mat-vec waits for its inputs and lets its successor start: a kernel of its own waits
// for its predecessor grid (PDL, common.cuh); engine/tools/phasebench.py's persistent kernel
// passes a grid barrier instead.
struct PdlSync {
    __device__ __forceinline__ void wait() const { pdl_wait(); }
    __device__ __forceinline__ void trigger() const { pdl_trigger(); }
};

// One warp computes NR consecutive output rows for up to RB activation rows; the block is the
// launch's block (bx, by) (its blockIdx in a kernel of its own).
template <int WT, int RB, int MODE, int NR, bool NORM, bool QX, class Sync = PdlSync>
__device__ __forceinline__ void gemv_body(const void* __restrict__ wq, const void* __restrict__ ws,
                                          const void* __restrict__ wq2, const void* __restrict__ ws2,
                                          const void* __restrict__ x, const float4* __restrict__ xs,
                                          float* __restrict__ out, int N, int K, int nrows, int ldo,
                                          const float* __restrict__ g, float eps, int bx, int by,
                                          const Sync& sync = Sync()) {
    constexpr bool QUANT = !(WT == WT_F16 || WT == WT_F32);
    constexpr int NW = MODE == MODE_GLU ? 2 * NR : NR;     // weight rows per warp
    constexpr int U = GEMV_U / NW > 0 ? GEMV_U / NW : 1;  // chunks in flight per lane and row
    constexpr int KS = GEMV_KSPLIT;                       // warps sharing one row group
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const int row0 = (bx * (GEMV_WARPS / KS) + warp / KS) * NR;
    if (KS == 1 && row0 >= N) return;  // with KS > 1 every warp reaches the block barrier
    const int nchunks = QUANT ? K / 32 : K / 8;
    constexpr int STEP = 32 * KS;  // chunks between a lane's consecutive chunks
    const int cfirst = lane + 32 * part;
    constexpr bool early = GEMV_EARLY && RB == 1;
    WChunk<WT> w0[U][NW];  // early: the lane's first chunks
    // weights never depend on the previous kernel: the first chunks may load before the wait
    if (early) load_chunks<WT, U, NR, MODE>(w0, wq, ws, wq2, ws2, row0, N, K, cfirst, STEP, nchunks);
    sync.wait();
    constexpr bool early_trigger = GEMV_TRIGGER == 1 || (GEMV_TRIGGER == 2 && QX);
    if (early_trigger) sync.trigger();
    const int r0 = by * RB;
    const int nr = min(RB, nrows - r0);
    float acc[RB][NW], ss[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        ss[r] = 0.f;
#pragma unroll
        for (int j = 0; j < NW; ++j) acc[r][j] = 0.f;
    }
    auto dot_round = [&](const WChunk<WT> (&w)[U][NW], int c0) {  // chunks c0, c0 + STEP, ...
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + STEP * u;
            if (c < nchunks) chunk_dot<WT, RB, NW, NORM, QX>(w[u], x, xs, g, K, c, r0, nr, acc, ss);
        }
    };
    if (early) dot_round(w0, cfirst);
    for (int c0 = early ? cfirst + STEP * U : cfirst; c0 < nchunks; c0 += STEP * U) {
        WChunk<WT> w[U][NW];
        load_chunks<WT, U, NR, MODE>(w, wq, ws, wq2, ws2, row0, N, K, c0, STEP, nchunks);
        dot_round(w, c0);
    }
    if (!early_trigger) sync.trigger();  // the weights are read: let the next kernel's blocks start
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        if constexpr (NORM) ss[r] = warp_sum(ss[r]);
#pragma unroll
        for (int j = 0; j < NW; ++j) acc[r][j] = warp_sum(acc[r][j]);
    }
    if constexpr (KS > 1) {  // the group's parts, added in a fixed order by its first warp
        __shared__ float red[GEMV_WARPS][RB][NW + 1];  // [NW]: the sum of squares (NORM)
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                red[warp][r][NW] = ss[r];
#pragma unroll
                for (int j = 0; j < NW; ++j) red[warp][r][j] = acc[r][j];
            }
        }
        __syncthreads();
        if (part != 0 || row0 >= N) return;
#pragma unroll
        for (int r = 0; r < RB; ++r) {
#pragma unroll
            for (int j = 0; j <= NW; ++j) {
                float t = 0.f;
#pragma unroll
                for (int p = 0; p < KS; ++p) t += red[warp + p][r][j];
                if (j < NW) acc[r][j] = t;
                else ss[r] = t;
            }
        }
    }
    if constexpr (NORM) {
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            const float rs = rsqrtf(ss[r] / (float)K + eps);
#pragma unroll
            for (int j = 0; j < NW; ++j) acc[r][j] *= rs;
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
#pragma unroll
                for (int j = 0; j < NR; ++j) {
                    if (row0 + j < N) {
                        float* o = out + (size_t)(r0 + r) * ldo + row0 + j;
                        if constexpr (MODE == MODE_STORE) {
                            *o = acc[r][j];
                        } else if constexpr (MODE == MODE_ADD) {
                            *o += acc[r][j];
                        } else {
                            const float g = acc[r][j];
                            *o = g / (1.f + expf(-g)) * acc[r][NR + j];
                        }
                    }
                }
            }
        }
    }
}

#define GEMV_PASS wq, ws, wq2, ws2, x, xs, out, N, K, nrows, ldo
#define GEMV_AT blockIdx.x, blockIdx.y

// Output rows per warp: more rows share each activation load across weight rows (the L1
// traffic of RB rows would otherwise outgrow the weights'). For one activation row: 1 for
// float weights, 4 for quantized ones, whose rows are short (engine/PERF.md, gemvbench).
#define GEMV_NR(WT, RB) ((RB) >= 4 ? 4 : (RB) == 2 ? 2 : ((WT) >= WT_Q8_0 ? GEMV_NR1_Q : GEMV_NR1))
#define GEMV_ONE(TNAME, WT, RB, MNAME, MODE)                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME(GEMV_ARGS) {                                            \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), false, false>(GEMV_PASS, nullptr, 0.f, GEMV_AT); \
    }
#define GEMV_NORM_ONE(TNAME, WT, RB, MNAME, MODE)                                             \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME##_norm(GEMV_ARGS, float eps) {                           \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), true, false>(GEMV_PASS, nullptr, eps, GEMV_AT); \
    }
// The `_qx` kernels (float input, quantized in the lanes), for one activation row only: each
// is 3-4x the compile time of its plain kernel, and wider launches keep quantize_q8
// (Geometry.quantizes_in_mv: the repeated quantization grows with the rows).
#define GEMV_QX_ONE(TNAME, WT, RB, MNAME, MODE)                                               \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME##_qx(GEMV_ARGS) {                                       \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), false, true>(GEMV_PASS, nullptr, 0.f, GEMV_AT); \
    }
#define GEMV_QX_NORM_ONE(TNAME, WT, RB, MNAME, MODE)                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME##_norm_qx(GEMV_ARGS, const float* __restrict__ g,       \
                                                  float eps) {                                  \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), true, true>(GEMV_PASS, g, eps, GEMV_AT); \
    }
#define GEMV_RBS(ONE, TNAME, WT, MNAME, MODE) \
    ONE(TNAME, WT, 1, MNAME, MODE)            \
    ONE(TNAME, WT, 2, MNAME, MODE)            \
    ONE(TNAME, WT, 4, MNAME, MODE)            \
    ONE(TNAME, WT, 8, MNAME, MODE)
#define GEMV_MODES(TNAME, WT)                          \
    GEMV_RBS(GEMV_ONE, TNAME, WT, store, MODE_STORE)   \
    GEMV_RBS(GEMV_ONE, TNAME, WT, add, MODE_ADD)       \
    GEMV_RBS(GEMV_ONE, TNAME, WT, glu, MODE_GLU)
// quantized weights: the plain modes, the norm modes, and both again on float input (_qx)
#define GEMV_QUANT_MODES(TNAME, WT)                                \
    GEMV_MODES(TNAME, WT)                                          \
    GEMV_RBS(GEMV_NORM_ONE, TNAME, WT, store, MODE_STORE)          \
    GEMV_RBS(GEMV_NORM_ONE, TNAME, WT, glu, MODE_GLU)              \
    GEMV_QX_ONE(TNAME, WT, 1, store, MODE_STORE)         \
    GEMV_QX_ONE(TNAME, WT, 1, add, MODE_ADD)             \
    GEMV_QX_ONE(TNAME, WT, 1, glu, MODE_GLU)             \
    GEMV_QX_NORM_ONE(TNAME, WT, 1, store, MODE_STORE)    \
    GEMV_QX_NORM_ONE(TNAME, WT, 1, glu, MODE_GLU)

// phasebench compiles the bodies alone (GEMV_BODY_ONLY): its kernels instantiate their own
#ifndef GEMV_BODY_ONLY
GEMV_MODES(f32, WT_F32)
GEMV_MODES(f16, WT_F16)
GEMV_QUANT_MODES(q8_0, WT_Q8_0)
GEMV_QUANT_MODES(q4_0, WT_Q4_0)
GEMV_QUANT_MODES(q4_1, WT_Q4_1)
#endif  // GEMV_BODY_ONLY
