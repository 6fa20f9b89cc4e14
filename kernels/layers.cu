// Element-wise and per-row layer kernels shared by decode and prefill: RMSNorm, embedding
// lookup, RoPE with the KV-cache write, argmax, dequantization for the prefill GEMMs, SwiGLU.

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w. Grid (slices, rows): every block sums the
// squares of its whole row (in the same order, so every block gets the same scale) and writes
// elements [slice * per, slice * per + per) of it. Decode uses slices of 256 so the int8
// quantization (one warp per block of 32) spreads over many SMs; a float row, one slice (prefill
// has its own rmsnorm_f16, below). Writes any of: float32 (y), float16 (y16, the prefill GEMM input),
// two-level int8 blocks (xq/xs, the input of the quantized mat-vec). dim and per are multiples
// of 32.
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ w,
                                   float* __restrict__ y, __half* __restrict__ y16,
                                   i8* __restrict__ xq, float4* __restrict__ xs, int dim, int per,
                                   float eps) {
    const size_t base = (size_t)blockIdx.y * dim;
    pdl_wait();
    pdl_trigger();
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = x[base + i];
        ss += v * v;
    }
    ss = block_sum(ss);
    const float rs = rsqrtf(ss / (float)dim + eps);
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int b_end = min(dim, (int)(blockIdx.x + 1) * per) / 32;
    for (int b = blockIdx.x * per / 32 + (threadIdx.x >> 5); b < b_end; b += nw) {
        const int i = b * 32 + lane;
        const float v = x[base + i] * rs * w[i];
        if (y) y[base + i] = v;
        if (y16) y16[base + i] = __float2half_rn(v);
        if (xq) quant_block(v, xq + (base / 32 + b) * 64, xs + base / 32 + b);
    }
}

// Prefill's RMSNorm into the float16 GEMM input: one block per row (thousands of rows, so
// each block is small: many rows in flight), 16-byte loads, the row read twice (the second
// time from L1). Each element is x * (1 / rms) * w, as rmsnorm computes it. dim % 4 == 0.
extern "C" __global__ void rmsnorm_f16(const float* __restrict__ x, const float* __restrict__ w,
                                       __half* __restrict__ y16, int dim, float eps) {
    const size_t base = (size_t)blockIdx.x * dim;
    const float4* x4 = reinterpret_cast<const float4*>(x + base);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    uint2* y4 = reinterpret_cast<uint2*>(y16 + base);
    const int n4 = dim / 4;
    float ss = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = x4[i];
        ss = fmaf(v.x, v.x, ss);
        ss = fmaf(v.y, v.y, ss);
        ss = fmaf(v.z, v.z, ss);
        ss = fmaf(v.w, v.w, ss);
    }
    ss = block_sum(ss);
    const float rs = rsqrtf(ss / (float)dim + eps);
#pragma unroll 4
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = x4[i], g = w4[i];
        y4[i] = make_uint2(pack_h2(v.x * rs * g.x, v.y * rs * g.y), pack_h2(v.z * rs * g.z, v.w * rs * g.w));
    }
}

// out[r] = token_embd[tokens[r]] in float32, for any weight storage type.
extern "C" __global__ void embed(const int* __restrict__ tokens, int wt, const void* __restrict__ wq,
                                 const void* __restrict__ ws, float* __restrict__ out, int dim) {
    pdl_wait();
    pdl_trigger();
    const int t = tokens[blockIdx.x];
    for (int e = threadIdx.x; e < dim; e += blockDim.x)
        out[(size_t)blockIdx.x * dim + e] = weight_at(wt, wq, ws, (size_t)t, dim, e);
}

// Rows [row0, row0 + nrows) of a weight to float16, 8 elements per thread.
extern "C" __global__ void dequant_f16(int wt, const void* __restrict__ wq, const void* __restrict__ ws,
                                       __half* __restrict__ out, int row0, int nrows, int K) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_row = K / 8;
    if (i >= (size_t)nrows * per_row) return;
    const size_t r = i / per_row;
    const int e0 = (int)(i % per_row) * 8;
    __align__(16) __half h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(weight_at(wt, wq, ws, row0 + r, K, e0 + j));
    *reinterpret_cast<uint4*>(out + r * K + e0) = *reinterpret_cast<const uint4*>(h);
}

