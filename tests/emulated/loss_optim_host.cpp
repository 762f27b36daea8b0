// Host emulation of xent.cu's cross-entropy kernels, bias_gelu.cu's kernels and optim.cu's
// multi-tensor Adam for the CPU test machine (tests/test_loss_optim_emulated.py): one fiber per
// CUDA thread (fibers.h), a barrier per block for __syncthreads, a barrier per warp around an
// exchange buffer for __shfl_xor_sync and __any_sync, `static` for __shared__ arrays (one block runs at a time).
// Built with -ffp-contract=off, as the loader's --fmad=false; exp and log1p are the C library's.
// It checks indexing, the row and chunk walks, the fold orders and the formulas of the real
// source; it says nothing about the GPU's own limits.
// (bias_gelu's float32 kernels: tl_act_f32.cuh's table, bit casts and rcp.approx, below.)
// TL_KERNEL_SOURCE: the kernel source with its headers inlined; TL_EMU_LOSS, TL_EMU_BIAS_GELU or
// TL_EMU_OPTIM picks the entry points.
#include <algorithm>
#include "cuda_host.h"

#define __restrict__ __restrict
#define __shared__ static
inline float atomicAdd(float* a, float v) { float o = *a; *a = o + v; return o; }
using std::min;
inline bool __any_sync(unsigned, bool p) {
    const unsigned warp = threadIdx.x >> 5;
    g_warp[warp]->arrive_and_wait();
    g_exchange[threadIdx.x] = p ? 1 : 0;
    g_warp[warp]->arrive_and_wait();
    bool any = false;
    for (unsigned l = 0; l < 32; ++l) any = any || g_exchange[(warp << 5) | l] != 0;
    return any;
}

#ifdef TL_EMU_BIAS_GELU
#include "act_f32_host.h"   // tl_act_f32.cuh's table, bit casts and rcp.approx
using std::fabs;
using std::fma;
#endif

#include TL_KERNEL_SOURCE

typedef unsigned U;
extern "C" {
#ifdef TL_EMU_LOSS
void emu_xent_rows(U gx, const float* x, const long long* t, double* rows_out, U rows, U n) {
    launch(gx, [=] { tl_xent_rows(x, t, rows_out, rows, n); });
}
void emu_xent_mean(const double* rows_in, float* out, U rows) {
    launch(1, [=] { tl_xent_mean(rows_in, out, rows); });
}
void emu_xent_bwd(U gx, const float* x, const long long* t, const float* g, float* gx_out, U rows,
                  U n, double count) {
    launch(gx, [=] { tl_xent_bwd(x, t, g, gx_out, rows, n, count); });
}
#endif
#ifdef TL_EMU_BIAS_GELU
void emu_bias_gelu_fwd(U gx, const float* x, const float* b, float* y, U n, U d) {
    launch(gx, [=] { tl_bias_gelu_fwd(x, b, y, n, d); });
}
void emu_bias_gelu_bwd(U gx, U gy, const float* x, const float* b, const float* g, float* gx_out,
                       double* part, U rows, U d, U chunk) {
    launch(gx, [=] { tl_bias_gelu_bwd(x, b, g, gx_out, part, rows, d, chunk); }, gy);
}
void emu_bias_gelu_db(U gx, const double* part, float* db, U chunks, U d) {
    launch(gx, [=] { tl_bias_gelu_db(part, db, chunks, d); });
}
void emu_set_rcp_ulps(int k) { g_rcp_ulps = k; }
void emu_bias_gelu_f32(U gx, const float* x, const float* b, float* y, U n, U d) {
    launch(gx, [=] { tl_bias_gelu_f32(x, b, y, n, d); });
}
void emu_bias_gelu_bwd_f32(U gx, const float* x, const float* b, const float* g, float* gx_out,
                           double* part, U rows, U d, U chunk, U col_blocks, U vec) {
    launch(gx, [=] {
        tl_bias_gelu_bwd_f32(x, b, g, gx_out, part, rows, d, chunk, col_blocks, vec);
    });
}
#endif
#ifdef TL_EMU_OPTIM
void emu_adam_step(U gx, float* p, const float* g, float* m, float* v, U n, float lr, float b1,
                   float b2, float c1, float c2, float bc1, float bc2, float eps) {
    launch(gx, [=] { tl_adam_step(p, g, m, v, n, lr, b1, b2, c1, c2, bc1, bc2, eps); });
}
void emu_adam_multi(U gx, const unsigned long long* ptrs, U T, const U* sizes, const U* decay,
                    const U* chunks, U use_decay, float shrink, float lr, float b1, float b2,
                    float c1, float c2, float bc1, float bc2, float eps) {
    launch(gx, [=] {
        tl_adam_multi(ptrs, T, sizes, decay, chunks, use_decay, shrink, lr, b1, b2, c1, c2, bc1,
                      bc2, eps);
    });
}
void emu_set_ptrs(unsigned long long* ptrs, U first, U count, const unsigned long long* a) {
    launch(1, [=] {
        tl_adam_set_ptrs(ptrs, first, count, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                         a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17],
                         a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27],
                         a[28], a[29], a[30], a[31], a[32], a[33], a[34], a[35], a[36], a[37],
                         a[38], a[39], a[40], a[41], a[42], a[43], a[44], a[45], a[46], a[47],
                         a[48], a[49], a[50], a[51], a[52], a[53], a[54], a[55], a[56], a[57],
                         a[58], a[59], a[60], a[61], a[62], a[63]);
    });
}
#endif
}
