// Attention over the float16 KV cache (layout per layer: [seq][kv_head][max_len][head_dim]).
//
// Decode (flash-decoding): attn_split_<HD> cuts each sequence's KV length into up to nsplit
// chunks of at least min_chunk positions (multiples of 32); one block per (split, kv head,
// row) streams its chunk of K and V through shared memory once for all the query heads of
// that kv head (grouped-query attention) and writes an unnormalised partial output with its
// running max and sum; attn_combine merges the partials. The split kernel also does the
// decode step's RoPE (rope_kv's work, without its launch): each block rotates its query heads
// from the q|k|v projection row, and the block holding the current position rotates its k and
// writes k and v into the cache before it loads that tile. The lengths are read from device
// memory and the split geometry depends only on a sequence's own length, so the grid is
// fixed for a CUDA graph and a row's result does not depend on the other rows.
//
// Prefill: attn_prefill_<HD> is a causal flash-attention kernel on tensor cores
// (mma.sync m16n8k16, f16 in, f32 accumulate): a block owns 64 queries of one head, walks
// 64-key tiles of the cache up to the diagonal with an online softmax held in registers, and
// never materialises the score matrix; K and V tiles stream in by cp.async, one tile ahead.

#define ATT_WARPS 4
#define GMAX 8
#define ATT_TILE 32  // positions per K/V tile of a decode split

// Positions per split of a sequence of n: n / nsplit rounded up to whole tiles, at least
// min_chunk (a multiple of ATT_TILE). The split kernel and the combine both derive it.
__device__ __forceinline__ int split_chunk(int n, int nsplit, int min_chunk) {
    const int chunk = (n + nsplit - 1) / nsplit;
    return max(min_chunk, (chunk + ATT_TILE - 1) / ATT_TILE * ATT_TILE);
}

// Rows t0 .. t0 + ATT_TILE - 1 of one head's K and V into padded shared tiles by cp.async;
// rows from `end` on are filled with zeros and read nothing (the cache past a sequence's
// length may hold anything, and a zero V row times a zero weight adds nothing).
template <int HD, int LDS>
__device__ __forceinline__ void load_kv_tile(__half (*ks)[LDS], __half (*vs)[LDS], const __half* __restrict__ K,
                                             const __half* __restrict__ V, int t0, int end) {
    constexpr int PIECES = ATT_TILE * (HD / 8);  // 16-byte pieces per tile
    for (int i = threadIdx.x; i < PIECES; i += blockDim.x) {
        const int rr = i / (HD / 8), cc = (i % (HD / 8)) * 8;
        const bool in = t0 + rr < end;
        const size_t off = (size_t)(in ? t0 + rr : 0) * HD + cc;
        cp_async16(&ks[rr][cc], K + off, in ? 16 : 0);
        cp_async16(&vs[rr][cc], V + off, in ? 16 : 0);
    }
}

// One head's HD values of a q|k|v row into dst (shared memory), by one warp: optionally
// RMS-normalised with weight nw (Qwen3's q/k norm), rotated by the position's angles (cs, sn:
// HD / 2 each; pairs 2i, 2i + 1, or i, i + HD / 2 for NEOX), times `scale`. Computed as
// rope_kv computes it.
template <int HD>
__device__ __forceinline__ void rope_head(const float* src, const float* __restrict__ nw, const float* cs,
                                          const float* sn, int neox, float eps, float scale, float* dst) {
    const int lane = threadIdx.x & 31;
    load_head(src, nw, HD, eps, dst);
    for (int i = lane; i < HD / 2; i += 32) {  // each pair read and written by one lane
        const int a = neox ? i : 2 * i, b = neox ? i + HD / 2 : 2 * i + 1;
        const float x0 = dst[a], x1 = dst[b];
        dst[a] = (x0 * cs[i] - x1 * sn[i]) * scale;
        dst[b] = (x0 * sn[i] + x1 * cs[i]) * scale;
    }
    __syncwarp();
}

