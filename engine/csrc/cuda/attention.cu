// Scaled dot-product attention with hard masks: the direct fused kernels of the capsule
// native_cuda.direct_attention (forward and backend VJP), and the NaN fix-up of
// torchlean.composed_attention (engine/providers/composed.py).
//
// Layout: q [B][Lq][d], k [B][Lk][d], v [B][Lk][dv], g and out [B][Lq][dv], mask [B][Lq][Lk] bool
// bytes or null (no mask). Mask true = the key participates; false = exactly zero weight: a blocked
// entry is ignored entirely, forward and VJP (its score, and q, k, v or g data used only by blocked
// entries, even inf or NaN, take no part), as conformance/references/scaled_dot_product_attention.py
// defines. A query row with no participant gives +0 outputs and +0 dq; a key no query attends
// gets +0 dk and dv. Signed zeros: out and dv start their sums at -0 (so an all -0 sum stays -0),
// an exact zero dq or dk is +0.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. Expects TL_BLOCK (default 256 = 8 warps; blockDim.x must equal it). Every
// value is evaluated in double from the float inputs (products of floats are exact in double;
// libdevice's exp within a few double ulps) and rounded once to float. Every sum has a fixed
// order (lanes over the feature axis then an xor-shuffle tree, or a serial loop): bitwise
// repeatable. Dynamic shared memory holds a tile's scores (host side: engine/providers/
// native_cuda/attention.py picks the tile heights so a block stays within 48 KiB).
//
//   tl_attn_fwd_1 tl_attn_fwd_2 tl_attn_fwd_4 tl_attn_fwd_8 (TQ = the suffix):
//       (q, k, v, mask, out, B, Lq, Lk, d, dv, scale)
//       one block per tile of TQ query rows of one batch entry (grid-stride over B * tiles): the
//       rows' scores s = scale * q k^T into shared memory (warp per key), the hard-masked softmax
//       of each row (warp per row), then out = sum over participating keys of p v (serial in j).
//       Shared: TQ * Lk doubles + TQ * d floats.
//   tl_attn_bwd_rows_1 tl_attn_bwd_rows_2 tl_attn_bwd_rows_4 tl_attn_bwd_rows_8:
//       (q, k, v, mask, g, dq, stats, B, Lq, Lk, d, dv, scale)
//       per tile of query rows: p as the forward, dP = g v^T (0 where blocked), D = sum dP p,
//       dS = p (dP - D), dq = scale * dS k; stats[(b Lq + i) * 3 + {0,1,2}] = (m, sum, D) of each
//       row for the column pass. Shared: TQ * (2 Lk doubles + d floats + dv floats).
//   tl_attn_bwd_cols_1 tl_attn_bwd_cols_2 tl_attn_bwd_cols_4 tl_attn_bwd_cols_8 (TK):
//       (q, k, v, mask, g, stats, dk, dv_out, B, Lq, Lk, d, dv, scale)
//       one block per tile of TK keys: for query rows in chunks of TL_QC it recomputes p and dS
//       from the stats and accumulates dk = scale * dS^T q and dv = p^T g in double (each output
//       owned by one thread: a left fold over the query rows). Shared: TK * (d + dv) *
//       (4 + 8) bytes + 2 * TL_QC * TK doubles + (TL_QC + 1) * TK flag bytes.
//   tl_attn_fixup(out, p, v, mask, B, Lq, Lk, dv)   composed attention: an output that the GEMM
//       p v made NaN is recomputed as the sum over participating keys only (a blocked key's inf
//       or NaN in v must not leak through 0 * v); other outputs are left as they are.

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"
#define TL_WARPS (TL_BLOCK / 32)
#define TL_QC 32

typedef unsigned long long tl_u64;

