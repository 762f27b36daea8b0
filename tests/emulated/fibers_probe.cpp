// A probe of fibers.h for tests/test_emulation_fibers.py: a block whose threads trade values
// through `static` shared memory across __syncthreads, a warp sum by __shfl_xor_sync, and a
// kernel whose threads diverge at a barrier (the emulation must stop, not spin).
#include "cuda_host.h"

#define __shared__ static

__global__ void probe_trade(float* out) {
    __shared__ float stage[256];
    const unsigned t = threadIdx.x;
    stage[t] = (float)(t + 1);
    __syncthreads();
    float v = stage[255 - t];             // another thread's value: needs the barrier
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();
    stage[t] = v;
    __syncthreads();
    out[blockIdx.x * 256 + t] = stage[t ^ 32];
}

__global__ void probe_diverge() {
    if (threadIdx.x < 128) __syncthreads();
}

extern "C" {
void emu_probe_trade(unsigned blocks, float* out) { launch(blocks, [=] { probe_trade(out); }); }
void emu_probe_diverge() { launch(1, [] { probe_diverge(); }); }
}
