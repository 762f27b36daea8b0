// The spectral family's own kernels around cuFFT (engine/providers/cufft.py): layout moves, the
// mode mixing of fft_fno forward and backward, and the scalings and bin weights of the packed
// rfft / irfft VJPs. cuFFT does the transforms; everything else is here.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. Expects TL_BLOCK (default 256). Every sum is evaluated in double from the float
// operands (float products are exact in double) in a fixed serial order and rounded once, so every
// result is bitwise repeatable and no kernel uses atomics: one kernel serves both deterministic
// modes. Index math is 64-bit wherever a product of extents can pass 2^31 (the wrapper guarantees
// only that each buffer's element count fits UInt32).
//
// Layouts (complex values interleaved [re, im] as float2):
//   x, y, g  real  [B][G][W]                  (batch, grid, width; row-major)
//   xt, yt   real  [B][W][G]                  (channels first: cuFFT's batch of B*W rows)
//   X, Z, S  cplx  [B][W][M]                  M = G / 2 + 1 bins
//   w_re, w_im     [K][W][W] at (k*W + c)*W + o, K = modes <= M
//
//   tl_spec_to_channels(x, xt, B, G, W)            xt[b][c][j] = x[b][j][c]
//   tl_spec_from_channels(yt, y, B, G, W, n)       y[b][j][o] = yt[b][o][j] / n (n = 1: a copy)
//   tl_spec_mix_fwd(X, wr, wi, Z, B, W, M, K)      Z[b][o][k] = sum_c X[b][c][k] w[k][c][o], k < K;
//                                                  0 for k >= K
//   tl_spec_mix_bwd_dx(S, wr, wi, D, B, W, M, K, G)
//       D[b][c][k] = (1/G) sum_o S'[b][o][k] conj(w[k][c][o]) for k < K, else 0; S = rfft(g) and
//       S' is S with the imaginary part 0 at k = 0 and (even G) k = G/2: C2R(D) is then dx.
//   tl_spec_mix_bwd_dw(X, S, dwr, dwi, B, W, M, K, G)
//       dw[k][c][o] = sum_b conj(X[b][c][k]) (w_k / G) S'[b][o][k], b in order 0..B-1;
//       w_k = 1 at DC and (even G) Nyquist, 2 elsewhere.
//   tl_spec_scale(in, out, count, n)               out = in / n (irfft's 1/n after C2R)
//   tl_spec_halve_interior(in, out, R, M, n)       copy of packed [R][M] with the interior bins
//                                                  (not DC, not the Nyquist of even n) halved
//   tl_spec_irfft_bwd(S, dz, R, M, n)              dz = (w_k / n) S, imaginary 0 at DC / Nyquist
//   tl_spec_pack_real(x, z, R)                     n = 1: z[r] = (x[r], +0)
//   tl_spec_real_part(z, x, R)                     n = 1: x[r] = re z[r] (C2R of one bin)
//   tl_spec_real_bins(z, R, M, n)                  im z[r][0] = 0 and (even n) im z[r][n/2] = 0,
//                                                  in place, before every C2R (see below)

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif

typedef unsigned long long u64;

__device__ __forceinline__ u64 tl_tid() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ u64 tl_stride() {
    return (u64)gridDim.x * blockDim.x;
}

// 1 at DC and, for even n, at the Nyquist bin n/2; 2 elsewhere.
__device__ __forceinline__ double tl_bin_weight(u64 k, u64 n) {
    return (k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0 : 2.0;
}

__device__ __forceinline__ bool tl_real_bin(u64 k, u64 n) {
    return k == 0 || (n % 2 == 0 && k == n / 2);
}

extern "C" __global__ void tl_spec_to_channels(const float* __restrict__ x, float* __restrict__ xt,
                                               unsigned B, unsigned G, unsigned W) {
    const u64 total = (u64)B * G * W;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 j = i % G, bc = i / G;          // i indexes xt[b][c][j]
        const u64 c = bc % W, b = bc / W;
        xt[i] = x[(b * G + j) * W + c];
    }
}

extern "C" __global__ void tl_spec_from_channels(const float* __restrict__ yt,
                                                 float* __restrict__ y, unsigned B, unsigned G,
                                                 unsigned W, unsigned n) {
    const u64 total = (u64)B * G * W;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 o = i % W, bj = i / W;          // i indexes y[b][j][o]
        const u64 j = bj % G, b = bj / G;
        const float v = yt[(b * W + o) * G + j];
        y[i] = n == 1 ? v : (float)((double)v / (double)n);
    }
}

extern "C" __global__ void tl_spec_mix_fwd(const float2* __restrict__ X,
                                           const float* __restrict__ wr,
                                           const float* __restrict__ wi, float2* __restrict__ Z,
                                           unsigned B, unsigned W, unsigned M, unsigned K) {
    const u64 total = (u64)B * W * M;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 k = i % M, bo = i / M;          // i indexes Z[b][o][k]
        const u64 o = bo % W, b = bo / W;
        double re = 0.0, im = 0.0;
        if (k < K) {
            for (u64 c = 0; c < W; ++c) {
                const float2 v = X[(b * W + c) * M + k];
                const u64 wix = (k * W + c) * W + o;
                const double a = wr[wix], d = wi[wix];
                re += (double)v.x * a - (double)v.y * d;
                im += (double)v.x * d + (double)v.y * a;
            }
        }
        Z[i] = make_float2((float)re, (float)im);
    }
}

