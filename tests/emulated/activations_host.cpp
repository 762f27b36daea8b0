// Host emulation of elementwise.cu's activation kernels for the CPU test machine
// (tests/test_activations_emulated.py): the real source (the loader's text, headers inlined) with
// just enough of CUDA's device API, every CUDA thread of the grid run in turn (these kernels
// share nothing between threads). Built with -ffp-contract=off, as the loader's --fmad=false;
// host libm stands in for libdevice in the tails. PTX rcp.approx.f32 (specified to 1 ulp) is
// emu_rcp_approx: the correctly rounded reciprocal moved g_rcp_ulps float ulps, so a test can try
// every admissible result (tl_act_fast.cuh's and tl_act_f32.cuh's rcp.approx statements both).
// __ldg is a plain load and float2 a struct: tl_act_f32.cuh's table. It checks the fast/tail split, the float4 and scalar loops and the
// arithmetic of the real source; it says nothing about registers, timing or the real MUFU.
// TL_KERNEL_SOURCE: the path of that text, its asm statement replaced by the builder.
#include <cmath>
#include <cstdint>
#include <cstring>
#include "act_f32_host.h"

struct Dim { unsigned x = 1, y = 1, z = 1; };
Dim threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads, blocks)
#define __shared__ static
struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
inline float __frcp_rn(float f) { return 1.0f / f; }
inline float __frsqrt_rn(float f) { return (float)(1.0 / std::sqrt((double)f)); }   // unused here
// tl_common.cuh's block sums use warp shuffles; elementwise.cu calls none of them
inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
inline double __shfl_xor_sync(unsigned, double v, int) { return v; }
inline void __syncthreads() {}
using std::fabs;
using std::fma;

#include TL_KERNEL_SOURCE

template <class K>
static void launch(unsigned grid, K body) {
    gridDim = {grid, 1, 1};
    blockDim = {256, 1, 1};
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < 256; ++t) {
            blockIdx = {b, 1, 1};
            threadIdx = {t, 0, 0};
            body();
        }
}

typedef unsigned U;
extern "C" {
void emu_set_rcp_ulps(int k) { g_rcp_ulps = k; }
void emu_fwd(int op, U grid, const float* a, float* out, U n) {
    switch (op) {
    case 0: launch(grid, [=] { tl_sigmoid_fwd(a, out, n); }); break;
    case 1: launch(grid, [=] { tl_softplus_fwd(a, out, n); }); break;
    case 2: launch(grid, [=] { tl_gelu_fwd(a, out, n); }); break;
    case 3: launch(grid, [=] { tl_sigmoid_f32(a, out, n); }); break;
    case 4: launch(grid, [=] { tl_softplus_f32(a, out, n); }); break;
    case 5: launch(grid, [=] { tl_gelu_f32(a, out, n); }); break;
    }
}
// tl_act_f32.cuh's tl_gelu_sc (GeluBF32's s and c) on its own, element by element
void emu_gelu_sc(const float* a, float* s, float* c, U n) {
    for (U i = 0; i < n; ++i) tl_gelu_sc(a[i], s[i], c[i]);
}
void emu_bwd(int op, U grid, const float* a, const float* g, float* ga, U n) {
    switch (op) {
    case 0: launch(grid, [=] { tl_sigmoid_bwd(a, g, ga, n); }); break;
    case 1: launch(grid, [=] { tl_softplus_bwd(a, g, ga, n); }); break;
    case 2: launch(grid, [=] { tl_gelu_bwd(a, g, ga, n); }); break;
    case 3: launch(grid, [=] { tl_tanh_bwd(a, g, ga, n); }); break;
    case 4: launch(grid, [=] { tl_exp_bwd(a, g, ga, n); }); break;
    case 5: launch(grid, [=] { tl_gelu_bwd_f32(a, g, ga, n); }); break;
    }
}
}