// One block per (split, kv head, row). The block's chunk of the cache streams through shared
// memory in tiles of ATT_TILE positions, double-buffered by cp.async, so the loads of a tile
// overlap the arithmetic on the one before and every warp reads each K and V row from shared
// memory, not from a chain of global round trips. Warp w owns query heads w, w + 4 (of the G
// that share this kv head): lane p scores position p of a tile, then every lane accumulates
// its HD / 32 output dims over the tile's 32 positions. Warps never merge with each other.
// The current token sits at position lens[seq] (advanced after the step); its q, k and v come
// from the q|k|v row r (stride ld) and are rotated here (qn_w / kn_w: Qwen3's head norms).
template <int HD>
__device__ __forceinline__ void attn_split_body(const float* __restrict__ qkv, int ld,
                                                const float* __restrict__ qn_w,
                                                const float* __restrict__ kn_w,
                                                const double* __restrict__ inv_freq, int neox, float eps,
                                                __half* __restrict__ kc, __half* __restrict__ vc,
                                                const int* __restrict__ seq_ids,
                                                const int* __restrict__ lens, float* __restrict__ part_o,
                                                float* __restrict__ part_ml, int n_heads, int n_kv,
                                                int max_len, int nsplit, int min_chunk, float scale) {
    constexpr int DPL = HD >= 32 ? HD / 32 : 1;  // output dims owned by each lane
    constexpr int HPW = GMAX / ATT_WARPS;         // query heads per warp, at most
    constexpr int LDS = HD + 8;                   // padded row (halves): no bank conflicts
    __shared__ __align__(16) __half Ks[2][ATT_TILE][LDS];
    __shared__ __align__(16) __half Vs[2][ATT_TILE][LDS];
    __shared__ __align__(16) float qs[GMAX][HD];
    __shared__ float cs[HD / 2], sn[HD / 2], kbuf[HD];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int split = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z;
    const int G = n_heads / n_kv;
    const bool vlane = lane * DPL < HD;  // HD 16: lanes 16..31 own no output dims
    pdl_wait();
    pdl_trigger();
    const int seq = seq_ids[r];
    const int pos = lens[seq];  // the current token's position
    const int n = pos + 1;      // positions attended: the cache so far and the current token
    const int chunk = split_chunk(n, nsplit, min_chunk);
    const int start = split * chunk;
    if (start >= n) return;  // the whole block: start is uniform
    const int end = min(n, start + chunk);
    const int ntiles = (end - start + ATT_TILE - 1) / ATT_TILE;

    const size_t head_base = ((size_t)seq * n_kv + kvh) * (size_t)max_len * HD;
    __half* K = kc + head_base;
    __half* V = vc + head_base;
    const float* row = qkv + (size_t)r * ld;
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x) {
        double s, c;
        sincos((double)pos * inv_freq[i], &s, &c);  // the angle in float64, as the reference
        cs[i] = (float)c;
        sn[i] = (float)s;
    }
    __syncthreads();
    if (end == n) {  // this block holds the current position: k and v into the cache first
        if (warp == 0) {
            rope_head<HD>(row + (size_t)(n_heads + kvh) * HD, kn_w, cs, sn, neox, eps, 1.f, kbuf);
            for (int e = lane; e < HD; e += 32) K[(size_t)pos * HD + e] = __float2half_rn(kbuf[e]);
        } else if (warp == 1) {
            const float* v = row + (size_t)(n_heads + n_kv + kvh) * HD;
            for (int e = lane; e < HD; e += 32) V[(size_t)pos * HD + e] = __float2half_rn(v[e]);
        }
        __threadfence();  // the writes reach L2, where the tile's cp.async reads them
        __syncthreads();
    }
    load_kv_tile<HD, LDS>(Ks[0], Vs[0], K, V, start, end);
    cp_async_commit();
    if (ntiles > 1) load_kv_tile<HD, LDS>(Ks[1], Vs[1], K, V, start + ATT_TILE, end);
    cp_async_commit();
    for (int g = warp; g < G; g += ATT_WARPS)  // while the first tiles load
        rope_head<HD>(row + (size_t)(kvh * G + g) * HD, qn_w, cs, sn, neox, eps, scale, qs[g]);

    float m[HPW], l[HPW], o[HPW][DPL];
