// Attention over the float16 KV cache (layout per layer: [seq][kv_head][max_len][head_dim]).
//
// Decode (flash-decoding): attn_split_<HD> cuts each sequence's KV length into up to nsplit
// chunks of at least min_chunk positions (multiples of 32); one block per (split, kv head,
// row) streams its chunk of K and V through shared memory once for all the query heads of
// that kv head (grouped-query attention), on tensor cores, and writes an unnormalised partial
// output with its running max and sum; attn_combine merges the partials. A row of at most
// one_split positions is one split; when every row of a step is, the step launches one split
// block per (kv head, row) with `out` set, which writes the output itself and no combine runs
// (the same bits: the combine of one split divides its partial by its sum). The split kernel
// also does the decode step's RoPE (rope_kv's work, without its launch): each block rotates
// its query heads from the q|k|v projection row, and the block holding the current position
// rotates its k, writes k and v into the cache for later steps and into its own sub-tile in
// shared memory (no round trip through the cache before it can use them). The lengths are read
// from device memory and the split geometry depends only on a sequence's own length, so the
// grid is fixed for a CUDA graph and a row's result does not depend on the other rows.
//
// Prefill: attn_prefill_<HD> is a causal flash-attention kernel on tensor cores
// (mma.sync m16n8k16, f16 in, f32 accumulate): a block owns 16 * PF_WARPS queries of one head,
// walks 64-key tiles of the cache up to the diagonal with an online softmax held in registers,
// and never materialises the score matrix; K and V tiles stream in by cp.async, one tile ahead.

#ifndef ATT_WARPS
#define ATT_WARPS 8  // warps of a decode split block (against 4: engine/PERF.md, issue 31)
#endif
#define GMAX 8
#define ATT_TILE 32  // a split's chunk is a whole number of these (positions)
#define ATT_SUB 16   // positions of one warp's step: the k of the P V product
#ifndef ATT_STAGES
#define ATT_STAGES 2  // sub-tiles in each warp's cp.async ring (3 and 4 measured no faster)
#endif

