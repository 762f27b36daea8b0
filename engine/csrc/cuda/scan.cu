// selective_scan: h[t][j] = A[t][j] h[t-1][j] + B[t][j] X[t][j], h[-1] = h0, every h written.
// A and B are (seq, state) when `token` is 1, (state,) when 0 (constant coefficients); X and h are
// (seq, state), h0 (state,); state is the contiguous axis, so consecutive threads take consecutive
// channels and every load and store is coalesced.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true, so a*h + b*x is two rounded products and one rounded sum (no FMA) and
// subnormals are kept. Expects TL_BLOCK (default 256; blockDim.x must equal it).
//
// Forward, float32:
//   tl_scan_fwd_seq(A, B, X, h0, H, seq, state, token)
//       one thread per channel, time order: TorchLean's kernel and the reference provider, step for
//       step (bitwise equal to engine/providers/reference.py's _selective_scan).
//   The parallel scan for long sequences, chunks of L steps (C = ceil(seq / L) chunks), three
//   launches (engine/providers/native_cuda/scan.py; the order is the capsule's numerical policy):
//   tl_scan_fwd_chunk_reduce(A, B, X, P, Q, seq, state, token, L)   thread per (chunk c, channel):
//       P[c] = A[c1-1] (... (A[c0+1] A[c0])), the chunk's coefficient product in time order, and
//       Q[c] = the recurrence over the chunk started from 0 (the affine map h -> P h + Q).
//   tl_scan_fwd_carry(P, Q, h0, Carry, C, state)   thread per channel, chunks in order:
//       Carry[0] = h0, Carry[c+1] = P[c] Carry[c] + Q[c] (the state entering each chunk).
//   tl_scan_fwd_chunk_apply(A, B, X, Carry, H, seq, state, token, L)   thread per (chunk, channel):
//       the sequential recurrence over the chunk started from Carry[c].
//   tl_scan_fwd_chunk_reduce_f64, tl_scan_fwd_carry_f64, tl_scan_fwd_chunk_apply_f64: the same
//       three steps in double, writing double (the VJP's h; one chunk below the switch point).
//
// VJP, double throughout, one rounding to float per gradient (engine/ops/scan.py, scan_vjp_f64):
//   dh[t] = g[t] + A[t+1] dh[t+1] (dh[seq-1] = g[seq-1]), dX = B dh, dB = X dh, dA = h[t-1] dh,
//   dh0 = A[0] dh[0]; constant A, B: dA, dB summed over t, in reverse time within a chunk, then the
//   chunk partials from the last chunk to the first (fixed order: no atomics, bitwise repeatable).
//   tl_scan_bwd_chunk_reduce(A, G, P, Q, seq, state, token, L)   thread per (chunk, channel):
//       the chunk's adjoint map dh[c0] = P dh[c1] + Q (reverse time, started from 0).
//   tl_scan_bwd_carry(P, Q, Carry, C, state)   thread per channel, chunks from the last:
//       Carry[C-1] = 0, Carry[c-1] = P[c] Carry[c] + Q[c] (dh entering chunk c from the right).
//   tl_scan_bwd_chunk_apply(A, B, X, h0, H, G, Carry, dA, dB, dX, PartA, PartB, D0, seq, state,
//                           token, L)   thread per (chunk, channel): dh over the chunk in reverse
//       time from Carry[c]; writes dX (and dA, dB for token), the chunk's double partial sums of
//       h[t-1] dh and X dh (constant), and dh[0] into D0 (chunk 0).
//   tl_scan_bwd_finish(A, D0, PartA, PartB, dA, dB, dh0, C, state, token)   thread per channel:
//       dh0 = A[0] dh[0]; constant: dA, dB = the partials summed from chunk C-1 down to 0.
// With L = seq (one chunk) the VJP is the sequential one-thread-per-channel evaluation.
//
// Index math is 64-bit (t * state + j can exceed 2^31; the wrapper keeps seq * state < 2^32);
// every kernel is a grid-stride loop, so any grid of at least one block covers its work.

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"

typedef unsigned long long u64;

__device__ __forceinline__ u64 tl_scan_coef(unsigned token, u64 t, u64 state, u64 j) {
    return token ? t * state + j : j;
}