#pragma unroll
    for (int i = 0; i < HPW; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[i][d] = 0.f;
    }
    const int voff = vlane ? lane * DPL : 0;

    for (int t = 0; t < ntiles; ++t) {
        const int st = t & 1, t0 = start + t * ATT_TILE;
        cp_async_wait_all_but_newest();  // tile t has landed (for this thread's copies)
        __syncthreads();                 // ... and for everyone's; qs is written
        const bool valid = t0 + lane < end;
#pragma unroll
        for (int i = 0; i < HPW; ++i) {
            const int g = warp + i * ATT_WARPS;
            if (g >= G) break;  // warp-uniform
            float s = 0.f;
#pragma unroll
            for (int c = 0; c < HD / 8; ++c) {
                const uint4 kr = *reinterpret_cast<const uint4*>(&Ks[st][lane][c * 8]);
                const __half2* kh = reinterpret_cast<const __half2*>(&kr);
                const float4 qa = *reinterpret_cast<const float4*>(&qs[g][c * 8]);
                const float4 qb = *reinterpret_cast<const float4*>(&qs[g][c * 8 + 4]);
                const float2 k0 = __half22float2(kh[0]), k1 = __half22float2(kh[1]);
                const float2 k2 = __half22float2(kh[2]), k3 = __half22float2(kh[3]);
                s = fmaf(qa.x, k0.x, s);
                s = fmaf(qa.y, k0.y, s);
                s = fmaf(qa.z, k1.x, s);
                s = fmaf(qa.w, k1.y, s);
                s = fmaf(qb.x, k2.x, s);
                s = fmaf(qb.y, k2.y, s);
                s = fmaf(qb.z, k3.x, s);
                s = fmaf(qb.w, k3.y, s);
            }
            const float sg = valid ? s : -INFINITY;
            const float mnew = fmaxf(m[i], warp_max(sg));  // finite: lane 0 is valid
            const float p = valid ? __expf(sg - mnew) : 0.f;
            const float alpha = __expf(m[i] - mnew);
            l[i] = l[i] * alpha + warp_sum(p);
            m[i] = mnew;
            float acc[DPL];
#pragma unroll
            for (int d = 0; d < DPL; ++d) acc[d] = o[i][d] * alpha;
#pragma unroll
            for (int j = 0; j < ATT_TILE; ++j) {
                const float pj = __shfl_sync(FULL_MASK, p, j);
                const __half* vrow = &Vs[st][j][voff];
                if (DPL == 4) {
                    const uint2 raw = *reinterpret_cast<const uint2*>(vrow);
                    const __half2* vh = reinterpret_cast<const __half2*>(&raw);
                    const float2 f0 = __half22float2(vh[0]), f1 = __half22float2(vh[1]);
                    acc[0] = fmaf(pj, f0.x, acc[0]);
                    acc[DPL > 1 ? 1 : 0] = fmaf(pj, f0.y, acc[DPL > 1 ? 1 : 0]);
                    acc[DPL > 2 ? 2 : 0] = fmaf(pj, f1.x, acc[DPL > 2 ? 2 : 0]);
                    acc[DPL > 3 ? 3 : 0] = fmaf(pj, f1.y, acc[DPL > 3 ? 3 : 0]);
                } else if (DPL == 2) {
                    const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(vrow));
                    acc[0] = fmaf(pj, f0.x, acc[0]);
                    acc[DPL > 1 ? 1 : 0] = fmaf(pj, f0.y, acc[DPL > 1 ? 1 : 0]);
                } else {
                    acc[0] = fmaf(pj, __half2float(*vrow), acc[0]);
                }
            }
#pragma unroll
            for (int d = 0; d < DPL; ++d) o[i][d] = acc[d];
        }
        __syncthreads();  // every warp is done with stage st: tile t + 2 may land there
        if (t + 2 < ntiles) load_kv_tile<HD, LDS>(Ks[st], Vs[st], K, V, t0 + 2 * ATT_TILE, end);
        cp_async_commit();
    }

#pragma unroll
    for (int i = 0; i < HPW; ++i) {
        const int g = warp + i * ATT_WARPS;
        if (g >= G) break;
        const size_t slot = ((size_t)r * n_heads + kvh * G + g) * nsplit + split;
        if (vlane) {
#pragma unroll
            for (int d = 0; d < DPL; ++d) part_o[slot * HD + lane * DPL + d] = o[i][d];
        }
        if (lane == 0) {
            part_ml[slot * 2] = m[i];
            part_ml[slot * 2 + 1] = l[i];
        }
    }
}

