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
// two-level int8 blocks of 32 (quantize_q8 below); the block sum of x folds the Q4_0
// offset (-8) and the Q4_1 minimum (m) into one multiply per block.
// NORM (quantized weights, store and glu): the input is x * g of the raw residual x, and
// the kernel applies RMSNorm's 1 / rms itself, from the blocks' sums of squares of x that
// quantize_q8 left beside their scales (quantization commutes with the positive scale, so
// the int8 codes are those of the normalised row): the decode step needs no norm kernel.
// Float weights (F16, F32) multiply float32 activations directly.
//
// MODE_STORE: out = acc. MODE_ADD: out += acc (residual add fused). MODE_GLU: two weight
// matrices (gate, up) against the same x; out = silu(gate) * up (SwiGLU fused).

#define MODE_STORE 0
#define MODE_ADD 1
#define MODE_GLU 2

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
template <int WT, int RB, int NW, bool NORM>
__device__ __forceinline__ void chunk_dot(const WChunk<WT> (&w)[NW], const void* __restrict__ x,
                                          const float4* __restrict__ xs, int K, int c, int r0,
                                          int nr, float (&acc)[RB][NW], float (&ss)[RB]) {
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
                // activation block c of row r0 + r: 32 bytes of level-1 codes, 32 of level 2
                const i8* xr = reinterpret_cast<const i8*>(x) + (size_t)(r0 + r) * 2 * K + 64 * c;
                const int4 a = ld_input4(xr), b = ld_input4(xr + 16), a2 = ld_input4(xr + 32),
                           b2 = ld_input4(xr + 48);
                // {d1, d2, sum x, sum of squares of the raw x (NORM)}
                const float4 sc = ld_input4(reinterpret_cast<const float*>(xs + (size_t)(r0 + r) * nb + c));
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

// One warp computes NR consecutive output rows for up to RB activation rows.
template <int WT, int RB, int MODE, int NR, bool NORM>
__device__ __forceinline__ void gemv_body(const void* __restrict__ wq, const void* __restrict__ ws,
                                          const void* __restrict__ wq2, const void* __restrict__ ws2,
                                          const void* __restrict__ x, const float4* __restrict__ xs,
                                          float* __restrict__ out, int N, int K, int nrows, int ldo,
                                          float eps) {
    constexpr bool QUANT = !(WT == WT_F16 || WT == WT_F32);
    constexpr int NW = MODE == MODE_GLU ? 2 * NR : NR;     // weight rows per warp
    constexpr int U = GEMV_U / NW > 0 ? GEMV_U / NW : 1;  // chunks in flight per lane and row
    constexpr int KS = GEMV_KSPLIT;                       // warps sharing one row group
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const int row0 = (blockIdx.x * (GEMV_WARPS / KS) + warp / KS) * NR;
    if (KS == 1 && row0 >= N) return;  // with KS > 1 every warp reaches the block barrier
    pdl_wait();
    const int nchunks = QUANT ? K / 32 : K / 8;
    const int r0 = blockIdx.y * RB;
    const int nr = min(RB, nrows - r0);
    float acc[RB][NW], ss[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        ss[r] = 0.f;
#pragma unroll
        for (int j = 0; j < NW; ++j) acc[r][j] = 0.f;
    }
    constexpr int STEP = 32 * KS;  // chunks between a lane's consecutive chunks
    for (int c0 = lane + 32 * part; c0 < nchunks; c0 += STEP * U) {
        WChunk<WT> w[U][NW];
        load_chunks<WT, U, NR, MODE>(w, wq, ws, wq2, ws2, row0, N, K, c0, STEP, nchunks);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + STEP * u;
            if (c < nchunks) chunk_dot<WT, RB, NW, NORM>(w[u], x, xs, K, c, r0, nr, acc, ss);
        }
    }
    pdl_trigger();  // the weights are read: let the next kernel's blocks start launching
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

#define GEMV_ARGS                                                                              \
    const void *__restrict__ wq, const void *__restrict__ ws, const void *__restrict__ wq2,    \
        const void *__restrict__ ws2, const void *__restrict__ x, const float4 *__restrict__ xs, \
        float *__restrict__ out, int N, int K, int nrows, int ldo
#define GEMV_PASS wq, ws, wq2, ws2, x, xs, out, N, K, nrows, ldo

// Output rows per warp: more rows share each activation load across weight rows (the L1
// traffic of RB rows would otherwise outgrow the weights'). For one activation row: 1 for
// float weights, 4 for quantized ones, whose rows are short (engine/PERF.md, gemvbench).
#define GEMV_NR(WT, RB) ((RB) >= 4 ? 4 : (RB) == 2 ? 2 : ((WT) >= WT_Q8_0 ? GEMV_NR1_Q : GEMV_NR1))
#define GEMV_ONE(TNAME, WT, RB, MNAME, MODE)                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME(GEMV_ARGS) {                                            \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), false>(GEMV_PASS, 0.f);                           \
    }
