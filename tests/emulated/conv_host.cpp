// Host emulation of engine/csrc/cuda/conv.cu for the CPU test machine (tests/test_conv_emulated.py):
// one fiber per CUDA thread (fibers.h), a barrier per block for __syncthreads, static storage for
// __shared__ (one block runs at a time), a mutex for atomicAdd. Built with -ffp-contract=off, as
// the loader's --fmad=false. It checks indexing, staging, tiling and the fold order of the real
// source; it says nothing about the GPU's own limits (registers, launch bounds, alignment traps).
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>
#include "fibers.h"

struct Dim { unsigned x = 1, y = 1, z = 1; };
Dim threadIdx;           // the running fiber's: fibers.h sets it before each switch into one
Dim blockIdx, blockDim, gridDim;
tl_fibers::Barrier* g_bar = nullptr;
std::mutex g_atomic;

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> l(g_atomic); float o = *p; *p = o + v; return o; }
// tl_common.cuh's block sums use warp shuffles; conv.cu calls none of them
inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
inline double __shfl_xor_sync(unsigned, double v, int) { return v; }
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uchar4 { unsigned char x, y, z, w; };

#include TL_KERNEL_SOURCE

static void launch(unsigned gx, unsigned gy, unsigned gz, std::function<void()> body) {
    gridDim = {gx, gy, gz};
    blockDim = {256, 1, 1};
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                blockIdx = {x, y, z};
                tl_fibers::Barrier bar(256);
                g_bar = &bar;
                tl_fibers::run_block(256, body, [](unsigned t) { threadIdx = {t, 0, 0}; });
            }
}

typedef unsigned U;
typedef unsigned long long ULL;
extern "C" {
void emu_fwd_nd(U gx, const float* x, const float* w, const float* b, float* y, const long long* geo, U total) {
    launch(gx, 1, 1, [=] { tl_conv_fwd_nd(x, w, b, y, geo, total); });
}
void emu_dx_nd(U gx, const float* g, const float* w, const float* b, float* dx, const long long* geo, U total) {
    launch(gx, 1, 1, [=] { tl_conv_dx_nd(g, w, b, dx, geo, total); });
}
void emu_dw_chunks(U gx, const float* g, const float* x, float* out, const long long* geo, U elems, U chunks, ULL span, int atomic) {
    launch(gx, 1, 1, [=] { tl_conv_dw_chunks(g, x, out, geo, elems, chunks, span, atomic); });
}
void emu_db_chunks(U gx, const float* g, float* out, U C, U S, U N, U chunks, ULL span, int atomic) {
    launch(gx, 1, 1, [=] { tl_conv_db_chunks(g, out, C, S, N, chunks, span, atomic); });
}
void emu_sum_chunks(U gx, const float* part, float* out, U elems, U chunks) {
    launch(gx, 1, 1, [=] { tl_conv_sum_chunks(part, out, elems, chunks); });
}
void emu_neg_zeros(U gx, float* a, U na, float* b, U nb) {
    launch(gx, 1, 1, [=] { tl_conv_neg_zeros(a, na, b, nb); });
}
void emu_fwd_2d(U gx, U gy, const float* x, const float* w, const float* b, float* y, const U* d) {
    launch(gx, gy, 1, [=] { tl_conv2d_fwd_tiled(x, w, b, y, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17]); });
}
void emu_fwd_2d_n64(U gx, U gy, const float* x, const float* w, const float* b, float* y, const U* d) {
    launch(gx, gy, 1, [=] { tl_conv2d_fwd_tiled_n64(x, w, b, y, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17]); });
}
void emu_dw_2d(U gx, U gy, U gz, const float* g, const float* x, float* out, const U* d, ULL span, int atomic) {
    launch(gx, gy, gz, [=] { tl_conv2d_dw_tiled(g, x, out, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16], span, atomic); });
}
}
