// Host emulation of engine/csrc/cuda/flash_attention.cu for the CPU test machine
// (tests/test_flash_attention_emulated.py): one fiber per CUDA thread (fibers.h), a barrier per
// block for __syncthreads (and its _and/_or forms), a barrier per warp around an exchange buffer
// for __shfl_xor_sync and __ballot_sync (a lane that skips one deadlocks here as it hangs the
// GPU), static storage for the dynamic shared memory (one block runs at a time), and plain copies
// for cp.async (the source's own fallback without __CUDA_ARCH__: a missing wait goes unseen
// here). Built with -ffp-contract=off, as the loader's --fmad=false; fmaf and expf are the C
// library's (expf within libdevice's 2 ulp). It checks indexing, staging, tiling, masks and fold
// orders of the real source; it says nothing about the GPU's own limits (registers, shared-memory
// opt-in, alignment traps).
// TL_KERNEL_SOURCE: the path of the kernel source with its headers inlined (the loader's text).
#include "cuda_host.h"

int g_vote[2];
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline int tl_vote(int slot, int init, int p, bool set_on_true) {
    if (threadIdx.x == 0) g_vote[slot] = init;
    __syncthreads();
    if (p == (int)set_on_true) __atomic_store_n(&g_vote[slot], !init, __ATOMIC_SEQ_CST);
    __syncthreads();
    const int r = g_vote[slot];
    __syncthreads();
    return r;
}
inline int __syncthreads_and(int p) { return tl_vote(0, 1, p != 0, false); }
inline int __syncthreads_or(int p) { return tl_vote(1, 0, p != 0, true); }

inline unsigned __ballot_sync(unsigned, int p) {
    const unsigned warp = threadIdx.x >> 5;
    g_warp[warp]->arrive_and_wait();      // the previous exchange is read
    g_exchange[threadIdx.x] = p != 0;
    g_warp[warp]->arrive_and_wait();
    unsigned votes = 0;
    for (unsigned lane = 0; lane < 32; ++lane)
        votes |= (g_exchange[(warp << 5) | lane] != 0 ? 1u : 0u) << lane;
    return votes;
}

#define __shared__
// the kernels' `extern __shared__ float4 fl_smem4[]`: as much as an sm_90 block may opt in to
alignas(16) float4 fl_smem4[232448 / 16];
#include TL_KERNEL_SOURCE

typedef unsigned U;
typedef const float* F;
typedef const unsigned char* M;
extern "C" {
void emu_tiles(U gx, M mask, unsigned char* flags, U B, U Lq, U Lk) {
    launch(gx, [=] { tl_flash_tiles(mask, flags, B, Lq, Lk); });
}
void emu_rowdot(U gx, F g, F out, float* dd, U rows, U dv, U L, U H) {
    launch(gx, [=] { tl_flash_rowdot(g, out, dd, rows, dv, L, H); });
}
void emu_fwd(U w, U gx, F q, F k, F v, M mask, M flags, float* out, float* stats, U B, U Lq,
             U Lk, U d, U dv, float scale, U H, U causal) {
    launch(gx, [=] {
        if (w == 32)
            tl_flash_fwd_32(q, k, v, mask, flags, out, stats, B, Lq, Lk, d, dv, scale, H, causal);
        if (w == 64)
            tl_flash_fwd_64(q, k, v, mask, flags, out, stats, B, Lq, Lk, d, dv, scale, H, causal);
        if (w == 128)
            tl_flash_fwd_128(q, k, v, mask, flags, out, stats, B, Lq, Lk, d, dv, scale, H, causal);
    });
}
void emu_dkdv(U w, U gx, F q, F k, F v, M mask, M flags, F g, F stats, F dd, float* dk,
              float* dvo, float* ds, U B, U Lq, U Lk, U d, U dv, float scale, U H, U causal) {
    launch(gx, [=] {
        if (w == 32) tl_flash_dkdv_32(q, k, v, mask, flags, g, stats, dd, dk, dvo, ds, B, Lq, Lk, d,
                                      dv, scale, H, causal);
        if (w == 64) tl_flash_dkdv_64(q, k, v, mask, flags, g, stats, dd, dk, dvo, ds, B, Lq, Lk, d,
                                      dv, scale, H, causal);
        if (w == 128) tl_flash_dkdv_128(q, k, v, mask, flags, g, stats, dd, dk, dvo, ds, B, Lq, Lk,
                                        d, dv, scale, H, causal);
    });
}
void emu_dqs(U w, U gx, F k, M mask, M flags, F ds, float* dq, U B, U Lq, U Lk, U d,
             float scale, U H, U causal) {
    launch(gx, [=] {
        if (w == 32) tl_flash_dqs_32(k, mask, flags, ds, dq, B, Lq, Lk, d, scale, H, causal);
        if (w == 64) tl_flash_dqs_64(k, mask, flags, ds, dq, B, Lq, Lk, d, scale, H, causal);
        if (w == 128) tl_flash_dqs_128(k, mask, flags, ds, dq, B, Lq, Lk, d, scale, H, causal);
    });
}
void emu_dq(U w, U gx, F q, F k, F v, M mask, M flags, F g, F stats, F dd, float* dq, U B, U Lq,
            U Lk, U d, U dv, float scale, U H, U causal) {
    launch(gx, [=] {
        if (w == 32) tl_flash_dq_32(q, k, v, mask, flags, g, stats, dd, dq, B, Lq, Lk, d, dv,
                                    scale, H, causal);
        if (w == 64) tl_flash_dq_64(q, k, v, mask, flags, g, stats, dd, dq, B, Lq, Lk, d, dv,
                                    scale, H, causal);
        if (w == 128) tl_flash_dq_128(q, k, v, mask, flags, g, stats, dd, dq, B, Lq, Lk, d, dv,
                                      scale, H, causal);
    });
}
}
