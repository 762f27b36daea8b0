// softmax, log_softmax and hard-masked softmax along one axis, forward and VJP: rows held in
// registers (a warp or a block per row, one read and one write) when the axis is last and
// contiguous and n <= 8192, one block per row with three passes over memory otherwise.
//
// engine/providers/native_cuda/softmax.py views the input as [outer][n][inner] (the axis in the
// middle); row r = (o, i) holds the n elements at ((o * n + j) * inner + i), j = 0 .. n-1.
//
// General path (any inner; the only path for inner > 1 or n > 8192): one block per row, rows
// r = blockIdx.x, blockIdx.x + gridDim.x, ... (blockDim.x = TL_BLOCK, a multiple of 32); three
// passes over the row (max, sum, write), the exp evaluated in the sum and again for the write.
//
// Register path (inner == 1): a group of G threads takes a row (G = 32: a warp, TL_BLOCK / 32 rows
// per block; G = TL_BLOCK: the block), thread t of the group holds entries j = t + G k, k < K
// (coalesced loads; n <= G K), reads them once, keeps exp(x - m) in registers and writes once.
// Variants (suffix: w = warp, b = block; K): w2 n <= 64, w8 n <= 256, w32 (forward) and b4 (VJP)
// n <= 1024, b8 n <= 2048, b32 n <= 8192. A forward thread's K loads are issued first with no branch between them (an index past
// the row's end reads the row's last entry, ignored), so all are in flight at once. The max is an
// fmax of the float (or scale * float, exact in double) values with a separate NaN flag (exact:
// the same m as the general path's argmax); each exp once per element; the sums in double in a
// fixed order: per thread over k, xor-shuffle tree in each warp, warps in order. Both paths are
// bitwise repeatable run to run.
//
// The float64 kernels below are the accurate variants' forwards (native_cuda.softmax.accurate,
// native_cuda.log_softmax.accurate) and every capsule's VJP; the plain capsules' forward takes
// the float32 kernels of tl_softmax_f32.cuh where a row fits in registers, these beyond.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. Expects TL_BLOCK (default 256). Every value is evaluated in double from the
// float inputs (libdevice's exp and log1p, a few double ulps each; the register forward's exp is
// tl_exp_nonpos of tl_rows.cuh, within 2^-50 relative, and its quotient e * (1/total)) and
// rounded once to float: the rounding keeps subnormals (--ftz=false).
//
// Semantics (docs/OPS.md, engine/providers/reference.py): m is the row's max (NaN if any entry is
// NaN), so a NaN or +inf entry, or a row of -inf, makes the row NaN as the IEEE formula does.
// Hard masks (mask = bool bytes of the row's layout): true = participates; false = exactly zero
// numerator (the entry never enters max or sum); a row with no participant is all +0.
//
//   tl_softmax_fwd(x, out, rows, n, inner)                   out = exp(x - m) / sum exp(x - m)
//   tl_log_softmax_fwd(x, out, rows, n, inner)               out = x - m - log1p(rest), rest = the
//       sum of exp(x - m) without the first max entry's 1 (as the reference: keeps tiny outputs)
//   tl_masked_softmax_fwd(x, mask, out, rows, n, inner, scale)   over the participants of
//       scale * x (a null mask: all participate); scale = 1 for the op, composed attention
//       passes its score scale (the product of two floats is exact in double)
//   tl_softmax_bwd(s, g, gx, rows, n, inner)                 gx = s (g - sum g s), s = the output
//   tl_log_softmax_bwd(y, g, gx, rows, n, inner)             gx = g - exp(y) sum g
//   tl_masked_softmax_bwd(s, g, mask, gx, rows, n, inner)    gx = mask ? s (g - sum g s) : +0,
//       the sum over participants only
// Fast float32 forwards (tl_softmax_f32.cuh: the plain capsules' register path; error analysis
// there), the register-path arguments; suffix and K as below, b16 n <= 4096; the v variants
// move float4 (n % 4 == 0, 16-byte aligned x and out), C float4 per thread: wv2 n <= 256, wv8
// n <= 1024, bv2 n <= 2048, bv4 n <= 4096, bv8 n <= 8192:
//   tl_softmax_f32_w2 tl_softmax_f32_w8 tl_softmax_f32_w32 tl_softmax_f32_b8 tl_softmax_f32_b16
//   tl_softmax_f32_b32 tl_log_softmax_f32_w2 tl_log_softmax_f32_w8 tl_log_softmax_f32_w32
//   tl_log_softmax_f32_b8 tl_log_softmax_f32_b16 tl_log_softmax_f32_b32
//   tl_softmax_f32_wv2 tl_softmax_f32_wv8 tl_softmax_f32_bv2 tl_softmax_f32_bv4
//   tl_softmax_f32_bv8 tl_log_softmax_f32_wv2 tl_log_softmax_f32_wv8 tl_log_softmax_f32_bv2
//   tl_log_softmax_f32_bv4 tl_log_softmax_f32_bv8
// Register-path variants, the same arguments without inner (rows of n contiguous entries):
//   tl_softmax_fwd_w2 tl_softmax_fwd_w8 tl_softmax_fwd_w32 tl_softmax_fwd_b8 tl_softmax_fwd_b32
//   tl_log_softmax_fwd_w2 tl_log_softmax_fwd_w8 tl_log_softmax_fwd_w32 tl_log_softmax_fwd_b8
//   tl_log_softmax_fwd_b32 tl_masked_softmax_fwd_w2 tl_masked_softmax_fwd_w8
//   tl_masked_softmax_fwd_w32 tl_masked_softmax_fwd_b8 tl_masked_softmax_fwd_b32
//   tl_softmax_bwd_w2 tl_softmax_bwd_w8 tl_softmax_bwd_b4 tl_softmax_bwd_b8 tl_softmax_bwd_b32
//   tl_log_softmax_bwd_w2 tl_log_softmax_bwd_w8 tl_log_softmax_bwd_b4 tl_log_softmax_bwd_b8
//   tl_log_softmax_bwd_b32 tl_masked_softmax_bwd_w2 tl_masked_softmax_bwd_w8
//   tl_masked_softmax_bwd_b4 tl_masked_softmax_bwd_b8 tl_masked_softmax_bwd_b32
// The plain log_softmax capsule's VJP register variants (exp(y) by expf, see F32EXP below):
//   tl_log_softmax_bwd_f32_w2 tl_log_softmax_bwd_f32_w8 tl_log_softmax_bwd_f32_b4
//   tl_log_softmax_bwd_f32_b8 tl_log_softmax_bwd_f32_b32

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"
#include "tl_rows.cuh"

