// What the host emulations of a block of 256 CUDA threads share (norm_host.cpp, reduce_host.cpp),
// on cuda_host.h's built-ins:
// one std::thread per CUDA thread, a std::barrier per block for __syncthreads, a barrier per warp
// around an exchange buffer for __shfl_xor_sync, `static` for __shared__ (one block runs at a
// time, so a function's static array is the block's shared array), atomicAdd under one mutex.
// Include it, then the kernel source, then call launch(blocks, body).
#pragma once
#include <mutex>
#include "cuda_host.h"

#define __shared__ static
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
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

