// layer_norm and batch_norm, forward and backward, with two-pass statistics: the mean, then the
// mean of squared deviations. layer_norm rows of up to 8192 (forward) or 4096 (backward) features
// are held in registers (read once, written once); wider rows take the general one-block-per-row
// kernels, which read the row three times.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. Expects TL_BLOCK (default 256, a multiple of 32; blockDim.x must equal it).
// Every value is evaluated in double from the float inputs and rounded once to float (subnormals
// kept). Sums run in a fixed order (strided serial per thread, xor-shuffle tree per warp, warps in
// order), so every result is bitwise repeatable for a given grid.
//
// Formulas (docs/OPS.md, engine/providers/reference.py, engine/ops/normalization.py):
//   y  = (x - mu) / sqrt(var + eps) * gamma + beta
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g gamma, rstd = 1/sqrt(var+eps)
//   dgamma = sum g xhat, dbeta = sum g (over everything but the feature / channel axis)
//
//   tl_layer_norm_fwd(x, gamma, beta, y, rows, d, eps)   x [rows][d]; block per row (grid-stride)
//   tl_layer_norm_bwd(x, gamma, g, dx, part_g, part_b, rows, d, eps)   rows wider than 4096:
//       block b takes rows b, b + G, ... (G = gridDim.x <= rows) and keeps its column partials of
//       g xhat and g in part_g[b][d], part_b[b][d] (double; thread t owns columns t, t + TL_BLOCK..,
//       so no two threads touch one slot)
//   Register path (docs: engine/providers/native_cuda/norm.py picks the variant by d): a group of
//   G threads owns a row, thread t of it holds features j = t + G k (k < K, d <= G K); rows are
//   walked in block-uniform steps of TL_BLOCK / G rows (the group sums contain barriers).
//   tl_layer_norm_fwd_w8 (G = 32: d <= 256) tl_layer_norm_fwd_b4 tl_layer_norm_fwd_b8
//   tl_layer_norm_fwd_b32 (G = TL_BLOCK: d <= 1024, 2048, 8192): (x, gamma, beta, y, rows, d, eps)
//   tl_layer_norm_fwd_v4 tl_layer_norm_fwd_v8 (a warp per row, float4 accesses: d % 4 == 0,
//   16-byte aligned x, gamma, beta, y; d <= 512, 1024): the same arguments
//   tl_layer_norm_bwd_w8 (G = 32, d <= 256) tl_layer_norm_bwd_q4 tl_layer_norm_bwd_q8 (G = 128:
//   d <= 512, 1024) tl_layer_norm_bwd_b8 tl_layer_norm_bwd_b16 (G = TL_BLOCK: d <= 2048, 4096):
//       (x, gamma, g, dx, part_g, part_b, rows, d, eps): per row two group sums, mu, then the
//       squared deviations with sum dxhat and sum dxhat (x - mu) (mean(dxhat xhat) = rstd times
//       its mean); each group keeps gamma and its column
//       partials of g xhat and g in registers across the rows it takes; the block's groups add
//       theirs in group order (through shared memory) and the block writes one partial per
//       column to part_g[b][d], part_b[b][d] (b = blockIdx.x, double). Either path, then
//   tl_layer_norm_bwd_cols(part_g, part_b, dgamma, dbeta, parts, d) adds each column's `parts`
//       partials (a block per 32-column tile, its eight warps taking parts w, w + 8, ... in order,
//       then the warps in order) and rounds once: two launches, an order fixed by (parts, d).
//       The partials are blocks x d doubles (one wave of blocks), not rows x d: the column
//       sums cost a small fraction of the row pass's traffic.
//   The order of the column sums (within a group, the block's groups, then the blocks) enters the
//   bound only through their float64 summation error: n terms added in any order err by at most
//   (n - 1) 2^-53 sum |terms|, under 2^-27 sum |terms| for n < 2^26 rows, beside the one
//   rounding to float32 and the terms' own errors (xhat from the two-pass statistics, unchanged
//   by the order). So F64_ONCE_CANCELLING's u of sum |terms| is spent as before for every order
//   and grid, which is why the grid may follow the SM count.
//   add_layer_norm (the residual add and layer norm of a pre-norm block; the RES templates): the
//   same kernels with the row formed as s = x + r (one float32 add, --fmad=false keeps it apart)
//   while it is loaded, s written to sout beside y, the same double arithmetic after it:
//   tl_add_layer_norm_fwd(x, r, sout, gamma, beta, y, rows, d, eps), and the register variants
//   tl_add_layer_norm_fwd_w8 _b4 _b8 _b32 _v4 _v8 (same arguments); backward, x the saved s and
//   gs the sum's own cotangent (read only when has_gs), added to dx in double before its one
//   rounding: tl_add_layer_norm_bwd(s, gamma, g, gs, has_gs, dx, part_g, part_b, rows, d, eps)
//   and tl_add_layer_norm_bwd_w8 _q4 _q8 _b8 _b16, then tl_layer_norm_bwd_cols as above.
//   The variants' symbols: tl_add_layer_norm_fwd_w8 tl_add_layer_norm_fwd_b4
//   tl_add_layer_norm_fwd_b8 tl_add_layer_norm_fwd_b32 tl_add_layer_norm_fwd_v4
//   tl_add_layer_norm_fwd_v8 tl_add_layer_norm_bwd_w8 tl_add_layer_norm_bwd_q4
//   tl_add_layer_norm_bwd_q8 tl_add_layer_norm_bwd_b8 tl_add_layer_norm_bwd_b16
//   tl_batch_norm_fwd(x, gamma, beta, y, N, C, S, eps)    x [N][C][S]; block per channel
//   tl_batch_norm_bwd(x, gamma, g, dx, dgamma, dbeta, N, C, S, eps)  block per channel: the
//       channel's four sums and dx in one block, no cross-block step
//   Split path (engine/providers/native_cuda/norm.py: channels of at least 2^14 elements, N > 1):
//   each channel's planes are cut in `chunks` (from the shape alone) and each block b = c chunks + k
//   takes planes n = k, k + chunks, ... of channel c (a plane is S contiguous floats, thread t its
//   s = t, t + TL_BLOCK, ...): a fixed order per shape, statistics still two-pass in double.
//   tl_bn_part_stat(x, mean, part, N, C, S, chunks, squares)   part[b] = sum x (squares = 0) or
//       sum (x - mean[c])^2 (squares = 1) over block b's elements
//   tl_bn_finish_stat(part, out, C, chunks, count, eps, rstd)  one thread per channel sums its
//       chunks in order: out[c] = sum / count (rstd = 0) or 1 / sqrt(sum / count + eps) (rstd = 1)
//   tl_bn_apply(x, gamma, beta, mean, rstd, y, N, C, S)        block per plane (grid-stride):
//       y = (x - mean[c]) rstd[c] gamma[c] + beta[c], rounded once
//   tl_bn_part_grad(x, g, mean, rstd, part, N, C, S, chunks)   part[b] = sum g, part[C chunks + b]
//       = sum g xhat, xhat = (x - mean[c]) rstd[c]
//   tl_bn_finish_grad(part, gamma, dgamma, dbeta, ma, mb, C, chunks, count)  per channel, chunks
//       in order: dbeta = sum g, dgamma = sum g xhat (rounded once), ma = gamma sum g / count,
//       mb = gamma sum g xhat / count (double)
//   tl_bn_apply_grad(x, g, gamma, mean, rstd, ma, mb, dx, N, C, S)  dx = rstd (g gamma - ma -
//       xhat mb), rounded once

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"
#include "tl_rows.cuh"