// out16 = silu(g) * u, the prefill SwiGLU (decode fuses it into the gate/up mat-vec).
// gu rows hold [gate | up], ffn values each. Grid (ceil(ffn / (4 * blockDim.x)), rows): a
// thread takes 4 consecutive columns of one row (16-byte loads when ffn % 4 == 0), so no
// thread divides by ffn.
extern "C" __global__ void swiglu_f16(const float* __restrict__ gu, int ffn, __half* __restrict__ out) {
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (c0 >= ffn) return;
    const size_t row = blockIdx.y;
    const float* g = gu + row * 2 * ffn + c0;
    const float* u = g + ffn;
    __half* o = out + row * ffn + c0;
    if (ffn % 4 == 0) {
        const float4 a = *reinterpret_cast<const float4*>(g), b = *reinterpret_cast<const float4*>(u);
        const __half2 lo = __floats2half2_rn(a.x / (1.f + expf(-a.x)) * b.x, a.y / (1.f + expf(-a.y)) * b.y);
        const __half2 hi = __floats2half2_rn(a.z / (1.f + expf(-a.z)) * b.z, a.w / (1.f + expf(-a.w)) * b.w);
        reinterpret_cast<__half2*>(o)[0] = lo;
        reinterpret_cast<__half2*>(o)[1] = hi;
        return;
    }
    for (int j = 0; j < 4 && c0 + j < ffn; ++j) o[j] = __float2half_rn(g[j] / (1.f + expf(-g[j])) * u[j]);
}

// Optional per-head RMSNorm (Qwen3 q/k norm), then RoPE on q and k, and the KV-cache write
// of k and v in float16. Grid (rows), ROPE_WARPS warps: the row's angles are computed once
// (float64, as the reference), then each warp takes heads warp, warp + ROPE_WARPS, ... of
// the n_heads + n_kv. Input: the fused q|k|v projection rows (row stride ld); q is written
// rotated to q_out [rows][n_heads][hd] (hd <= 256).
// Row r's sequence and position: decode reads them from device memory (seq_ids[r],
// lens[seq]) so a captured graph replays for any position; prefill passes pos_base >= 0
// and seq_fixed, and row r sits at pos_base + r.
// Cache layout per layer: [seq][kv_head][max_len][head_dim].
#define ROPE_WARPS 8
extern "C" __global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_kv(const float* __restrict__ qkv, int ld, float* __restrict__ q_out, __half* __restrict__ kc,
            __half* __restrict__ vc, const float* __restrict__ qn_w, const float* __restrict__ kn_w,
            const int* __restrict__ seq_ids, const int* __restrict__ lens, int seq_fixed, int pos_base,
            int n_heads, int n_kv, int hd, int max_len, const double* __restrict__ inv_freq, int neox,
            float eps) {
    __shared__ float buf[ROPE_WARPS][256];
    __shared__ float cs[128], sn[128];
    const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    pdl_wait();
    pdl_trigger();
    int seq, pos;
    if (pos_base >= 0) {
        seq = seq_fixed;
        pos = pos_base + r;
    } else {
        seq = seq_ids[r];
        pos = lens[seq];
    }
    const int half_dim = hd / 2;
    rope_angles(pos, inv_freq, half_dim, cs, sn);
    __syncthreads();
    const float* row = qkv + (size_t)r * ld;
    for (int h = warp; h < n_heads + n_kv; h += ROPE_WARPS) {  // warp-uniform
        const bool isq = h < n_heads;
        const int kvh = h - n_heads;
        const float* src = isq ? row + (size_t)h * hd : row + (size_t)(n_heads + kvh) * hd;
        load_head(src, isq ? qn_w : kn_w, hd, eps, buf[warp]);
        const size_t cache_row = (((size_t)seq * n_kv + (isq ? 0 : kvh)) * max_len + pos) * hd;
        for (int i = lane; i < half_dim; i += 32) {
            const int a = neox ? i : 2 * i;
            const int b = neox ? i + half_dim : 2 * i + 1;
            const float c = cs[i], s = sn[i];
            const float x0 = buf[warp][a], x1 = buf[warp][b];
            const float y0 = x0 * c - x1 * s;
            const float y1 = x0 * s + x1 * c;
            if (isq) {
                float* dst = q_out + ((size_t)r * n_heads + h) * hd;
                dst[a] = y0;
                dst[b] = y1;
            } else {
                kc[cache_row + a] = __float2half_rn(y0);
                kc[cache_row + b] = __float2half_rn(y1);
            }
        }
        if (!isq) {
            const float* vs = row + (size_t)(n_heads + n_kv + kvh) * hd;
            for (int e = lane; e < hd; e += 32) vc[cache_row + e] = __float2half_rn(vs[e]);
        }
        __syncwarp();  // the warp's buf is read before its next head overwrites it
    }
}