#define GEMV_NORM_ONE(TNAME, WT, RB, MNAME, MODE)                                             \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME##_norm(GEMV_ARGS, float eps) {                           \
        gemv_body<WT, RB, MODE, GEMV_NR(WT, RB), true>(GEMV_PASS, eps);                            \
    }
#define GEMV_RBS(TNAME, WT, MNAME, MODE) \
    GEMV_ONE(TNAME, WT, 1, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 2, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 4, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 8, MNAME, MODE)
#define GEMV_NORM_RBS(TNAME, WT, MNAME, MODE) \
    GEMV_NORM_ONE(TNAME, WT, 1, MNAME, MODE)  \
    GEMV_NORM_ONE(TNAME, WT, 2, MNAME, MODE)  \
    GEMV_NORM_ONE(TNAME, WT, 4, MNAME, MODE)  \
    GEMV_NORM_ONE(TNAME, WT, 8, MNAME, MODE)
#define GEMV_MODES(TNAME, WT)                \
    GEMV_RBS(TNAME, WT, store, MODE_STORE)   \
    GEMV_RBS(TNAME, WT, add, MODE_ADD)       \
    GEMV_RBS(TNAME, WT, glu, MODE_GLU)
#define GEMV_NORM_MODES(TNAME, WT)                \
    GEMV_NORM_RBS(TNAME, WT, store, MODE_STORE)   \
    GEMV_NORM_RBS(TNAME, WT, glu, MODE_GLU)

GEMV_MODES(f32, WT_F32)
GEMV_MODES(f16, WT_F16)
GEMV_MODES(q8_0, WT_Q8_0)
GEMV_MODES(q4_0, WT_Q4_0)
GEMV_MODES(q4_1, WT_Q4_1)
GEMV_NORM_MODES(q8_0, WT_Q8_0)
GEMV_NORM_MODES(q4_0, WT_Q4_0)
GEMV_NORM_MODES(q4_1, WT_Q4_1)