__device__ __forceinline__ unsigned long long tl_at(unsigned row, unsigned j, unsigned n,
                                                    unsigned inner) {
    const unsigned o = row / inner, i = row - o * inner;
    return ((unsigned long long)o * n + j) * inner + i;
}

// Block-wide argmax; every thread returns the same (v, i).
__device__ __forceinline__ void tl_block_argmax(double& v, unsigned& i) {
    __shared__ double sv[TL_BLOCK / 32];
    __shared__ unsigned si[TL_BLOCK / 32];
    for (int off = 16; off > 0; off >>= 1) {
        const double v2 = __shfl_xor_sync(0xffffffffu, v, off);
        const unsigned i2 = __shfl_xor_sync(0xffffffffu, i, off);
        tl_pick(v, i, v2, i2);
    }
    __syncthreads();   // the shared slots may still be read by a previous call
    if ((threadIdx.x & 31u) == 0) { sv[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
    __syncthreads();
    v = sv[0];
    i = si[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) tl_pick(v, i, sv[w], si[w]);
}

// MODE 0: softmax, 1: log_softmax, 2: hard-masked softmax (null mask: every entry participates).
template <int MODE>
__device__ __forceinline__ void tl_softmax_rows(const float* __restrict__ x,
                                                const unsigned char* __restrict__ mask,
                                                float* __restrict__ out, unsigned rows, unsigned n,
                                                unsigned inner, double scale) {
    for (unsigned row = blockIdx.x; row < rows; row += gridDim.x) {
        double m = 0.0;
        unsigned jm = TL_NONE;
        for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned long long at = tl_at(row, j, n, inner);
            if (MODE == 2 && mask && !mask[at]) continue;
            tl_pick(m, jm, (double)x[at] * scale, j);
        }
        tl_block_argmax(m, jm);
        if (jm == TL_NONE) {   // no participant (only a masked row can have none: n >= 1)
            for (unsigned j = threadIdx.x; j < n; j += blockDim.x) out[tl_at(row, j, n, inner)] = 0.0f;
            continue;
        }
        double part = 0.0;
        for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned long long at = tl_at(row, j, n, inner);
            if (MODE == 2 && mask && !mask[at]) continue;
            const double e = exp((double)x[at] * scale - m);
            part += (MODE == 1 && j == jm) ? e - 1.0 : e;   // the max's own 1 (NaN kept)
        }
        const double total = tl_block_sum_d(part);
        const double log_total = (MODE == 1) ? log1p(total) : 0.0;
        for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned long long at = tl_at(row, j, n, inner);
            const double v = (double)x[at] * scale;
            if (MODE == 1) out[at] = (float)(v - m - log_total);
            else if (MODE == 2 && mask && !mask[at]) out[at] = 0.0f;
            else out[at] = (float)(exp(v - m) / total);
        }
    }
}