// RES: add_layer_norm's form: the row is v = x + r (one float32 add, rounded as the add op
// rounds it: --fmad=false keeps it a separate add), written to sout, and normalised. RES = false
// is layer_norm's kernel as before (r and sout unused).
template <bool RES>
__device__ __forceinline__ float tl_ln_in(const float* __restrict__ x,
                                          const float* __restrict__ r, unsigned long long at) {
    return RES ? x[at] + r[at] : x[at];
}

template <bool RES>
__device__ __forceinline__ void tl_ln_fwd_rows(const float* __restrict__ x,
                                               const float* __restrict__ r,
                                               float* __restrict__ sout,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ beta,
                                               float* __restrict__ y, unsigned rows, unsigned d,
                                               float eps) {
    for (unsigned row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned long long base = (unsigned long long)row * d;
        float* yr = y + base;
        double s = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const float v = tl_ln_in<RES>(x, r, base + j);
            if (RES) sout[base + j] = v;
            s += (double)v;
        }
        const double mu = tl_block_sum_d(s) / d;
        double q = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double c = (double)tl_ln_in<RES>(x, r, base + j) - mu;
            q += c * c;
        }
        const double sd = sqrt(tl_block_sum_d(q) / d + (double)eps);
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double v = (double)tl_ln_in<RES>(x, r, base + j);
            yr[j] = (float)((v - mu) / sd * (double)gamma[j] + (double)beta[j]);
        }
    }
}

extern "C" __global__ void tl_layer_norm_fwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ beta, float* __restrict__ y,
                                             unsigned rows, unsigned d, float eps) {
    tl_ln_fwd_rows<false>(x, nullptr, nullptr, gamma, beta, y, rows, d, eps);
}

extern "C" __global__ void tl_add_layer_norm_fwd(const float* __restrict__ x,
                                                 const float* __restrict__ r,
                                                 float* __restrict__ sout,
                                                 const float* __restrict__ gamma,
                                                 const float* __restrict__ beta,
                                                 float* __restrict__ y, unsigned rows, unsigned d,
                                                 float eps) {
    tl_ln_fwd_rows<true>(x, r, sout, gamma, beta, y, rows, d, eps);
}

