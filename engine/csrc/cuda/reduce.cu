// Sums over one contiguous block of axes, the building block of reduce_sum, reduce_mean and the
// broadcast-gradient reduction. engine/providers/native_cuda/reduce.py views the input as
// [outer][R][inner] (merging adjacent axes; reductions over separated axes take one pass per
// group) and picks the kernel, `tpr` and `chunks` from the shape alone.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. No #defines expected. 32-bit unsigned indexing: outer * R * inner < 2^32.
//
// Row sums (inner == 1) visit a row in "units" of four consecutive elements (the last unit may be
// short); a thread adds its units in ascending order and the four elements of a unit in
// ascending order, so the 16-byte-load path (vec != 0: row starts 16-byte aligned and every
// unit full) and the scalar path add the same terms in the same order: the result depends on
// the shape alone, never on the alignment of the buffer.
//
//   tl_reduce_rows_group(in, out, rows, R, tpr_log2, vec, d)   short rows, one pass: a group
//       of tpr = 2^tpr_log2 (<= 32) lanes of one warp per row, 256 / tpr rows per block; the
//       lanes' partials combine by an xor-shuffle tree; out[row] = the sum, or the sum / d in
//       float (IEEE division) when d != 1: reduce_mean's count, exact (<= 2^24), divided in the
//       same launch (tl_div_f32's quotient bit for bit). No atomics in either mode.
//   tl_reduce_rows(in, out, R, chunks, seg, atomic, vec)         long rows: one block per
//       (row o, chunk c) = blockIdx.x = o * chunks + c sums in[o*R + c*seg ...] (seg % 4 == 0
//       when chunks > 1) in a fixed tree; atomic != 0: atomicAdd into out[o] (out filled with
//       -0; order of the adds is unspecified); atomic == 0: writes the partial to
//       out[o * chunks + c] (a second pass sums partials).
//   tl_reduce_cols(in, out, outer, R, inner, chunks, seg, atomic, vec, lq_log2)  inner > 1:
//       a block per (o, chunk c, group of LQ = 2^lq_log2 <= 32 adjacent quads: four adjacent
//       columns each), grid-stride over blocks. The block's 256 threads are LQ lanes (one quad
//       each) by S = 256 / LQ sub-chunks: the chunk's rows r = c*seg ... split into S runs of
//       ceil(len / S) rows (the last ones may be short or empty). Each thread left-folds its
//       run per column (starting from -0); the S run sums of a column are then left-folded in
//       run order through shared memory, and that chunk sum goes to atomicAdd(out[o*inner + i])
//       (atomic != 0) or to out[(o*chunks + c)*inner + i] (atomic == 0). vec != 0 (inner % 4 ==
//       0 and `in` 16-byte aligned): float4 loads, eight rows in flight; the same adds in the
//       same order as the scalar path, so alignment never changes a result. (One thread per quad
//       and chunk ran at 60-78% of the copy ceiling on the H200 at 65536x1024; S runs per block
//       give the same bytes in flight with 1/S the atomics, ~100%.)
//   tl_div_f32(in, out, n, d)  out[i] = in[i] / d in float (d exact: a count up to 2^24)
//   tl_neg_zeros(out, n)       out[0..n) = -0.0f: default mode's atomic targets, one launch
//   tl_div_f64(in, out, n, d)  out[i] = (float)((double)in[i] / d) (counts above 2^24)
//
// Accumulators start at -0.0f, the identity of IEEE addition, so a one-element sum returns the
// element bit for bit (signed zero included). With atomic == 0 every launch sums in an order
// fixed by (shape, tpr, chunks, blockDim): deterministic mode uses only those launches.

#define TL_BLOCK 256
#include "tl_common.cuh"

__device__ __forceinline__ float tl_add4(float acc, float4 v) {
    acc += v.x;
    acc += v.y;
    acc += v.z;
    return acc + v.w;
}

// The sum, in unit order, of the units t, t + step, ... of row[0..len) (see the header): four
// 16-byte loads are issued before their adds so that enough bytes are in flight per thread.
__device__ __forceinline__ float tl_row_units(const float* __restrict__ row, unsigned len,
                                              unsigned t, unsigned step, int vec) {
    const unsigned units = (len + 3u) >> 2;
    float acc = -0.0f;
    unsigned u = t;
    if (vec) {
        const float4* __restrict__ row4 = reinterpret_cast<const float4*>(row);
        for (; u < units && units - u > 3u * step; u += 4u * step) {
            const float4 a = row4[u], b = row4[u + step], c = row4[u + 2u * step],
                         d = row4[u + 3u * step];
            acc = tl_add4(acc, a);
            acc = tl_add4(acc, b);
            acc = tl_add4(acc, c);
            acc = tl_add4(acc, d);
        }
        for (; u < units; u += step) acc = tl_add4(acc, row4[u]);
    } else {
        for (; u < units; u += step) {
            const unsigned e = u << 2;
            acc += row[e];
            if (e + 1u < len) acc += row[e + 1u];
            if (e + 2u < len) acc += row[e + 2u];
            if (e + 3u < len) acc += row[e + 3u];
        }
    }
    return acc;
}

