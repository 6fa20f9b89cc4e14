// ---------------------------------------------------------------------------------------
// Float16 weights: gemv_mma_f16_<mode>[_norm][_n16|_n32] (mode store, add, glu).
// ---------------------------------------------------------------------------------------

// Float16 weights on tensor cores (mma.sync m16n8k16, float32 accumulate), for any number of
// activation rows: a block owns 16 output rows (the mma's m) and up to 8 activation rows (its
// n), so each weight byte is read once for 8 sequences without 8x the arithmetic of the loop
// in gemv_simt.cu. The weights come in tile order (engine/cuda/tiles.py): the 16 x 32 tile of a band's
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
//
// NT: n-tiles per block. The `_n16` and `_n32` kernels multiply each weight fragment into 2
// or 4 tiles of 8 activation rows (mma j of a K block reads rows 8j + g), so a band's weights
// leave DRAM once for 16 or 32 sequences instead of once per 8 (a block per 8 rows read them
// up to 4 times). Each column still sees the same mmas in the same order: bit-identical to NT 1.
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
#ifndef MMA_NT_MAX
#define MMA_NT_MAX 4  // the widest kernel's n-tiles (1: every block 8 rows, the old launch)
#endif
#ifndef MMA_S_WIDE
#define MMA_S_WIDE 0  // ring slots of the _n16/_n32 kernels (0: MMA_S / MMA_S_GLU)
#endif
#ifndef MMA_WARPS_WIDE
#define MMA_WARPS_WIDE 16  // warps per block of the _n16/_n32 kernels
#endif
#define MMA_WARPS_OF(NT) ((NT) == 1 ? MMA_WARPS : MMA_WARPS_WIDE)
// Bands of 16 rows per block of the wide plain-store kernels (the output head: 8,016 blocks of
// llama's 128,256 rows, each re-reading the whole activation block from L2, 4x the bytes of
// its weight tile at 32 rows): each activation fragment a warp loads multiplies MB tiles.
#ifndef MMA_MB_WIDE
#define MMA_MB_WIDE 4
#endif
// Bands per block of the _n32 gate|up kernels (with and without the norm): at 32 rows each
// activation fragment then feeds 2 x 2 weight tiles, half the L2 traffic per weight byte
// (+3-5% at width 32 on llama-1b:f16, +10% on llama-8b:f16; at 16 rows mixed, kept at 1)
#ifndef MMA_MB_GLU
#define MMA_MB_GLU 2
#endif
#define MMA_MB_OF(MODE, NT, NORM) \
    ((NT) > 1 && (MODE) == MODE_STORE && !(NORM) ? MMA_MB_WIDE : (NT) == 4 && (MODE) == MODE_GLU ? MMA_MB_GLU : 1)
// Bands per block of the `_n32b` kernels: the add and norm-store _n32 kernels again, for the
// matrices with rows enough that the banded grid still fills the card (Geometry.launch picks
// them: llama-8b's 4,096-row o and down, +6% at width 32; llama-1b's 2,048 rows lost 5%)
#ifndef MMA_MB_N32
#define MMA_MB_N32 2
#endif
// the _n16/_n32 kernels ask for 16 warps per SM (their registers: 72-128 per thread)
#define MMA_MINB_WIDE (MMA_WARPS_WIDE >= 16 ? 1 : 16 / MMA_WARPS_WIDE)
// Kernels of up to MMA_XPF_NT n-tiles load the next K block's activations a block ahead, in
// registers; the _n32 kernels load them at use (width 32: +3.7% on llama-1b, +3.3% on 8b f16).
#ifndef MMA_XPF_NT
#define MMA_XPF_NT 2
#endif
#define MMA_M 16  // output rows per block
#define MMA_N 8   // activation rows per n-tile

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

