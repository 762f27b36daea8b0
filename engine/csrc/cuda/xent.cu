// The fused cross-entropy loss, forward and VJP (a file of its own: the capsules' build
// fingerprints hash their .cu files, so mse_loss's loss.cu stays as its evidence saw it).
//
// Compiled with OPTIONS (engine/runtime/loader.py): every value below is a double from the
// float inputs, rounded once to float at the end. No #defines expected. 32-bit unsigned
// indexing (the row offset r * n in 64 bits).
//
// Cross-entropy (the fused loss, RuntimeEntry cross_entropy): logits x [rows][n] row-major,
// targets t [rows] (int64, checked in [0, n) by the wrapper), L = (1/rows) sum_r l_r with
// l_r = -log_softmax(x_r)[t_r] = log1p(T) + (m - x_t): m the row's max, k its first index,
// T = sum_{j != k} exp(x_j - m) (as the log_softmax reference: no 1 + T rounding, so a row whose
// target dominates keeps a tiny l accurate). A warp per row (lanes stride the row: coalesced),
// everything in double from the float inputs (libdevice exp, log1p), sums in a fixed order
// (each lane over its j in order, then the warp's xor tree; rows in the order of
// tl_block_sum_d), so results repeat bit for bit. A row with a NaN or +inf entry, or all -inf,
// has l = NaN (log_softmax's NaN row); a target at -inf has l = +inf.
//   tl_xent_rows(x, t, rowloss, rows, n)      rowloss[r] = l_r in double
//   tl_xent_mean(rowloss, out, rows)          one block: out[0] = f32((sum_r rowloss[r]) / rows)
//   tl_xent_bwd(x, t, g, gx, rows, n, count)  gx[r][j] = f32(c v), c = g[0] / count, S = 1 + T,
//       v = e_j / S for j != t; for j = t: -T / S when t = k, else -(S - e_t) / S (s_t - 1
//       without cancellation); a NaN row gives NaN

#define TL_BLOCK 256
#include "tl_common.cuh"


#define TL_F32_NAN_BITS 0x7fc00000

// A warp's row statistics: m (the max), k (its first index, TL_NONE for a row of -inf), bad (a
// NaN or +inf entry) and T = sum_{j != k} exp(x_j - m) in double, the same in every lane.
struct TlXentRow {
    double m, t_sum;
    unsigned k;
    bool nan_row;
};

__device__ __forceinline__ TlXentRow tl_xent_row(const float* __restrict__ xr, unsigned n,
                                                 unsigned lane) {
    const float inf = __int_as_float(0x7f800000);   // NVRTC has no math.h: no INFINITY
    float m = -inf;
    unsigned k = TL_NONE;
    bool bad = false;
    for (unsigned j = lane; j < n; j += 32u) {
        const float v = xr[j];
        if (v != v || v == inf) bad = true;
        if (v > m) { m = v; k = j; }                 // ascending j: the lane's first max
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const unsigned k2 = __shfl_xor_sync(0xffffffffu, k, off);
        if (m2 > m || (m2 == m && k2 < k)) { m = m2; k = k2; }
    }
    TlXentRow out;
    out.nan_row = __any_sync(0xffffffffu, bad) || k == TL_NONE;
    out.m = (double)m;
    out.k = k;
    double part = 0.0;
    if (!out.nan_row) {
        for (unsigned j = lane; j < n; j += 32u)
            if (j != k) part += exp((double)xr[j] - out.m);
    }
    for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
    out.t_sum = part;
    return out;
}

extern "C" __global__ void tl_xent_rows(const float* __restrict__ x,
                                        const long long* __restrict__ targets,
                                        double* __restrict__ rowloss, unsigned rows, unsigned n) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned per_block = blockDim.x >> 5;
    const unsigned warps = per_block * gridDim.x;
    for (unsigned r = blockIdx.x * per_block + (threadIdx.x >> 5); r < rows;
         r = tl_next(r, warps, rows)) {
        const float* xr = x + (unsigned long long)r * n;
        const TlXentRow st = tl_xent_row(xr, n, lane);
        if (lane == 0) {
            const unsigned long long t = (unsigned long long)targets[r];
            const double nan = __longlong_as_double(0x7ff8000000000000ll);
            rowloss[r] = (st.nan_row || t >= n) ? nan
                                                : log1p(st.t_sum) + (st.m - (double)xr[t]);
        }
    }
}

extern "C" __global__ void tl_xent_mean(const double* __restrict__ rowloss, float* __restrict__ out,
                                        unsigned rows) {
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < rows; i = tl_next(i, blockDim.x, rows)) acc += rowloss[i];
    const double total = tl_block_sum_d(acc);
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = (float)(total / (double)rows);
}

extern "C" __global__ void tl_xent_bwd(const float* __restrict__ x,
                                       const long long* __restrict__ targets,
                                       const float* __restrict__ g, float* __restrict__ gx,
                                       unsigned rows, unsigned n, double count) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned per_block = blockDim.x >> 5;
    const unsigned warps = per_block * gridDim.x;
    const double c = (double)g[0] / count;
    for (unsigned r = blockIdx.x * per_block + (threadIdx.x >> 5); r < rows;
         r = tl_next(r, warps, rows)) {
        const float* xr = x + (unsigned long long)r * n;
        float* gr = gx + (unsigned long long)r * n;
        const TlXentRow st = tl_xent_row(xr, n, lane);
        const unsigned long long t = (unsigned long long)targets[r];
        const double s_sum = 1.0 + st.t_sum;
        for (unsigned j = lane; j < n; j += 32u) {
            if (st.nan_row || t >= n) { gr[j] = __int_as_float(TL_F32_NAN_BITS); continue; }
            const double e = exp((double)xr[j] - st.m);
            double v;
            if (j != t) v = e / s_sum;
            else if (j == st.k) v = -(st.t_sum / s_sum);
            else v = -((s_sum - e) / s_sum);
            gr[j] = (float)(c * v);
        }
    }
}
