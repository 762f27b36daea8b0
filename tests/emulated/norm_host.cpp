// Host emulation of engine/csrc/cuda/norm.cu's layer_norm backward for the CPU test machine
// (tests/test_layer_norm_bwd_emulated.py), on block_host.h's threads, barriers and shuffles. Built
// with -ffp-contract=off, as the loader's --fmad=false. It checks indexing, the shared-memory
// staging and the fold orders of the real source; it says nothing about the GPU's own limits
// (registers, occupancy, timing).
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include "block_host.h"
#include TL_KERNEL_SOURCE

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