#define ATTN_SPLIT_ARGS                                                                           \
    const float *__restrict__ qkv, int ld, const float *__restrict__ qn_w,                         \
        const float *__restrict__ kn_w, const double *__restrict__ inv_freq, int neox, float eps,  \
        __half *__restrict__ kc, __half *__restrict__ vc, const int *__restrict__ seq_ids,          \
        const int *__restrict__ lens, float *__restrict__ part_o, float *__restrict__ part_ml,     \
        int n_heads, int n_kv, int max_len, int nsplit, int min_chunk, float scale
#define ATTN_SPLIT_PASS                                                                           \
    qkv, ld, qn_w, kn_w, inv_freq, neox, eps, kc, vc, seq_ids, lens, part_o, part_ml, n_heads,     \
        n_kv, max_len, nsplit, min_chunk, scale

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attn_split_16(ATTN_SPLIT_ARGS) {
    attn_split_body<16>(ATTN_SPLIT_PASS);
}
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attn_split_32(ATTN_SPLIT_ARGS) {
    attn_split_body<32>(ATTN_SPLIT_PASS);
}
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attn_split_64(ATTN_SPLIT_ARGS) {
    attn_split_body<64>(ATTN_SPLIT_PASS);
}
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attn_split_128(ATTN_SPLIT_ARGS) {
    attn_split_body<128>(ATTN_SPLIT_PASS);
}

// Merge the splits of one (head, row): grid (n_heads, rows), hd threads. Also writes the
// two-level int8 blocks of the output (xq/xs non-null) for a quantized output projection:
// with hd >= 32 each warp holds exactly one block of 32. The splits' maxima and sums are
// loaded in parallel into shared memory first, and the partial outputs eight at a time, so
// the merge is a few memory round trips, not one per split. nsplit <= ATT_MAX_SPLITS.
#define ATT_MAX_SPLITS 64
extern "C" __global__ void attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                        const int* __restrict__ seq_ids, const int* __restrict__ lens,
                                        float* __restrict__ out, i8* __restrict__ xq,
                                        float4* __restrict__ xs, int n_heads, int hd, int nsplit,
                                        int min_chunk) {
    __shared__ float sm[ATT_MAX_SPLITS], sl[ATT_MAX_SPLITS];
    const int h = blockIdx.x, r = blockIdx.y, e = threadIdx.x;
    pdl_wait();
    pdl_trigger();
    const int n = lens[seq_ids[r]] + 1;
    const int chunk = split_chunk(n, nsplit, min_chunk);
    const int used = (n + chunk - 1) / chunk;
    const size_t slot0 = ((size_t)r * n_heads + h) * nsplit;
    for (int s = e; s < used; s += blockDim.x) {
        const float2 ml = reinterpret_cast<const float2*>(part_ml)[slot0 + s];
        sm[s] = ml.x;
        sl[s] = ml.y;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int s = 0; s < used; ++s) M = fmaxf(M, sm[s]);
    float acc = 0.f, L = 0.f;
    for (int s0 = 0; s0 < used; s0 += 8) {
        float po[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) po[j] = s0 + j < used ? part_o[(slot0 + s0 + j) * hd + e] : 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (s0 + j < used) {
                const float f = __expf(sm[s0 + j] - M);
                L += sl[s0 + j] * f;
                acc += po[j] * f;
            }
        }
    }
    const float v = acc / L;
    const size_t i = ((size_t)r * n_heads + h) * hd + e;
    out[i] = v;
    if (xq && hd >= 32) quant_block(v, xq + (i / 32) * 64, xs + i / 32);
}

// ---------------------------------------------------------------------------------------
// Prefill: causal flash attention on tensor cores.

#define PF_BQ 64
#define PF_BK 64

