// engine/tools/phasebench.py's kernels, compiled after common.cuh and gemv_simt.cu (with
// GEMV_BODY_ONLY): one decoder layer's four mat-vec phases of a SmolLM2-sized model as kernels
// of their own, and one persistent kernel whose blocks walk every layer's phases with a grid
// barrier between them. Both run gemv_body with the same shapes (compile-time: PROBE_WT,
// PROBE_D, PROBE_QKV, PROBE_F), so they must give the same bits; only the boundary differs.
//
// A layer, with the attention left out (o reads q|k|v's first D values as its input):
//   qkv = W_qkv . rmsnorm(x)        store, norm, quantized in the lanes
//   x  += W_o . qkv[:D]             add
//   f   = glu(W_g, W_u . rmsnorm(x)) glu, norm
//   x  += W_d . f                   add

#define PROBE_NR GEMV_NR(PROBE_WT, 1)
#define PROBE_ROWS_PER_BLOCK ((GEMV_WARPS / GEMV_KSPLIT) * PROBE_NR)

// A layer's weights: nibbles and scales of q|k|v, o, gate, up, down.
struct ProbeLayer {
    const void *qkv_q, *qkv_s, *o_q, *o_s, *g_q, *g_s, *u_q, *u_s, *d_q, *d_s;
    const float *attn_norm, *ffn_norm;
};

// The buffers every phase reads and writes (the kernels take them as three arguments).
struct ProbeBuffers {
    float *x, *qkv, *f;
};

// Phase p (0..3) of layer L for the launch's block bx, waiting through sync. Unlike the
// engine's kernels, which take their weights as arguments, both ways read L from a table first
// (one load from L2 before the weights').
template <class Sync>
__device__ __forceinline__ void probe_phase(const ProbeLayer& L, const ProbeBuffers& b, int p, int bx,
                                            float eps, const Sync& sync) {
    switch (p) {
        case 0:
            gemv_body<PROBE_WT, 1, MODE_STORE, PROBE_NR, true, true, Sync>(
                L.qkv_q, L.qkv_s, nullptr, nullptr, b.x, nullptr, b.qkv, PROBE_QKV, PROBE_D, 1,
                PROBE_QKV, L.attn_norm, eps, bx, 0, sync);
            break;
        case 1:
            gemv_body<PROBE_WT, 1, MODE_ADD, PROBE_NR, false, true, Sync>(
                L.o_q, L.o_s, nullptr, nullptr, b.qkv, nullptr, b.x, PROBE_D, PROBE_D, 1, PROBE_D,
                nullptr, 0.f, bx, 0, sync);
            break;
        case 2:
            gemv_body<PROBE_WT, 1, MODE_GLU, PROBE_NR, true, true, Sync>(
                L.g_q, L.g_s, L.u_q, L.u_s, b.x, nullptr, b.f, PROBE_F, PROBE_D, 1, PROBE_F,
                L.ffn_norm, eps, bx, 0, sync);
            break;
        default:
            gemv_body<PROBE_WT, 1, MODE_ADD, PROBE_NR, false, true, Sync>(
                L.d_q, L.d_s, nullptr, nullptr, b.f, nullptr, b.x, PROBE_D, PROBE_F, 1, PROBE_D,
                nullptr, 0.f, bx, 0, sync);
    }
}

__device__ __forceinline__ int probe_blocks(int p) {
    const int n = p == 0 ? PROBE_QKV : p == 2 ? PROBE_F : PROBE_D;
    return (n + PROBE_ROWS_PER_BLOCK - 1) / PROBE_ROWS_PER_BLOCK;
}

