// The CUDA built-ins every host emulation here shares (block_host.h, softmax_host.cpp,
// flash_host.cpp, loss_optim_host.cpp): thread and block indices, one fiber per CUDA thread
// (fibers.h; launch() below runs them, a block at a time), a barrier per block for
// __syncthreads (g_bar), a barrier per warp around an exchange buffer for __shfl_xor_sync
// (g_warp, g_exchange), the qualifiers made empty, float4 and the bit casts. Each file adds what only its kernels use
// (__shared__, atomics, votes). Built with -ffp-contract=off, as the loader's
// --fmad=false.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include "fibers.h"

struct Dim { unsigned x = 1, y = 1, z = 1; };
Dim threadIdx;           // the running fiber's: fibers.h sets it before each switch into one
Dim blockIdx, blockDim, gridDim;
tl_fibers::Barrier* g_bar = nullptr;
tl_fibers::Barrier* g_warp[8] = {};
long long g_exchange[256];

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __int_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
inline void __syncthreads() { g_bar->arrive_and_wait(); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int off) {
    static_assert(sizeof(T) <= sizeof(long long), "shuffle of a wide type");
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    g_warp[warp]->arrive_and_wait();      // the previous exchange is read
    g_exchange[threadIdx.x] = bits;
    g_warp[warp]->arrive_and_wait();
    const long long other = g_exchange[(warp << 5) | (lane ^ (unsigned)off)];
    T r;
    std::memcpy(&r, &other, sizeof(T));
    return r;
}

// A grid of gx x gy blocks of 256 threads, one block at a time (so `static` can stand for
// __shared__): each block's threads run `body` with threadIdx, blockIdx and the barriers set.
inline void launch(unsigned gx, std::function<void()> body, unsigned gy = 1) {
    gridDim = {gx, gy, 1};
    blockDim = {256, 1, 1};
    for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
        blockIdx = {x, y, 0};
        tl_fibers::Barrier bar(256);
        tl_fibers::Barrier warps[8] = {tl_fibers::Barrier(32), tl_fibers::Barrier(32),
                                       tl_fibers::Barrier(32), tl_fibers::Barrier(32),
                                       tl_fibers::Barrier(32), tl_fibers::Barrier(32),
                                       tl_fibers::Barrier(32), tl_fibers::Barrier(32)};
        for (int w = 0; w < 8; ++w) g_warp[w] = &warps[w];
        g_bar = &bar;
        tl_fibers::run_block(256, body, [](unsigned t) { threadIdx = {t, 0, 0}; });
    }
}