__device__ __forceinline__ void ldmatrix_x4_trans(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Rows k0 .. k0 + PF_BK - 1 of one head's cache into a padded tile; rows from nkeys on are
// zeros (never read: the cache past the prompt may hold anything).
template <int HD, int LDS>
__device__ __forceinline__ void load_tile(__half (*tile)[LDS], const __half* __restrict__ head, int k0,
                                          int nkeys) {
    for (int i = threadIdx.x; i < PF_BK * (HD / 8); i += blockDim.x) {
        const int rr = i / (HD / 8), cc = (i % (HD / 8)) * 8;
        const bool in = k0 + rr < nkeys;
        cp_async16(&tile[rr][cc], head + (size_t)(in ? k0 + rr : 0) * HD + cc, in ? 16 : 0);
    }
}

// q: float32 [T][n_heads][HD] after RoPE; out: float16 [T][n_heads * HD]. The T queries sit
// at positions p0 .. p0+T-1 of sequence `seq`, whose keys 0 .. p0+T-1 are in the cache.
template <int HD>
__device__ __forceinline__ void attn_prefill_body(const float* __restrict__ q, const __half* __restrict__ kc,
                                                  const __half* __restrict__ vc, __half* __restrict__ out,
                                                  int seq, int p0, int T, int n_heads, int n_kv,
                                                  int max_len, float scale_log2) {
    constexpr int LDS = HD + 8;  // padded smem row (halves): 16-byte aligned, no bank conflicts
    constexpr int KSTEPS = HD / 16;
    constexpr int NT_O = HD / 8;
    __shared__ __align__(16) __half Ks[PF_BK][LDS];
    __shared__ __align__(16) __half Vs[PF_BK][LDS];

    const int qtile = gridDim.x - 1 - blockIdx.x;  // heaviest (latest) tiles first
    const int h = blockIdx.y;
    const int kvh = h / (n_heads / n_kv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int qi0 = qtile * PF_BQ + warp * 16 + g;  // this thread's rows: qi0 and qi0 + 8
    const int qi1 = qi0 + 8;

    // Q fragments for the whole head dim, scaled by softmax scale * log2(e).
    u32 qa[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        const int c0 = kk * 16 + 2 * t;
        float2 v00 = make_float2(0.f, 0.f), v01 = v00, v10 = v00, v11 = v00;
        if (qi0 < T) {
            const float* row = q + ((size_t)qi0 * n_heads + h) * HD;
            v00 = *reinterpret_cast<const float2*>(row + c0);
            v01 = *reinterpret_cast<const float2*>(row + c0 + 8);
        }
        if (qi1 < T) {
            const float* row = q + ((size_t)qi1 * n_heads + h) * HD;
            v10 = *reinterpret_cast<const float2*>(row + c0);
            v11 = *reinterpret_cast<const float2*>(row + c0 + 8);
        }
        qa[kk][0] = pack_h2(v00.x * scale_log2, v00.y * scale_log2);
        qa[kk][1] = pack_h2(v10.x * scale_log2, v10.y * scale_log2);
        qa[kk][2] = pack_h2(v01.x * scale_log2, v01.y * scale_log2);
        qa[kk][3] = pack_h2(v11.x * scale_log2, v11.y * scale_log2);
    }

    float o[NT_O][4];
#pragma unroll
    for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int qp0 = p0 + qi0, qp1 = p0 + qi1;

    const int nkeys = p0 + T;
    const int last_q = min(T, (qtile + 1) * PF_BQ) - 1;
    const int ntiles = (p0 + last_q) / PF_BK + 1;
    const size_t head_base = ((size_t)seq * n_kv + kvh) * (size_t)max_len * HD;

    // K and V tiles arrive by cp.async, each one tile ahead: the next K tile loads while this
    // tile's softmax and P V run, the next V tile while the next Q K^T runs. Commit groups go
    // K0, V0, K1, V1, ...; waiting for "all but the newest" then always means the tile needed.
    load_tile<HD, LDS>(Ks, kc + head_base, 0, nkeys);
    cp_async_commit();
    load_tile<HD, LDS>(Vs, vc + head_base, 0, nkeys);
    cp_async_commit();
    for (int kt = 0; kt < ntiles; ++kt) {
        const int k0 = kt * PF_BK;
        cp_async_wait_all_but_newest();  // K tile kt
        __syncthreads();

        // S = Q K^T: 8 n-tiles of 8 keys.
        float s[PF_BK / 8][4];
#pragma unroll
        for (int j = 0; j < PF_BK / 8; ++j) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                const u32 b0 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 2 * t]);
                const u32 b1 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 8 + 2 * t]);
                mma16816(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);
            }
        }
        __syncthreads();  // every warp is done with Ks: the next K tile may land there
        if (kt + 1 < ntiles) load_tile<HD, LDS>(Ks, kc + head_base, k0 + PF_BK, nkeys);
        cp_async_commit();
        // Causal mask and the row maxima (rows g and g+8; 4 threads share a row).
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < PF_BK / 8; ++j) {
            const int kp = k0 + j * 8 + 2 * t;
            if (kp > qp0) s[j][0] = -INFINITY;
            if (kp + 1 > qp0) s[j][1] = -INFINITY;
            if (kp > qp1) s[j][2] = -INFINITY;
            if (kp + 1 > qp1) s[j][3] = -INFINITY;
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);  // finite: key 0 is in tile 0
        const float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
        for (int j = 0; j < PF_BK / 8; ++j) {
            s[j][0] = exp2f(s[j][0] - mn0);
            s[j][1] = exp2f(s[j][1] - mn0);
            s[j][2] = exp2f(s[j][2] - mn1);
            s[j][3] = exp2f(s[j][3] - mn1);
            rs0 += s[j][0] + s[j][1];
            rs1 += s[j][2] + s[j][3];
        }
        rs0 += __shfl_xor_sync(FULL_MASK, rs0, 1);
        rs0 += __shfl_xor_sync(FULL_MASK, rs0, 2);
        rs1 += __shfl_xor_sync(FULL_MASK, rs1, 1);
        rs1 += __shfl_xor_sync(FULL_MASK, rs1, 2);
        l0 = l0 * a0 + rs0;
        l1 = l1 * a1 + rs1;