// ---------------------------------------------------------------------------------------
// Float16 weights on tensor cores (mma.sync m16n8k16, float32 accumulate), for any number of
// activation rows: a block owns 16 output rows (the mma's m) and up to 8 activation rows (its
// n), so each weight byte is read once for 8 sequences without 8x the arithmetic of the loop
// above. The weights come in tile order (engine/cuda/tiles.py): the 16 x 32 tile of a band's
// K block is one contiguous 1 KB, rows past N zero-padded. The block's MMA_WARPS warps split
// K in blocks of 32 (warp w takes blocks w, w + MMA_WARPS, ...) and add their partial tiles
// in a fixed order. Each activation goes in as
// two float16 halves, x = hi + lo (about 22 bits of it), both multiplied into the same
// accumulator, so the result keeps float32-grade accuracy although the weights are float16.
// The mma computes each column on its own, and nothing else depends on the row count: a
// sequence's result is bit-identical alone and in a batch.
//
// Inside a 32-wide K block, lane (g = lane / 4, t = lane % 4) takes the 8 consecutive weights
// at k = 8t .. 8t + 7 of rows g and g + 8 and the same 8 activations of row g, and uses them as
// the fragments of two mmas (any order of k serves if A and B share it): mma j takes
// k = 8t + 4j + {0, 1} as its logical k = 2t, 2t + 1 and 8t + 4j + {2, 3} as 2t + 8, 2t + 9.
//
// NORM: the input is the raw residual x and the block applies RMSNorm itself: each lane
// scales the activations it loads by the norm weight g in float32 before the split, and the
// block scales the result by 1 / rms, W (x * g / rms) = (1 / rms) W (x * g), with rms taken
// from the raw activations the warps load anyway (their K blocks cover each row once), so
// the norm kernel and its pass disappear without a pre-pass in any block (engine/PERF.md: a
// per-block pre-pass lost 13%; folding g into W's float16 columns instead cost accuracy).
//
// The weights stream through a ring of MMA_S K blocks per warp in dynamic shared memory,
// filled by cp.async MMA_S - 1 blocks ahead of the mma, so a warp's next loads are in flight
// while it multiplies and hold no registers (64 per thread: two 512-thread blocks fit an SM).
// The first slots are requested before the PDL wait: weights never depend on the previous
// kernel. Each lane copies and later reads only its own 16-byte pieces, so a lane's
// cp.async.wait_group is the only synchronisation the ring needs. Measured (engine/PERF.md):
// two slots beat register loads by 4% on llama-1b; deeper rings were slower (6 slots: -7%).
#ifndef MMA_WARPS
#define MMA_WARPS 16  // 8: -3% on llama-1b (too few blocks for its 2048-row matrices); 32: -12%
#endif
#ifndef MMA_S
#define MMA_S 2  // ring slots per warp, store/add (a slot: 1 KB per weight matrix)
#endif
#ifndef MMA_S_GLU
#define MMA_S_GLU 2  // ring slots per warp for gate|up (2 KB each)
#endif
#ifndef MMA_EARLY
#define MMA_EARLY 1  // the first slots load before the PDL wait (weights never depend on it)
#endif
#ifndef MMA_MINB
#define MMA_MINB 1  // __launch_bounds__ minimum blocks per SM (a tuning knob)
#endif
#ifndef MMA_NORM_MINB
// the `_norm` kernels: 2 holds gate|up's to 62 registers (74 unbounded: one block per SM),
// +7.0% on llama-1b:f16 decode, +3.3% on llama-8b:f16 (engine/PERF.md)
#define MMA_NORM_MINB 2
#endif
#define MMA_M 16  // output rows per block
#define MMA_N 8   // activation rows per block

// 8 activations as float16 pairs: hi[i] + lo[i] ~= elements 2i, 2i + 1 (lo: the residual).
__device__ __forceinline__ void split_f16(const float4& a, const float4& b, u32 (&hi)[4], u32 (&lo)[4]) {
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        const float2 f = __half22float2(h);
        hi[i] = *reinterpret_cast<const u32*>(&h);
        lo[i] = pack_h2(v[2 * i] - f.x, v[2 * i + 1] - f.y);
    }
}

// The end of a tensor-core mat-vec block: each warp's accumulator fragment (and, for NORM,
// its sums of squares) into shared memory where the ring was, then the block's 16 x 8 outputs
// summed over the warps in a fixed order and stored by mode.
template <int MODE, int NM, bool NORM>
__device__ __forceinline__ void mma_finish(const float (&c)[NM][4], float ss, int N, int K, int nrows,
                                           int ldo, float eps, float* __restrict__ out) {
    extern __shared__ uint4 mma_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * MMA_M, r0 = blockIdx.y * MMA_N;
    const int nr = min(MMA_N, nrows - r0);
    __syncthreads();  // every warp is done with its ring: the space now holds the partial tiles
    float(*part)[NM][MMA_M][MMA_N] = reinterpret_cast<float(*)[NM][MMA_M][MMA_N]>(mma_smem);
    // after the tiles: each warp's sum of squares per activation row (NORM)
    float(*sq)[MMA_N] = reinterpret_cast<float(*)[MMA_N]>(&part[MMA_WARPS][0][0][0]);
    // accumulator fragment: c = {C[g][2t], C[g][2t + 1], C[g + 8][2t], C[g + 8][2t + 1]}
#pragma unroll
    for (int m = 0; m < NM; ++m) {
        part[warp][m][g][2 * t] = c[m][0];
        part[warp][m][g][2 * t + 1] = c[m][1];
        part[warp][m][g + 8][2 * t] = c[m][2];
        part[warp][m][g + 8][2 * t + 1] = c[m][3];
    }
    if constexpr (NORM) {  // the 4 lanes of group g hold row g's elements 8t .. 8t + 7 of each K block
        ss += __shfl_xor_sync(FULL_MASK, ss, 1);
        ss += __shfl_xor_sync(FULL_MASK, ss, 2);
        if (t == 0) sq[warp][g] = ss;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < MMA_M * MMA_N; i += blockDim.x) {
        const int row = i / MMA_N, col = i % MMA_N;
        if (row0 + row >= N || col >= nr) continue;
        float s[NM];
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            s[m] = 0.f;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; ++w) s[m] += part[w][m][row][col];  // fixed order
        }
        if constexpr (NORM) {
            float q = 0.f;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; ++w) q += sq[w][col];  // fixed order
            const float rs = rsqrtf(q / (float)K + eps);