// The end of a tensor-core mat-vec block: each warp's accumulator fragments (and, for NORM,
// its sums of squares) into shared memory where the ring was, then the block's 16MB x 8NT
// outputs summed over the warps in a fixed order and stored by mode. c[m * MB + b]: matrix m's
// band b (MB bands of 16 rows per block).
template <int MODE, int NM, int MB, int NT, int W, bool NORM>
__device__ __forceinline__ void mma_finish(const float (&c)[NM * MB][NT][4], const float (&ss)[NT],
                                           int N, int K, int nrows, int ldo, float eps,
                                           float* __restrict__ out) {
    constexpr int NC = MMA_N * NT;  // activation rows (columns) of the block
    constexpr int NR = MMA_M * MB;  // output rows of the block
    extern __shared__ uint4 mma_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * NR, r0 = blockIdx.y * NC;
    const int nr = min(NC, nrows - r0);
    __syncthreads();  // every warp is done with its ring: the space now holds the partial tiles
    float(*part)[NM][NR][NC] = reinterpret_cast<float(*)[NM][NR][NC]>(mma_smem);
    // after the tiles: each warp's sum of squares per activation row (NORM)
    float(*sq)[NC] = reinterpret_cast<float(*)[NC]>(&part[W][0][0][0]);
    // accumulator fragment of tile j: {C[g][2t], C[g][2t + 1], C[g + 8][2t], C[g + 8][2t + 1]}
#pragma unroll
    for (int m = 0; m < NM; ++m) {
#pragma unroll
        for (int b = 0; b < MB; ++b) {
            const int rg = MMA_M * b + g;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                part[warp][m][rg][MMA_N * j + 2 * t] = c[m * MB + b][j][0];
                part[warp][m][rg][MMA_N * j + 2 * t + 1] = c[m * MB + b][j][1];
                part[warp][m][rg + 8][MMA_N * j + 2 * t] = c[m * MB + b][j][2];
                part[warp][m][rg + 8][MMA_N * j + 2 * t + 1] = c[m * MB + b][j][3];
            }
        }
    }
    if constexpr (NORM) {  // the 4 lanes of group g hold row g's elements 8t .. 8t + 7 of each K block
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            float v = ss[j];
            v += __shfl_xor_sync(FULL_MASK, v, 1);
            v += __shfl_xor_sync(FULL_MASK, v, 2);
            if (t == 0) sq[warp][MMA_N * j + g] = v;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < NR * NC; i += blockDim.x) {
        const int row = i / NC, col = i % NC;
        if (row0 + row >= N || col >= nr) continue;
        float s[NM];
#pragma unroll
        for (int m = 0; m < NM; ++m) {
            s[m] = 0.f;
#pragma unroll
            for (int w = 0; w < W; ++w) s[m] += part[w][m][row][col];  // fixed order
        }
        if constexpr (NORM) {
            float q = 0.f;
#pragma unroll
            for (int w = 0; w < W; ++w) q += sq[w][col];  // fixed order
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

template <int MODE, int MB, int NT, int W, bool NORM>
__device__ __forceinline__ void gemv_mma_body(const __half* __restrict__ w1, const __half* __restrict__ w2,
                                              const float* __restrict__ x, float* __restrict__ out,
                                              int N, int K, int nrows, int ldo,
                                              const float* __restrict__ gnorm, float eps) {
    constexpr int NM = MODE == MODE_GLU ? 2 : 1;  // weight matrices (gate and up for GLU)
    constexpr int S = NT > 1 && MMA_S_WIDE ? MMA_S_WIDE : MODE == MODE_GLU ? MMA_S_GLU : MMA_S;
    constexpr bool XPF = NT <= MMA_XPF_NT;  // activations a K block ahead, in registers
    constexpr int SLOT = NM * MB * 64;  // uint4 per ring slot: [matrix][band][rows g, g + 8][lane]
    extern __shared__ uint4 mma_smem[];  // the rings; after the loop, the partial tiles
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * MMA_M * MB, r0 = blockIdx.y * (MMA_N * NT);
    const int nr = min(MMA_N * NT, nrows - r0);
    // weight rows g and g + 8 of the band's first tile (rows past N are zeros, never stored)
    const size_t wa_off = (size_t)row0 * K + g * 32 + 8 * t;
    const size_t wb_off = wa_off + 8 * 32;
    const __half* wm[2] = {w1, w2};
    // lane g of tile j loads activation row 8j + g; lanes of absent rows multiply zeros
    const float* xrow[NT];
    bool has_x[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        has_x[j] = MMA_N * j + g < nr;
        xrow[j] = x + (size_t)(r0 + (has_x[j] ? MMA_N * j + g : 0)) * K + 8 * t;
    }
    uint4* ring = mma_smem + (size_t)warp * S * SLOT + lane;
    const int nkb = K / 32;
    const int mine = warp < nkb ? (nkb - 1 - warp) / W + 1 : 0;  // this warp's K blocks
    auto fill = [&](int i) {  // K block warp + i * W into slot i % S
        uint4* slot = ring + (i % S) * SLOT;
        const int k = (warp + i * W) * MMA_M * 32;  // the K block's 1 KB tile
#pragma unroll
        for (int m = 0; m < NM; ++m) {
#pragma unroll
            for (int b = 0; b < MB; ++b) {
                if (MB > 1 && row0 + MMA_M * b >= N) break;  // past the last band: never stored
                const size_t band = (size_t)MMA_M * b * K + k;
                cp_async16(slot + (m * MB + b) * 64, wm[m] + wa_off + band);
                cp_async16(slot + (m * MB + b) * 64 + 32, wm[m] + wb_off + band);
            }
        }
    };
    auto load_x = [&](int i, float4 (&a)[NT], float4 (&b)[NT]) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            a[j] = b[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (has_x[j] && i < mine) {
                const float* p = xrow[j] + (warp + i * W) * 32;
                a[j] = ld_input4(p);
                b[j] = ld_input4(p + 4);
            }
        }
    };
    if (!MMA_EARLY) pdl_wait();
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
        if (i < mine) fill(i);
        cp_async_commit();  // empty groups keep the count that cp_async_wait relies on
    }
    if (MMA_EARLY) pdl_wait();
    float c[NM * MB][NT][4];
#pragma unroll
    for (int m = 0; m < NM * MB; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j) c[m][j][0] = c[m][j][1] = c[m][j][2] = c[m][j][3] = 0.f;
    float4 xa[NT], xb[NT];
    if constexpr (XPF) load_x(0, xa, xb);
    float ss[NT];  // NORM: this lane's share of each of its activation rows' sum of squares
#pragma unroll
    for (int j = 0; j < NT; ++j) ss[j] = 0.f;
    for (int i = 0; i < mine; ++i) {
        // refill the slot read last iteration (this lane's own reads of it are done)
        if (i + S - 1 < mine) fill(i + S - 1);
        cp_async_commit();
        float4 na[NT], nb[NT];
        if constexpr (XPF) load_x(i + 1, na, nb);
        else load_x(i, xa, xb);
        float4 ga, gb;  // NORM: the norm weight of this lane's 8 activations (a constant)
        if constexpr (NORM) {
            const float* gk = gnorm + (warp + i * W) * 32 + 8 * t;
            const float4* gp = reinterpret_cast<const float4*>(gk);
            ga = __ldg(gp);
            gb = __ldg(gp + 1);
        }
        cp_async_wait<S - 1>();  // K block i has landed
        const uint4* slot = ring + (i % S) * SLOT;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            float4 va = xa[j], vb = xb[j];
            if constexpr (NORM) {
                float q = ss[j];
                q = fmaf(va.x, va.x, q); q = fmaf(va.y, va.y, q);
                q = fmaf(va.z, va.z, q); q = fmaf(va.w, va.w, q);
                q = fmaf(vb.x, vb.x, q); q = fmaf(vb.y, vb.y, q);
                q = fmaf(vb.z, vb.z, q); q = fmaf(vb.w, vb.w, q);
                ss[j] = q;
                va = make_float4(va.x * ga.x, va.y * ga.y, va.z * ga.z, va.w * ga.w);
                vb = make_float4(vb.x * gb.x, vb.y * gb.y, vb.z * gb.z, vb.w * gb.w);
            }
            u32 hi[4], lo[4];
            split_f16(va, vb, hi, lo);
#pragma unroll
            for (int m = 0; m < NM * MB; ++m) {
                const uint4 a = slot[m * 64], b = slot[m * 64 + 32];
                mma16816(c[m][j], a.x, b.x, a.y, b.y, hi[0], hi[1]);
                mma16816(c[m][j], a.x, b.x, a.y, b.y, lo[0], lo[1]);
                mma16816(c[m][j], a.z, b.z, a.w, b.w, hi[2], hi[3]);
                mma16816(c[m][j], a.z, b.z, a.w, b.w, lo[2], lo[3]);
            }
        }
        if constexpr (XPF) {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                xa[j] = na[j];
                xb[j] = nb[j];
            }
        }
    }
    cp_async_wait<0>();
    pdl_trigger();  // the weights are read: let the next kernel's blocks start launching
    mma_finish<MODE, NM, MB, NT, W, NORM>(c, ss, N, K, nrows, ldo, eps, out);
}

