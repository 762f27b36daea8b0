// Host emulation of engine/csrc/cuda/softmax.cu's float32 forwards (tl_softmax_f32.cuh) for the
// CPU test machine (tests/test_softmax_f32_emulated.py): the real source (the loader's text,
// headers inlined) with one fiber per CUDA thread (fibers.h), a barrier per block for
// __syncthreads and a barrier per warp around an exchange buffer for __shfl_xor_sync (as
// flash_host.cpp), one block at a time. Built with -ffp-contract=off, as the loader's
// --fmad=false. expf is emu_expf: the correctly rounded exp moved up to g_expf_ulps float ulps
// (a direction and size drawn from a hash of the argument and g_seed) but never farther than
// g_expf_ulps ulps from the exact value (libdevice's documented measure), so that the test runs the
// kernels under libdevice's documented 2 ulp rather than under one lucky libm; results that
// round to 0 stay 0, expf(0) = 1 (libdevice's value). It checks the kernels' indexing (float4
// chunks, full and partial rows, warp and block groups), their special-value handling and
// their arithmetic against the derived bounds; it says nothing about registers or timing.
// The plain log_softmax capsule's VJP register variants (emu_vjp) run the same way.
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include "cuda_host.h"

int g_expf_ulps = 2;
unsigned g_seed = 1;
#define __restrict__

// expf within g_expf_ulps ulps of the correctly rounded value (see the header comment)
inline float emu_expf(float x) {
    const double exact = std::exp((double)x);     // to ~2^-53: the exact value for a float's ulps
    const float r = (float)exact;
    if (x == 0.0f || r == 0.0f || !std::isfinite(r)) return r;
    uint32_t h = __float_as_uint(x) * 2654435761u ^ g_seed * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const int k = g_expf_ulps ? (int)(h % (2u * g_expf_ulps + 1)) - g_expf_ulps : 0;
    float e = r;
    for (int i = 0; i < (k < 0 ? -k : k); ++i) {   // each step stays within the ulps of exact
        const float next = std::nextafter(e, k < 0 ? 0.0f : INFINITY);
        const double ulp = (double)std::nextafter(std::fabs(next), INFINITY) - std::fabs(next);
        if (std::fabs((double)next - exact) > g_expf_ulps * ulp) break;
        e = next;
    }
    return e;
}
#define expf emu_expf
using std::fabs;
using std::fma;
using std::fmax;
using std::exp;
using std::log1p;
using std::min;

#define __shared__ static
#include TL_KERNEL_SOURCE
#undef expf

typedef void (*Kernel)(const float*, float*, unsigned, unsigned);
#define K(name) {#name, name}
static const struct { const char* name; Kernel fn; } KERNELS[] = {
    K(tl_softmax_f32_w2), K(tl_softmax_f32_w8), K(tl_softmax_f32_w32), K(tl_softmax_f32_b8),
    K(tl_softmax_f32_b16), K(tl_softmax_f32_b32), K(tl_log_softmax_f32_w2),
    K(tl_log_softmax_f32_w8), K(tl_log_softmax_f32_w32), K(tl_log_softmax_f32_b8),
    K(tl_log_softmax_f32_b16), K(tl_log_softmax_f32_b32), K(tl_softmax_f32_wv2),
    K(tl_softmax_f32_wv8), K(tl_softmax_f32_bv2), K(tl_softmax_f32_bv4), K(tl_softmax_f32_bv8),
    K(tl_log_softmax_f32_wv2), K(tl_log_softmax_f32_wv8), K(tl_log_softmax_f32_bv2),
    K(tl_log_softmax_f32_bv4), K(tl_log_softmax_f32_bv8),
};

typedef void (*Vjp)(const float*, const float*, float*, unsigned, unsigned);
static const struct { const char* name; Vjp fn; } VJPS[] = {
    K(tl_log_softmax_bwd_f32_w2), K(tl_log_softmax_bwd_f32_w8), K(tl_log_softmax_bwd_f32_b4),
    K(tl_log_softmax_bwd_f32_b8), K(tl_log_softmax_bwd_f32_b32),
};

extern "C" {
void emu_set_expf(int ulps, unsigned seed) { g_expf_ulps = ulps; g_seed = seed; }
// 0: launched; -1: no such kernel
int emu_forward(const char* name, unsigned grid, const float* x, float* out, unsigned rows,
                unsigned n) {
    for (const auto& k : KERNELS) {
        if (std::strcmp(k.name, name) == 0) {
            launch(grid, [=] { k.fn(x, out, rows, n); });
            return 0;
        }
    }
    return -1;
}
int emu_vjp(const char* name, unsigned grid, const float* y, const float* g, float* gx,
            unsigned rows, unsigned n) {
    for (const auto& k : VJPS) {
        if (std::strcmp(k.name, name) == 0) {
            launch(grid, [=] { k.fn(y, g, gx, rows, n); });
            return 0;
        }
    }
    return -1;
}
}