#pragma unroll
            for (int m = 0; m < NM; ++m) s[m] *= rs;
        }
        float* o = out + (size_t)(r0 + col) * ldo + row0 + row;
        if constexpr (MODE == MODE_STORE) {
            *o = s[0];
        } else if constexpr (MODE == MODE_ADD) {
            *o += s[0];
        } else {
            *o = s[0] / (1.f + expf(-s[0])) * s[NM - 1];
        }
    }
}

template <int MODE, bool NORM>
__device__ __forceinline__ void gemv_mma_body(const __half* __restrict__ w1, const __half* __restrict__ w2,
                                              const float* __restrict__ x, float* __restrict__ out,
                                              int N, int K, int nrows, int ldo,
                                              const float* __restrict__ gnorm, float eps) {
    constexpr int NM = MODE == MODE_GLU ? 2 : 1;  // weight matrices (gate and up for GLU)
    constexpr int S = MODE == MODE_GLU ? MMA_S_GLU : MMA_S;
    constexpr int SLOT = NM * 64;  // uint4 per ring slot: [matrix][rows g, g + 8][lane]
    extern __shared__ uint4 mma_smem[];  // the rings; after the loop, the partial tiles
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * MMA_M, r0 = blockIdx.y * MMA_N;
    const int nr = min(MMA_N, nrows - r0);
    // weight rows g and g + 8 of the band's first tile (rows past N are zeros, never stored)
    const size_t wa_off = (size_t)row0 * K + g * 32 + 8 * t;
    const size_t wb_off = wa_off + 8 * 32;
    const __half* wm[2] = {w1, w2};
    const bool has_x = g < nr;  // lanes of absent activation rows multiply zeros
    const float* xrow = x + (size_t)(r0 + (has_x ? g : 0)) * K + 8 * t;
    uint4* ring = mma_smem + (size_t)warp * S * SLOT + lane;
    const int nkb = K / 32;
    const int mine = warp < nkb ? (nkb - 1 - warp) / MMA_WARPS + 1 : 0;  // this warp's K blocks
    auto fill = [&](int i) {  // K block warp + i * MMA_WARPS into slot i % S
        uint4* slot = ring + (i % S) * SLOT;
        const int k = (warp + i * MMA_WARPS) * MMA_M * 32;  // the K block's 1 KB tile
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            cp_async16(slot + m * 64, wm[m] + wa_off + k);
            cp_async16(slot + m * 64 + 32, wm[m] + wb_off + k);
        }
    };
    auto load_x = [&](int i, float4& a, float4& b) {
        a = b = make_float4(0.f, 0.f, 0.f, 0.f);
        if (has_x && i < mine) {
            const float* p = xrow + (warp + i * MMA_WARPS) * 32;
            a = ld_input4(p);
            b = ld_input4(p + 4);
        }
    };
    if (!MMA_EARLY) pdl_wait();
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
        if (i < mine) fill(i);
        cp_async_commit();  // empty groups keep the count that cp_async_wait relies on
    }
    if (MMA_EARLY) pdl_wait();
    float c[NM][4];