// RES: add_layer_norm's VJP: x is the saved sum s, and the sum's own cotangent gs (when has_gs)
// is added to dx in double before the one rounding: dx = rstd (...) + gs.
template <bool RES>
__device__ __forceinline__ void tl_ln_bwd_rows(const float* __restrict__ x,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ g,
                                               const float* __restrict__ gs, int has_gs,
                                               float* __restrict__ dx,
                                               double* __restrict__ part_g,
                                               double* __restrict__ part_b, unsigned rows,
                                               unsigned d, float eps) {
    double* pg = part_g + (unsigned long long)blockIdx.x * d;
    double* pb = part_b + (unsigned long long)blockIdx.x * d;
    bool first = true;
    for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (unsigned long long)r * d;
        const float* gr = g + (unsigned long long)r * d;
        float* dxr = dx + (unsigned long long)r * d;
        double s = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) s += (double)xr[j];
        const double mu = tl_block_sum_d(s) / d;
        double q = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double c = (double)xr[j] - mu;
            q += c * c;
        }
        const double rstd = 1.0 / sqrt(tl_block_sum_d(q) / d + (double)eps);
        double a = 0.0, b = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double xhat = ((double)xr[j] - mu) * rstd;
            const double gj = gr[j];
            const double dxhat = gj * (double)gamma[j];
            a += dxhat;
            b += dxhat * xhat;
            pg[j] = first ? gj * xhat : pg[j] + gj * xhat;
            pb[j] = first ? gj : pb[j] + gj;
        }
        const double mean_a = tl_block_sum_d(a) / d;
        const double mean_b = tl_block_sum_d(b) / d;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double xhat = ((double)xr[j] - mu) * rstd;
            const double dxhat = (double)gr[j] * (double)gamma[j];
            const double plus = (RES && has_gs) ? (double)gs[(unsigned long long)r * d + j] : 0.0;
            dxr[j] = RES ? (float)(rstd * (dxhat - mean_a - xhat * mean_b) + plus)
                         : (float)(rstd * (dxhat - mean_a - xhat * mean_b));
        }
        first = false;
    }
}

extern "C" __global__ void tl_layer_norm_bwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ g, float* __restrict__ dx,
                                             double* __restrict__ part_g,
                                             double* __restrict__ part_b, unsigned rows, unsigned d,
                                             float eps) {
    tl_ln_bwd_rows<false>(x, gamma, g, nullptr, 0, dx, part_g, part_b, rows, d, eps);
}

extern "C" __global__ void tl_add_layer_norm_bwd(const float* __restrict__ s,
                                                 const float* __restrict__ gamma,
                                                 const float* __restrict__ g,
                                                 const float* __restrict__ gs, int has_gs,
                                                 float* __restrict__ dx,
                                                 double* __restrict__ part_g,
                                                 double* __restrict__ part_b, unsigned rows,
                                                 unsigned d, float eps) {
    tl_ln_bwd_rows<true>(s, gamma, g, gs, has_gs, dx, part_g, part_b, rows, d, eps);
}


// Element t of channel c in x [N][C][S]: n = t / S, s = t % S.
__device__ __forceinline__ unsigned long long tl_bn_at(unsigned t, unsigned c, unsigned C,
                                                       unsigned S) {
    const unsigned n = t / S, s = t - n * S;
    return ((unsigned long long)n * C + c) * S + s;
}

extern "C" __global__ void tl_batch_norm_fwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ beta, float* __restrict__ y,
                                             unsigned N, unsigned C, unsigned S, float eps) {
    const unsigned count = N * S;
    for (unsigned c = blockIdx.x; c < C; c += gridDim.x) {
        double s = 0.0;
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) s += (double)x[tl_bn_at(t, c, C, S)];
        const double mu = tl_block_sum_d(s) / count;
        double q = 0.0;
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) {
            const double v = (double)x[tl_bn_at(t, c, C, S)] - mu;
            q += v * v;
        }
        const double sd = sqrt(tl_block_sum_d(q) / count + (double)eps);
        const double gm = gamma[c], bt = beta[c];
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) {
            const unsigned long long at = tl_bn_at(t, c, C, S);
            y[at] = (float)(((double)x[at] - mu) / sd * gm + bt);
        }
    }
}

