// Mean-squared-error loss: forward mean((p - t)^2) and its VJP.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false keeps d*d and the running sum
// as separate roundings. No #defines expected. 32-bit unsigned indexing.
//
//   tl_mse_partial(p, t, out, n, seg, atomic, vec)  block b sums d*d, d = p[i] - t[i] (float),
//       over i in [b*seg, min(n, b*seg + seg)) (seg % 4 == 0) in a fixed tree; atomic != 0:
//       atomicAdd into out[0] (filled with -0; order unspecified); atomic == 0: out[b] = the
//       block's partial. A thread adds the units (four consecutive elements) t, t + 256, ... in
//       order, each unit's elements in order; vec != 0 (p and t 16-byte aligned) reads a full
//       unit with two 16-byte loads, which changes no term and no order.
//   tl_sum_partials(in, out, n)                one block sums in[0..n) in a fixed tree into out[0].
//   tl_mse_finish(x, count)                    x[0] = x[0] / count: float division when the count
//       is exact in float (at most 2^24), else the quotient in double rounded once.
//   tl_mse_bwd(p, t, g, gp, gt, n, count, vec)  v = 2 (p - t) g / count evaluated in double and
//       rounded once: gp = v, gt = -v (negation is exact); vec != 0 (all four arrays 16-byte
//       aligned) moves four elements per 16-byte access.

#define TL_BLOCK 256
#include "tl_common.cuh"

__device__ __forceinline__ float tl_sq_add(float acc, float p, float t) {
    const float d = p - t;
    return acc + d * d;
}

extern "C" __global__ void tl_mse_partial(const float* __restrict__ p, const float* __restrict__ t,
                                          float* __restrict__ out, unsigned n, unsigned seg,
                                          int atomic, int vec) {
    const unsigned lo = blockIdx.x * seg;
    const unsigned len = (n - lo > seg) ? seg : n - lo;
    const unsigned units = (len + 3u) >> 2;
    const float* pb = p + lo;
    const float* tb = t + lo;
    float acc = -0.0f;
    for (unsigned u = threadIdx.x; u < units; u = tl_next(u, blockDim.x, units)) {
        const unsigned e = u << 2;
        if (vec && len - e >= 4u) {
            const float4 a = reinterpret_cast<const float4*>(pb)[u];
            const float4 b = reinterpret_cast<const float4*>(tb)[u];
            acc = tl_sq_add(acc, a.x, b.x);
            acc = tl_sq_add(acc, a.y, b.y);
            acc = tl_sq_add(acc, a.z, b.z);
            acc = tl_sq_add(acc, a.w, b.w);
        } else {
            for (unsigned k = e; k < len && k < e + 4u; ++k) acc = tl_sq_add(acc, pb[k], tb[k]);
        }
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

__device__ __forceinline__ float tl_mse_grad(float p, float t, double scale) {
    return (float)(((double)p - (double)t) * scale);
}

extern "C" __global__ void tl_mse_bwd(const float* __restrict__ p, const float* __restrict__ t,
                                      const float* __restrict__ g, float* __restrict__ gp,
                                      float* __restrict__ gt, unsigned n, double count, int vec) {
    const double scale = 2.0 * (double)g[0] / count;
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned first = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned head = 0;   // elements [0, head) go four at a time
    if (vec) {
        head = n & ~3u;
        const unsigned n4 = n >> 2;
        for (unsigned i = first; i < n4; i = tl_next(i, stride, n4)) {
            const float4 a = reinterpret_cast<const float4*>(p)[i];
            const float4 b = reinterpret_cast<const float4*>(t)[i];
            float4 v;
            v.x = tl_mse_grad(a.x, b.x, scale);
            v.y = tl_mse_grad(a.y, b.y, scale);
            v.z = tl_mse_grad(a.z, b.z, scale);
            v.w = tl_mse_grad(a.w, b.w, scale);
            reinterpret_cast<float4*>(gp)[i] = v;
            reinterpret_cast<float4*>(gt)[i] = make_float4(-v.x, -v.y, -v.z, -v.w);
        }
    }
    const unsigned rest = n - head;
    for (unsigned i = first; i < rest; i = tl_next(i, stride, rest)) {
        const float v = tl_mse_grad(p[head + i], t[head + i], scale);
        gp[head + i] = v;
        gt[head + i] = -v;
    }
}
