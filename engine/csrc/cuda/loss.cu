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

// --- cross-entropy --------------------------------------------------------------------------

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