// One phase as a kernel of its own (PDL launches in a graph, as the decode step issues them),
// compiled per phase as the engine's kernels are per mode.
template <int P>
__device__ __forceinline__ void probe_launch(const ProbeLayer* __restrict__ layers, float* x, float* qkv,
                                             float* f, int layer, float eps) {
    const ProbeLayer L = layers[layer];
    probe_phase(L, ProbeBuffers{x, qkv, f}, P, blockIdx.x, eps, PdlSync());
}
#define PROBE_LAUNCH(P)                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                \
        probe_launch_##P(const ProbeLayer* __restrict__ layers, float* x, float* qkv, float* f,  \
                         int layer, float eps) {                                                 \
        probe_launch<P>(layers, x, qkv, f, layer, eps);                                          \
    }
PROBE_LAUNCH(0)
PROBE_LAUNCH(1)
PROBE_LAUNCH(2)
PROBE_LAUNCH(3)

// A grid barrier: every block's threads have written what they will before any block reads
// past it. Thread 0 of each block arrives once per barrier on sync[0], which only grows: the
// k-th barrier of a run lets a block through once base + k * gridDim.x arrivals are counted,
// base being sync[1] as the run found it (the count before the run; block 0 moves it on once
// every block has read it). A block whose poll never sees its count (a grid that was not
// co-resident) gives up and sets *err, and every later barrier of the run passes at once.
struct GridSync {
    unsigned* counter;
    unsigned target;
    int* err;
    bool active;  // false: the run's first phase, nothing to wait for
    __device__ __forceinline__ void wait() const {
        if (!active) return;
        __syncthreads();
        if (threadIdx.x == 0 && !*(volatile int*)err) {
            __threadfence();  // this block's writes, ordered by the block barrier, before the arrival
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
            unsigned seen;
            int polls = 0;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
            } while ((int)(seen - target) < 0 && ++polls < (1 << 22));
            if ((int)(seen - target) < 0) atomicExch(err, 1);
        }
        __syncthreads();
    }
    __device__ __forceinline__ void trigger() const {}
};

// Barrier k of a run of `barriers` barriers (k = 1..barriers; 0: none); after the first, block
// 0 moves the base on for the next run (every block read it before arriving there).
__device__ __forceinline__ GridSync grid_sync(unsigned* sync, unsigned base, int k, int barriers, int* err) {
    if (k == 2 && blockIdx.x == 0 && threadIdx.x == 0) sync[1] = base + (unsigned)barriers * gridDim.x;
    return GridSync{sync, base + (unsigned)k * gridDim.x, err, k > 0};
}

// Every phase of every layer in one launch (only where gemv_body's warps all reach each phase's
// block barrier: where they split K; with one warp a row group, a warp past N returns first,
// and phasebench times the launches alone): phase k waits at the k-th barrier, after its
// first weights are loaded (gemv_body loads them before sync.wait(), as before the PDL wait).
// Blocks past a phase's row groups only pass its barrier.
#if GEMV_KSPLIT >= 2
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    probe_persistent(const ProbeLayer* __restrict__ layers, float* x, float* qkv, float* f, int nlayers,
                     float eps, unsigned* sync, int* err) {
    const ProbeBuffers b{x, qkv, f};
    const unsigned base = *(volatile unsigned*)(sync + 1);
    const int phases = 4 * nlayers;
    for (int k = 0; k < phases; ++k) {
        const int p = k & 3;
        const GridSync gs = grid_sync(sync, base, k, phases - 1, err);
        if ((int)blockIdx.x < probe_blocks(p)) {
            const ProbeLayer L = layers[k >> 2];
            probe_phase(L, b, p, blockIdx.x, eps, gs);
        } else {
            gs.wait();
        }
    }
}

#endif

// The boundaries alone: a launch that only waits and lets the next start, and a persistent
// kernel that only passes its barriers.
extern "C" __global__ void probe_empty_launch() {
    pdl_wait();
    pdl_trigger();
}

extern "C" __global__ void probe_empty_persistent(int phases, unsigned* sync, int* err) {
    const unsigned base = *(volatile unsigned*)(sync + 1);
    for (int k = 1; k < phases; ++k) grid_sync(sync, base, k, phases - 1, err).wait();
}