#pragma unroll
    for (int m = 0; m < NM; ++m) c[m][0] = c[m][1] = c[m][2] = c[m][3] = 0.f;
    float4 xa, xb;
    load_x(0, xa, xb);
    float ss = 0.f;  // NORM: this lane's share of its activation row's sum of squares
    for (int i = 0; i < mine; ++i) {
        // refill the slot read last iteration (this lane's own reads of it are done)
        if (i + S - 1 < mine) fill(i + S - 1);
        cp_async_commit();
        float4 na, nb;
        load_x(i + 1, na, nb);
        float4 ga, gb;  // NORM: the norm weight of this lane's 8 activations (a constant)
        if constexpr (NORM) {
            const float* gk = gnorm + (warp + i * MMA_WARPS) * 32 + 8 * t;
            const float4* gp = reinterpret_cast<const float4*>(gk);
            ga = __ldg(gp);
            gb = __ldg(gp + 1);
        }
        cp_async_wait<S - 1>();  // K block i has landed
        const uint4* slot = ring + (i % S) * SLOT;
        if constexpr (NORM) {
            ss = fmaf(xa.x, xa.x, ss); ss = fmaf(xa.y, xa.y, ss);
            ss = fmaf(xa.z, xa.z, ss); ss = fmaf(xa.w, xa.w, ss);
            ss = fmaf(xb.x, xb.x, ss); ss = fmaf(xb.y, xb.y, ss);
            ss = fmaf(xb.z, xb.z, ss); ss = fmaf(xb.w, xb.w, ss);
            xa = make_float4(xa.x * ga.x, xa.y * ga.y, xa.z * ga.z, xa.w * ga.w);
            xb = make_float4(xb.x * gb.x, xb.y * gb.y, xb.z * gb.z, xb.w * gb.w);
        }
        u32 hi[4], lo[4];
        split_f16(xa, xb, hi, lo);
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            const uint4 a = slot[m * 64], b = slot[m * 64 + 32];
            mma16816(c[m], a.x, b.x, a.y, b.y, hi[0], hi[1]);
            mma16816(c[m], a.x, b.x, a.y, b.y, lo[0], lo[1]);
            mma16816(c[m], a.z, b.z, a.w, b.w, hi[2], hi[3]);
            mma16816(c[m], a.z, b.z, a.w, b.w, lo[2], lo[3]);
        }
        xa = na;
        xb = nb;
    }
    cp_async_wait<0>();
    pdl_trigger();  // the weights are read: let the next kernel's blocks start launching
    mma_finish<MODE, NM, NORM>(c, ss, N, K, nrows, ldo, eps, out);
}

#define GEMV_MMA_ONE(MNAME, MODE)                                                                  \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32, MMA_MINB)                          \
        gemv_mma_f16_##MNAME(GEMV_ARGS) {                                                          \
        gemv_mma_body<MODE, false>(reinterpret_cast<const __half*>(wq),                            \
                                   reinterpret_cast<const __half*>(wq2),                           \
                                   reinterpret_cast<const float*>(x), out, N, K, nrows, ldo,       \
                                   nullptr, 0.f);                                                  \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32, MMA_NORM_MINB)                     \
        gemv_mma_f16_##MNAME##_norm(GEMV_ARGS, const float* __restrict__ gnorm, float eps) {       \
        gemv_mma_body<MODE, true>(reinterpret_cast<const __half*>(wq),                             \
                                  reinterpret_cast<const __half*>(wq2),                            \
                                  reinterpret_cast<const float*>(x), out, N, K, nrows, ldo,        \
                                  gnorm, eps);                                                     \
    }
GEMV_MMA_ONE(store, MODE_STORE)
GEMV_MMA_ONE(add, MODE_ADD)
GEMV_MMA_ONE(glu, MODE_GLU)

