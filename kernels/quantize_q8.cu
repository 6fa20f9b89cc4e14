// Activations to two-level int8 blocks of 32 for the dp4a path, one warp per block:
// x ~= d1 * q1 + d2 * q2 with q2 quantizing the residual of q1, so the dot products carry
// about 15 bits of each activation (one level alone costs ~0.5% relative error per mat-vec,
// enough to flip near-tied argmaxes against the float reference). Per block: 32 bytes q1,
// 32 bytes q2, and xs = {d1, d2, sum, ss}; the sum folds in the Q4_0 offset and Q4_1 min.
// With a norm weight g (rows of K): the blocks of x * g, and ss = the block's sum of squares
// of the raw x, from which a NORM mat-vec takes 1 / rms (else ss = 0). The `_qx` mat-vecs
// (gemv_simt.cu) compute the same blocks themselves, bit for bit (quant_chunk, common.cuh).
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
        ss = warp_sum(__fmul_rn(v, v));  // rounded as quant_chunk rounds it (common.cuh)
        v = __fmul_rn(v, __ldg(g + (b * 32 + lane) % K));
    }
    quant_block(v, xq + (size_t)b * 64, xs + b, ss);
}