// MODE 0: softmax VJP, 1: log_softmax VJP, 2: hard-masked softmax VJP.
template <int MODE>
__device__ __forceinline__ void tl_softmax_bwd_rows(const float* __restrict__ y,
                                                    const float* __restrict__ g,
                                                    const unsigned char* __restrict__ mask,
                                                    float* __restrict__ gx, unsigned rows,
                                                    unsigned n, unsigned inner) {
    for (unsigned row = blockIdx.x; row < rows; row += gridDim.x) {
        double part = 0.0;
        for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned long long at = tl_at(row, j, n, inner);
            // A blocked entry takes no part, not even its g (an inf or NaN there stays out).
            if (MODE == 2 && mask && !mask[at]) continue;
            part += (MODE == 1) ? (double)g[at] : (double)g[at] * (double)y[at];
        }
        const double total = tl_block_sum_d(part);
        for (unsigned j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned long long at = tl_at(row, j, n, inner);
            const double gj = g[at], yj = y[at];
            if (MODE == 1) gx[at] = (float)(gj - exp(yj) * total);
            else if (MODE == 2 && mask && !mask[at]) gx[at] = 0.0f;
            else gx[at] = (float)(yj * (gj - total));
        }
    }
}

extern "C" __global__ void tl_softmax_fwd(const float* __restrict__ x, float* __restrict__ out,
                                          unsigned rows, unsigned n, unsigned inner) {
    tl_softmax_rows<0>(x, nullptr, out, rows, n, inner, 1.0);
}
extern "C" __global__ void tl_log_softmax_fwd(const float* __restrict__ x,
                                              float* __restrict__ out, unsigned rows, unsigned n,
                                              unsigned inner) {
    tl_softmax_rows<1>(x, nullptr, out, rows, n, inner, 1.0);
}
extern "C" __global__ void tl_masked_softmax_fwd(const float* __restrict__ x,
                                                 const unsigned char* __restrict__ mask,
                                                 float* __restrict__ out, unsigned rows,
                                                 unsigned n, unsigned inner, float scale) {
    tl_softmax_rows<2>(x, mask, out, rows, n, inner, (double)scale);
}
extern "C" __global__ void tl_softmax_bwd(const float* __restrict__ s, const float* __restrict__ g,
                                          float* __restrict__ gx, unsigned rows, unsigned n,
                                          unsigned inner) {
    tl_softmax_bwd_rows<0>(s, g, nullptr, gx, rows, n, inner);
}
extern "C" __global__ void tl_log_softmax_bwd(const float* __restrict__ y,
                                              const float* __restrict__ g,
                                              float* __restrict__ gx, unsigned rows, unsigned n,
                                              unsigned inner) {
    tl_softmax_bwd_rows<1>(y, g, nullptr, gx, rows, n, inner);
}
extern "C" __global__ void tl_masked_softmax_bwd(const float* __restrict__ s,
                                                 const float* __restrict__ g,
                                                 const unsigned char* __restrict__ mask,
                                                 float* __restrict__ gx, unsigned rows,
                                                 unsigned n, unsigned inner) {
    tl_softmax_bwd_rows<2>(s, g, mask, gx, rows, n, inner);
}