// ---------------------------------------------------------------------------------------
// Q4_0 weights on the int8 tensor cores (mma.sync m16n8k32, int32 accumulate) against the
// two-level int8 activations of the dp4a path, for any number of activation rows, with the
// block shape, warp split, ring and epilogue of the float16 kernel above. A step is two K
// blocks (64 columns) of the band; the weights come in fragment order (engine/cuda/tiles.py,
// q4_0_fragments): each lane's 16 bytes are its A fragments of rows g and g + 8 for both
// blocks (low nibbles: elements 4t..4t+3, high nibbles: 16+4t..16+4t+3, as GGUF packs them),
// and 8 bytes per group g hold the four block scales. Per block and output element:
// y += d_w * (d1 * (q . q1) + d2 * (q . q2) - 8 * sum(x)), the dp4a path's formula, with the
// integer dot products exact, so each column (sequence) is computed on its own.
#ifndef MMAQ_S
#define MMAQ_S 2  // ring slots per warp (a slot: 768 bytes per weight matrix)
#endif

template <int MODE>
__device__ __forceinline__ void gemv_mmaq_body(const uint4* __restrict__ q1w, const uint2* __restrict__ s1w,
                                               const uint4* __restrict__ q2w, const uint2* __restrict__ s2w,
                                               const i8* __restrict__ xq, const float4* __restrict__ xs,
                                               float* __restrict__ out, int N, int K, int nrows, int ldo) {
    constexpr int NM = MODE == MODE_GLU ? 2 : 1;
    constexpr int S = MMAQ_S;
    constexpr int SLOT = NM * 48;  // uint4 per slot: [matrix][32 lanes x 16 B words, 32 x 8 B scales]
    extern __shared__ uint4 mma_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.y * MMA_N;
    const int nr = min(MMA_N, nrows - r0);
    const int nsteps = K / 64;
    const size_t band = (size_t)blockIdx.x * nsteps;  // this band's first step
    const uint4* qm[2] = {q1w, q2w};
    const uint2* sm[2] = {s1w, s2w};
    const bool has_x = g < nr;  // activation row g of the block feeds B column g
    const i8* xrow = xq + (size_t)(r0 + (has_x ? g : 0)) * 2 * K + 4 * t;
    // the two activation rows (C columns 2t, 2t + 1) whose scales this lane applies
    const bool has_c0 = 2 * t < nr, has_c1 = 2 * t + 1 < nr;
    const float4* xs0 = xs + (size_t)(r0 + (has_c0 ? 2 * t : 0)) * (K / 32);
    const float4* xs1 = xs + (size_t)(r0 + (has_c1 ? 2 * t + 1 : 0)) * (K / 32);
    uint4* ring = mma_smem + (size_t)warp * S * SLOT;
    const int mine = warp < nsteps ? (nsteps - 1 - warp) / MMA_WARPS + 1 : 0;
    auto fill = [&](int i) {  // step warp + i * MMA_WARPS into slot i % S
        uint4* slot = ring + (i % S) * SLOT;
        const size_t step = band + warp + i * MMA_WARPS;
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            cp_async16(slot + m * 48 + lane, qm[m] + step * 32 + lane);
            cp_async8(reinterpret_cast<uint2*>(slot + m * 48 + 32) + lane, sm[m] + step * 8 + g);
        }
    };
    // activation words of one step: per block, q1 at k 4t.., 16+4t.., then q2 the same
    auto load_x = [&](int i, u32 (&xa)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) xa[j] = 0u;
        if (has_x && i < mine) {
            const i8* p = xrow + (size_t)(warp + i * MMA_WARPS) * 128;
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                xa[4 * b] = ld_input_u32(p + 64 * b);
                xa[4 * b + 1] = ld_input_u32(p + 64 * b + 16);
                xa[4 * b + 2] = ld_input_u32(p + 64 * b + 32);
                xa[4 * b + 3] = ld_input_u32(p + 64 * b + 48);
            }
        }
    };
    if (!MMA_EARLY) pdl_wait();
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
        if (i < mine) fill(i);
        cp_async_commit();
    }
    if (MMA_EARLY) pdl_wait();
    float c[NM][4];
