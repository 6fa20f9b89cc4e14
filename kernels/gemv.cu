// Decode mat-vec: out[r, n] = sum_k W[n, k] * x[r, k] for up to RB activation rows at once,
// so each weight byte is read once for RB rows. One warp per output row; lane i takes
// chunks i, i+32, ... of the row (a chunk is one 32-element block for quantized weights,
// 8 elements for float weights). The per-row arithmetic does not depend on RB or on the
// other rows: a sequence decoded in a batch gets bit-identical results to one decoded alone.
//
// Quantized weights are read as int8 dp4a dot products against activations quantized to
// two-level int8 blocks of 32 (quantize_q8 below); the block sum of x folds the Q4_0
// offset (-8) and the Q4_1 minimum (m) into one multiply per block.
// Float weights (F16, F32) multiply float32 activations directly.
//
// MODE_STORE: out = acc. MODE_ADD: out += acc (residual add fused). MODE_GLU: two weight
// matrices (gate, up) against the same x; out = silu(gate) * up (SwiGLU fused).

#define MODE_STORE 0
#define MODE_ADD 1
#define MODE_GLU 2

#define GEMV_WARPS 4

template <int WT, int RB>
__device__ __forceinline__ void gemv_chunk(const void* __restrict__ wq, const void* __restrict__ ws,
                                           size_t row, int K, int c, const void* __restrict__ x,
                                           const float4* __restrict__ xs, int r0, int nr,
                                           float (&acc)[RB]) {
    if (WT == WT_F16 || WT == WT_F32) {
        float w[8];
        if (WT == WT_F16) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(wq) + row * (K / 8) + c);
            const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __half22float2(h[i]);
                w[2 * i] = f.x;
                w[2 * i + 1] = f.y;
            }
        } else {
            const float4* p = reinterpret_cast<const float4*>(wq) + row * (K / 4) + 2 * c;
            const float4 a = __ldg(p), b = __ldg(p + 1);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        }
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
                const float4* xr =
                    reinterpret_cast<const float4*>(reinterpret_cast<const float*>(x) + (size_t)(r0 + r) * K) + 2 * c;
                const float4 a = __ldg(xr), b = __ldg(xr + 1);
                float t = w[0] * a.x;
                t = fmaf(w[1], a.y, t);
                t = fmaf(w[2], a.z, t);
                t = fmaf(w[3], a.w, t);
                t = fmaf(w[4], b.x, t);
                t = fmaf(w[5], b.y, t);
                t = fmaf(w[6], b.z, t);
                t = fmaf(w[7], b.w, t);
                acc[r] += t;
            }
        }
    } else {
        const int nb = K / 32;
        int4 lo, hi;  // weight bytes of elements 0..15 and 16..31 as signed int8 lanes
        float d, m = 0.f;
        if (WT == WT_Q8_0) {
            const int4* p = reinterpret_cast<const int4*>(reinterpret_cast<const i8*>(wq) + row * K) + 2 * c;
            lo = __ldg(p);
            hi = __ldg(p + 1);
            d = __half2float(__ldg(reinterpret_cast<const __half*>(ws) + row * nb + c));
        } else {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const u8*>(wq) + row * (K / 2)) + c);
            lo.x = v.x & 0x0F0F0F0F; lo.y = v.y & 0x0F0F0F0F; lo.z = v.z & 0x0F0F0F0F; lo.w = v.w & 0x0F0F0F0F;
            hi.x = (v.x >> 4) & 0x0F0F0F0F; hi.y = (v.y >> 4) & 0x0F0F0F0F;
            hi.z = (v.z >> 4) & 0x0F0F0F0F; hi.w = (v.w >> 4) & 0x0F0F0F0F;
            if (WT == WT_Q4_0) {
                d = __half2float(__ldg(reinterpret_cast<const __half*>(ws) + row * nb + c));
            } else {
                const __half2 dm = __ldg(reinterpret_cast<const __half2*>(ws) + row * nb + c);
                d = __low2float(dm);
                m = __high2float(dm);
            }
        }
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
                // activation block c of row r0 + r: 32 bytes of level-1 codes, 32 of level 2
                const int4* xr = reinterpret_cast<const int4*>(reinterpret_cast<const i8*>(x) + (size_t)(r0 + r) * 2 * K) + 4 * c;
                const int4 a = __ldg(xr), b = __ldg(xr + 1), a2 = __ldg(xr + 2), b2 = __ldg(xr + 3);
                int s = __dp4a(lo.x, a.x, 0);
                s = __dp4a(lo.y, a.y, s);
                s = __dp4a(lo.z, a.z, s);
                s = __dp4a(lo.w, a.w, s);
                s = __dp4a(hi.x, b.x, s);
                s = __dp4a(hi.y, b.y, s);
                s = __dp4a(hi.z, b.z, s);
                s = __dp4a(hi.w, b.w, s);
                int s2 = __dp4a(lo.x, a2.x, 0);
                s2 = __dp4a(lo.y, a2.y, s2);
                s2 = __dp4a(lo.z, a2.z, s2);
                s2 = __dp4a(lo.w, a2.w, s2);
                s2 = __dp4a(hi.x, b2.x, s2);
                s2 = __dp4a(hi.y, b2.y, s2);
                s2 = __dp4a(hi.z, b2.z, s2);
                s2 = __dp4a(hi.w, b2.w, s2);
                const float4 sc = __ldg(xs + (size_t)(r0 + r) * nb + c);  // {d1, d2, sum x, 0}
                const float dot = fmaf(sc.x, (float)s, sc.y * (float)s2);
                if (WT == WT_Q8_0) {
                    acc[r] += d * dot;
                } else if (WT == WT_Q4_0) {
                    acc[r] += d * fmaf(-8.f, sc.z, dot);
                } else {
                    acc[r] += fmaf(d, dot, m * sc.z);
                }
            }
        }
    }
}