// ---- Register path (inner == 1) -------------------------------------------------------------

// The rows of a group: first = the group's index in the grid, stride = groups in the grid. Only
// G = 32 (no barriers) or G = TL_BLOCK (one group: every thread walks the same rows) use it.
template <int G>
struct TlGroup {
    unsigned t;
    unsigned long long first, stride;   // 64-bit: row + stride never wraps near 2^32 rows
    __device__ __forceinline__ TlGroup() {
        t = threadIdx.x & (G - 1);
        first = (unsigned long long)blockIdx.x * (TL_BLOCK / G) + threadIdx.x / G;
        stride = (unsigned long long)gridDim.x * (TL_BLOCK / G);
    }
};

// The fast float32 forwards (the plain capsules; the kernels above and below are the accurate
// variants'): after TlGroup, which they use.
#include "tl_softmax_f32.cuh"

// MODE 0: softmax, 1: log_softmax, 2: hard-masked softmax (null mask: every entry participates).
// The loads come first and alone (no branch between them: all K are in flight at once); the max
// is an fmax with a separate NaN flag (branch-free; the value tl_pick would give: a NaN entry
// makes m NaN, and the max of the rest is exact), and log_softmax's first max index is the
// smallest j whose value equals m.
template <int MODE, int G, int K>
__device__ __forceinline__ void tl_softmax_reg(const float* __restrict__ x,
                                               const unsigned char* __restrict__ mask,
                                               float* __restrict__ out, unsigned rows, unsigned n,
                                               double scale) {
    const TlGroup<G> grp;
    __shared__ double exp_table[64];
    tl_exp_table_init(exp_table);   // before any row: every thread of the block reaches it
    for (unsigned long long row = grp.first; row < rows; row += grp.stride) {
        const unsigned long long base = row * n;
        float v[K];
        unsigned char keep[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            // Past the row's end, load its last entry (a valid address, ignored): no branch.
            const unsigned j = grp.t + G * k;
            const unsigned long long at = base + (j < n ? j : n - 1);
            v[k] = x[at];
            const unsigned char in = (MODE == 2 && mask) ? mask[at] : 1;
            keep[k] = j < n ? in : 0;
        }
        unsigned live = 0;   // bit k: entry t + G k exists and participates
        unsigned has_nan = 0;
        double m = -__longlong_as_double(0x7ff0000000000000ll);   // -inf (NVRTC has no INFINITY)
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const double sv = (double)v[k] * scale;
            const bool p = keep[k] != 0;
            live |= p ? 1u << k : 0u;
            has_nan |= (p && sv != sv) ? 1u : 0u;
            m = p ? fmax(m, sv) : m;
        }
        // bit 0: someone participates, bit 1: a participant is NaN (one reduction for both)
        const unsigned flags = tl_group_or<G>((live != 0 ? 1u : 0u) | (has_nan << 1));
        m = tl_group_max<G>(m);
        if (flags & 2u) m = __longlong_as_double(0x7ff8000000000000ll);
        if (!(flags & 1u)) {   // no participant (only a masked row can have none: n >= 1)
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = grp.t + G * k;
                if (j < n) out[base + j] = 0.0f;
            }
            continue;
        }
        unsigned jm = TL_NONE;
        if (MODE == 1) {
#pragma unroll
            for (int k = K - 1; k >= 0; --k) {
                if (((live >> k) & 1u) && (double)v[k] * scale == m) jm = grp.t + G * k;
            }
            jm = tl_group_min<G>(jm);
        }
        // Each exp kept for the write: evaluating it again there (fewer registers) measured 1.5x
        // slower at 8192 x 8192 on the H200: the forward is bound by float64 work, not occupancy.
        double e[K];
        double part = 0.0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            e[k] = 0.0;
            if ((live >> k) & 1u) {
                e[k] = tl_exp_nonpos((double)v[k] * scale - m, exp_table);   // argument <= 0
                part += (MODE == 1 && grp.t + G * k == jm) ? e[k] - 1.0 : e[k];   // NaN kept
            }
        }
        const double total = tl_group_sum<G>(part);
        const double log_total = (MODE == 1) ? log1p(total) : 0.0;
        const double inv_total = 1.0 / total;   // one division per row: e * (1/total) is within
                                                // 2^-52 relative of e / total
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = grp.t + G * k;
            if (j >= n) continue;
            if (MODE == 1) out[base + j] = (float)((double)v[k] - m - log_total);
            else out[base + j] = ((live >> k) & 1u) ? (float)(e[k] * inv_total) : 0.0f;
        }
    }
}

