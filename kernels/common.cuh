// Shared helpers for every kernel file. The loader (engine/cuda/kernels.py) prepends this
// text to each .cu source before NVRTC compiles it, so no include path is needed.
#include <cuda_fp16.h>

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned int u32;

#define FULL_MASK 0xffffffffu
#ifndef INFINITY  // NVRTC has no math.h
#define INFINITY __int_as_float(0x7f800000)
#endif

// Weight storage types on the GPU (engine/cuda/layout.py writes the same numbers).
#define WT_F32 0
#define WT_F16 1
#define WT_Q8_0 2
#define WT_Q4_0 3
#define WT_Q4_1 4

// Programmatic dependent launch (sm_90): a kernel launched with the PDL attribute may start
// while its predecessor finishes; pdl_wait() blocks until the predecessor grid has completed
// and its writes are visible (a no-op for a plain launch), pdl_trigger() lets the successor
// grid start launching. Every decode kernel waits before touching what the previous kernel
// wrote, and triggers only after its wait, so a kernel that starts early runs beside its
// predecessor alone (the decode attention reads the step's constants before its wait).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// Loads of data the previous kernel wrote, after pdl_wait(). __ldg compiles to an invariant
// load, which the compiler may hoist above griddepcontrol.wait (the tensor-core mat-vec read
// stale activations under PDL that way); a volatile asm load keeps its place in program order.
__device__ __forceinline__ float4 ld_input4(const float* p) {
    float4 v;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ int4 ld_input4(const i8* p) {
    int4 v;
    asm volatile("ld.global.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ u32 ld_input_u32(const i8* p) {
    u32 v;
    asm volatile("ld.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Sum over a whole block (blockDim.x a multiple of 32, at most 1024). Every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < nw; ++i) t += red[i];  // same order in every thread: deterministic
    return t;
}

// Two floats as one register of float16 halves (lo in the low 16 bits).
__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<u32*>(&h);
}

// Tensor-core product c += A (16x16, row) * B (16x8, col), float16 in, float32 accumulate;
// fragments as in the PTX ISA's mma.m16n8k16 (lane = 4 * group + thread in group).
__device__ __forceinline__ void mma16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Integer tensor-core product c += A (16x32 int8, row) * B (32x8 int8, col), int32 accumulate;
// a0/a2: row g, k 4t.. and 16+4t..; a1/a3: row g + 8; b0/b1: column g, k 4t.. and 16+4t..
__device__ __forceinline__ void mma_s8_16832(int (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared without registers; src_bytes 0 fills zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
    const u32 addr = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes));
}
// 8 bytes global -> shared (through L1: the .cg form takes only 16).
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
    const u32 addr = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(addr), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all_but_newest() { cp_async_wait<1>(); }

// One element of a weight row in any storage type (used off the hot path: embedding
// lookup and dequantization for the prefill GEMMs). Quantized planes: see layout.py.
__device__ __forceinline__ float weight_at(int wt, const void* __restrict__ wq,
                                          const void* __restrict__ ws, size_t row, int K, int e) {
    switch (wt) {
        case WT_F32:
            return reinterpret_cast<const float*>(wq)[row * K + e];
        case WT_F16:
            return __half2float(reinterpret_cast<const __half*>(wq)[row * K + e]);
        case WT_Q8_0: {
            const float d = __half2float(reinterpret_cast<const __half*>(ws)[row * (K / 32) + e / 32]);
            return d * (float)reinterpret_cast<const i8*>(wq)[row * K + e];
        }
        case WT_Q4_0: {
            const int b = e >> 5, j = e & 31;
            const u8 byte = reinterpret_cast<const u8*>(wq)[row * (K / 2) + b * 16 + (j & 15)];
            const int q = j < 16 ? (byte & 15) : (byte >> 4);
            const float d = __half2float(reinterpret_cast<const __half*>(ws)[row * (K / 32) + b]);
            return d * (float)(q - 8);
        }
        default: {  // WT_Q4_1
            const int b = e >> 5, j = e & 31;
            const u8 byte = reinterpret_cast<const u8*>(wq)[row * (K / 2) + b * 16 + (j & 15)];
            const int q = j < 16 ? (byte & 15) : (byte >> 4);
            const __half* dm = reinterpret_cast<const __half*>(ws) + 2 * (row * (K / 32) + b);
            // unfused multiply-add: the same two roundings as the NumPy dequantizer
            return __fadd_rn(__fmul_rn(__half2float(dm[0]), (float)q), __half2float(dm[1]));
        }
    }
}

// The RoPE angles of position pos into cs[i], sn[i] (i < half_dim) by the block's threads
// (the caller synchronises before reading them): computed in float64 as the reference.
__device__ __forceinline__ void rope_angles(int pos, const double* __restrict__ inv_freq, int half_dim,
                                            float* cs, float* sn) {
    for (int i = threadIdx.x; i < half_dim; i += blockDim.x) {
        double s, c;
        sincos((double)pos * inv_freq[i], &s, &c);
        cs[i] = (float)c;
        sn[i] = (float)s;
    }
}

// One head's n values of a q|k|v row into dst (shared memory), by one warp, RMS-normalised
// with weight nw when given (Qwen3's q/k head norm); the warp may read dst afterwards.
__device__ __forceinline__ void load_head(const float* src, const float* __restrict__ nw, int n, float eps,
                                          float* dst) {
    const int lane = threadIdx.x & 31;
    float ss = 0.f;
    for (int e = lane; e < n; e += 32) {
        const float t = src[e];
        dst[e] = t;
        ss += t * t;
    }
    ss = warp_sum(ss);
    __syncwarp();
    if (nw) {
        const float rs = rsqrtf(ss / (float)n + eps);
        for (int e = lane; e < n; e += 32) dst[e] = dst[e] * rs * nw[e];
        __syncwarp();
    }
}

// Two-level int8 quantization of one block of 32 activations held one per lane (see
// quantize_q8.cu for the layout): q1 at xq[0..31], q2 at xq[32..63],
// *xs = {d1, d2, sum, ss} (ss: a sum of squares the caller passes on).
// Products and differences are rounded one by one (__fmul_rn, __fsub_rn: never fused into an
// fma), so quant_chunk below, which computes the same block in one lane, gets the same bits.
__device__ __forceinline__ void quant_block(float v, i8* __restrict__ xq, float4* __restrict__ xs,
                                            float ss = 0.f) {
    const int lane = threadIdx.x & 31;
    const float amax = warp_max(fabsf(v));
    const float d1 = amax / 127.f;
    const float id1 = amax > 0.f ? 127.f / amax : 0.f;
    const int q1 = __float2int_rn(__fmul_rn(v, id1));
    const float res = __fsub_rn(v, __fmul_rn(d1, (float)q1));
    const float rmax = warp_max(fabsf(res));
    const float d2 = rmax / 127.f;
    const float id2 = rmax > 0.f ? 127.f / rmax : 0.f;
    const int q2 = __float2int_rn(__fmul_rn(res, id2));
    const float sum = warp_sum(v);
    xq[lane] = (i8)q1;
    xq[32 + lane] = (i8)q2;
    if (lane == 0) *xs = make_float4(d1, d2, sum, ss);
}

// The sum of 32 values held by one lane in warp_sum's order (lane i of the butterfly adds
// v[i] and v[i ^ 16], then those sums 8 apart, 4, 2, 1): the same bits as warp_sum.
template <int W>
__device__ __forceinline__ void lane_fold(float (&v)[32]) {
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = __fadd_rn(v[i], v[i + W]);
}
__device__ __forceinline__ float lane_sum32(float (&v)[32]) {
    lane_fold<16>(v);
    lane_fold<8>(v);
    lane_fold<4>(v);
    lane_fold<2>(v);
    lane_fold<1>(v);
    return v[0];
}

// 32 int8 codes, elements 0..15 into lo and 16..31 into hi, in xq's byte order.
__device__ __forceinline__ void pack_codes(const int (&q)[32], int4& lo, int4& hi) {
    u32 w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
        w[i] = (u32)(q[4 * i] & 0xFF) | ((u32)(q[4 * i + 1] & 0xFF) << 8) |
               ((u32)(q[4 * i + 2] & 0xFF) << 16) | ((u32)(q[4 * i + 3] & 0xFF) << 24);
    lo = make_int4(w[0], w[1], w[2], w[3]);
    hi = make_int4(w[4], w[5], w[6], w[7]);
}

// quantize_q8's block of 32 activations at xr (times the norm weight g when g is not null,
// with ss the sum of squares of the raw xr), computed by one lane: the codes as a mat-vec
// reads them from xq (q1 of elements 0..15 in a, 16..31 in b; q2 in a2, b2) and the returned
// {d1, d2, sum, ss}, bit for bit quant_block's (same roundings, warp_sum's order of adds,
// maxima in any order). xr is an input the previous kernel wrote: read after pdl_wait().
__device__ __forceinline__ float4 quant_chunk(const float* __restrict__ xr, const float* __restrict__ g,
                                              int4& a, int4& b, int4& a2, int4& b2) {
    float v[32], t[32];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 f = ld_input4(xr + 4 * i);
        v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
    }
    float ss = 0.f;
    if (g) {
#pragma unroll
        for (int i = 0; i < 32; ++i) t[i] = __fmul_rn(v[i], v[i]);
        ss = lane_sum32(t);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 w = __ldg(reinterpret_cast<const float4*>(g) + i);
            v[4 * i] = __fmul_rn(v[4 * i], w.x);
            v[4 * i + 1] = __fmul_rn(v[4 * i + 1], w.y);
            v[4 * i + 2] = __fmul_rn(v[4 * i + 2], w.z);
            v[4 * i + 3] = __fmul_rn(v[4 * i + 3], w.w);
        }
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float d1 = amax / 127.f;
    const float id1 = amax > 0.f ? 127.f / amax : 0.f;
    int q[32];
    float rmax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        q[i] = __float2int_rn(__fmul_rn(v[i], id1));
        t[i] = __fsub_rn(v[i], __fmul_rn(d1, (float)q[i]));  // the residual
        rmax = fmaxf(rmax, fabsf(t[i]));
    }
    pack_codes(q, a, b);
    const float d2 = rmax / 127.f;
    const float id2 = rmax > 0.f ? 127.f / rmax : 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) q[i] = __float2int_rn(__fmul_rn(t[i], id2));
    pack_codes(q, a2, b2);
    const float sum = lane_sum32(v);
    return make_float4(d1, d2, sum, ss);
}

// ---------------------------------------------------------------------------------------
// The mat-vec kernels' shared interface (gemv_simt.cu, gemv_mma.cu).
// MODE_STORE: out = acc. MODE_ADD: out += acc (residual add fused). MODE_GLU: two weight
// matrices (gate, up) against the same x; out = silu(gate) * up (SwiGLU fused).

#define MODE_STORE 0
#define MODE_ADD 1
#define MODE_GLU 2

#define GEMV_ARGS                                                                              \
    const void *__restrict__ wq, const void *__restrict__ ws, const void *__restrict__ wq2,    \
        const void *__restrict__ ws2, const void *__restrict__ x, const float4 *__restrict__ xs, \
        float *__restrict__ out, int N, int K, int nrows, int ldo