__device__ __forceinline__ double tl_warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Hard-masked softmax of one row of scores in place (one warp); returns (m, sum) in stats when
// given. A row with no participant becomes zeros, with m = sum = 0.
__device__ __forceinline__ void tl_warp_softmax(double* pr, const unsigned char* mr, unsigned Lk,
                                                double* stats) {
    const unsigned lane = threadIdx.x & 31u;
    double m = 0.0;
    unsigned jm = TL_NONE;
    for (unsigned j = lane; j < Lk; j += 32) {
        if (!mr || mr[j]) tl_pick(m, jm, pr[j], j);
    }
    for (int off = 16; off > 0; off >>= 1) {
        const double m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const unsigned j2 = __shfl_xor_sync(0xffffffffu, jm, off);
        tl_pick(m, jm, m2, j2);
    }
    if (jm == TL_NONE) {
        for (unsigned j = lane; j < Lk; j += 32) pr[j] = 0.0;
        if (stats && lane == 0) { stats[0] = 0.0; stats[1] = 0.0; }
        return;
    }
    double s = 0.0;
    for (unsigned j = lane; j < Lk; j += 32) {
        if (!mr || mr[j]) s += exp(pr[j] - m);
    }
    s = tl_warp_sum(s);
    for (unsigned j = lane; j < Lk; j += 32) pr[j] = (!mr || mr[j]) ? exp(pr[j] - m) / s : 0.0;
    if (stats && lane == 0) { stats[0] = m; stats[1] = s; }
}

// dst[r][j] = scale * sum_c a[r][c] b[j][c] for r < nr, j < L (warp per j, lanes over c).
template <int TQ>
__device__ __forceinline__ void tl_row_dots(const float* a, const float* __restrict__ b,
                                            unsigned nr, unsigned L, unsigned n, double scale,
                                            double* dst) {
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    for (unsigned j = warp; j < L; j += TL_WARPS) {
        const float* bj = b + (tl_u64)j * n;
        double acc[TQ];
#pragma unroll
        for (int r = 0; r < TQ; ++r) acc[r] = 0.0;
        for (unsigned c = lane; c < n; c += 32) {
            const double bv = bj[c];
#pragma unroll
            for (int r = 0; r < TQ; ++r) {
                if (r < (int)nr) acc[r] += (double)a[r * n + c] * bv;
            }
        }
#pragma unroll
        for (int r = 0; r < TQ; ++r) {
            const double t = tl_warp_sum(acc[r]);
            if (lane == 0 && r < (int)nr) dst[(tl_u64)r * L + j] = t * scale;
        }
    }
}

template <int TQ>
__device__ __forceinline__ void tl_attn_fwd(const float* __restrict__ q,
                                            const float* __restrict__ k,
                                            const float* __restrict__ v,
                                            const unsigned char* __restrict__ mask,
                                            float* __restrict__ out, unsigned B, unsigned Lq,
                                            unsigned Lk, unsigned d, unsigned dv, float scale) {
    extern __shared__ double tl_smem[];
    double* p = tl_smem;                                        // [TQ][Lk]
    float* qs = reinterpret_cast<float*>(p + (tl_u64)TQ * Lk);  // [TQ][d]
    const unsigned tiles = (Lq + TQ - 1) / TQ, warp = threadIdx.x >> 5;
    for (unsigned blk = blockIdx.x; blk < B * tiles; blk += gridDim.x) {
        const unsigned b = blk / tiles, i0 = (blk - b * tiles) * TQ;
        const unsigned nr = (Lq - i0 < (unsigned)TQ) ? Lq - i0 : (unsigned)TQ;
        const tl_u64 row0 = (tl_u64)b * Lq + i0;
        __syncthreads();   // the previous tile is done with shared memory
        for (unsigned t = threadIdx.x; t < nr * d; t += blockDim.x) qs[t] = q[row0 * d + t];
        __syncthreads();
        tl_row_dots<TQ>(qs, k + (tl_u64)b * Lk * d, nr, Lk, d, (double)scale, p);
        __syncthreads();
        if (warp < nr) {
            tl_warp_softmax(p + (tl_u64)warp * Lk, mask ? mask + (row0 + warp) * Lk : nullptr,
                            Lk, nullptr);
        }
        __syncthreads();
        const float* vb = v + (tl_u64)b * Lk * dv;
        for (unsigned o = threadIdx.x; o < nr * dv; o += blockDim.x) {
            const unsigned r = o / dv, c = o - r * dv;
            const unsigned char* mr = mask ? mask + (row0 + r) * Lk : nullptr;
            const double* pr = p + (tl_u64)r * Lk;
            double acc = -0.0;
            bool any = false;
            for (unsigned j = 0; j < Lk; ++j) {
                if (!mr || mr[j]) {
                    acc += pr[j] * (double)vb[(tl_u64)j * dv + c];
                    any = true;
                }
            }
            out[(row0 + r) * dv + c] = any ? (float)acc : 0.0f;
        }
    }
}