// Positions per split of a sequence of n: all of them for a row of at most one_split (one
// split: a step whose rows all are takes no combine), else n / nsplit rounded up to whole
// tiles, at least min_chunk (a multiple of ATT_TILE). The split kernel and the combine both
// derive it from the row's own length, so a row's splits never depend on the other rows.
__device__ __forceinline__ int split_chunk(int n, int nsplit, int min_chunk, int one_split) {
    if (n <= one_split) return (n + ATT_TILE - 1) / ATT_TILE * ATT_TILE;
    const int chunk = (n + nsplit - 1) / nsplit;
    return max(min_chunk, (chunk + ATT_TILE - 1) / ATT_TILE * ATT_TILE);
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// x0, x1 as two float16 pairs whose sum is x to ~22 bits: hi = the halves of x, lo = the
// halves of what they missed. A product with a float16 operand taken as hi + lo keeps
// float32-like accuracy on float16 tensor cores.
__device__ __forceinline__ void split_h2(float x0, float x1, u32& hi, u32& lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 f = __half22float2(h);
    hi = *reinterpret_cast<const u32*>(&h);
    lo = pack_h2(x0 - f.x, x1 - f.y);
}

// ATT_SUB rows t0 .. of one head's K and V into a warp's padded shared sub-tiles by cp.async,
// by the warp's lanes; rows from `end` on are zeros and read nothing (the cache past a
// sequence's length may hold anything; a zero V row under a zero weight adds nothing).
template <int HD, int LDS>
__device__ __forceinline__ void load_kv_sub(__half (*ks)[LDS], __half (*vs)[LDS], const __half* __restrict__ K,
                                            const __half* __restrict__ V, int t0, int end) {
    constexpr int PIECES = ATT_SUB * (HD / 8);  // 16-byte pieces per sub-tile
    for (int i = threadIdx.x & 31; i < PIECES; i += 32) {
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

// ---------------------------------------------------------------------------------------
// Decode: one step of flash-decoding (attn_split_<HD>, then attn_combine).
// ---------------------------------------------------------------------------------------

// One block per (split, kv head, row), ATT_WARPS warps. The chunk is cut into sub-tiles of
// ATT_SUB positions; warp w takes sub-tiles w, w + ATT_WARPS, ... and streams them through
// its own ring of ATT_STAGES by cp.async (no block barrier inside the loop), so every warp
// keeps ATT_STAGES - 1 sub-tiles in flight while it computes on one. Per sub-tile, on the
// tensor cores (mma m16n8k16, the G query heads of this kv head as the rows of A, padded to
// 16): S = Q K^T, an online softmax per head in registers, O += P V. Q and P enter as float16
// pairs hi + lo (split_h2), so the result keeps float32 accuracy; K and V are float16 already.
// At the end the warps' (max, sum, output) merge in shared memory in warp order. The current
// token sits at position lens[seq] (advanced after the step); its q, k and v come from the
// q|k|v row r (stride ld) and are rotated here (qn_w / kn_w: Qwen3's head norms).
template <int HD>
__device__ __forceinline__ void attn_split_body(const float* __restrict__ qkv, int ld,
                                                const float* __restrict__ qn_w,
                                                const float* __restrict__ kn_w,
                                                const double* __restrict__ inv_freq, int neox, float eps,
                                                __half* __restrict__ kc, __half* __restrict__ vc,
                                                const int* __restrict__ seq_ids,
                                                const int* __restrict__ lens, float* __restrict__ part_o,
                                                float* __restrict__ part_ml, int n_heads, int n_kv,
                                                int max_len, int nsplit, int min_chunk, int one_split,
                                                float scale, float* __restrict__ out,
                                                i8* __restrict__ xq, float4* __restrict__ xs) {
    constexpr int LDS = HD + 8;  // padded row (halves): no bank conflicts, rows 16-byte aligned
    constexpr int S = ATT_STAGES;
    constexpr int KSTEPS = HD / 16, NT_O = HD / 8;
    extern __shared__ __align__(16) unsigned char att_smem[];  // per warp: S K, then S V sub-tiles
    __shared__ __align__(16) float qs[GMAX][HD];
    __shared__ float cs[HD / 2], sn[HD / 2], kbuf[HD], vbuf[HD];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;  // this lane's query head (row of A) and pair
    const int split = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z;
    const int G = n_heads / n_kv;
    // Up to pdl_wait(), only what no kernel of this step writes, so it overlaps the q|k|v
    // mat-vec: seq_ids and lens change between steps (set_rows, a step's last kernel, a
    // prefill), and the cache before the current position holds earlier steps' k and v. Every
    // kernel triggers its dependants only after its own wait, so all but the previous kernel
    // have completed when this one starts.
    const int seq = seq_ids[r];
    const int pos = lens[seq];  // the current token's position
    const int n = pos + 1;      // positions attended: the cache so far and the current token
    const int chunk = split_chunk(n, nsplit, min_chunk, one_split);
    const int start = split * chunk;
    if (start >= n) return;  // the whole block: start is uniform
    const int end = min(n, start + chunk);
    // positions read from the cache: all but the current one, whose k and v this kernel
    // computes and puts into its sub-tile in shared memory itself
    const int have = min(end, pos);
    const int nsub = (end - start + ATT_SUB - 1) / ATT_SUB;
    const int mine = nsub > warp ? (nsub - warp + ATT_WARPS - 1) / ATT_WARPS : 0;

    const size_t head_base = ((size_t)seq * n_kv + kvh) * (size_t)max_len * HD;
    __half* K = kc + head_base;
    __half* V = vc + head_base;
    const float* row = qkv + (size_t)r * ld;
    auto Ks = reinterpret_cast<__half(*)[ATT_SUB][LDS]>(att_smem) + (size_t)warp * 2 * S;
    auto Vs = Ks + S;
    // the ring's first S - 1 sub-tiles (a commit group each, even empty)
    auto ring_start = [&]() {
#pragma unroll
        for (int i = 0; i < S - 1; ++i) {
            if (i < mine) load_kv_sub<HD, LDS>(Ks[i], Vs[i], K, V, start + (warp + i * ATT_WARPS) * ATT_SUB, have);
            cp_async_commit();
        }
    };
    // the first sub-tiles, then the RoPE angles, before the wait (earlier steps' positions)
    ring_start();
    rope_angles(pos, inv_freq, HD / 2, cs, sn);
    pdl_wait();  // the q|k|v row is the previous kernel's
    pdl_trigger();
    __syncthreads();
    const bool current = end == n;  // this block holds the current position
    if (current && warp == ATT_WARPS - 1) {  // its k and v: into the cache for later steps
        rope_head<HD>(row + (size_t)(n_heads + kvh) * HD, kn_w, cs, sn, neox, eps, 1.f, kbuf);
        const float* v = row + (size_t)(n_heads + n_kv + kvh) * HD;
        for (int e = lane; e < HD; e += 32) {
            K[(size_t)pos * HD + e] = __float2half_rn(kbuf[e]);
            V[(size_t)pos * HD + e] = __float2half_rn(vbuf[e] = v[e]);
        }
    }
    for (int h = warp; h < G; h += ATT_WARPS)  // while the first sub-tiles load
        rope_head<HD>(row + (size_t)(kvh * G + h) * HD, qn_w, cs, sn, neox, eps, scale, qs[h]);
    __syncthreads();

    // A fragments of Q (rows g < G) as hi and lo halves: hi as rows g, lo as rows g + 8 (G <=
    // 8: A's other rows are padding), so one mma multiplies both, into accumulators of their
    // own, added once per n-tile: half the mmas, half the dependent chain of S = Q K^T, and
    // 188 -> 128 registers at HD 128 (four blocks an SM, not two)
    u32 qh[KSTEPS][2], ql[KSTEPS][2];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        float2 x0 = make_float2(0.f, 0.f), x1 = x0;
        if (g < G) {
            x0 = *reinterpret_cast<const float2*>(&qs[g][kk * 16 + 2 * t]);
            x1 = *reinterpret_cast<const float2*>(&qs[g][kk * 16 + 8 + 2 * t]);
        }
        split_h2(x0.x, x0.y, qh[kk][0], ql[kk][0]);
        split_h2(x1.x, x1.y, qh[kk][1], ql[kk][1]);
    }
    float o[NT_O][4];
#pragma unroll
    for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m = -INFINITY, l = 0.f;  // row g's running max and this lane's share of its sum

    for (int i = 0; i < mine; ++i) {
        const int st = i % S, t0 = start + (warp + i * ATT_WARPS) * ATT_SUB;
        cp_async_wait<S - 2>();  // sub-tile i has landed (this lane's copies)
        __syncwarp();            // ... and the warp's; every lane is done with sub-tile i - 1
        const int in = i + S - 1;  // into the stage sub-tile i - 1 used
        if (in < mine)
            load_kv_sub<HD, LDS>(Ks[in % S], Vs[in % S], K, V, start + (warp + in * ATT_WARPS) * ATT_SUB, have);
        cp_async_commit();
        if (current && pos - t0 < ATT_SUB) {  // the current position's row (zeros so far)
            for (int e = lane; e < HD; e += 32) {
                Ks[st][pos - t0][e] = __float2half_rn(kbuf[e]);
                Vs[st][pos - t0][e] = __float2half_rn(vbuf[e]);
            }
            __syncwarp();
        }

        float s[2][4];  // S = Q K^T, two n-tiles of 8 positions
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                const u32 b0 = *reinterpret_cast<const u32*>(&Ks[st][j * 8 + g][kk * 16 + 2 * t]);
                const u32 b1 = *reinterpret_cast<const u32*>(&Ks[st][j * 8 + g][kk * 16 + 8 + 2 * t]);
                mma16816(s[j], qh[kk][0], ql[kk][0], qh[kk][1], ql[kk][1], b0, b1);
            }
            s[j][0] += s[j][2];  // hi (row g) + lo (row g + 8)
            s[j][1] += s[j][3];
        }
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int p = t0 + j * 8 + 2 * t;
            if (p >= end) s[j][0] = -INFINITY;
            if (p + 1 >= end) s[j][1] = -INFINITY;
            mx = fmaxf(mx, fmaxf(s[j][0], s[j][1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
        const float mnew = fmaxf(m, mx);  // finite: the sub-tile's first position is valid
        const float alpha = __expf(m - mnew);
        m = mnew;
        float p[2][2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            p[j][0] = __expf(s[j][0] - mnew);
            p[j][1] = __expf(s[j][1] - mnew);
        }
        l = l * alpha + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
#pragma unroll
        for (int j = 0; j < NT_O; ++j) {
            o[j][0] *= alpha;
            o[j][1] *= alpha;
            o[j][2] *= alpha;  // P lo's share
            o[j][3] *= alpha;
        }
        // O += P V: the S accumulators of the two n-tiles are P's A fragment, P hi as rows g
        // and P lo as rows g + 8 (o[.][2..3]: lo's share, added to hi's at the end)
        u32 ph0, pl0, ph2, pl2;
        split_h2(p[0][0], p[0][1], ph0, pl0);
        split_h2(p[1][0], p[1][1], ph2, pl2);
        const int key = ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
        for (int n0 = 0; n0 < HD; n0 += 16) {
            u32 b0, b1, b2, b3;
            ldmatrix_x4_trans(b0, b1, b2, b3, &Vs[st][key][n0 + (lane >> 4) * 8]);
            mma16816(o[n0 / 8], ph0, pl0, ph2, pl2, b0, b1);
            mma16816(o[n0 / 8 + 1], ph0, pl0, ph2, pl2, b2, b3);
        }
    }
    l += __shfl_xor_sync(FULL_MASK, l, 1);
    l += __shfl_xor_sync(FULL_MASK, l, 2);

    // the warps' partials into shared memory (over the rings), merged in warp order
    cp_async_wait<0>();
    __syncthreads();
    float* wo = reinterpret_cast<float*>(att_smem);  // [ATT_WARPS][GMAX][HD]
    float* wml = wo + ATT_WARPS * GMAX * HD;         // [ATT_WARPS][GMAX][2]
    if (g < G) {
#pragma unroll
        for (int j = 0; j < NT_O; ++j)
            *reinterpret_cast<float2*>(&wo[((size_t)warp * GMAX + g) * HD + j * 8 + 2 * t]) =
                make_float2(o[j][0] + o[j][2], o[j][1] + o[j][3]);
        if (t == 0) {
            wml[(warp * GMAX + g) * 2] = m;
            wml[(warp * GMAX + g) * 2 + 1] = l;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
        const int h = i / HD, e = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; ++w) M = fmaxf(M, wml[(w * GMAX + h) * 2]);
        float acc = 0.f, L = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; ++w) {
            const float f = __expf(wml[(w * GMAX + h) * 2] - M);  // 0 for a warp with no sub-tile
            acc += wo[((size_t)w * GMAX + h) * HD + e] * f;
            L += wml[(w * GMAX + h) * 2 + 1] * f;
        }
        if (out) {  // the only split: the output itself, as attn_combine divides one split's
            // partial (NaN for a row too long to be one split: the host chose wrongly)
            const float v = n <= one_split ? acc / L : __int_as_float(0x7fc00000);
            const size_t i = ((size_t)r * n_heads + kvh * G + h) * HD + e;
            out[i] = v;
            if (HD >= 32 && xq) quant_block(v, xq + (i / 32) * 64, xs + i / 32);  // whole warps
            continue;
        }
        const size_t slot = ((size_t)r * n_heads + kvh * G + h) * nsplit + split;
        part_o[slot * HD + e] = acc;
        if (e == 0) {
            part_ml[slot * 2] = M;
            part_ml[slot * 2 + 1] = L;
        }
    }
}

#define ATTN_SPLIT_ARGS                                                                           \
    const float *__restrict__ qkv, int ld, const float *__restrict__ qn_w,                         \
        const float *__restrict__ kn_w, const double *__restrict__ inv_freq, int neox, float eps,  \
        __half *__restrict__ kc, __half *__restrict__ vc, const int *__restrict__ seq_ids,          \
        const int *__restrict__ lens, float *__restrict__ part_o, float *__restrict__ part_ml,     \
        int n_heads, int n_kv, int max_len, int nsplit, int min_chunk, int one_split, float scale, \
        float *__restrict__ out, i8 *__restrict__ xq, float4 *__restrict__ xs
#define ATTN_SPLIT_PASS                                                                           \
    qkv, ld, qn_w, kn_w, inv_freq, neox, eps, kc, vc, seq_ids, lens, part_o, part_ml, n_heads,     \
        n_kv, max_len, nsplit, min_chunk, one_split, scale, out, xq, xs

// attn_split_16/32/64/128: one per head dim. Grid (nsplit, n_kv_heads, rows), ATT_WARPS * 32
// threads, dynamic shared memory Geometry.attn_shared_bytes(HD) (engine/cuda/geometry.py).
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

// attn_combine: merge the splits of one (head, row): grid (n_heads, rows), hd threads. Also writes the
// two-level int8 blocks of the output (xq/xs non-null) for a quantized output projection:
// with hd >= 32 each warp holds exactly one block of 32. The splits' maxima and sums are
// loaded in parallel into shared memory, and the partial outputs eight at a time (the first
// eight beside the maxima), so the merge is a few memory round trips, not one per split.
// nsplit <= ATT_MAX_SPLITS.
#define ATT_MAX_SPLITS 64
extern "C" __global__ void attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                        const int* __restrict__ seq_ids, const int* __restrict__ lens,
                                        float* __restrict__ out, i8* __restrict__ xq,
                                        float4* __restrict__ xs, int n_heads, int hd, int nsplit,
                                        int min_chunk, int one_split) {
    __shared__ float sm[ATT_MAX_SPLITS], sl[ATT_MAX_SPLITS];
    const int h = blockIdx.x, r = blockIdx.y, e = threadIdx.x;
    const int n = lens[seq_ids[r]] + 1;  // before the wait: as in the split kernel
    const int chunk = split_chunk(n, nsplit, min_chunk, one_split);
    const int used = (n + chunk - 1) / chunk;
    pdl_wait();
    pdl_trigger();
    const size_t slot0 = ((size_t)r * n_heads + h) * nsplit;
    float first[8];  // the first eight partials, requested beside the maxima and sums
#pragma unroll
    for (int j = 0; j < 8; ++j) first[j] = j < used ? part_o[(slot0 + j) * hd + e] : 0.f;
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
        for (int j = 0; j < 8; ++j)
            po[j] = s0 == 0 ? first[j] : s0 + j < used ? part_o[(slot0 + s0 + j) * hd + e] : 0.f;
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
//
// A block of PF_WARPS warps owns PF_BQ = 16 * PF_WARPS queries of one head (16 rows a warp).
// K and V tiles of PF_BK keys stream through two stages of dynamic shared memory: tile t + 1
// is requested right after the block barrier that opens tile t, so it lands while tile t is
// multiplied, and that one barrier per tile is the only one (it also tells every warp that
// the stage it overwrites was read). K's B fragments come by ldmatrix (two key n-tiles a
// load), V's by ldmatrix.trans. Only the tiles that cross a warp's diagonal are masked. The
// arithmetic of each output (fragments, accumulation order over head dim and key tiles) does
// not depend on PF_WARPS.

// PF_WARPS: warps per block (16 queries each). Alone on llama-8b's shape (engine/PERF.md): 8
// warps 1% slower; two 16-query m-tiles per warp with the queries in shared memory (255
// registers, 8 warps an SM) 690 us against 611.
#ifndef PF_WARPS
#define PF_WARPS 4
#endif
#define PF_BQ (16 * PF_WARPS)
#define PF_BK 64

__device__ __forceinline__ void ldmatrix_x4(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
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
    extern __shared__ uint4 pf_smem[];
    // [stage][K, V][key][LDS]
    __half(*tiles)[2][PF_BK][LDS] = reinterpret_cast<__half(*)[2][PF_BK][LDS]>(pf_smem);

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
    const int warp_first = p0 + qtile * PF_BQ + warp * 16;  // the warp's earliest query position

    const int nkeys = p0 + T;
    const int last_q = min(T, (qtile + 1) * PF_BQ) - 1;
    const int ntiles = (p0 + last_q) / PF_BK + 1;
    const size_t head_base = ((size_t)seq * n_kv + kvh) * (size_t)max_len * HD;

    load_tile<HD, LDS>(tiles[0][0], kc + head_base, 0, nkeys);
    load_tile<HD, LDS>(tiles[0][1], vc + head_base, 0, nkeys);
    cp_async_commit();
    for (int kt = 0; kt < ntiles; ++kt) {
        const int k0 = kt * PF_BK;
        const int st = kt & 1;
        cp_async_wait<0>();  // this thread's copies of tile kt
        __syncthreads();     // everyone's; and every warp is done with tile kt - 1's stage
        if (kt + 1 < ntiles) {
            load_tile<HD, LDS>(tiles[st ^ 1][0], kc + head_base, k0 + PF_BK, nkeys);
            load_tile<HD, LDS>(tiles[st ^ 1][1], vc + head_base, k0 + PF_BK, nkeys);
        }
        cp_async_commit();
        __half(*Ks)[LDS] = tiles[st][0];
        __half(*Vs)[LDS] = tiles[st][1];

        // S = Q K^T: 8 n-tiles of 8 keys; one ldmatrix gives two n-tiles' B fragments.
        float s[PF_BK / 8][4];
#pragma unroll
        for (int j = 0; j < PF_BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int j = 0; j < PF_BK / 8; j += 2) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                u32 b0, b1, b2, b3;  // n-tile j: b0, b1; n-tile j + 1: b2, b3
                ldmatrix_x4(b0, b1, b2, b3, &Ks[(j + (lane >> 4)) * 8 + (lane & 7)][kk * 16 + ((lane >> 3) & 1) * 8]);
                mma16816(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);
                mma16816(s[j + 1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b2, b3);
            }
        }
        // Causal mask (only where the tile crosses this warp's diagonal) and the row maxima
        // (rows g and g+8; 4 threads share a row).
        if (k0 + PF_BK - 1 > warp_first) {
#pragma unroll
            for (int j = 0; j < PF_BK / 8; ++j) {
                const int kp = k0 + j * 8 + 2 * t;
                if (kp > qp0) s[j][0] = -INFINITY;
                if (kp + 1 > qp0) s[j][1] = -INFINITY;
                if (kp > qp1) s[j][2] = -INFINITY;
                if (kp + 1 > qp1) s[j][3] = -INFINITY;
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < PF_BK / 8; ++j) {
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

// attn_prefill_16/32/64/128: one per head dim. Grid (ceil(T / (16 * PF_WARPS)), n_heads),
// PF_WARPS * 32 threads, dynamic shared memory Geometry.prefill_shared_bytes(HD).
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attn_prefill_16(ATTN_PREFILL_ARGS) {
    attn_prefill_body<16>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attn_prefill_32(ATTN_PREFILL_ARGS) {
    attn_prefill_body<32>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attn_prefill_64(ATTN_PREFILL_ARGS) {
    attn_prefill_body<64>(ATTN_PREFILL_PASS);
}
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attn_prefill_128(ATTN_PREFILL_ARGS) {
    attn_prefill_body<128>(ATTN_PREFILL_PASS);
}
