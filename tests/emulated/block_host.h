// What the host emulations of a block of 256 CUDA threads share (norm_host.cpp, reduce_host.cpp):
// one std::thread per CUDA thread, a std::barrier per block for __syncthreads, a barrier per warp
// around an exchange buffer for __shfl_xor_sync, `static` for __shared__ (one block runs at a
// time, so a function's static array is the block's shared array), atomicAdd under one mutex.
// Include it, then the kernel source, then call launch(blocks, body).
#pragma once
#include <barrier>
#include <cstring>
#include <functional>
#include <math.h>
#include <mutex>
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
#define __shared__ static
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
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
struct alignas(16) float4 { float x, y, z, w; };
inline std::mutex& tl_atomic_lock() { static std::mutex m; return m; }
inline float atomicAdd(float* p, float v) {
    std::lock_guard<std::mutex> hold(tl_atomic_lock());
    const float old = *p;
    *p = old + v;
    return old;
}


inline void launch(unsigned gx, std::function<void()> body) {
    gridDim = {gx, 1, 1};
    blockDim = {256, 1, 1};
    for (unsigned x = 0; x < gx; ++x) {
        blockIdx = {x, 0, 0};
        std::barrier<> bar(256);
        for (int w = 0; w < 8; ++w) g_warp[w] = new std::barrier<>(32);
        g_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < 256; ++t)
            ts.emplace_back([t, &body] { threadIdx = {t, 0, 0}; body(); });
        for (auto& th : ts) th.join();
        for (int w = 0; w < 8; ++w) delete g_warp[w];
    }
}