extern "C" __global__ void tl_reduce_rows_group(const float* __restrict__ in,
                                                float* __restrict__ out, unsigned rows,
                                                unsigned R, unsigned tpr_log2, int vec,
                                                float d) {
    const unsigned tpr = 1u << tpr_log2;
    const unsigned long long gid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long row = gid >> tpr_log2;
    const unsigned t = threadIdx.x & (tpr - 1u);
    const bool live = row < rows;
    float acc = live ? tl_row_units(in + row * R, R, t, tpr, vec) : -0.0f;
    // every lane of the warp takes part in the shuffles (groups never straddle a warp)
    for (unsigned off = tpr >> 1; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (live && t == 0) out[row] = (d != 1.0f) ? acc / d : acc;
}

extern "C" __global__ void tl_reduce_rows(const float* __restrict__ in, float* __restrict__ out,
                                          unsigned R, unsigned chunks, unsigned seg, int atomic,
                                          int vec) {
    const unsigned o = blockIdx.x / chunks, c = blockIdx.x % chunks;
    const unsigned lo = c * seg;
    const unsigned len = (R - lo > seg) ? seg : R - lo;
    const float* row = in + (unsigned long long)o * R + lo;
    float acc = tl_row_units(row, len, threadIdx.x, blockDim.x, vec);
    acc = tl_block_sum(acc);
    if (threadIdx.x == 0) {
        if (atomic) atomicAdd(out + o, acc);
        else out[blockIdx.x] = acc;
    }
}

// Rows [lo, lo + len) of four adjacent columns (n <= 4 of them real) starting at p, row pitch
// `inner`: a left fold per column in row order. vec: n == 4 and p 16-byte aligned (so is every
// row: inner % 4 == 0), read as float4, eight rows' loads in flight before their adds; the scalar
// path adds the same terms in the same order.
__device__ __forceinline__ void tl_cols_fold(const float* __restrict__ p, unsigned len,
                                             unsigned inner, unsigned n, int vec, float* acc) {
    unsigned r = 0;
    if (vec) {
        constexpr unsigned U = 8;
        for (; r + U <= len; r += U) {
            float4 v[U];
#pragma unroll
            for (unsigned u = 0; u < U; ++u)
                v[u] = *reinterpret_cast<const float4*>(p + (unsigned long long)(r + u) * inner);
#pragma unroll
            for (unsigned u = 0; u < U; ++u) {
                acc[0] += v[u].x;
                acc[1] += v[u].y;
                acc[2] += v[u].z;
                acc[3] += v[u].w;
            }
        }
        for (; r < len; ++r) {
            const float4 v = *reinterpret_cast<const float4*>(p + (unsigned long long)r * inner);
            acc[0] += v.x;
            acc[1] += v.y;
            acc[2] += v.z;
            acc[3] += v.w;
        }
        return;
    }
    for (; r < len; ++r) {
        const float* q = p + (unsigned long long)r * inner;
        for (unsigned k = 0; k < n; ++k) acc[k] += q[k];
    }
}

extern "C" __global__ void tl_reduce_cols(const float* __restrict__ in, float* __restrict__ out,
                                          unsigned outer, unsigned R, unsigned inner,
                                          unsigned chunks, unsigned seg, int atomic, int vec,
                                          unsigned lq_log2) {
    __shared__ float runs[TL_BLOCK * 4];      // [run w][4 * lane + k]: S * 4 * LQ == 4 * TL_BLOCK
    const unsigned lq = 1u << lq_log2, lane = threadIdx.x & (lq - 1u), w = threadIdx.x >> lq_log2;
    const unsigned n_runs = TL_BLOCK >> lq_log2;
    const unsigned quads = (inner + 3u) >> 2, groups = (quads + lq - 1u) >> lq_log2;
    const unsigned long long blocks = (unsigned long long)outer * chunks * groups;
    for (unsigned long long b = blockIdx.x; b < blocks; b += gridDim.x) {
        const unsigned g = (unsigned)(b % groups);
        const unsigned long long oc = b / groups;
        const unsigned c = (unsigned)(oc % chunks), o = (unsigned)(oc / chunks);
        const unsigned lo = c * seg;
        const unsigned len = (R - lo > seg) ? seg : R - lo;
        const unsigned per = (len + n_runs - 1u) / n_runs;
        const unsigned a = (w * per < len) ? w * per : len;
        const unsigned e = (a + per < len) ? a + per : len;
        const unsigned q = (g << lq_log2) + lane;
        const unsigned i = q << 2;
        const unsigned n = (q >= quads) ? 0u : (inner - i < 4u) ? inner - i : 4u;
        float acc[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
        if (n) tl_cols_fold(in + ((unsigned long long)o * R + lo + a) * inner + i, e - a, inner, n,
                            vec, acc);
        __syncthreads();                        // the previous block's readers are done
#pragma unroll
        for (unsigned k = 0; k < 4u; ++k) runs[w * 4u * lq + 4u * lane + k] = acc[k];
        __syncthreads();
        const unsigned col = (g << (lq_log2 + 2u)) + threadIdx.x;   // thread t < 4 LQ: one column
        if (threadIdx.x < 4u * lq && col < inner) {
            float s = runs[threadIdx.x];
            for (unsigned r = 1; r < n_runs; ++r) s += runs[r * 4u * lq + threadIdx.x];
            if (atomic) atomicAdd(out + (unsigned long long)o * inner + col, s);
            else out[((unsigned long long)o * chunks + c) * inner + col] = s;
        }
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

extern "C" __global__ void tl_neg_zeros(float* __restrict__ out, unsigned n) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = -0.0f;
    }
}