extern "C" __global__ void tl_spec_mix_bwd_dx(const float2* __restrict__ S,
                                              const float* __restrict__ wr,
                                              const float* __restrict__ wi,
                                              float2* __restrict__ D, unsigned B, unsigned W,
                                              unsigned M, unsigned K, unsigned G) {
    const u64 total = (u64)B * W * M;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 k = i % M, bc = i / M;          // i indexes D[b][c][k]
        const u64 c = bc % W, b = bc / W;
        double re = 0.0, im = 0.0;
        if (k < K) {
            const bool real_bin = tl_real_bin(k, G);
            for (u64 o = 0; o < W; ++o) {
                const float2 s = S[(b * W + o) * M + k];
                const double sr = s.x, si = real_bin ? 0.0 : (double)s.y;
                const u64 wix = (k * W + c) * W + o;
                const double a = wr[wix], d = wi[wix];
                re += sr * a + si * d;            // s * conj(w)
                im += si * a - sr * d;
            }
            re /= (double)G;
            im /= (double)G;
        }
        D[i] = make_float2((float)re, (float)im);
    }
}

extern "C" __global__ void tl_spec_mix_bwd_dw(const float2* __restrict__ X,
                                              const float2* __restrict__ S,
                                              float* __restrict__ dwr, float* __restrict__ dwi,
                                              unsigned B, unsigned W, unsigned M, unsigned K,
                                              unsigned G) {
    const u64 total = (u64)K * W * W;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 o = i % W, kc = i / W;          // i indexes dw[k][c][o]
        const u64 c = kc % W, k = kc / W;
        const bool real_bin = tl_real_bin(k, G);
        double re = 0.0, im = 0.0;
        for (u64 b = 0; b < B; ++b) {             // fixed order over the batch: no atomics
            const float2 v = X[(b * W + c) * M + k];
            const float2 s = S[(b * W + o) * M + k];
            const double sr = s.x, si = real_bin ? 0.0 : (double)s.y;
            re += (double)v.x * sr + (double)v.y * si;     // conj(X) * S
            im += (double)v.x * si - (double)v.y * sr;
        }
        const double scale = tl_bin_weight(k, G) / (double)G;
        dwr[i] = (float)(re * scale);
        dwi[i] = (float)(im * scale);
    }
}

extern "C" __global__ void tl_spec_scale(const float* __restrict__ in, float* __restrict__ out,
                                         unsigned count, unsigned n) {
    for (u64 i = tl_tid(); i < count; i += tl_stride())
        out[i] = (float)((double)in[i] / (double)n);
}

extern "C" __global__ void tl_spec_halve_interior(const float2* __restrict__ in,
                                                  float2* __restrict__ out, unsigned R,
                                                  unsigned M, unsigned n) {
    const u64 total = (u64)R * M;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 k = i % M;
        const float2 v = in[i];
        out[i] = tl_real_bin(k, n) ? v : make_float2((float)(0.5 * (double)v.x),
                                                     (float)(0.5 * (double)v.y));
    }
}

extern "C" __global__ void tl_spec_irfft_bwd(const float2* __restrict__ S,
                                             float2* __restrict__ dz, unsigned R, unsigned M,
                                             unsigned n) {
    const u64 total = (u64)R * M;
    for (u64 i = tl_tid(); i < total; i += tl_stride()) {
        const u64 k = i % M;
        const float2 s = S[i];
        const double scale = tl_bin_weight(k, n) / (double)n;
        dz[i] = make_float2((float)((double)s.x * scale),
                            tl_real_bin(k, n) ? 0.0f : (float)((double)s.y * scale));
    }
}

extern "C" __global__ void tl_spec_pack_real(const float* __restrict__ x, float2* __restrict__ z,
                                             unsigned R) {
    for (u64 i = tl_tid(); i < R; i += tl_stride()) z[i] = make_float2(x[i], 0.0f);
}

extern "C" __global__ void tl_spec_real_part(const float2* __restrict__ z, float* __restrict__ x,
                                             unsigned R) {
    for (u64 i = tl_tid(); i < R; i += tl_stride()) x[i] = z[i].x;
}

// cuFFT's C2R assumes a Hermitian input: the imaginary parts of DC and (even n) Nyquist must be 0,
// and when they are not its result is undefined. It was seen to differ with the transform size on
// an H200 (cuFFT 12.0: ignored for rows * n < 2^20, mixed into the output past it), so every C2R
// input is made Hermitian first: the op's rule is that those parts are not read.
extern "C" __global__ void tl_spec_real_bins(float2* __restrict__ z, unsigned R, unsigned M,
                                             unsigned n) {
    const bool nyquist = n % 2 == 0 && n / 2 < M;
    for (u64 r = tl_tid(); r < R; r += tl_stride()) {
        z[r * M].y = 0.0f;
        if (nyquist) z[r * M + n / 2].y = 0.0f;
    }
}