template <int TQ>
__device__ __forceinline__ void tl_attn_bwd_rows(const float* __restrict__ q,
                                                 const float* __restrict__ k,
                                                 const float* __restrict__ v,
                                                 const unsigned char* __restrict__ mask,
                                                 const float* __restrict__ g,
                                                 float* __restrict__ dq, double* __restrict__ stats,
                                                 unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                                 unsigned dv, float scale) {
    extern __shared__ double tl_smem[];
    double* p = tl_smem;                                           // [TQ][Lk]
    double* dp = p + (tl_u64)TQ * Lk;                              // [TQ][Lk]: dP, then dS
    float* qs = reinterpret_cast<float*>(dp + (tl_u64)TQ * Lk);    // [TQ][d]
    float* gs = qs + (tl_u64)TQ * d;                               // [TQ][dv]
    const unsigned tiles = (Lq + TQ - 1) / TQ, warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    for (unsigned blk = blockIdx.x; blk < B * tiles; blk += gridDim.x) {
        const unsigned b = blk / tiles, i0 = (blk - b * tiles) * TQ;
        const unsigned nr = (Lq - i0 < (unsigned)TQ) ? Lq - i0 : (unsigned)TQ;
        const tl_u64 row0 = (tl_u64)b * Lq + i0;
        __syncthreads();
        for (unsigned t = threadIdx.x; t < nr * d; t += blockDim.x) qs[t] = q[row0 * d + t];
        for (unsigned t = threadIdx.x; t < nr * dv; t += blockDim.x) gs[t] = g[row0 * dv + t];
        __syncthreads();
        tl_row_dots<TQ>(qs, k + (tl_u64)b * Lk * d, nr, Lk, d, (double)scale, p);
        tl_row_dots<TQ>(gs, v + (tl_u64)b * Lk * dv, nr, Lk, dv, 1.0, dp);
        __syncthreads();
        if (warp < nr) {
            const unsigned char* mr = mask ? mask + (row0 + warp) * Lk : nullptr;
            double* pr = p + (tl_u64)warp * Lk;
            double* dpr = dp + (tl_u64)warp * Lk;
            double* st = stats + (row0 + warp) * 3;
            tl_warp_softmax(pr, mr, Lk, st);
            double s = 0.0;
            for (unsigned j = lane; j < Lk; j += 32) {
                if (!mr || mr[j]) s += dpr[j] * pr[j];   // blocked keys take no part in D
            }
            const double D = tl_warp_sum(s);
            for (unsigned j = lane; j < Lk; j += 32) {
                dpr[j] = (!mr || mr[j]) ? pr[j] * (dpr[j] - D) : 0.0;
            }
            if (lane == 0) st[2] = D;
        }
        __syncthreads();
        const float* kb = k + (tl_u64)b * Lk * d;
        for (unsigned o = threadIdx.x; o < nr * d; o += blockDim.x) {
            const unsigned r = o / d, c = o - r * d;
            const unsigned char* mr = mask ? mask + (row0 + r) * Lk : nullptr;
            const double* dsr = dp + (tl_u64)r * Lk;
            double acc = 0.0;
            for (unsigned j = 0; j < Lk; ++j) {
                if (!mr || mr[j]) acc += dsr[j] * (double)kb[(tl_u64)j * d + c];
            }
            dq[(row0 + r) * d + c] = (acc == 0.0) ? 0.0f : (float)(acc * (double)scale);
        }
    }
}