extern "C" __global__ void tl_batch_norm_bwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ g, float* __restrict__ dx,
                                             float* __restrict__ dgamma,
                                             float* __restrict__ dbeta, unsigned N, unsigned C,
                                             unsigned S, float eps) {
    const unsigned count = N * S;
    for (unsigned c = blockIdx.x; c < C; c += gridDim.x) {
        double s = 0.0;
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) s += (double)x[tl_bn_at(t, c, C, S)];
        const double mu = tl_block_sum_d(s) / count;
        double q = 0.0;
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) {
            const double v = (double)x[tl_bn_at(t, c, C, S)] - mu;
            q += v * v;
        }
        const double rstd = 1.0 / sqrt(tl_block_sum_d(q) / count + (double)eps);
        const double gm = gamma[c];
        double a = 0.0, b = 0.0, sgx = 0.0, sg = 0.0;
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) {
            const unsigned long long at = tl_bn_at(t, c, C, S);
            const double xhat = ((double)x[at] - mu) * rstd;
            const double gj = g[at];
            const double dxhat = gj * gm;
            a += dxhat;
            b += dxhat * xhat;
            sgx += gj * xhat;
            sg += gj;
        }
        const double mean_a = tl_block_sum_d(a) / count;
        const double mean_b = tl_block_sum_d(b) / count;
        const double dg = tl_block_sum_d(sgx);
        const double db = tl_block_sum_d(sg);
        for (unsigned t = threadIdx.x; t < count; t += blockDim.x) {
            const unsigned long long at = tl_bn_at(t, c, C, S);
            const double xhat = ((double)x[at] - mu) * rstd;
            dx[at] = (float)(rstd * ((double)g[at] * gm - mean_a - xhat * mean_b));
        }
        if (threadIdx.x == 0) {
            dgamma[c] = (float)dg;
            dbeta[c] = (float)db;
        }
    }
}

// ---- batch_norm split path -------------------------------------------------------------------

extern "C" __global__ void tl_bn_part_stat(const float* __restrict__ x,
                                           const double* __restrict__ mean,
                                           double* __restrict__ part, unsigned N, unsigned C,
                                           unsigned S, unsigned chunks, int squares) {
    const unsigned c = blockIdx.x / chunks, k = blockIdx.x - c * chunks;
    const double mu = squares ? mean[c] : 0.0;
    double acc = 0.0;
    for (unsigned n = k; n < N; n = tl_next(n, chunks, N)) {
        const float* p = x + ((unsigned long long)n * C + c) * S;
#pragma unroll 4
        for (unsigned s = threadIdx.x; s < S; s = tl_next(s, blockDim.x, S)) {
            const double v = (double)p[s] - mu;
            acc += squares ? v * v : v;
        }
    }
    const double total = tl_block_sum_d(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = total;
}

extern "C" __global__ void tl_bn_finish_stat(const double* __restrict__ part,
                                             double* __restrict__ out, unsigned C,
                                             unsigned chunks, double count, float eps, int rstd) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sum = 0.0;
    for (unsigned k = 0; k < chunks; ++k) sum += part[(unsigned long long)c * chunks + k];
    out[c] = rstd ? 1.0 / sqrt(sum / count + (double)eps) : sum / count;
}

extern "C" __global__ void tl_bn_apply(const float* __restrict__ x, const float* __restrict__ gamma,
                                       const float* __restrict__ beta,
                                       const double* __restrict__ mean,
                                       const double* __restrict__ rstd, float* __restrict__ y,
                                       unsigned N, unsigned C, unsigned S) {
    const unsigned planes = N * C;
    for (unsigned p = blockIdx.x; p < planes; p = tl_next(p, gridDim.x, planes)) {
        const unsigned c = p % C;
        const double mu = mean[c], r = rstd[c], gm = gamma[c], bt = beta[c];
        const unsigned long long base = (unsigned long long)p * S;
        for (unsigned s = threadIdx.x; s < S; s = tl_next(s, blockDim.x, S)) {
            y[base + s] = (float)(((double)x[base + s] - mu) * r * gm + bt);
        }
    }
}

extern "C" __global__ void tl_bn_part_grad(const float* __restrict__ x, const float* __restrict__ g,
                                           const double* __restrict__ mean,
                                           const double* __restrict__ rstd,
                                           double* __restrict__ part, unsigned N, unsigned C,
                                           unsigned S, unsigned chunks) {
    const unsigned c = blockIdx.x / chunks, k = blockIdx.x - c * chunks;
    const double mu = mean[c], r = rstd[c];
    double sg = 0.0, sgx = 0.0;
    for (unsigned n = k; n < N; n = tl_next(n, chunks, N)) {
        const unsigned long long base = ((unsigned long long)n * C + c) * S;
#pragma unroll 4
        for (unsigned s = threadIdx.x; s < S; s = tl_next(s, blockDim.x, S)) {
            const double gj = g[base + s];
            sg += gj;
            sgx += gj * (((double)x[base + s] - mu) * r);
        }
    }
    const double tg = tl_block_sum_d(sg);
    const double tgx = tl_block_sum_d(sgx);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = tg;
        part[(unsigned long long)C * chunks + blockIdx.x] = tgx;
    }
}