// F32EXP (log_softmax only, the plain capsule's VJP): exp(y) by libdevice expf (2 ulp) instead of
// float64 exp; the sum, the product and the difference stay in double, rounded once. Within the
// derived rule the harness judges the plain capsule's VJP by (conformance/families/softmax.py: g - exp(out)
// sum g in float32, E_REL for the exp): E_REL s |sum g| + u |gx|. Exact to the float64 path's
// semantics for every log_softmax output (y <= 0, -inf or NaN); a y over 88.7 (no output of the
// forward) would give expf's inf where double exp is finite.
template <int MODE, int G, int K, bool F32EXP = false>
__device__ __forceinline__ void tl_softmax_bwd_reg(const float* __restrict__ y,
                                                   const float* __restrict__ g,
                                                   const unsigned char* __restrict__ mask,
                                                   float* __restrict__ gx, unsigned rows,
                                                   unsigned n) {
    const TlGroup<G> grp;
    for (unsigned long long row = grp.first; row < rows; row += grp.stride) {
        const unsigned long long base = row * n;
        float yv[K], gv[K];
        unsigned live = 0;
        double part = 0.0;
        // Guarded loads here (not the forward's clamped ones): measured on the H200, the clamped
        // form raised the K = 32 variants' registers to ~210 and their time 1.7-2.4x.
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = grp.t + G * k;
            yv[k] = gv[k] = 0.0f;
            if (j < n) {
                yv[k] = y[base + j];
                gv[k] = g[base + j];
                // A blocked entry takes no part, not even its g (an inf or NaN there stays out).
                if (MODE != 2 || !mask || mask[base + j]) {
                    live |= 1u << k;
                    part += (MODE == 1) ? (double)gv[k] : (double)gv[k] * (double)yv[k];
                }
            }
        }
        const double total = tl_group_sum<G>(part);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = grp.t + G * k;
            if (j >= n) continue;
            const double gj = gv[k], yj = yv[k];
            const double ey = F32EXP ? (double)expf(yv[k]) : exp(yj);
            if (MODE == 1) gx[base + j] = (float)(gj - ey * total);
            else if (MODE == 2 && !((live >> k) & 1u)) gx[base + j] = 0.0f;
            else gx[base + j] = (float)(yj * (gj - total));
        }
    }
}