extern "C" __global__ void tl_scan_fwd_seq(const float* __restrict__ A, const float* __restrict__ B,
                                           const float* __restrict__ X,
                                           const float* __restrict__ h0, float* __restrict__ H,
                                           unsigned seq, unsigned state, unsigned token) {
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < state;
         j += (u64)gridDim.x * blockDim.x) {
        float h = h0[j];
        for (u64 t = 0; t < seq; ++t) {
            const u64 c = tl_scan_coef(token, t, state, j);
            h = A[c] * h + B[c] * X[t * state + j];
            H[t * state + j] = h;
        }
    }
}

// --- the chunked parallel scan, float (forward) and double (the VJP's h) ------------------------

template <typename T>
__device__ __forceinline__ void scan_chunk_reduce(const float* __restrict__ A,
                                                  const float* __restrict__ B,
                                                  const float* __restrict__ X, T* __restrict__ P,
                                                  T* __restrict__ Q, unsigned seq, unsigned state,
                                                  unsigned token, unsigned L) {
    const u64 chunks = ((u64)seq + L - 1) / L, work = chunks * state;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < work;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 c = i / state, j = i % state;
        const u64 t0 = c * L, t1 = (t0 + L < seq) ? t0 + L : seq;
        T a = (T)1, b = (T)0;
        for (u64 t = t0; t < t1; ++t) {
            const u64 k = tl_scan_coef(token, t, state, j);
            const T at = (T)A[k];
            a = at * a;
            b = at * b + (T)B[k] * (T)X[t * state + j];
        }
        P[i] = a;
        Q[i] = b;
    }
}

template <typename T>
__device__ __forceinline__ void scan_carry(const T* __restrict__ P, const T* __restrict__ Q,
                                           const float* __restrict__ h0, T* __restrict__ Carry,
                                           unsigned chunks, unsigned state) {
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < state;
         j += (u64)gridDim.x * blockDim.x) {
        T h = (T)h0[j];
        for (u64 c = 0; c < chunks; ++c) {
            Carry[c * state + j] = h;
            // The last chunk's P, Q feed no carry (and with one chunk nothing wrote them).
            if (c + 1 < chunks) h = P[c * state + j] * h + Q[c * state + j];
        }
    }
}

template <typename T>
__device__ __forceinline__ void scan_chunk_apply(const float* __restrict__ A,
                                                 const float* __restrict__ B,
                                                 const float* __restrict__ X,
                                                 const T* __restrict__ Carry, T* __restrict__ H,
                                                 unsigned seq, unsigned state, unsigned token,
                                                 unsigned L) {
    const u64 chunks = ((u64)seq + L - 1) / L, work = chunks * state;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < work;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 c = i / state, j = i % state;
        const u64 t0 = c * L, t1 = (t0 + L < seq) ? t0 + L : seq;
        T h = Carry[i];
        for (u64 t = t0; t < t1; ++t) {
            const u64 k = tl_scan_coef(token, t, state, j);
            h = (T)A[k] * h + (T)B[k] * (T)X[t * state + j];
            H[t * state + j] = h;
        }
    }
}

extern "C" __global__ void tl_scan_fwd_chunk_reduce(const float* A, const float* B, const float* X,
                                                    float* P, float* Q, unsigned seq,
                                                    unsigned state, unsigned token, unsigned L) {
    scan_chunk_reduce<float>(A, B, X, P, Q, seq, state, token, L);
}

extern "C" __global__ void tl_scan_fwd_carry(const float* P, const float* Q, const float* h0,
                                             float* Carry, unsigned chunks, unsigned state) {
    scan_carry<float>(P, Q, h0, Carry, chunks, state);
}

extern "C" __global__ void tl_scan_fwd_chunk_apply(const float* A, const float* B, const float* X,
                                                   const float* Carry, float* H, unsigned seq,
                                                   unsigned state, unsigned token, unsigned L) {
    scan_chunk_apply<float>(A, B, X, Carry, H, seq, state, token, L);
}

extern "C" __global__ void tl_scan_fwd_chunk_reduce_f64(const float* A, const float* B,
                                                        const float* X, double* P, double* Q,
                                                        unsigned seq, unsigned state,
                                                        unsigned token, unsigned L) {
    scan_chunk_reduce<double>(A, B, X, P, Q, seq, state, token, L);
}

extern "C" __global__ void tl_scan_fwd_carry_f64(const double* P, const double* Q,
                                                 const float* h0, double* Carry, unsigned chunks,
                                                 unsigned state) {
    scan_carry<double>(P, Q, h0, Carry, chunks, state);
}

extern "C" __global__ void tl_scan_fwd_chunk_apply_f64(const float* A, const float* B,
                                                       const float* X, const double* Carry,
                                                       double* H, unsigned seq, unsigned state,
                                                       unsigned token, unsigned L) {
    scan_chunk_apply<double>(A, B, X, Carry, H, seq, state, token, L);
}