#pragma unroll
    for (int m = 0; m < NM; ++m) c[m][0] = c[m][1] = c[m][2] = c[m][3] = 0.f;
    u32 xa[8];
    load_x(0, xa);
    for (int i = 0; i < mine; ++i) {
        if (i + S - 1 < mine) fill(i + S - 1);
        cp_async_commit();
        u32 na[8];
        load_x(i + 1, na);
        const int blk0 = 2 * (warp + i * MMA_WARPS);
        float4 sc[2][2];  // [block][column 2t, 2t + 1]: {d1, d2, sum x, 0}
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            sc[b][0] = has_c0 ? ld_input4(reinterpret_cast<const float*>(xs0 + blk0 + b))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
            sc[b][1] = has_c1 ? ld_input4(reinterpret_cast<const float*>(xs1 + blk0 + b))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        cp_async_wait<S - 1>();
        const uint4* slot = ring + (i % S) * SLOT;
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            const uint4 wv = slot[m * 48 + lane];
            const uint2 dv = reinterpret_cast<const uint2*>(slot + m * 48 + 32)[lane];
            const u32 w[4] = {wv.x, wv.y, wv.z, wv.w};
            const __half2 dh[2] = {*reinterpret_cast<const __half2*>(&dv.x),
                                   *reinterpret_cast<const __half2*>(&dv.y)};
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                const u32 ga = w[2 * b], gb = w[2 * b + 1];  // rows g, g + 8
                const u32 a0 = ga & 0x0F0F0F0Fu, a2 = (ga >> 4) & 0x0F0F0F0Fu;
                const u32 a1 = gb & 0x0F0F0F0Fu, a3 = (gb >> 4) & 0x0F0F0F0Fu;
                int c1[4] = {0, 0, 0, 0}, c2[4] = {0, 0, 0, 0};
                mma_s8_16832(c1, a0, a1, a2, a3, xa[4 * b], xa[4 * b + 1]);
                mma_s8_16832(c2, a0, a1, a2, a3, xa[4 * b + 2], xa[4 * b + 3]);
                const float2 d = __half22float2(dh[b]);  // rows g, g + 8
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float4 v = sc[b][e & 1];
                    const float dot = fmaf(v.x, (float)c1[e], v.y * (float)c2[e]);
                    c[m][e] += (e < 2 ? d.x : d.y) * fmaf(-8.f, v.z, dot);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) xa[j] = na[j];
    }
    cp_async_wait<0>();
    pdl_trigger();
    mma_finish<MODE, NM, false>(c, 0.f, N, K, nrows, ldo, 0.f, out);
}

#define GEMV_MMAQ_ONE(MNAME, MODE)                                                                 \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32, MMA_MINB)                          \
        gemv_mma_q4_0_##MNAME(GEMV_ARGS) {                                                         \
        gemv_mmaq_body<MODE>(reinterpret_cast<const uint4*>(wq), reinterpret_cast<const uint2*>(ws), \
                             reinterpret_cast<const uint4*>(wq2), reinterpret_cast<const uint2*>(ws2), \
                             reinterpret_cast<const i8*>(x), xs, out, N, K, nrows, ldo);           \
    }
GEMV_MMAQ_ONE(store, MODE_STORE)
GEMV_MMAQ_ONE(add, MODE_ADD)
GEMV_MMAQ_ONE(glu, MODE_GLU)

// Activations to two-level int8 blocks of 32 for the dp4a path, one warp per block:
// x ~= d1 * q1 + d2 * q2 with q2 quantizing the residual of q1, so the dot products carry
// about 15 bits of each activation (one level alone costs ~0.5% relative error per mat-vec,
// enough to flip near-tied argmaxes against the float reference). Per block: 32 bytes q1,
// 32 bytes q2, and xs = {d1, d2, sum, ss}; the sum folds in the Q4_0 offset and Q4_1 min.
// With a norm weight g (rows of K): the blocks of x * g, and ss = the block's sum of squares
// of the raw x, from which a NORM mat-vec takes 1 / rms (else ss = 0).
extern "C" __global__ void quantize_q8(const float* __restrict__ x, const float* __restrict__ g,
                                       i8* __restrict__ xq, float4* __restrict__ xs, int nblocks,
                                       int K) {
    const int b = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    pdl_wait();
    pdl_trigger();
    if (b >= nblocks) return;
    float v = x[(size_t)b * 32 + lane];
    float ss = 0.f;
    if (g) {
        ss = warp_sum(v * v);
        v *= __ldg(g + (b * 32 + lane) % K);
    }
    quant_block(v, xq + (size_t)b * 64, xs + b, ss);
}