#define TL_SOFTMAX_REG(name, MODE, G, K)                                                        \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, float* __restrict__ out, unsigned rows, unsigned n) {     \
        tl_softmax_reg<MODE, G, K>(x, nullptr, out, rows, n, 1.0);                            \
    }
#define TL_MASKED_REG(name, G, K)                                                               \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, const unsigned char* __restrict__ mask,                   \
        float* __restrict__ out, unsigned rows, unsigned n, float scale) {                     \
        tl_softmax_reg<2, G, K>(x, mask, out, rows, n, (double)scale);                        \
    }
#define TL_SOFTMAX_BWD_REG(name, MODE, G, K)                                                    \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ y, const float* __restrict__ g, float* __restrict__ gx,      \
        unsigned rows, unsigned n) {                                                           \
        tl_softmax_bwd_reg<MODE, G, K>(y, g, nullptr, gx, rows, n);                           \
    }
#define TL_LOG_SOFTMAX_BWD_F32(name, G, K)                                                      \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ y, const float* __restrict__ g, float* __restrict__ gx,      \
        unsigned rows, unsigned n) {                                                           \
        tl_softmax_bwd_reg<1, G, K, true>(y, g, nullptr, gx, rows, n);                        \
    }
#define TL_MASKED_BWD_REG(name, G, K)                                                           \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ y, const float* __restrict__ g,                              \
        const unsigned char* __restrict__ mask, float* __restrict__ gx, unsigned rows,         \
        unsigned n) {                                                                          \
        tl_softmax_bwd_reg<2, G, K>(y, g, mask, gx, rows, n);                                 \
    }