template <int WT, int RB, int MODE>
__device__ __forceinline__ void gemv_body(const void* __restrict__ wq, const void* __restrict__ ws,
                                          const void* __restrict__ wq2, const void* __restrict__ ws2,
                                          const void* __restrict__ x, const float4* __restrict__ xs,
                                          float* __restrict__ out, int N, int K, int nrows, int ldo) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    const int r0 = blockIdx.y * RB;
    const int nr = min(RB, nrows - r0);
    float acc[RB], acc2[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        acc[r] = 0.f;
        acc2[r] = 0.f;
    }
    const int nchunks = (WT == WT_F16 || WT == WT_F32) ? K / 8 : K / 32;
#pragma unroll 8
    for (int c = lane; c < nchunks; c += 32) {
        gemv_chunk<WT, RB>(wq, ws, row, K, c, x, xs, r0, nr, acc);
        if (MODE == MODE_GLU) gemv_chunk<WT, RB>(wq2, ws2, row, K, c, x, xs, r0, nr, acc2);
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        acc[r] = warp_sum(acc[r]);
        if (MODE == MODE_GLU) acc2[r] = warp_sum(acc2[r]);
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (r < nr) {
                float* o = out + (size_t)(r0 + r) * ldo + row;
                if (MODE == MODE_STORE) {
                    *o = acc[r];
                } else if (MODE == MODE_ADD) {
                    *o += acc[r];
                } else {
                    const float g = acc[r];
                    *o = g / (1.f + expf(-g)) * acc2[r];
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

#define GEMV_ONE(TNAME, WT, RB, MNAME, MODE)                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                              \
        gemv_##TNAME##_r##RB##_##MNAME(GEMV_ARGS) {                                            \
        gemv_body<WT, RB, MODE>(GEMV_PASS);                                                    \
    }
#define GEMV_RBS(TNAME, WT, MNAME, MODE) \
    GEMV_ONE(TNAME, WT, 1, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 2, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 4, MNAME, MODE)  \
    GEMV_ONE(TNAME, WT, 8, MNAME, MODE)
#define GEMV_MODES(TNAME, WT)                \
    GEMV_RBS(TNAME, WT, store, MODE_STORE)   \
    GEMV_RBS(TNAME, WT, add, MODE_ADD)       \
    GEMV_RBS(TNAME, WT, glu, MODE_GLU)

GEMV_MODES(f32, WT_F32)
GEMV_MODES(f16, WT_F16)
GEMV_MODES(q8_0, WT_Q8_0)
GEMV_MODES(q4_0, WT_Q4_0)
GEMV_MODES(q4_1, WT_Q4_1)

// Activations to two-level int8 blocks of 32 for the dp4a path, one warp per block:
// x ~= d1 * q1 + d2 * q2 with q2 quantizing the residual of q1, so the dot products carry
// about 15 bits of each activation (one level alone costs ~0.5% relative error per mat-vec,
// enough to flip near-tied argmaxes against the float reference). Per block: 32 bytes q1,
// 32 bytes q2, and xs = {d1, d2, sum(x), 0}; the sum folds in the Q4_0 offset and Q4_1 min.
extern "C" __global__ void quantize_q8(const float* __restrict__ x, i8* __restrict__ xq,
                                       float4* __restrict__ xs, int nblocks) {
    const int b = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (b >= nblocks) return;
    quant_block(x[(size_t)b * 32 + (threadIdx.x & 31)], xq + (size_t)b * 64, xs + b);
}