extern "C" __global__ void tl_bn_finish_grad(const double* __restrict__ part,
                                             const float* __restrict__ gamma,
                                             float* __restrict__ dgamma, float* __restrict__ dbeta,
                                             double* __restrict__ ma, double* __restrict__ mb,
                                             unsigned C, unsigned chunks, double count) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sg = 0.0, sgx = 0.0;
    for (unsigned k = 0; k < chunks; ++k) {
        sg += part[(unsigned long long)c * chunks + k];
        sgx += part[(unsigned long long)C * chunks + (unsigned long long)c * chunks + k];
    }
    dbeta[c] = (float)sg;
    dgamma[c] = (float)sgx;
    const double gm = gamma[c];
    ma[c] = gm * sg / count;
    mb[c] = gm * sgx / count;
}

extern "C" __global__ void tl_bn_apply_grad(const float* __restrict__ x,
                                            const float* __restrict__ g,
                                            const float* __restrict__ gamma,
                                            const double* __restrict__ mean,
                                            const double* __restrict__ rstd,
                                            const double* __restrict__ ma,
                                            const double* __restrict__ mb,
                                            float* __restrict__ dx, unsigned N, unsigned C,
                                            unsigned S) {
    const unsigned planes = N * C;
    for (unsigned p = blockIdx.x; p < planes; p = tl_next(p, gridDim.x, planes)) {
        const unsigned c = p % C;
        const double mu = mean[c], r = rstd[c], gm = gamma[c], a = ma[c], b = mb[c];
        const unsigned long long base = (unsigned long long)p * S;
        for (unsigned s = threadIdx.x; s < S; s = tl_next(s, blockDim.x, S)) {
            const double xhat = ((double)x[base + s] - mu) * r;
            dx[base + s] = (float)(r * ((double)g[base + s] * gm - a - xhat * b));
        }
    }
}

// ---- layer_norm register path ----------------------------------------------------------------

template <int G, int K, bool RES = false>
__device__ __forceinline__ void tl_ln_fwd_reg(const float* __restrict__ x,
                                              const float* __restrict__ r,
                                              float* __restrict__ sout,
                                              const float* __restrict__ gamma,
                                              const float* __restrict__ beta,
                                              float* __restrict__ y, unsigned rows, unsigned d,
                                              float eps) {
    constexpr unsigned R = TL_BLOCK / G;   // rows per block step
    const unsigned t = threadIdx.x & (G - 1);
    for (unsigned long long step = (unsigned long long)blockIdx.x * R; step < rows;
         step += (unsigned long long)gridDim.x * R) {
        const unsigned long long row = step + threadIdx.x / G;
        const bool on = row < rows;   // an idle group still joins the block's barriers
        const unsigned long long base = row * d;
        float v[K];
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = t + G * k;
            v[k] = (on && j < d) ? tl_ln_in<RES>(x, r, base + j) : 0.0f;
            if (RES && on && j < d) sout[base + j] = v[k];
            s += (double)v[k];
        }
        const double mu = tl_group_sum<G>(s) / d;
        double q = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t + G * k < d) {
                const double c = (double)v[k] - mu;
                q += c * c;
            }
        }
        // one division per row: (v - mu) * (1 / sd) is within 2^-52 relative of (v - mu) / sd
        const double rsd = 1.0 / sqrt(tl_group_sum<G>(q) / d + (double)eps);
        if (!on) continue;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = t + G * k;
            if (j < d)
                y[base + j] = (float)(((double)v[k] - mu) * rsd * (double)gamma[j] + (double)beta[j]);
        }
    }
}