TL_SOFTMAX_REG(tl_softmax_fwd_w2, 0, 32, 2)
TL_SOFTMAX_REG(tl_softmax_fwd_w8, 0, 32, 8)
TL_SOFTMAX_REG(tl_softmax_fwd_w32, 0, 32, 32)
TL_SOFTMAX_REG(tl_softmax_fwd_b8, 0, TL_BLOCK, 8)
TL_SOFTMAX_REG(tl_softmax_fwd_b32, 0, TL_BLOCK, 32)
TL_SOFTMAX_REG(tl_log_softmax_fwd_w2, 1, 32, 2)
TL_SOFTMAX_REG(tl_log_softmax_fwd_w8, 1, 32, 8)
TL_SOFTMAX_REG(tl_log_softmax_fwd_w32, 1, 32, 32)
TL_SOFTMAX_REG(tl_log_softmax_fwd_b8, 1, TL_BLOCK, 8)
TL_SOFTMAX_REG(tl_log_softmax_fwd_b32, 1, TL_BLOCK, 32)
TL_MASKED_REG(tl_masked_softmax_fwd_w2, 32, 2)
TL_MASKED_REG(tl_masked_softmax_fwd_w8, 32, 8)
TL_MASKED_REG(tl_masked_softmax_fwd_w32, 32, 32)
TL_MASKED_REG(tl_masked_softmax_fwd_b8, TL_BLOCK, 8)
TL_MASKED_REG(tl_masked_softmax_fwd_b32, TL_BLOCK, 32)
TL_SOFTMAX_F32(tl_softmax_f32_w2, 0, 32, 2)
TL_SOFTMAX_F32(tl_softmax_f32_w8, 0, 32, 8)
TL_SOFTMAX_F32(tl_softmax_f32_w32, 0, 32, 32)
TL_SOFTMAX_F32(tl_softmax_f32_b8, 0, TL_BLOCK, 8)
TL_SOFTMAX_F32(tl_softmax_f32_b16, 0, TL_BLOCK, 16)
TL_SOFTMAX_F32(tl_softmax_f32_b32, 0, TL_BLOCK, 32)
TL_SOFTMAX_F32(tl_log_softmax_f32_w2, 1, 32, 2)
TL_SOFTMAX_F32(tl_log_softmax_f32_w8, 1, 32, 8)
TL_SOFTMAX_F32(tl_log_softmax_f32_w32, 1, 32, 32)
TL_SOFTMAX_F32(tl_log_softmax_f32_b8, 1, TL_BLOCK, 8)
TL_SOFTMAX_F32(tl_log_softmax_f32_b16, 1, TL_BLOCK, 16)
TL_SOFTMAX_F32(tl_log_softmax_f32_b32, 1, TL_BLOCK, 32)
TL_SOFTMAX_F32V(tl_softmax_f32_wv2, 0, 32, 2, 3)
TL_SOFTMAX_F32V(tl_softmax_f32_wv8, 0, 32, 8, 3)
TL_SOFTMAX_F32V(tl_softmax_f32_bv2, 0, TL_BLOCK, 2, 3)
TL_SOFTMAX_F32V(tl_softmax_f32_bv4, 0, TL_BLOCK, 4, 3)
TL_SOFTMAX_F32V(tl_softmax_f32_bv8, 0, TL_BLOCK, 8, 3)
TL_SOFTMAX_F32V(tl_log_softmax_f32_wv2, 1, 32, 2, 2)
TL_SOFTMAX_F32V(tl_log_softmax_f32_wv8, 1, 32, 8, 2)
TL_SOFTMAX_F32V(tl_log_softmax_f32_bv2, 1, TL_BLOCK, 2, 2)
TL_SOFTMAX_F32V(tl_log_softmax_f32_bv4, 1, TL_BLOCK, 4, 2)
TL_SOFTMAX_F32V(tl_log_softmax_f32_bv8, 1, TL_BLOCK, 8, 2)
TL_SOFTMAX_BWD_REG(tl_softmax_bwd_w2, 0, 32, 2)
TL_SOFTMAX_BWD_REG(tl_softmax_bwd_w8, 0, 32, 8)
TL_SOFTMAX_BWD_REG(tl_softmax_bwd_b4, 0, TL_BLOCK, 4)
TL_SOFTMAX_BWD_REG(tl_softmax_bwd_b8, 0, TL_BLOCK, 8)
TL_SOFTMAX_BWD_REG(tl_softmax_bwd_b32, 0, TL_BLOCK, 32)
TL_SOFTMAX_BWD_REG(tl_log_softmax_bwd_w2, 1, 32, 2)
TL_SOFTMAX_BWD_REG(tl_log_softmax_bwd_w8, 1, 32, 8)
TL_SOFTMAX_BWD_REG(tl_log_softmax_bwd_b4, 1, TL_BLOCK, 4)
TL_SOFTMAX_BWD_REG(tl_log_softmax_bwd_b8, 1, TL_BLOCK, 8)
TL_SOFTMAX_BWD_REG(tl_log_softmax_bwd_b32, 1, TL_BLOCK, 32)
TL_LOG_SOFTMAX_BWD_F32(tl_log_softmax_bwd_f32_w2, 32, 2)
TL_LOG_SOFTMAX_BWD_F32(tl_log_softmax_bwd_f32_w8, 32, 8)
TL_LOG_SOFTMAX_BWD_F32(tl_log_softmax_bwd_f32_b4, TL_BLOCK, 4)
TL_LOG_SOFTMAX_BWD_F32(tl_log_softmax_bwd_f32_b8, TL_BLOCK, 8)
TL_LOG_SOFTMAX_BWD_F32(tl_log_softmax_bwd_f32_b32, TL_BLOCK, 32)
TL_MASKED_BWD_REG(tl_masked_softmax_bwd_w2, 32, 2)
TL_MASKED_BWD_REG(tl_masked_softmax_bwd_w8, 32, 8)
TL_MASKED_BWD_REG(tl_masked_softmax_bwd_b4, TL_BLOCK, 4)
TL_MASKED_BWD_REG(tl_masked_softmax_bwd_b8, TL_BLOCK, 8)
TL_MASKED_BWD_REG(tl_masked_softmax_bwd_b32, TL_BLOCK, 32)