template <int TK>
__device__ __forceinline__ void tl_attn_bwd_cols(const float* __restrict__ q,
                                                 const float* __restrict__ k,
                                                 const float* __restrict__ v,
                                                 const unsigned char* __restrict__ mask,
                                                 const float* __restrict__ g,
                                                 const double* __restrict__ stats,
                                                 float* __restrict__ dk, float* __restrict__ dvo,
                                                 unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                                 unsigned dv, float scale) {
    extern __shared__ double tl_smem[];
    double* acc_k = tl_smem;                                       // [TK][d]
    double* acc_v = acc_k + (tl_u64)TK * d;                        // [TK][dv]
    double* pc = acc_v + (tl_u64)TK * dv;                          // [TL_QC][TK]
    double* dsc = pc + TL_QC * TK;                                 // [TL_QC][TK]
    float* ks = reinterpret_cast<float*>(dsc + TL_QC * TK);        // [TK][d]
    float* vs = ks + (tl_u64)TK * d;                               // [TK][dv]
    unsigned char* on = reinterpret_cast<unsigned char*>(vs + (tl_u64)TK * dv);  // [TL_QC][TK]
    unsigned char* seen = on + TL_QC * TK;                         // [TK]: some query attends
    const unsigned tiles = (Lk + TK - 1) / TK, warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    for (unsigned blk = blockIdx.x; blk < B * tiles; blk += gridDim.x) {
        const unsigned b = blk / tiles, j0 = (blk - b * tiles) * TK;
        const unsigned nk = (Lk - j0 < (unsigned)TK) ? Lk - j0 : (unsigned)TK;
        const tl_u64 key0 = (tl_u64)b * Lk + j0;
        __syncthreads();
        for (unsigned t = threadIdx.x; t < nk * d; t += blockDim.x) {
            ks[t] = k[key0 * d + t];
            acc_k[t] = 0.0;
        }
        for (unsigned t = threadIdx.x; t < nk * dv; t += blockDim.x) {
            vs[t] = v[key0 * dv + t];
            acc_v[t] = -0.0;
        }
        for (unsigned t = threadIdx.x; t < nk; t += blockDim.x) seen[t] = 0;
        for (unsigned i0 = 0; i0 < Lq; i0 += TL_QC) {
            const unsigned nq = (Lq - i0 < TL_QC) ? Lq - i0 : TL_QC;
            const tl_u64 row0 = (tl_u64)b * Lq + i0;
            __syncthreads();   // tiles loaded; the previous chunk's p and dS consumed
            for (unsigned pair = warp; pair < nq * nk; pair += TL_WARPS) {
                const unsigned i = pair / nk, jj = pair - i * nk;
                const float* qi = q + (row0 + i) * d;
                const float* gi = g + (row0 + i) * dv;
                double s = 0.0, t = 0.0;
                for (unsigned c = lane; c < d; c += 32) s += (double)qi[c] * (double)ks[jj * d + c];
                for (unsigned c = lane; c < dv; c += 32) t += (double)gi[c] * (double)vs[jj * dv + c];
                s = tl_warp_sum(s) * (double)scale;
                t = tl_warp_sum(t);
                if (lane == 0) {
                    const bool part = !mask || mask[(row0 + i) * Lk + j0 + jj];
                    const double* st = stats + (row0 + i) * 3;
                    const double pij = part ? exp(s - st[0]) / st[1] : 0.0;
                    on[i * TK + jj] = part;
                    pc[i * TK + jj] = pij;
                    dsc[i * TK + jj] = part ? pij * (t - st[2]) : 0.0;
                    if (part) seen[jj] = 1;
                }
            }
            __syncthreads();
            for (unsigned o = threadIdx.x; o < nk * d; o += blockDim.x) {
                const unsigned jj = o / d, c = o - jj * d;
                double a = acc_k[o];
                for (unsigned i = 0; i < nq; ++i) {
                    if (on[i * TK + jj]) a += dsc[i * TK + jj] * (double)q[(row0 + i) * d + c];
                }
                acc_k[o] = a;
            }
            for (unsigned o = threadIdx.x; o < nk * dv; o += blockDim.x) {
                const unsigned jj = o / dv, c = o - jj * dv;
                double a = acc_v[o];
                for (unsigned i = 0; i < nq; ++i) {
                    if (on[i * TK + jj]) a += pc[i * TK + jj] * (double)g[(row0 + i) * dv + c];
                }
                acc_v[o] = a;
            }
        }
        __syncthreads();   // `seen` is complete
        for (unsigned o = threadIdx.x; o < nk * d; o += blockDim.x) {
            const double a = acc_k[o];
            dk[key0 * d + o] = (a == 0.0) ? 0.0f : (float)(a * (double)scale);
        }
        for (unsigned o = threadIdx.x; o < nk * dv; o += blockDim.x) {
            dvo[key0 * dv + o] = seen[o / dv] ? (float)acc_v[o] : 0.0f;
        }
    }
}

