// Data movement by strided index math: broadcast, permute, slice and concat (forward and VJP),
// all exact copies. engine/providers/native_cuda.py describes each op as a walk over a dense
// "visit" shape dims[0..rank) whose element at multi-index k sits at offset
//     base + sum_d k[d] * strides[d]
// of the strided side (stride 0 repeats an axis: broadcast). Adjacent axes are merged and unit
// axes dropped before the launch, so rank is small; meta = dims followed by strides, uploaded
// once per distinct layout and cached.
//
// Compiled with OPTIONS (engine/runtime/loader.py). Expects TL_MAX_RANK (default 32 here; the
// Python side refuses larger ranks). 32-bit unsigned indexing: every offset < 2^32.
//
//   tl_strided_copy(in, out, n, meta, rank, base)    out[i] = in[offset(i)]   (gather side strided)
//   tl_strided_place(src, out, n, meta, rank, base)  out[offset(i)] = src[i]  (scatter side strided;
//       the offsets of distinct i are distinct, so no two threads write one element)

#ifndef TL_MAX_RANK
#define TL_MAX_RANK 32
#endif
#include "tl_common.cuh"

__device__ __forceinline__ void tl_load_meta(const unsigned* __restrict__ meta, unsigned rank,
                                             unsigned* dims, unsigned* strides) {
    for (unsigned d = threadIdx.x; d < rank; d += blockDim.x) {
        dims[d] = meta[d];
        strides[d] = meta[rank + d];
    }
    __syncthreads();
}

__device__ __forceinline__ unsigned tl_offset(unsigned i, const unsigned* dims,
                                              const unsigned* strides, unsigned rank,
                                              unsigned base) {
    unsigned off = base;
    for (int d = (int)rank - 1; d >= 0; --d) {
        const unsigned q = i / dims[d];
        off += (i - q * dims[d]) * strides[d];
        i = q;
    }
    return off;
}

extern "C" __global__ void tl_strided_copy(const float* __restrict__ in, float* __restrict__ out,
                                           unsigned n, const unsigned* __restrict__ meta,
                                           unsigned rank, unsigned base) {
    __shared__ unsigned dims[TL_MAX_RANK], strides[TL_MAX_RANK];
    tl_load_meta(meta, rank, dims, strides);
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = in[tl_offset(i, dims, strides, rank, base)];
    }
}

extern "C" __global__ void tl_strided_place(const float* __restrict__ src, float* __restrict__ out,
                                            unsigned n, const unsigned* __restrict__ meta,
                                            unsigned rank, unsigned base) {
    __shared__ unsigned dims[TL_MAX_RANK], strides[TL_MAX_RANK];
    tl_load_meta(meta, rank, dims, strides);
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[tl_offset(i, dims, strides, rank, base)] = src[i];
    }
}