#pragma unroll
        for (int j = 0; j < NT_O; ++j) {
            o[j][0] *= a0;
            o[j][1] *= a0;
            o[j][2] *= a1;
            o[j][3] *= a1;
        }
        cp_async_wait_all_but_newest();  // V tile kt
        __syncthreads();
        // O += P V: the S accumulators of two adjacent key tiles are the A fragment of P.
#pragma unroll
        for (int ks = 0; ks < PF_BK / 16; ++ks) {
            const u32 pa0 = pack_h2(s[2 * ks][0], s[2 * ks][1]);
            const u32 pa1 = pack_h2(s[2 * ks][2], s[2 * ks][3]);
            const u32 pa2 = pack_h2(s[2 * ks + 1][0], s[2 * ks + 1][1]);
            const u32 pa3 = pack_h2(s[2 * ks + 1][2], s[2 * ks + 1][3]);
            const int key = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
            for (int n0 = 0; n0 < HD; n0 += 16) {
                u32 b0, b1, b2, b3;
                ldmatrix_x4_trans(b0, b1, b2, b3, &Vs[key][n0 + (lane >> 4) * 8]);
                mma16816(o[n0 / 8], pa0, pa1, pa2, pa3, b0, b1);
                mma16816(o[n0 / 8 + 1], pa0, pa1, pa2, pa3, b2, b3);
            }
        }
        __syncthreads();  // every warp is done with Vs
        if (kt + 1 < ntiles) load_tile<HD, LDS>(Vs, vc + head_base, k0 + PF_BK, nkeys);
        cp_async_commit();
    }

    const float il0 = 1.f / l0, il1 = 1.f / l1;
#pragma unroll
    for (int j = 0; j < NT_O; ++j) {
        const int c = j * 8 + 2 * t;
        if (qi0 < T)
            *reinterpret_cast<__half2*>(out + ((size_t)qi0 * n_heads + h) * HD + c) =
                __floats2half2_rn(o[j][0] * il0, o[j][1] * il0);
        if (qi1 < T)
            *reinterpret_cast<__half2*>(out + ((size_t)qi1 * n_heads + h) * HD + c) =
                __floats2half2_rn(o[j][2] * il1, o[j][3] * il1);
    }
}

#define ATTN_PREFILL_ARGS                                                                       \
    const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc,  \
        __half *__restrict__ out, int seq, int p0, int T, int n_heads, int n_kv, int max_len,   \
        float scale_log2
#define ATTN_PREFILL_PASS q, kc, vc, out, seq, p0, T, n_heads, n_kv, max_len, scale_log2

extern "C" __global__ void __launch_bounds__(128) attn_prefill_16(ATTN_PREFILL_ARGS) {
    attn_prefill_body<16>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(128) attn_prefill_32(ATTN_PREFILL_ARGS) {
    attn_prefill_body<32>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(128) attn_prefill_64(ATTN_PREFILL_ARGS) {
    attn_prefill_body<64>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(128) attn_prefill_128(ATTN_PREFILL_ARGS) {
    attn_prefill_body<128>(ATTN_PREFILL_PASS);
}
