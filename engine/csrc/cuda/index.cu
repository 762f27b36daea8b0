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
//
// Row fast paths for inner >= 16 (embedding lookups, their VJP): the (o, j) rows of inner floats
// are cut in segments that lane groups of tpr = 2^tpr_log2 copy (tl_runs.cuh), so idx[j] and the
// row addresses are computed once per segment; vec != 0 (inner % 4 == 0, buffers 16-byte
// aligned) moves four floats per access.
//   tl_gather_rows(a, idx, out, outer, E, m, inner, chunks, tpr_log2, vec)   as tl_gather
//   tl_scatter_add_atomic_rows(out, src, idx, outer, E, m, inner, chunks, tpr_log2, vec)
//       as tl_scatter_add_atomic (one atomic add per element, order unspecified; on sm_90 the
//       vec path adds four floats per instruction: tl_atomic_add4)

#include "tl_common.cuh"
#include "tl_runs.cuh"

// Four float atomic adds to dst[0..3] (16-byte aligned). sm_90 has a vector form (atomicAdd on
// a float4, CUDA 12.2 and later: one instruction, each element still its own atomic add, so the
// result is the same as four scalar ones in some order); elsewhere four scalar atomics.
// __CUDACC_VER_MAJOR__ is undefined (0 here) under a compiler that does not say: scalar then.
__device__ __forceinline__ void tl_atomic_add4(float* dst, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 2))
    atomicAdd(reinterpret_cast<float4*>(dst), v);
#else
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
    atomicAdd(dst + 2, v.z);
    atomicAdd(dst + 3, v.w);
#endif
}

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

extern "C" __global__ void tl_gather_rows(const float* __restrict__ a,
                                          const long long* __restrict__ idx,
                                          float* __restrict__ out, unsigned outer, unsigned E,
                                          unsigned m, unsigned inner, unsigned chunks,
                                          unsigned tpr_log2, int vec) {
    const unsigned tpr = 1u << tpr_log2;
    const unsigned long long seg = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
                                   >> tpr_log2;
    if (seg >= (unsigned long long)outer * m * chunks) return;
    const TlSegment s = tl_segment((unsigned)seg, chunks, inner, tpr);
    const unsigned o = s.row / m, j = s.row - o * m;
    tl_copy_segment(a + ((unsigned long long)o * E + (unsigned)idx[j]) * inner,
                    out + (unsigned long long)s.row * inner, 1u, s, threadIdx.x & (tpr - 1u),
                    tpr, inner, vec);
}

extern "C" __global__ void tl_scatter_add_atomic_rows(float* __restrict__ out,
                                                      const float* __restrict__ src,
                                                      const long long* __restrict__ idx,
                                                      unsigned outer, unsigned E, unsigned m,
                                                      unsigned inner, unsigned chunks,
                                                      unsigned tpr_log2, int vec) {
    const unsigned tpr = 1u << tpr_log2;
    const unsigned long long seg = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
                                   >> tpr_log2;
    if (seg >= (unsigned long long)outer * m * chunks) return;
    const TlSegment s = tl_segment((unsigned)seg, chunks, inner, tpr);
    const unsigned o = s.row / m, j = s.row - o * m;
    float* dst = out + ((unsigned long long)o * E + (unsigned)idx[j]) * inner;
    const float* from = src + (unsigned long long)s.row * inner;
    for (unsigned u = s.lo + (threadIdx.x & (tpr - 1u)); u < s.hi; u += tpr) {
        const unsigned e = u << 2;
        if (vec) {
            const float4 v = reinterpret_cast<const float4*>(from)[u];
            tl_atomic_add4(dst + e, v);
        } else {
            for (unsigned k = e; k < inner && k < e + 4u; ++k) atomicAdd(dst + k, from[k]);
        }
    }
}