#define TL_ATTN_FWD(name, T)                                                                      \
    extern "C" __global__ void name(const float* q, const float* k, const float* v,              \
                                    const unsigned char* mask, float* out, unsigned B,           \
                                    unsigned Lq, unsigned Lk, unsigned d, unsigned dv,           \
                                    float scale) {                                               \
        tl_attn_fwd<T>(q, k, v, mask, out, B, Lq, Lk, d, dv, scale);                             \
    }
#define TL_ATTN_ROWS(name, T)                                                                     \
    extern "C" __global__ void name(const float* q, const float* k, const float* v,              \
                                    const unsigned char* mask, const float* g, float* dq,        \
                                    double* stats, unsigned B, unsigned Lq, unsigned Lk,         \
                                    unsigned d, unsigned dv, float scale) {                      \
        tl_attn_bwd_rows<T>(q, k, v, mask, g, dq, stats, B, Lq, Lk, d, dv, scale);               \
    }
#define TL_ATTN_COLS(name, T)                                                                     \
    extern "C" __global__ void name(const float* q, const float* k, const float* v,              \
                                    const unsigned char* mask, const float* g,                   \
                                    const double* stats, float* dk, float* dvo, unsigned B,      \
                                    unsigned Lq, unsigned Lk, unsigned d, unsigned dv,           \
                                    float scale) {                                               \
        tl_attn_bwd_cols<T>(q, k, v, mask, g, stats, dk, dvo, B, Lq, Lk, d, dv, scale);          \
    }

TL_ATTN_FWD(tl_attn_fwd_1, 1)
TL_ATTN_FWD(tl_attn_fwd_2, 2)
TL_ATTN_FWD(tl_attn_fwd_4, 4)
TL_ATTN_FWD(tl_attn_fwd_8, 8)
TL_ATTN_ROWS(tl_attn_bwd_rows_1, 1)
TL_ATTN_ROWS(tl_attn_bwd_rows_2, 2)
TL_ATTN_ROWS(tl_attn_bwd_rows_4, 4)
TL_ATTN_ROWS(tl_attn_bwd_rows_8, 8)
TL_ATTN_COLS(tl_attn_bwd_cols_1, 1)
TL_ATTN_COLS(tl_attn_bwd_cols_2, 2)
TL_ATTN_COLS(tl_attn_bwd_cols_4, 4)
TL_ATTN_COLS(tl_attn_bwd_cols_8, 8)

extern "C" __global__ void tl_attn_fixup(float* __restrict__ out, const float* __restrict__ p,
                                         const float* __restrict__ v,
                                         const unsigned char* __restrict__ mask, unsigned B,
                                         unsigned Lq, unsigned Lk, unsigned dv) {
    const tl_u64 n = (tl_u64)B * Lq * dv;
    const tl_u64 stride = (tl_u64)blockDim.x * gridDim.x;
    for (tl_u64 t = (tl_u64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        if (out[t] == out[t]) continue;
        const tl_u64 row = t / dv;
        const unsigned c = (unsigned)(t - row * dv);
        const tl_u64 b = row / Lq;
        double acc = 0.0;
        for (unsigned j = 0; j < Lk; ++j) {
            if (mask[row * Lk + j]) acc += (double)p[row * Lk + j] * (double)v[(b * Lk + j) * dv + c];
        }
        out[t] = (float)acc;
    }
}