// Warp-per-row forward with 16-byte accesses (the host picks it when d % 4 == 0 and x, gamma,
// beta and y are 16-byte aligned): lane t of a warp holds features 4 (t + 32 k) + c (c < 4, k <
// K4: d <= 128 K4), so every load and store is a float4 and the row's two sums are warp shuffles
// with no block barrier; each warp walks its own rows. The block-per-row variants (b4) spent their
// time in the two barriers per row with a quarter of the row's bytes in flight: on the H200 b4
// ran 8192 x 1024 at 43% of the copy ceiling. Same formulas, in the same operation order, as
// tl_ln_fwd_reg; only the order of the two double sums differs (any order is within the bound:
// header), fixed for a given d.
template <int K4, bool RES = false>
__device__ __forceinline__ void tl_ln_fwd_warp4(const float* __restrict__ x,
                                                const float* __restrict__ r,
                                                float* __restrict__ sout,
                                                const float* __restrict__ gamma,
                                                const float* __restrict__ beta,
                                                float* __restrict__ y, unsigned rows, unsigned d,
                                                float eps) {
    constexpr unsigned W = TL_BLOCK / 32;   // rows per block step, one a warp
    const unsigned lane = threadIdx.x & 31u, d4 = d >> 2;
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    const float4* b4 = reinterpret_cast<const float4*>(beta);
    for (unsigned long long row = (unsigned long long)blockIdx.x * W + threadIdx.x / 32;
         row < rows; row += (unsigned long long)gridDim.x * W) {
        const float4* xr = reinterpret_cast<const float4*>(x + row * d);
        float4* yr = reinterpret_cast<float4*>(y + row * d);
        float4 v[K4];
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < K4; ++k) {
            const unsigned j = lane + 32u * k;
            v[k] = j < d4 ? xr[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);   // zeros add nothing
            if (RES && j < d4) {   // the float32 sum, written once: s = x + r
                const float4 w = reinterpret_cast<const float4*>(r + row * d)[j];
                v[k] = make_float4(v[k].x + w.x, v[k].y + w.y, v[k].z + w.z, v[k].w + w.w);
                reinterpret_cast<float4*>(sout + row * d)[j] = v[k];
            }
            s += ((double)v[k].x + (double)v[k].y) + ((double)v[k].z + (double)v[k].w);
        }
        const double mu = tl_group_sum<32>(s) / d;
        double q = 0.0;
#pragma unroll
        for (int k = 0; k < K4; ++k) {
            if (lane + 32u * k < d4) {
                const double c0 = (double)v[k].x - mu, c1 = (double)v[k].y - mu;
                const double c2 = (double)v[k].z - mu, c3 = (double)v[k].w - mu;
                q += (c0 * c0 + c1 * c1) + (c2 * c2 + c3 * c3);
            }
        }
        const double rsd = 1.0 / sqrt(tl_group_sum<32>(q) / d + (double)eps);
#pragma unroll
        for (int k = 0; k < K4; ++k) {
            const unsigned j = lane + 32u * k;
            if (j < d4) {
                const float4 g = g4[j], b = b4[j];
                yr[j] = make_float4(
                    (float)(((double)v[k].x - mu) * rsd * (double)g.x + (double)b.x),
                    (float)(((double)v[k].y - mu) * rsd * (double)g.y + (double)b.y),
                    (float)(((double)v[k].z - mu) * rsd * (double)g.z + (double)b.z),
                    (float)(((double)v[k].w - mu) * rsd * (double)g.w + (double)b.w));
            }
        }
    }
}

// An L2 prefetch of the line holding p (a hint: no value changes). The row loops below issue it
// for the row a thread takes next, so that row's loads find L2 while this row's group sums and
// barriers run: with two blocks per SM (the register budget) the loop is otherwise bound by
// load latency, not bandwidth. A no-op off the device (the host emulation).
__device__ __forceinline__ void tl_prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// The column sums of a block's R = TL_BLOCK / G groups (group r's thread t holds v[k] for column
// t + G k): staged in shared memory, then each column's R values added in group order and written
// to out[0..d). 8 KiB or 16 KiB of shared memory (R K G <= 2048 doubles for every R > 1 variant).
template <int G, int K>
__device__ __forceinline__ void tl_ln_block_parts(const double (&v)[K], double* __restrict__ out,
                                                  unsigned d) {
    constexpr unsigned R = TL_BLOCK / G, W = G * K;
    __shared__ double stage[R > 1 ? R * W : 1];   // never instantiated for R = 1 in use
    const unsigned t = threadIdx.x & (G - 1), r = threadIdx.x / G;
    __syncthreads();   // a previous call may still read the slots
#pragma unroll
    for (int k = 0; k < K; ++k) stage[r * W + t + G * k] = v[k];
    __syncthreads();
    for (unsigned j = threadIdx.x; j < d; j += TL_BLOCK) {
        double s = stage[j];
        for (unsigned q = 1; q < R; ++q) s += stage[q * W + j];
        out[j] = s;
    }
}

