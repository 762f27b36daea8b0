// Mean-squared-error loss: forward mean((p - t)^2) and its VJP.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false keeps d*d and the running sum
// as separate roundings. No #defines expected. 32-bit unsigned indexing.
//
//   tl_mse_partial(p, t, out, n, seg, atomic)  block b sums d*d, d = p[i] - t[i] (float), over
//       i in [b*seg, min(n, b*seg + seg)) in a fixed tree; atomic != 0: atomicAdd into out[0]
//       (zero-filled; order unspecified); atomic == 0: out[b] = the block's partial.
//   tl_sum_partials(in, out, n)                one block sums in[0..n) in a fixed tree into out[0].
//   tl_mse_finish(x, count)                    x[0] = x[0] / count: float division when the count
//       is exact in float (at most 2^24), else the quotient in double rounded once.
//   tl_mse_bwd(p, t, g, gp, gt, n, count)      v = 2 (p - t) g / count evaluated in double and
//       rounded once: gp = v, gt = -v (negation is exact).

#define TL_BLOCK 256
#include "tl_common.cuh"

extern "C" __global__ void tl_mse_partial(const float* __restrict__ p, const float* __restrict__ t,
                                          float* __restrict__ out, unsigned n, unsigned seg,
                                          int atomic) {
    const unsigned lo = blockIdx.x * seg;
    const unsigned len = (n - lo > seg) ? seg : n - lo;
    float acc = -0.0f;
    for (unsigned i = threadIdx.x; i < len; i = tl_next(i, blockDim.x, len)) {
        const float d = p[lo + i] - t[lo + i];
        acc += d * d;
    }
    acc = tl_block_sum(acc);
    if (threadIdx.x == 0) {
        if (atomic) atomicAdd(out, acc);
        else out[blockIdx.x] = acc;
    }
}

extern "C" __global__ void tl_sum_partials(const float* __restrict__ in, float* __restrict__ out,
                                           unsigned n) {
    float acc = -0.0f;
    for (unsigned i = threadIdx.x; i < n; i = tl_next(i, blockDim.x, n)) acc += in[i];
    acc = tl_block_sum(acc);
    if (threadIdx.x == 0) out[0] = acc;
}

extern "C" __global__ void tl_mse_finish(float* x, double count) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        x[0] = (count <= 16777216.0) ? x[0] / (float)count : (float)((double)x[0] / count);
    }
}

extern "C" __global__ void tl_mse_bwd(const float* __restrict__ p, const float* __restrict__ t,
                                      const float* __restrict__ g, float* __restrict__ gp,
                                      float* __restrict__ gt, unsigned n, double count) {
    const double scale = 2.0 * (double)g[0] / count;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        const float v = (float)(((double)p[i] - (double)t[i]) * scale);
        gp[i] = v;
        gt[i] = -v;
    }
}
