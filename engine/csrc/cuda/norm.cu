// layer_norm and batch_norm: one forward kernel and one backward kernel each (dx, dgamma and dbeta
// from one launch), with two-pass statistics: the mean, then the mean of squared deviations.
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
//   tl_layer_norm_bwd(x, gamma, g, dx, part_g, part_b, ticket, dgamma, dbeta, rows, d, eps)
//       block b takes rows b, b + G, ... (G = gridDim.x <= rows) and keeps its column partials of
//       g xhat and g in part_g[b][d], part_b[b][d] (double; thread t owns columns t, t + TL_BLOCK..,
//       so no two threads touch one slot); the block that takes the last ticket (ticket: one
//       zeroed unsigned) sums the G partials of each column in block order and rounds once.
//   tl_batch_norm_fwd(x, gamma, beta, y, N, C, S, eps)    x [N][C][S]; block per channel
//   tl_batch_norm_bwd(x, gamma, g, dx, dgamma, dbeta, N, C, S, eps)  block per channel: the
//       channel's four sums and dx in one block, no cross-block step

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"

extern "C" __global__ void tl_layer_norm_fwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ beta, float* __restrict__ y,
                                             unsigned rows, unsigned d, float eps) {
    for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (unsigned long long)r * d;
        float* yr = y + (unsigned long long)r * d;
        double s = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) s += (double)xr[j];
        const double mu = tl_block_sum_d(s) / d;
        double q = 0.0;
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            const double c = (double)xr[j] - mu;
            q += c * c;
        }
        const double sd = sqrt(tl_block_sum_d(q) / d + (double)eps);
        for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
            yr[j] = (float)(((double)xr[j] - mu) / sd * (double)gamma[j] + (double)beta[j]);
        }
    }
}

extern "C" __global__ void tl_layer_norm_bwd(const float* __restrict__ x,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ g, float* __restrict__ dx,
                                             double* __restrict__ part_g,
                                             double* __restrict__ part_b,
                                             unsigned* __restrict__ ticket,
                                             float* __restrict__ dgamma,
                                             float* __restrict__ dbeta, unsigned rows, unsigned d,
                                             float eps) {
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
            dxr[j] = (float)(rstd * (dxhat - mean_a - xhat * mean_b));
        }
        first = false;
    }
    // The last block to finish sums every block's partials, column by column in block order.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = (atomicAdd(ticket, 1u) == gridDim.x - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (unsigned j = threadIdx.x; j < d; j += blockDim.x) {
        double sg = 0.0, sb = 0.0;
        for (unsigned k = 0; k < gridDim.x; ++k) {
            sg += __ldcg(part_g + (unsigned long long)k * d + j);
            sb += __ldcg(part_b + (unsigned long long)k * d + j);
        }
        dgamma[j] = (float)sg;
        dbeta[j] = (float)sb;
    }
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
