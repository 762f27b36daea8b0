// What the host emulations of a block of 256 CUDA threads share (norm_host.cpp, reduce_host.cpp),
// on cuda_host.h's built-ins:
// one fiber per CUDA thread (fibers.h), a barrier per block for __syncthreads, a barrier per warp
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