template <int G, int K, bool RES = false>
__device__ __forceinline__ void tl_ln_bwd_reg(const float* __restrict__ x,
                                              const float* __restrict__ gamma,
                                              const float* __restrict__ g,
                                              const float* __restrict__ gs, int has_gs,
                                              float* __restrict__ dx, double* __restrict__ part_g,
                                              double* __restrict__ part_b, unsigned rows,
                                              unsigned d, float eps) {
    constexpr unsigned R = TL_BLOCK / G;
    const unsigned t = threadIdx.x & (G - 1);
    float gm[K];
    double pg[K], pb[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const unsigned j = t + G * k;
        gm[k] = j < d ? gamma[j] : 0.0f;
        pg[k] = pb[k] = 0.0;
    }
    for (unsigned long long step = (unsigned long long)blockIdx.x * R; step < rows;
         step += (unsigned long long)gridDim.x * R) {
        const unsigned long long row = step + threadIdx.x / G;
        const bool on = row < rows;
        const unsigned long long base = row * d;
        const unsigned long long next = row + (unsigned long long)gridDim.x * R;
        if (next < rows) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = t + G * k;
                if (j < d) {   // a warp's 32 addresses coalesce into its one or two lines
                    tl_prefetch_l2(x + next * d + j);
                    tl_prefetch_l2(g + next * d + j);
                }
            }
        }
        float xv[K], gv[K];
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = t + G * k;
            const bool in = on && j < d;
            xv[k] = in ? x[base + j] : 0.0f;
            gv[k] = in ? g[base + j] : 0.0f;
            s += (double)xv[k];
        }
        const double mu = tl_group_sum<G>(s) / d;
        // The squared deviations and both dx sums need only mu: one group sum for the three
        // (two barrier pairs per row, not three). mean(dxhat xhat) = rstd mean(dxhat (x - mu)).
        double q = 0.0, a = 0.0, b = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t + G * k < d) {   // an idle group's zeros add nothing
                const double c = (double)xv[k] - mu;
                const double dxhat = (double)gv[k] * (double)gm[k];
                q += c * c;
                a += dxhat;
                b += dxhat * c;
            }
        }
        tl_group_sum3<G>(q, a, b);
        if (!on) continue;
        const double rstd = 1.0 / sqrt(q / d + (double)eps);
        const double mean_a = a / d, mean_b = b * rstd / d;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = t + G * k;
            if (j < d) {
                const double xhat = ((double)xv[k] - mu) * rstd;
                const double gj = gv[k];
                const double dxhat = gj * (double)gm[k];
                if (RES) {   // add_layer_norm: the sum's own cotangent, before the one rounding
                    const double plus = has_gs ? (double)gs[base + j] : 0.0;
                    dx[base + j] = (float)(rstd * (dxhat - mean_a - xhat * mean_b) + plus);
                } else {
                    dx[base + j] = (float)(rstd * (dxhat - mean_a - xhat * mean_b));
                }
                pg[k] += gj * xhat;
                pb[k] += gj;
            }
        }
    }
    // One partial per block: the R groups' column partials added in group order (a fixed order;
    // R = 1 writes its registers directly). The row loop above is block-uniform, so every thread
    // reaches these barriers.
    const unsigned long long p = blockIdx.x;
    if (R == 1) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = t + G * k;
            if (j < d) {
                part_g[p * d + j] = pg[k];
                part_b[p * d + j] = pb[k];
            }
        }
        return;
    }
    tl_ln_block_parts<G, K>(pg, part_g + p * d, d);
    tl_ln_block_parts<G, K>(pb, part_b + p * d, d);
}

// dgamma[j] = sum_p part_g[p][j], dbeta likewise, p = 0 .. parts-1: a block takes a tile of 32
// columns (lane = column) and its eight warps the parts w, w + 8, ... (serially, in order); the
// eight warp sums are then added in warp order. The order depends on (parts, d) alone.
extern "C" __global__ void tl_layer_norm_bwd_cols(const double* __restrict__ part_g,
                                                  const double* __restrict__ part_b,
                                                  float* __restrict__ dgamma,
                                                  float* __restrict__ dbeta, unsigned parts,
                                                  unsigned d) {
    constexpr unsigned WARPS = TL_BLOCK / 32;
    __shared__ double sg[WARPS][32], sb[WARPS][32];
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    for (unsigned tile = blockIdx.x; tile * 32u < d; tile += gridDim.x) {
        const unsigned j = tile * 32u + lane;
        double ag = 0.0, ab = 0.0;
        if (j < d) {
            unsigned p = w;
            // eight parts' loads in flight before their adds (the adds stay in part order): the
            // few blocks of a narrow d are otherwise bound by load latency
            constexpr unsigned U = 8;
            for (; p + (U - 1) * WARPS < parts; p += U * WARPS) {
                double vg[U], vb[U];
#pragma unroll
                for (unsigned u = 0; u < U; ++u) {
                    const unsigned long long at = (unsigned long long)(p + u * WARPS) * d + j;
                    vg[u] = part_g[at];
                    vb[u] = part_b[at];
                }
#pragma unroll
                for (unsigned u = 0; u < U; ++u) {
                    ag += vg[u];
                    ab += vb[u];
                }
            }
            for (; p < parts; p += WARPS) {
                ag += part_g[(unsigned long long)p * d + j];
                ab += part_b[(unsigned long long)p * d + j];
            }
        }
        __syncthreads();   // the previous tile's sums have been read
        sg[w][lane] = ag;
        sb[w][lane] = ab;
        __syncthreads();
        if (w == 0 && j < d) {
            double tg = sg[0][lane], tb = sb[0][lane];
            for (unsigned q = 1; q < WARPS; ++q) { tg += sg[q][lane]; tb += sb[q][lane]; }
            dgamma[j] = (float)tg;
            dbeta[j] = (float)tb;
        }
    }
}

#define TL_LN_FWD_REG(name, G, K)                                                               \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const float* __restrict__ gamma,                          \
        const float* __restrict__ beta, float* __restrict__ y, unsigned rows, unsigned d,      \
        float eps) {                                                                           \
        tl_ln_fwd_reg<G, K>(x, nullptr, nullptr, gamma, beta, y, rows, d, eps);               \
    }
