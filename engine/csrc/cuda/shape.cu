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
//
// Fast paths for a visit shape whose innermost axis (extent w) has stride 1 (a contiguous run:
// slice, concat, a broadcast row) or stride 0 (a broadcast column); meta then describes the
// outer axes only (rank - 1 of them) and the dense side is [rows][w], copied in segments by lane
// groups of tpr = 2^tpr_log2 (tl_runs.cuh), so the outer offset is computed once per segment, not
// per element. vec != 0: the caller has checked w % 4 == 0, 16-byte aligned buffers, and base and
// every outer stride % 4 == 0.
//   tl_rows_copy(in, out, rows, w, chunks, tpr_log2, meta, rank, base, step, vec)
//       out[r*w + j] = in[offset(r) + j*step]   (step 1: a run; step 0: one value repeated)
//   tl_rows_place(src, out, rows, w, chunks, tpr_log2, meta, rank, base, vec)
//       out[offset(r) + j] = src[r*w + j]
//
// Transposes: a visit shape [..., A, C] whose axis A has stride 1 and axis C stride S (a permute
// that swaps the two innermost axes, possibly under batch axes that meta describes, rank - 2 of
// them) goes through 32 x 32 tiles in shared memory, so that reads and writes both coalesce.
//   tl_transpose_tiles(in, out, A, C, S, tiles_a, tiles_c, meta, rank, base)
//       block = (batch b, tile row, tile column); out[b][i][j] = in[offset(b) + i + j*S]

#ifndef TL_MAX_RANK
#define TL_MAX_RANK 32
#endif
#include "tl_common.cuh"
#include "tl_runs.cuh"

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

extern "C" __global__ void tl_rows_copy(const float* __restrict__ in, float* __restrict__ out,
                                        unsigned rows, unsigned w, unsigned chunks,
                                        unsigned tpr_log2, const unsigned* __restrict__ meta,
                                        unsigned rank, unsigned base, unsigned step, int vec) {
    __shared__ unsigned dims[TL_MAX_RANK], strides[TL_MAX_RANK];
    tl_load_meta(meta, rank, dims, strides);
    const unsigned tpr = 1u << tpr_log2;
    const unsigned long long seg = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
                                   >> tpr_log2;
    if (seg >= (unsigned long long)rows * chunks) return;
    const TlSegment s = tl_segment((unsigned)seg, chunks, w, tpr);
    tl_copy_segment(in + tl_offset(s.row, dims, strides, rank, base),
                    out + (unsigned long long)s.row * w, step, s, threadIdx.x & (tpr - 1u), tpr,
                    w, vec);
}

extern "C" __global__ void tl_rows_place(const float* __restrict__ src, float* __restrict__ out,
                                         unsigned rows, unsigned w, unsigned chunks,
                                         unsigned tpr_log2, const unsigned* __restrict__ meta,
                                         unsigned rank, unsigned base, int vec) {
    __shared__ unsigned dims[TL_MAX_RANK], strides[TL_MAX_RANK];
    tl_load_meta(meta, rank, dims, strides);
    const unsigned tpr = 1u << tpr_log2;
    const unsigned long long seg = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
                                   >> tpr_log2;
    if (seg >= (unsigned long long)rows * chunks) return;
    const TlSegment s = tl_segment((unsigned)seg, chunks, w, tpr);
    tl_copy_segment(src + (unsigned long long)s.row * w,
                    out + tl_offset(s.row, dims, strides, rank, base), 1u, s,
                    threadIdx.x & (tpr - 1u), tpr, w, vec);
}

#define TL_TILE 32u

extern "C" __global__ void tl_transpose_tiles(const float* __restrict__ in,
                                              float* __restrict__ out, unsigned A, unsigned C,
                                              unsigned S, unsigned tiles_a, unsigned tiles_c,
                                              const unsigned* __restrict__ meta, unsigned rank,
                                              unsigned base) {
    __shared__ unsigned dims[TL_MAX_RANK], strides[TL_MAX_RANK];
    __shared__ float tile[TL_TILE][TL_TILE + 1];   // +1: column reads hit 32 distinct banks
    tl_load_meta(meta, rank, dims, strides);
    unsigned id = blockIdx.x;
    const unsigned tc = id % tiles_c;
    id /= tiles_c;
    const unsigned ta = id % tiles_a, b = id / tiles_a;
    const float* src = in + tl_offset(b, dims, strides, rank, base);
    float* dst = out + (unsigned long long)b * A * C;
    const unsigned lx = threadIdx.x % TL_TILE, ly = threadIdx.x / TL_TILE;
    const unsigned rows_per_pass = blockDim.x / TL_TILE;
    const unsigned i0 = ta * TL_TILE, j0 = tc * TL_TILE;
    for (unsigned k = ly; k < TL_TILE; k += rows_per_pass) {
        const unsigned i = i0 + lx, j = j0 + k;
        if (i < A && j < C) tile[k][lx] = src[i + (unsigned long long)j * S];
    }
    __syncthreads();
    for (unsigned k = ly; k < TL_TILE; k += rows_per_pass) {
        const unsigned i = i0 + k, j = j0 + lx;
        if (i < A && j < C) dst[(unsigned long long)i * C + j] = tile[lx][k];
    }
}