// (best, idx) of a whole block into thread 0: the larger value wins, the lower index on ties
// (numpy's first hit); NaN never wins. blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ void block_argmax(float& best, int& idx) {
    __shared__ float bv[32];
    __shared__ int bi[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL_MASK, best, o);
        const int oi = __shfl_xor_sync(FULL_MASK, idx, o);
        if (ov > best || (ov == best && oi < idx)) {
            best = ov;
            idx = oi;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // bv/bi may still be read by an earlier call
    if (lane == 0) {
        bv[warp] = best;
        bi[warp] = idx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {
            if (bv[w] > best || (bv[w] == best && bi[w] < idx)) {
                best = bv[w];
                idx = bi[w];
            }
        }
    }
}

// Greedy pick on the device: tokens[r] = argmax(logits[r]) (first index on ties, like
// numpy), hist[r * hist_stride + pos] = that token, and (advance != 0) lens[seq] += 1.
// This is the last kernel of the decode graph, so the next replay sees the new position.
// Grid (nb, rows): a row's logits are scanned by nb blocks at once (one block alone spent
// tens of microseconds on a 128k vocabulary); each writes its pick to part_v/part_i
// [rows][nb], and the last block of a row to finish (count[r], zero between launches: that
// block resets it) picks among them in index order. nb <= blockDim.x.
extern "C" __global__ void argmax_advance(const float* __restrict__ logits, int vocab,
                                          int* __restrict__ tokens, const int* __restrict__ seq_ids,
                                          int* __restrict__ lens, int* __restrict__ hist,
                                          int hist_stride, int advance, float* __restrict__ part_v,
                                          int* __restrict__ part_i, unsigned* __restrict__ count) {
    __shared__ bool last;
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.y, nb = gridDim.x;
    const int per = (vocab + nb - 1) / nb;
    const int lo = blockIdx.x * per, hi = min(vocab, lo + per);
    const float* row = logits + (size_t)r * vocab;
    float best = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float t = row[i];
        if (t > best) {  // strided scan: the first hit per thread is its lowest index
            best = t;
            idx = i;
        }
    }
    block_argmax(best, idx);
    if (threadIdx.x == 0) {
        part_v[r * nb + blockIdx.x] = best;
        part_i[r * nb + blockIdx.x] = idx;
        __threadfence();  // the pick is visible before the count says so
        last = atomicAdd(&count[r], 1u) == (unsigned)nb - 1;
    }
    __syncthreads();
    if (!last) return;
    best = -INFINITY;
    idx = 0x7fffffff;
    if (threadIdx.x < nb) {
        best = __ldcg(part_v + r * nb + threadIdx.x);  // from L2: other blocks wrote them
        idx = __ldcg(part_i + r * nb + threadIdx.x);
    }
    block_argmax(best, idx);
    if (threadIdx.x == 0) {
        count[r] = 0;
        if (idx == 0x7fffffff) idx = 0;  // all NaN: keep the loop going, the caller sees logits
        tokens[r] = idx;
        const int seq = seq_ids[r];
        const int pos = lens[seq];
        hist[(size_t)r * hist_stride + pos] = idx;
        if (advance) lens[seq] = pos + 1;
    }
}

// lens[seq_ids[r]] += 1 for every row (a decode step without the argmax).
extern "C" __global__ void advance_lens(const int* __restrict__ seq_ids, int* __restrict__ lens,
                                        int nrows) {
    const int r = threadIdx.x;
    if (r < nrows) lens[seq_ids[r]] += 1;
}
