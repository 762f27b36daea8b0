// Host emulation of engine/csrc/cuda/reduce.cu's column and short-row sums for the CPU test
// machine (tests/test_reduce_emulated.py), on block_host.h's threads (default mode's atomic adds
// come in the fibers' turn order, one fixed order; the GPU's is its own). Built with
// -ffp-contract=off, as the loader's --fmad=false.
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include "block_host.h"
#include TL_KERNEL_SOURCE

typedef unsigned U;
extern "C" {
void emu_reduce_cols(U gx, const float* in, float* out, U outer, U R, U inner, U chunks, U seg,
                     int atomic, int vec, U lq_log2) {
    launch(gx, [=] { tl_reduce_cols(in, out, outer, R, inner, chunks, seg, atomic, vec,
                                    lq_log2); });
}

void emu_reduce_rows_group(U gx, const float* in, float* out, U rows, U R, U tpr_log2, int vec,
                           float d) {
    launch(gx, [=] { tl_reduce_rows_group(in, out, rows, R, tpr_log2, vec, d); });
}
}
