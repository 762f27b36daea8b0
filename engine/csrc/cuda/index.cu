// gather and scatter_add along one axis. The indexed tensor is viewed as [outer][E][inner] and
// the gathered / scattered side as [outer][m][inner], m = len(indices). Indices arrive as int64
// (the wrapper has already checked 0 <= idx < E <= 2^32 - 1) and are read as unsigned.
//
// Compiled with OPTIONS (engine/runtime/loader.py). No #defines expected. 32-bit unsigned
// indexing: every tensor has fewer than 2^32 elements.
//
//   tl_gather(a, idx, out, outer, E, m, inner)             out[o][j][k] = a[o][idx[j]][k]
//   tl_scatter_add_atomic(out, src, idx, outer, E, m, inner)
//       out[o][idx[j]][k] += src[o][j][k] with atomicAdd, one thread per src element: duplicate
//       indices accumulate in an unspecified order (default mode).
//   tl_scatter_add_ordered(out, src, idx, outer, E, m, inner)
//       one thread per (o, k) column adds src[o][j][k] for j = 0, 1, ..., m-1 in that order: a left
//       fold from the base value, bit-for-bit repeatable (deterministic mode). Columns are
//       disjoint, so no atomics are needed.
// `out` holds the base (scatter_add) or zeros (gather's VJP) before the scatter kernels run.

#include "tl_common.cuh"
extern "C" __global__ void tl_gather(const float* __restrict__ a, const long long* __restrict__ idx,
                                     float* __restrict__ out, unsigned outer, unsigned E,
                                     unsigned m, unsigned inner) {
    const unsigned n = outer * m * inner;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned k = t % inner;
        const unsigned oj = t / inner;
        const unsigned j = oj % m, o = oj / m;
        out[t] = a[((unsigned long long)o * E + (unsigned)idx[j]) * inner + k];
    }
}

extern "C" __global__ void tl_scatter_add_atomic(float* __restrict__ out,
                                                 const float* __restrict__ src,
                                                 const long long* __restrict__ idx,
                                                 unsigned outer, unsigned E, unsigned m,
                                                 unsigned inner) {
    const unsigned n = outer * m * inner;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned k = t % inner;
        const unsigned oj = t / inner;
        const unsigned j = oj % m, o = oj / m;
        atomicAdd(out + ((unsigned long long)o * E + (unsigned)idx[j]) * inner + k, src[t]);
    }
}

extern "C" __global__ void tl_scatter_add_ordered(float* __restrict__ out,
                                                  const float* __restrict__ src,
                                                  const long long* __restrict__ idx,
                                                  unsigned outer, unsigned E, unsigned m,
                                                  unsigned inner) {
    const unsigned cols = outer * inner;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < cols;
         t = tl_next(t, stride, cols)) {
        const unsigned o = t / inner, k = t - o * inner;
        float* dst = out + (unsigned long long)o * E * inner + k;
        const float* s = src + (unsigned long long)o * m * inner + k;
        for (unsigned j = 0; j < m; ++j) {
            dst[(unsigned long long)(unsigned)idx[j] * inner] += s[(unsigned long long)j * inner];
        }
    }
}
