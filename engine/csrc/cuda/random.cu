// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the Random123 constants). Element i of a draw with seed s
// is word 0 of philox4x32_10(counter = (i, 0, 0, 0), key = (s mod 2^32, s div 2^32)); the uniform
// value is (w >> 8) * 2^-24, exactly representable, so every provider's bits agree
// (engine/providers/reference.py computes the same in NumPy).
//
// Compiled with OPTIONS (engine/runtime/loader.py); the arithmetic is integer except one exact
// scaling by 2^-24. No #defines expected. 32-bit unsigned indexing (i is the counter word).
//
//   tl_philox_uniform(out, n, k0, k1)       out[i] = (w_i >> 8) * 2^-24
//   tl_bernoulli_mask(out, n, k0, k1, p)    out[i] = 1.0f if (w_i >> 8) * 2^-24 < p else 0.0f
//                                           (p already rounded to float32)
//   tl_philox_words(out, n, c0, c1, c2, c3, k0, k1)  the raw four words for the counter
//                                           (c0 + i, c1, c2, c3) into out[4i..4i+3]: for the
//                                           Random123 known-answer tests.

#define TL_PHILOX_M0 0xD2511F53u
#define TL_PHILOX_M1 0xCD9E8D57u
#define TL_PHILOX_W0 0x9E3779B9u
#define TL_PHILOX_W1 0xBB67AE85u

#include "tl_common.cuh"
__device__ __forceinline__ uint4 tl_philox4x32_10(uint4 c, unsigned k0, unsigned k1) {
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += TL_PHILOX_W0;
            k1 += TL_PHILOX_W1;
        }
        const unsigned hi0 = __umulhi(TL_PHILOX_M0, c.x), lo0 = TL_PHILOX_M0 * c.x;
        const unsigned hi1 = __umulhi(TL_PHILOX_M1, c.z), lo1 = TL_PHILOX_M1 * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

__device__ __forceinline__ float tl_uniform(unsigned i, unsigned k0, unsigned k1) {
    const uint4 w = tl_philox4x32_10(make_uint4(i, 0u, 0u, 0u), k0, k1);
    return (float)(w.x >> 8) * 5.9604644775390625e-08f;   // 2^-24
}

extern "C" __global__ void tl_philox_uniform(float* __restrict__ out, unsigned n, unsigned k0,
                                             unsigned k1) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = tl_uniform(i, k0, k1);
    }
}

extern "C" __global__ void tl_bernoulli_mask(float* __restrict__ out, unsigned n, unsigned k0,
                                             unsigned k1, float p) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = tl_uniform(i, k0, k1) < p ? 1.0f : 0.0f;
    }
}

extern "C" __global__ void tl_philox_words(unsigned* __restrict__ out, unsigned n, unsigned c0,
                                           unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                           unsigned k1) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        const uint4 w = tl_philox4x32_10(make_uint4(c0 + i, c1, c2, c3), k0, k1);
        out[4ull * i + 0] = w.x;
        out[4ull * i + 1] = w.y;
        out[4ull * i + 2] = w.z;
        out[4ull * i + 3] = w.w;
    }
}
