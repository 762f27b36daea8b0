// Host emulation of engine/csrc/cuda/norm.cu's layer_norm backward for the CPU test machine
// (tests/test_layer_norm_bwd_emulated.py): one std::thread per CUDA thread, a std::barrier per
// block for __syncthreads, a barrier per warp around an exchange buffer for __shfl_xor_sync,
// `static` for __shared__ (one block runs at a time, so a function's static array is the block's
// shared array). Built with -ffp-contract=off, as the loader's --fmad=false. It checks indexing,
// the shared-memory staging and the fold orders of the real source; it says nothing about the
// GPU's own limits (registers, occupancy, timing).
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include <barrier>
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

#include TL_KERNEL_SOURCE

static void launch(unsigned gx, std::function<void()> body) {
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

typedef unsigned U;
typedef const float* F;
extern "C" {
// variant: 0 the wide kernel (tl_layer_norm_bwd), 1..5 w8 q4 q8 b8 b16
int emu_ln_bwd(U variant, U gx, F x, F gamma, F g, float* dx, double* pg, double* pb, U rows, U d,
               float eps) {
    void (*const fns[])(F, F, F, float*, double*, double*, U, U, float) = {
        tl_layer_norm_bwd, tl_layer_norm_bwd_w8, tl_layer_norm_bwd_q4, tl_layer_norm_bwd_q8,
        tl_layer_norm_bwd_b8, tl_layer_norm_bwd_b16};
    if (variant > 5) return 1;
    const auto fn = fns[variant];
    launch(gx, [=] { fn(x, gamma, g, dx, pg, pb, rows, d, eps); });
    return 0;
}
void emu_ln_cols(U gx, const double* pg, const double* pb, float* dgamma, float* dbeta, U parts,
                 U d) {
    launch(gx, [=] { tl_layer_norm_bwd_cols(pg, pb, dgamma, dbeta, parts, d); });
}
}