// One kernel per mode, NT (suffix: none for 8 activation rows per block, _n16, _n32) and norm.
// Launch (Geometry.launch, engine/cuda/geometry.py): grid (ceil(n_out / (16 * bands)),
// ceil(rows / (8 * NT))), MMA_WARPS_OF(NT) * 32 threads, dynamic shared memory
// Geometry.shared_bytes(name): the weight ring or the warps' partial tiles, the larger.
#define GEMV_MMA_PLAIN(MNAME, MODE, NT, SUFFIX, MB)                                                 \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS_OF(NT) * 32, NT == 1 ? MMA_MINB : MMA_MINB_WIDE) \
        gemv_mma_f16_##MNAME##SUFFIX(GEMV_ARGS) {                                                  \
        gemv_mma_body<MODE, MB, NT, MMA_WARPS_OF(NT), false>(reinterpret_cast<const __half*>(wq),    \
                                       reinterpret_cast<const __half*>(wq2),                       \
                                       reinterpret_cast<const float*>(x), out, N, K, nrows, ldo,   \
                                       nullptr, 0.f);                                              \
    }
#define GEMV_MMA_NORM(MNAME, MODE, NT, SUFFIX, MB)                                                  \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS_OF(NT) * 32, NT == 1 ? MMA_NORM_MINB : MMA_MINB_WIDE) \
        gemv_mma_f16_##MNAME##_norm##SUFFIX(GEMV_ARGS, const float* __restrict__ gnorm, float eps) { \
        gemv_mma_body<MODE, MB, NT, MMA_WARPS_OF(NT), true>(reinterpret_cast<const __half*>(wq),     \
                                      reinterpret_cast<const __half*>(wq2),                        \
                                      reinterpret_cast<const float*>(x), out, N, K, nrows, ldo,    \
                                      gnorm, eps);                                                 \
    }