// --- the VJP: the adjoint's reverse-time scan, in double ----------------------------------------

// The coefficient of dh[t+1] in dh[t]: A[t+1] (0 past the end, where dh[seq] = 0 anyway).
__device__ __forceinline__ double tl_scan_next_coef(const float* A, unsigned token, u64 t, u64 seq,
                                                    u64 state, u64 j) {
    return (t + 1 < seq) ? (double)A[tl_scan_coef(token, t + 1, state, j)] : 0.0;
}

extern "C" __global__ void tl_scan_bwd_chunk_reduce(const float* __restrict__ A,
                                                    const float* __restrict__ G,
                                                    double* __restrict__ P,
                                                    double* __restrict__ Q, unsigned seq,
                                                    unsigned state, unsigned token, unsigned L) {
    const u64 chunks = ((u64)seq + L - 1) / L, work = chunks * state;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < work;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 c = i / state, j = i % state;
        const u64 t0 = c * L, t1 = (t0 + L < seq) ? t0 + L : seq;
        double a = 1.0, d = 0.0;
        for (u64 t = t1; t-- > t0;) {
            const double at = tl_scan_next_coef(A, token, t, seq, state, j);
            a = at * a;
            d = at * d + (double)G[t * state + j];
        }
        P[i] = a;
        Q[i] = d;
    }
}

extern "C" __global__ void tl_scan_bwd_carry(const double* __restrict__ P,
                                             const double* __restrict__ Q,
                                             double* __restrict__ Carry, unsigned chunks,
                                             unsigned state) {
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < state;
         j += (u64)gridDim.x * blockDim.x) {
        double d = 0.0;
        for (u64 c = chunks; c-- > 0;) {
            Carry[c * state + j] = d;
            // Chunk 0's P, Q feed no carry (and with one chunk nothing wrote them: initcheck
            // reported this read of never-written memory on the H200).
            if (c > 0) d = P[c * state + j] * d + Q[c * state + j];
        }
    }
}

extern "C" __global__ void tl_scan_bwd_chunk_apply(
    const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ X,
    const float* __restrict__ h0, const double* __restrict__ H, const float* __restrict__ G,
    const double* __restrict__ Carry, float* __restrict__ dA, float* __restrict__ dB,
    float* __restrict__ dX, double* __restrict__ PartA, double* __restrict__ PartB,
    double* __restrict__ D0, unsigned seq, unsigned state, unsigned token, unsigned L) {
    const u64 chunks = ((u64)seq + L - 1) / L, work = chunks * state;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < work;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 c = i / state, j = i % state;
        const u64 t0 = c * L, t1 = (t0 + L < seq) ? t0 + L : seq;
        double d = Carry[i], sa = 0.0, sb = 0.0;
        for (u64 t = t1; t-- > t0;) {
            const u64 at = t * state + j, k = tl_scan_coef(token, t, state, j);
            d = tl_scan_next_coef(A, token, t, seq, state, j) * d + (double)G[at];
            const double hprev = t ? H[at - state] : (double)h0[j];
            const double x = (double)X[at];
            dX[at] = (float)((double)B[k] * d);
            if (token) {
                dA[at] = (float)(hprev * d);
                dB[at] = (float)(x * d);
            } else {
                sa = sa + hprev * d;
                sb = sb + x * d;
            }
        }
        if (!token) {
            PartA[i] = sa;
            PartB[i] = sb;
        }
        if (c == 0) D0[j] = d;
    }
}

extern "C" __global__ void tl_scan_bwd_finish(const float* __restrict__ A,
                                              const double* __restrict__ D0,
                                              const double* __restrict__ PartA,
                                              const double* __restrict__ PartB,
                                              float* __restrict__ dA, float* __restrict__ dB,
                                              float* __restrict__ dh0, unsigned chunks,
                                              unsigned state, unsigned token) {
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < state;
         j += (u64)gridDim.x * blockDim.x) {
        dh0[j] = (float)((double)A[j] * D0[j]);   // A[0][j]: row 0 of a token A is A[j] too
        if (!token) {
            double sa = 0.0, sb = 0.0;
            for (u64 c = chunks; c-- > 0;) {
                sa = sa + PartA[c * state + j];
                sb = sb + PartB[c * state + j];
            }
            dA[j] = (float)sa;
            dB[j] = (float)sb;
        }
    }
}
