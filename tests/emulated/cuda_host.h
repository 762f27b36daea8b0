// The CUDA built-ins every host emulation here shares (block_host.h, softmax_host.cpp,
// flash_host.cpp, loss_optim_host.cpp): thread and block indices, one std::thread per CUDA thread
// (each file's launch() starts them), a std::barrier per block for __syncthreads (g_bar), a
// barrier per warp around an exchange buffer for __shfl_xor_sync (g_warp, g_exchange), the
// qualifiers made empty, float4 and the bit casts. Each file adds what only its kernels use
// (__shared__, atomics, votes, its launch). Built with -ffp-contract=off, as the loader's
// --fmad=false.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include <thread>
#include <vector>

struct Dim { unsigned x = 1, y = 1, z = 1; };
thread_local Dim threadIdx;
Dim blockIdx, blockDim, gridDim;
std::barrier<>* g_bar = nullptr;
std::barrier<>* g_warp[8] = {};
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
