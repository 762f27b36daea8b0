// Sums over one contiguous block of axes, the building block of reduce_sum, reduce_mean and the
// broadcast-gradient reduction. engine/providers/native_cuda.py views the input as
// [outer][R][inner] (merging adjacent axes; reductions over separated axes take one pass per
// group) and picks `chunks`, the number of pieces R is split into, from the shape alone.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. No #defines expected. 32-bit unsigned indexing: outer * R * inner < 2^32.
//
//   tl_reduce_rows(in, out, R, chunks, seg, atomic)              inner == 1; one block per
//       (row o, chunk c) = blockIdx.x = o * chunks + c sums in[o*R + c*seg ...] in a fixed tree;
//       atomic != 0: atomicAdd into out[o] (out zero-filled; order of the adds is unspecified);
//       atomic == 0: writes the partial to out[o * chunks + c] (a second pass sums partials).
//   tl_reduce_cols(in, out, outer, R, inner, chunks, seg, atomic)  inner > 1; one thread per
//       (o, i) column and blockIdx.y = chunk c: a left fold over r in the chunk; atomic != 0:
//       atomicAdd into out[o*inner + i]; atomic == 0: out[(o*chunks + c)*inner + i].
//   tl_div_f32(in, out, n, d)  out[i] = in[i] / d in float (d exact: a count up to 2^24)
//   tl_div_f64(in, out, n, d)  out[i] = (float)((double)in[i] / d) (counts above 2^24)
//
// Accumulators start at -0.0f, the identity of IEEE addition, so a one-element sum returns the
// element bit for bit (signed zero included). With atomic == 0 every launch sums in an order
// fixed by (shape, chunks, blockDim): deterministic mode uses only those launches.

#define TL_BLOCK 256
#include "tl_common.cuh"

extern "C" __global__ void tl_reduce_rows(const float* __restrict__ in, float* __restrict__ out,
                                          unsigned R, unsigned chunks, unsigned seg, int atomic) {
    const unsigned o = blockIdx.x / chunks, c = blockIdx.x % chunks;
    const unsigned lo = c * seg;
    const unsigned len = (R - lo > seg) ? seg : R - lo;
    const float* row = in + (unsigned long long)o * R + lo;
    float acc = -0.0f;
    for (unsigned r = threadIdx.x; r < len; r = tl_next(r, blockDim.x, len)) acc += row[r];
    acc = tl_block_sum(acc);
    if (threadIdx.x == 0) {
        if (atomic) atomicAdd(out + o, acc);
        else out[blockIdx.x] = acc;
    }
}

extern "C" __global__ void tl_reduce_cols(const float* __restrict__ in, float* __restrict__ out,
                                          unsigned outer, unsigned R, unsigned inner,
                                          unsigned chunks, unsigned seg, int atomic) {
    const unsigned c = blockIdx.y;
    const unsigned lo = c * seg;
    const unsigned len = (R - lo > seg) ? seg : R - lo;
    const unsigned total = outer * inner;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t = tl_next(t, stride, total)) {
        const unsigned o = t / inner, i = t - o * inner;
        const float* p = in + ((unsigned long long)o * R + lo) * inner + i;
        float acc = -0.0f;
        for (unsigned r = 0; r < len; ++r) acc += p[(unsigned long long)r * inner];
        if (atomic) atomicAdd(out + t, acc);
        else out[((unsigned long long)o * chunks + c) * inner + i] = acc;
    }
}

extern "C" __global__ void tl_div_f32(const float* in, float* out, unsigned n, float d) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = in[i] / d;
    }
}

extern "C" __global__ void tl_div_f64(const float* in, float* out, unsigned n, double d) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = (float)((double)in[i] / d);
    }
}