#define GEMV_MMA_NT(MNAME, MODE, NT, SUFFIX)                                 \
    GEMV_MMA_PLAIN(MNAME, MODE, NT, SUFFIX, MMA_MB_OF(MODE, NT, false))      \
    GEMV_MMA_NORM(MNAME, MODE, NT, SUFFIX, MMA_MB_OF(MODE, NT, true))
#define GEMV_MMA_ONE(MNAME, MODE)        \
    GEMV_MMA_NT(MNAME, MODE, 1, )        \
    GEMV_MMA_NT(MNAME, MODE, 2, _n16)    \
    GEMV_MMA_NT(MNAME, MODE, 4, _n32)
GEMV_MMA_ONE(store, MODE_STORE)
GEMV_MMA_ONE(add, MODE_ADD)
GEMV_MMA_ONE(glu, MODE_GLU)
// the `_n32b` kernels: the _n32 kernels of one band per block, with MMA_MB_N32
GEMV_MMA_PLAIN(add, MODE_ADD, 4, _n32b, MMA_MB_N32)
GEMV_MMA_NORM(add, MODE_ADD, 4, _n32b, MMA_MB_N32)
GEMV_MMA_NORM(store, MODE_STORE, 4, _n32b, MMA_MB_N32)

// ---------------------------------------------------------------------------------------
// Q4_0 weights: gemv_mma_q4_0_<mode> (mode store, add, glu).
// ---------------------------------------------------------------------------------------
//
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
    const float no_ss[1] = {0.f};
    mma_finish<MODE, NM, 1, 1, MMA_WARPS, false>(reinterpret_cast<const float(&)[NM][1][4]>(c), no_ss, N, K, nrows,
                                   ldo, 0.f, out);
}

// One kernel per mode. Launch: grid (ceil(n_out / (16 * bands)), ceil(rows / 8)), MMA_WARPS * 32
// threads, dynamic shared memory Geometry.shared_bytes(name).
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