#define TL_LN_BWD_REG(name, G, K)                                                               \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const float* __restrict__ gamma,                          \
        const float* __restrict__ g, float* __restrict__ dx, double* __restrict__ part_g,      \
        double* __restrict__ part_b, unsigned rows, unsigned d, float eps) {                   \
        tl_ln_bwd_reg<G, K>(x, gamma, g, nullptr, 0, dx, part_g, part_b, rows, d, eps);       \
    }

#define TL_LN_FWD_WARP4(name, K4)                                                               \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const float* __restrict__ gamma,                          \
        const float* __restrict__ beta, float* __restrict__ y, unsigned rows, unsigned d,      \
        float eps) {                                                                           \
        tl_ln_fwd_warp4<K4>(x, nullptr, nullptr, gamma, beta, y, rows, d, eps);               \
    }

TL_LN_FWD_REG(tl_layer_norm_fwd_w8, 32, 8)
TL_LN_FWD_REG(tl_layer_norm_fwd_b4, TL_BLOCK, 4)
TL_LN_FWD_REG(tl_layer_norm_fwd_b8, TL_BLOCK, 8)
TL_LN_FWD_REG(tl_layer_norm_fwd_b32, TL_BLOCK, 32)
TL_LN_FWD_WARP4(tl_layer_norm_fwd_v4, 4)
TL_LN_FWD_WARP4(tl_layer_norm_fwd_v8, 8)
TL_LN_BWD_REG(tl_layer_norm_bwd_w8, 32, 8)
TL_LN_BWD_REG(tl_layer_norm_bwd_q4, 128, 4)
TL_LN_BWD_REG(tl_layer_norm_bwd_q8, 128, 8)
TL_LN_BWD_REG(tl_layer_norm_bwd_b8, TL_BLOCK, 8)
TL_LN_BWD_REG(tl_layer_norm_bwd_b16, TL_BLOCK, 16)

// add_layer_norm (the residual add and layer norm of a pre-norm block, one pass): the same
// variants with the sum s = x + r formed as the row is loaded and written to sout (forward), and
// the sum's cotangent gs added to dx before its rounding (backward; x is then the saved s).
#define TL_ADD_LN_FWD_REG(name, G, K)                                                           \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const float* __restrict__ r, float* __restrict__ sout,    \
        const float* __restrict__ gamma, const float* __restrict__ beta,                       \
        float* __restrict__ y, unsigned rows, unsigned d, float eps) {                         \
        tl_ln_fwd_reg<G, K, true>(x, r, sout, gamma, beta, y, rows, d, eps);                  \
    }
#define TL_ADD_LN_FWD_WARP4(name, K4)                                                           \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const float* __restrict__ r, float* __restrict__ sout,    \
        const float* __restrict__ gamma, const float* __restrict__ beta,                       \
        float* __restrict__ y, unsigned rows, unsigned d, float eps) {                         \
        tl_ln_fwd_warp4<K4, true>(x, r, sout, gamma, beta, y, rows, d, eps);                  \
    }
#define TL_ADD_LN_BWD_REG(name, G, K)                                                           \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ s, const float* __restrict__ gamma,                          \
        const float* __restrict__ g, const float* __restrict__ gs, int has_gs,                 \
        float* __restrict__ dx, double* __restrict__ part_g, double* __restrict__ part_b,      \
        unsigned rows, unsigned d, float eps) {                                                \
        tl_ln_bwd_reg<G, K, true>(s, gamma, g, gs, has_gs, dx, part_g, part_b, rows, d, eps); \
    }

TL_ADD_LN_FWD_REG(tl_add_layer_norm_fwd_w8, 32, 8)
TL_ADD_LN_FWD_REG(tl_add_layer_norm_fwd_b4, TL_BLOCK, 4)
TL_ADD_LN_FWD_REG(tl_add_layer_norm_fwd_b8, TL_BLOCK, 8)
TL_ADD_LN_FWD_REG(tl_add_layer_norm_fwd_b32, TL_BLOCK, 32)
TL_ADD_LN_FWD_WARP4(tl_add_layer_norm_fwd_v4, 4)
TL_ADD_LN_FWD_WARP4(tl_add_layer_norm_fwd_v8, 8)
TL_ADD_LN_BWD_REG(tl_add_layer_norm_bwd_w8, 32, 8)
TL_ADD_LN_BWD_REG(tl_add_layer_norm_bwd_q4, 128, 4)
TL_ADD_LN_BWD_REG(tl_add_layer_norm_bwd_q8, 128, 8)
TL_ADD_LN_BWD_REG(tl_add_layer_norm_bwd_b8, TL_BLOCK, 8)
TL_ADD_LN_BWD_REG(tl_add_layer_norm_bwd_b16, TL_BLOCK, 16)
