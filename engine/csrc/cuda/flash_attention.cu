// Tiled online-softmax attention in float32 (FlashAttention-2's schedule) with hard masks: the
// kernels of the capsule native_cuda.flash_attention (forward and backend VJP; engine/providers/
// native_cuda/flash_attention.py launches them, conformance/families/attention.py bounds them).
//
// Layout: B problems, each with q [Lq][d], k [Lk][d], v [Lk][dv], g and out [Lq][dv]; every
// kernel takes H (heads): problem e = n H + j is head j of batch entry n of the packed layout
// q [B/H][Lq][H d] (columns j d .. j d + d - 1, row stride H d; likewise k, v, g, out and the
// gradients), so H = 1 is q [B][Lq][d] (fl_row0). Row statistics, dd and the dS scratch stay per
// (problem, row). Mask [B][Lq][Lk] bool bytes, or null with `causal` 0 (all participate) or 1
// (the implicit causal mask: key j participates for query i iff j <= i; tile flags from the
// indices, no mask byte read, no tl_flash_tiles). Semantics as attention.cu and
// conformance/references/scaled_dot_product_attention.py: a blocked entry takes no part at all
// (its score, and q, k, v, g data only blocked entries use, even inf or NaN, never enter an
// operation: the mask decides, never a -inf sentinel); a query row with no participant gives +0
// outputs and +0 dq; a key no query attends gets +0 dk and dv; an output whose participating
// terms are all -0 stays -0 (out and dv start at -0); an exact zero dq or dk is +0. A
// participating NaN or +inf score, or only -inf ones, makes the row's probabilities NaN (running
// max NaN-propagating; 0 / 0 at the end).
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true, so every fused multiply-add below is an explicit fmaf (one rounding) and every
// other operation rounds once; expf and logf are libdevice's (2 and 1 ulp). No atomics: every
// output element is owned by one thread of one block and every sum has a fixed order (bitwise
// repeatable).
//
// Schedule. Tiles of FL_T = 64 query rows by 64 keys; 256 threads, thread (ty, tx) = (tid / 16,
// tid % 16) owns, of every 64 x 64 product, rows ty*4+a (a < 4) and columns tx+16b (b < 4)
// (register tiling; columns strided by 16 so the float4 reads of a natural tile's rows are free of
// bank conflicts) and, of a 64 x D product, rows ty*4+a and D/16 columns (fl_col). Operands are
// staged in shared memory by cp.async (16-byte copies where rows allow, the async copy overlapping
// the product before it): "N" tiles natural ([row][feature], leading dimension D + 4), "T" tiles
// of P or dS transposed ([key or query][row], leading dimension FL_LD = 68). fl_qk does the 64 x 64
// products (dot products of two natural tiles' rows), fl_mma the 64 x D ones; both are left folds
// of fmaf over the reduction index. Kernels are instantiated for D in {32, 64, 128}: d and dv may
// differ, both are padded with zeros to D (a zero feature adds exactly nothing to a dot product).
//
//   tl_flash_tiles(mask, flags, B, Lq, Lk): flags[(b * nqt + qt) * nkt + kt] = 0 when no entry of
//       the (query tile, key tile) participates, 1 when all 64 x 64 do (and the tile is whole),
//       2 otherwise ("mixed": per-element mask reads, and products skip blocked entries). One
//       block per tile, __syncthreads_and/_or. The kernels below skip tiles flagged 0 (a causal
//       mask's upper triangle) and read no mask byte in tiles flagged 1.
//   tl_flash_rowdot(g, out, dd, rows, dv, L, H): dd[row] = sum_c g_c out_c, a left fold of fmaf
//       over dv (FlashAttention-2's D), one thread per row = (problem, query row) of L rows.
//   tl_flash_dqs_D(k, mask, flags, ds, dq, B, Lq, Lk, d, scale): dq = scale * dS k from the dS
//       tiles tl_flash_dkdv_D wrote to a scratch (`ds`: [B][nqt][nkt] tiles of 64 x 64 floats,
//       [key][query], only the tiles with a participant): the same fmaf fold over keys as
//       tl_flash_dq_D, on the same dS bits, without recomputing S, P and dP. One block per
//       (batch entry, query tile); the next tile's k and dS are copied while this one's product
//       runs (two buffers of each).
// Kernels (D = the suffix: tl_flash_fwd_32 tl_flash_fwd_64 tl_flash_fwd_128, tl_flash_dkdv_32
// tl_flash_dkdv_64 tl_flash_dkdv_128, tl_flash_dq_32 tl_flash_dq_64 tl_flash_dq_128,
// tl_flash_dqs_32 tl_flash_dqs_64 tl_flash_dqs_128):
// The four below end with (..., scale, H, causal).
//   tl_flash_fwd_D(q, k, v, mask, flags, out, stats, B, Lq, Lk, d, dv, scale):
//       one block per (batch entry, query tile), block index = (nqt - 1 - qt) * B + b: the
//       longest causal tiles of every batch entry first (the other kernels order alike). Per key
//       tile: S = q k^T (fmaf over d, then * scale), the tile's row max over participants, m_new
//       = max(m, tile max), alpha = expf(m - m_new), p = expf(s - m_new) (0 where blocked), each
//       thread's part of l = fmaf(l, alpha, its 4 terms summed serially), O = O alpha then O +=
//       p v (fmaf over the tile's keys). At the end l = a 16-lane xor tree over the row's threads
//       (each term: 3 adds, at most nt fmaf, 4 tree adds, as when the tree ran per tile), out =
//       O / l (+0 for a row with no participant) and, with `stats` non-null, stats[row] = (m,
//       1 / l): the VJP's row statistics, kept with the output (the handler's saved state). With
//       `out` null the p v product is skipped (the VJP's pass for an output whose statistics were
//       not kept: the same code, so the same m and l bits). V's tile is copied while S is
//       computed, the next K tile while p v is. Shared: q, k, v natural, pT, the tile's flags.
//   tl_flash_dkdv_D(q, k, v, mask, flags, g, stats, dd, dk, dv_out, ds, B, Lq, Lk, d, dv,
//       scale): one block per (batch entry, key tile); a pass over query tiles recomputes S^T =
//       k q^T, P = expf(s - m) (1/l), dP^T = v g^T, dS = P (dP - D) and accumulates dv += P^T g
//       and dk += dS^T q (fmaf over query rows; dk times scale at the end); with `ds` non-null it
//       writes each dS tile there for tl_flash_dqs_D. Shared: k, v, q, g natural, P and dS as
//       [query][key], flags.
//   tl_flash_dq_D(q, k, v, mask, flags, g, stats, dd, dq, B, Lq, Lk, d, dv, scale):
//       one block per (batch entry, query tile); a pass over key tiles recomputes P and dS as
//       above and accumulates dq += dS k (fmaf over keys; times scale at the end). K is double
//       buffered: the next key tile's k and v are copied while dS k is computed. The VJP's
//       path when the dS scratch would be too large (the host decides).
// Dynamic shared memory above 48 KiB is opted in by the host (cuFuncSetAttribute).

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#define FL_T 64            // query rows and keys per tile
#define FL_LD 68           // leading dimension of a transposed tile (float4 aligned, padded)

typedef unsigned long long fl_u64;

// -inf (NVRTC has no math.h: no INFINITY macro)
#define FL_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ unsigned fl_min(unsigned a, unsigned b) { return a < b ? a : b; }

// Where problem e's row 0 of a w-wide operand starts, in units of w: problems are (batch entry,
// head) pairs e = n H + j of the packed layout [N][L][H w] (head j: columns j w .. j w + w - 1,
// row stride H w). H = 1 is the [B][L][w] layout: problem e at e L (times w). Kept in units of w
// so one value serves operands of widths d and dv (two registers per length, not four).
__device__ __forceinline__ fl_u64 fl_row0(unsigned e, unsigned L, unsigned H) {
    return (fl_u64)(e / H) * L * H + e % H;
}

// NaN-propagating max: a NaN score of a participant makes the row NaN (the reference's rule).
__device__ __forceinline__ float fl_max(float a, float b) {
    return (b > a || b != b) ? b : a;
}

// Asynchronous global -> shared copies (sm_80 and later; a plain copy elsewhere, and in the host
// emulation). `ok` false writes zeros and reads nothing (src-size 0).
__device__ __forceinline__ void fl_cp16(float* dst, const float* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(ok ? 16 : 0));
#else
    for (int i = 0; i < 4; ++i) dst[i] = ok ? src[i] : 0.0f;
#endif
}
__device__ __forceinline__ void fl_cp4(float* dst, const float* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src),
                 "r"(ok ? 4 : 0));
#else
    *dst = ok ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void fl_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void fl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Stage rows of a [.][ld] matrix as a natural 64 x D tile: dst[r * (D + 4) + c] = src[r * ld + c]
// for r < nr, c < w, zeros elsewhere (ld = w: a [.][w] matrix; ld = H w: one head's columns of
// the packed layout). 16-byte copies when w and ld are multiples of 4 and src is 16-byte aligned
// (uniform over the block), 4-byte ones otherwise. Not committed: the caller groups copies.
template <int D>
__device__ __forceinline__ void fl_stage(float* dst, const float* __restrict__ src, unsigned nr,
                                         unsigned w, unsigned ld) {
    if (((w | ld) & 3u) == 0u && (reinterpret_cast<fl_u64>(src) & 15u) == 0u) {
        constexpr unsigned C4 = D / 4;
        for (unsigned t = threadIdx.x; t < FL_T * C4; t += TL_BLOCK) {
            const unsigned r = t / C4, c = (t - r * C4) * 4;
            const bool ok = r < nr && c < w;
            fl_cp16(dst + r * (D + 4) + c, ok ? src + (fl_u64)r * ld + c : src, ok);
        }
    } else {
        for (unsigned t = threadIdx.x; t < FL_T * D; t += TL_BLOCK) {
            const unsigned r = t / D, c = t - r * D;
            const bool ok = r < nr && c < w;
            fl_cp4(dst + r * (D + 4) + c, ok ? src + (fl_u64)r * ld + c : src, ok);
        }
    }
}

// Stage a 64 x 64 tile stored contiguously (a dS tile of the scratch) with leading dimension
// FL_LD: 16-byte copies (the scratch is 16-byte aligned, its tiles 16 KiB apart).
__device__ __forceinline__ void fl_stage_t(float* dst, const float* __restrict__ src) {
    for (unsigned t = threadIdx.x; t < FL_T * FL_T / 4; t += TL_BLOCK) {
        const unsigned r = t / (FL_T / 4), c = (t - r * (FL_T / 4)) * 4;
        fl_cp16(dst + r * FL_LD + c, src + r * FL_T + c, true);
    }
}

// Column n of the D/16 columns thread tx owns in a 64 x D product (D = 32: 2, D >= 64: groups of 4
// per 64 columns, so 16 threads read 64 consecutive floats).
template <int NC>
__device__ __forceinline__ int fl_col(int tx, int n) {
    return NC >= 4 ? (n >> 2) * 64 + tx * 4 + (n & 3) : tx * NC + n;
}

// acc[a][b] = fmaf(A[ty*4+a][kk], Bt[tx+16b][kk], acc[a][b]) for kk = 0 .. D-1 in order (a left
// fold per element): the 64 x 64 product of two natural tiles (leading dimension D + 4), read as
// float4 along the features. A's rows are shared by a half warp (broadcast), Bt's rows tx + 16b
// fall in distinct bank groups for 8 consecutive tx.
template <int D>
__device__ __forceinline__ void fl_qk(float (&acc)[4][4], const float* __restrict__ A,
                                      const float* __restrict__ Bt, int tx, int ty) {
#pragma unroll 1
    for (int kk = 0; kk < D; kk += 4) {
        float4 av[4], bv[4];
#pragma unroll
        for (int a = 0; a < 4; ++a)
            av[a] = *reinterpret_cast<const float4*>(A + (ty * 4 + a) * (D + 4) + kk);
#pragma unroll
        for (int b = 0; b < 4; ++b)
            bv[b] = *reinterpret_cast<const float4*>(Bt + (tx + 16 * b) * (D + 4) + kk);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                float s = acc[a][b];
                s = fmaf(av[a].x, bv[b].x, s);
                s = fmaf(av[a].y, bv[b].y, s);
                s = fmaf(av[a].z, bv[b].z, s);
                s = fmaf(av[a].w, bv[b].w, s);
                acc[a][b] = s;
            }
        }
    }
}

// acc[a][n] = fmaf(aT[kk][ty*4+a], b[kk][fl_col(n)], acc[a][n]) for kk = 0 .. KN-1 in order: a
// left fold per element. aT is a transposed tile (leading dimension FL_LD); b has leading
// dimension ldb. With FLAGS, a term whose flag byte fT[kk][ty*4+a] is 0 (blocked) is skipped.
template <int NC, int KN, bool FLAGS>
__device__ __forceinline__ void fl_mma(float (&acc)[4][NC], const float* __restrict__ aT,
                                       const float* __restrict__ b, int ldb,
                                       const unsigned char* __restrict__ fT, int tx, int ty) {
#pragma unroll 4
    for (int kk = 0; kk < KN; ++kk) {
        const float4 a4 = *reinterpret_cast<const float4*>(aT + kk * FL_LD + ty * 4);
        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
        float bv[NC];
#pragma unroll
        for (int n = 0; n < NC; ++n) bv[n] = b[kk * ldb + fl_col<NC>(tx, n)];
        unsigned f = 0x01010101u;
        if (FLAGS) f = *reinterpret_cast<const unsigned*>(fT + kk * FL_T + ty * 4);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const bool on = !FLAGS || ((f >> (8 * a)) & 0xffu);
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                if (on) acc[a][n] = fmaf(av[a], bv[n], acc[a][n]);
            }
        }
    }
}

// The tile's flag: from the summary; under the implicit causal mask (key j participates for query
// i iff j <= i) from the indices, as tl_flash_tiles would flag the causal triangle: 0 when the
// tile's first key is past its last query, 1 when its last key is at most its first query and
// the tile is whole, 2 otherwise; without either, 1 for a whole tile and 2 for a partial one.
__device__ __forceinline__ unsigned fl_flag(const unsigned char* flags, unsigned b, unsigned qt,
                                            unsigned kt, unsigned nqt, unsigned nkt, unsigned Lq,
                                            unsigned Lk, bool causal) {
    if (flags) return flags[((fl_u64)b * nqt + qt) * nkt + kt];
    const bool whole = Lq - qt * FL_T >= FL_T && Lk - kt * FL_T >= FL_T;
    if (causal) {
        const unsigned i0 = qt * FL_T, j0 = kt * FL_T;
        const unsigned ilast = i0 + fl_min(FL_T, Lq - i0) - 1;
        const unsigned jlast = j0 + fl_min(FL_T, Lk - j0) - 1;
        if (j0 > ilast) return 0u;
        return (whole && jlast <= i0) ? 1u : 2u;
    }
    return whole ? 1u : 2u;
}

// The first key tile >= kt of query tile qt with a participant (nkt when none is left).
__device__ __forceinline__ unsigned fl_next_k(const unsigned char* flags, unsigned b, unsigned qt,
                                              unsigned kt, unsigned nqt, unsigned nkt,
                                              unsigned Lq, unsigned Lk, bool causal) {
    while (kt < nkt && fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal) == 0u) ++kt;
    return kt;
}

// The first query tile >= qt of key tile kt with a participant (nqt when none is left).
__device__ __forceinline__ unsigned fl_next_q(const unsigned char* flags, unsigned b, unsigned qt,
                                              unsigned kt, unsigned nqt, unsigned nkt,
                                              unsigned Lq, unsigned Lk, bool causal) {
    while (qt < nqt && fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal) == 0u) ++qt;
    return qt;
}

// part[a][bb]: whether (row ty*4+a, column tx+16bb) of the thread's sub-tile participates, for a
// tile of nr valid rows and nc valid columns. `rows_are_q` says whether the tile's rows are
// queries (S) or keys (S^T); `causal`: the implicit causal mask (key j0 + kj <= query i0 + qi),
// no mask byte read.
__device__ __forceinline__ void fl_part(bool (&part)[4][4], unsigned flag,
                                        const unsigned char* __restrict__ mask, fl_u64 mrow0,
                                        unsigned Lk, unsigned i0, unsigned j0, unsigned nr,
                                        unsigned nc, bool rows_are_q, bool causal, int tx,
                                        int ty) {
    // the tile's first mask row, formed here (not per row and hoisted out of the tile loop: four
    // 64-bit row addresses the forward has no registers for)
    const unsigned char* mtile = mask ? mask + (mrow0 + i0) * Lk + j0 : mask;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int bb = 0; bb < 4; ++bb) {
            const unsigned r = ty * 4 + a, c = tx + 16 * bb;
            bool on = flag == 1u;
            if (flag == 2u) {
                const unsigned qi = rows_are_q ? r : c, kj = rows_are_q ? c : r;
                on = r < nr && c < nc;
                if (on && mask) on = mtile[(fl_u64)qi * Lk + kj] != 0;
                if (causal) on = on && j0 + kj <= i0 + qi;
            }
            part[a][bb] = on;
        }
    }
}

// The flag bytes of the thread's 4 rows at column tx+16bb, as one word of fT[column][row].
__device__ __forceinline__ unsigned fl_pack(const bool (&part)[4][4], int bb) {
    return (unsigned)part[0][bb] | ((unsigned)part[1][bb] << 8) | ((unsigned)part[2][bb] << 16) |
           ((unsigned)part[3][bb] << 24);
}

// No zero byte among a word's four (the classic bit trick).
__device__ __forceinline__ bool fl_all_bytes(unsigned w) {
    return ((w - 0x01010101u) & ~w & 0x80808080u) == 0u;
}

extern "C" __global__ void tl_flash_tiles(const unsigned char* __restrict__ mask,
                                          unsigned char* __restrict__ flags, unsigned B,
                                          unsigned Lq, unsigned Lk) {
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    const fl_u64 total = (fl_u64)B * nqt * nkt;
    // whole 16-byte rows when Lk is a multiple of 16 and the mask 16-byte aligned
    const bool vec = (Lk & 15u) == 0u && (reinterpret_cast<fl_u64>(mask) & 15u) == 0u;
    for (fl_u64 blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const unsigned kt = (unsigned)(blk % nkt);
        const fl_u64 rest = blk / nkt;
        const unsigned qt = (unsigned)(rest % nqt), b = (unsigned)(rest / nqt);
        const unsigned i0 = qt * FL_T, j0 = kt * FL_T;
        const unsigned nr = fl_min(FL_T, Lq - i0), nk = fl_min(FL_T, Lk - j0);
        bool all = true, any = false;
        if (vec) {   // nk is a multiple of 16 too: thread t reads bytes 16 (t % 4) .. of row t / 4
            for (unsigned t = threadIdx.x; t < FL_T * 4; t += TL_BLOCK) {
                const unsigned r = t >> 2, c = (t & 3u) * 16;
                if (r < nr && c < nk) {
                    const uint4 w = *reinterpret_cast<const uint4*>(
                        mask + ((fl_u64)b * Lq + i0 + r) * Lk + j0 + c);
                    all = all && fl_all_bytes(w.x) && fl_all_bytes(w.y) && fl_all_bytes(w.z) &&
                          fl_all_bytes(w.w);
                    any = any || (w.x | w.y | w.z | w.w) != 0u;
                }
            }
        } else {
            for (unsigned t = threadIdx.x; t < FL_T * FL_T; t += TL_BLOCK) {
                const unsigned r = t / FL_T, c = t - r * FL_T;
                if (r < nr && c < nk) {
                    const bool on = mask[((fl_u64)b * Lq + i0 + r) * Lk + j0 + c] != 0;
                    all = all && on;
                    any = any || on;
                }
            }
        }
        all = __syncthreads_and(all);
        any = __syncthreads_or(any);
        if (threadIdx.x == 0) {
            flags[blk] = !any ? 0 : (all && nr == FL_T && nk == FL_T) ? 1 : 2;
        }
    }
}

extern "C" __global__ void tl_flash_rowdot(const float* __restrict__ g,
                                           const float* __restrict__ out, float* __restrict__ dd,
                                           unsigned rows, unsigned dv, unsigned L, unsigned H) {
    // float4 reads (the same fold, four terms a load) when rows are 16-byte aligned
    const bool vec = (dv & 3u) == 0u &&
                     ((reinterpret_cast<fl_u64>(g) | reinterpret_cast<fl_u64>(out)) & 15u) == 0u;
    for (unsigned row = blockIdx.x * blockDim.x + threadIdx.x; row < rows;
         row += gridDim.x * blockDim.x) {
        // dd is per (problem, query row) = row; g and out in the packed layout (H = 1: row dv)
        const fl_u64 at = (fl_row0(row / L, L, H) + (fl_u64)(row % L) * H) * dv;
        float acc = 0.0f;   // a left fold of fmaf over dv
        if (vec) {
            const float4* g4 = reinterpret_cast<const float4*>(g + at);
            const float4* o4 = reinterpret_cast<const float4*>(out + at);
            for (unsigned c = 0; c < dv / 4; ++c) {
                const float4 x = g4[c], y = o4[c];
                acc = fmaf(x.x, y.x, acc);
                acc = fmaf(x.y, y.y, acc);
                acc = fmaf(x.z, y.z, acc);
                acc = fmaf(x.w, y.w, acc);
            }
        } else {
            for (unsigned c = 0; c < dv; ++c)
                acc = fmaf(g[at + c], out[at + c], acc);
        }
        dd[row] = acc;
    }
}

template <int D>
__device__ __forceinline__ void fl_forward(const float* __restrict__ q,
                                           const float* __restrict__ k,
                                           const float* __restrict__ v,
                                           const unsigned char* __restrict__ mask,
                                           const unsigned char* __restrict__ flags,
                                           float* __restrict__ out, float* __restrict__ stats,
                                           unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                           unsigned dv, float scale, unsigned H, bool causal) {
    constexpr int NC = D / 16;
    constexpr int LN = D + 4;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* qs = smem;                           // [64 rows][D + 4]
    float* ks = qs + FL_T * LN;                 // [64 keys][D + 4]
    float* vs = ks + FL_T * LN;                 // [64 keys][D + 4]
    float* pT = vs + FL_T * LN;                 // [64 keys][FL_LD]
    unsigned char* fT = reinterpret_cast<unsigned char*>(pT + FL_T * FL_LD);   // [key][row]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    const bool write_out = out != nullptr;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nqt; blk += gridDim.x) {
        // every batch entry's last (causal: longest) query tile first, then the next ones: the
        // longest work starts in the first wave, so no long block is left for the tail
        const unsigned b = (unsigned)(blk % B);
        const unsigned qt = nqt - 1 - (unsigned)(blk / B);
        const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;   // stats and mask rows
        const unsigned ldq = H * d, ldv = H * dv;
        unsigned kt = fl_next_k(flags, b, qt, 0, nqt, nkt, Lq, Lk, causal);
        fl_wait<0>();      // no copy of the previous tile is still in flight
        __syncthreads();   // the previous tile's readers are done with every buffer
        fl_stage<D>(qs, q + fl_row0(b, Lq, H) * d + (fl_u64)i0 * ldq, nr, d, ldq);
        if (kt < nkt) fl_stage<D>(ks, k + fl_row0(b, Lk, H) * d + (fl_u64)kt * FL_T * ldq,
                                  fl_min(FL_T, Lk - kt * FL_T), d, ldq);
        fl_commit();
        float m[4], l[4], o[4][NC];
        bool any[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            m[a] = FL_NEG_INF;
            l[a] = 0.0f;
            any[a] = false;
#pragma unroll
            for (int n = 0; n < NC; ++n) o[a][n] = -0.0f;
        }
        while (kt < nkt) {
            const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal);
            const unsigned kn = fl_next_k(flags, b, qt, kt + 1, nqt, nkt, Lq, Lk, causal);
            fl_wait<0>();
            __syncthreads();   // q and this K tile landed; vs, pT, fT of the last tile consumed
            if (write_out)
                fl_stage<D>(vs, v + fl_row0(b, Lk, H) * dv + (fl_u64)j0 * ldv, nk,
                            dv, ldv);
            fl_commit();
            float s[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = 0.0f;
            bool part[4][4];   // (mask bytes read before the product: their latency overlaps it)
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nr, nk, true, causal, tx, ty);
            fl_qk<D>(s, qs, ks, tx, ty);
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                float mt = FL_NEG_INF;
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) {
                    s[a][bb] = s[a][bb] * scale;
                    if (part[a][bb]) {
                        mt = fl_max(mt, s[a][bb]);
                        any[a] = true;
                    }
                }
#pragma unroll
                for (int off = 8; off > 0; off >>= 1)
                    mt = fl_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
                const float mn = fl_max(m[a], mt);
                const float mu = (mn == FL_NEG_INF) ? 0.0f : mn;   // all -inf so far: weights 0
                const float alpha = (mn == m[a]) ? 1.0f : expf(m[a] - mu);
                float ls = 0.0f;
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) {
                    const float p = part[a][bb] ? expf(s[a][bb] - mu) : 0.0f;
                    s[a][bb] = p;
                    ls = ls + p;
                }
                l[a] = fmaf(l[a], alpha, ls);   // this thread's keys; lanes summed at the end
                m[a] = mn;
                if (write_out) {
#pragma unroll
                    for (int n = 0; n < NC; ++n) o[a][n] = o[a][n] * alpha;
                }
            }
            __syncthreads();   // every thread has read ks: the next K tile may land there
            if (kn < nkt) fl_stage<D>(ks, k + fl_row0(b, Lk, H) * d + (fl_u64)kn * FL_T * ldq,
                                      fl_min(FL_T, Lk - kn * FL_T), d, ldq);
            fl_commit();
            kt = kn;
            if (!write_out) continue;
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int key = tx + 16 * bb;
                *reinterpret_cast<float4*>(pT + key * FL_LD + ty * 4) =
                    make_float4(s[0][bb], s[1][bb], s[2][bb], s[3][bb]);
                if (flag != 1u)
                    *reinterpret_cast<unsigned*>(fT + key * FL_T + ty * 4) = fl_pack(part, bb);
            }
            fl_wait<1>();      // this tile's V (the next K may still be in flight)
            __syncthreads();
            if (flag == 1u) fl_mma<NC, FL_T, false>(o, pT, vs, LN, nullptr, tx, ty);
            else fl_mma<NC, FL_T, true>(o, pT, vs, LN, fT, tx, ty);
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {   // the row's sum and participation over its 16 lanes
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                l[a] = l[a] + __shfl_xor_sync(0xffffffffu, l[a], off);
            const unsigned votes = __ballot_sync(0xffffffffu, any[a]);
            any[a] = ((votes >> (threadIdx.x & 16u)) & 0xffffu) != 0u;   // this half warp
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            if (r >= nr) continue;
            const fl_u64 row = qrow0 + i0 + r;
            if (write_out) {
#pragma unroll
                for (int n = 0; n < NC; ++n) {
                    const unsigned c = fl_col<NC>(tx, n);
                    if (c < dv) out[(fl_row0(b, Lq, H) + (fl_u64)(i0 + r) * H) * dv + c] =
                                    any[a] ? o[a][n] / l[a] : 0.0f;
                }
            }
            if (stats != nullptr && tx == 0) {
                stats[row * 2 + 0] = m[a];
                stats[row * 2 + 1] = 1.0f / l[a];
            }
        }
    }
}

// P and dS of one score from its recomputed s and dP: p = expf(s - m) (1/l), dS = p (dP - D);
// blocked entries get 0 (the flags keep them out of every product).
__device__ __forceinline__ void fl_p_ds(float& s, float& dp, bool on, float m, float inv_l,
                                        float dd, float scale) {
    if (!on) {
        s = 0.0f;
        dp = 0.0f;
        return;
    }
    const float mu = (m == FL_NEG_INF) ? 0.0f : m;
    const float p = expf(s * scale - mu) * inv_l;
    s = p;
    dp = p * (dp - dd);
}

template <int D>
__device__ __forceinline__ void fl_dkdv(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v,
                                        const unsigned char* __restrict__ mask,
                                        const unsigned char* __restrict__ flags,
                                        const float* __restrict__ g,
                                        const float* __restrict__ stats,
                                        const float* __restrict__ ddv, float* __restrict__ dk,
                                        float* __restrict__ dvo, float* __restrict__ ds,
                                        unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                        unsigned dv, float scale, unsigned H, bool causal) {
    constexpr int NC = D / 16;
    constexpr int LN = D + 4;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* ks = smem;                       // [64 keys][D + 4]
    float* vs = ks + FL_T * LN;             // [64 keys][D + 4]
    float* qs = vs + FL_T * LN;             // [64 queries][D + 4]
    float* gs = qs + FL_T * LN;             // [64 queries][D + 4]
    float* ps = gs + FL_T * LN;             // P as [query][key]
    float* dss = ps + FL_T * FL_LD;         // dS as [query][key]
    unsigned char* fT = reinterpret_cast<unsigned char*>(dss + FL_T * FL_LD);   // [query][key]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nkt; blk += gridDim.x) {
        // every batch entry's key tile 0 (causal: the longest) first, then the next ones
        const unsigned b = (unsigned)(blk % B);
        const unsigned kt = (unsigned)(blk / B);
        const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;   // stats, dd and mask rows
        const unsigned ldq = H * d, ldv = H * dv;
        const fl_u64 qe = fl_row0(b, Lq, H);
        const fl_u64 kr = fl_row0(b, Lk, H) + (fl_u64)j0 * H;   // this key tile's row 0 (units)
        unsigned qt = fl_next_q(flags, b, 0, kt, nqt, nkt, Lq, Lk, causal);
        fl_wait<0>();      // no copy of the previous tile is still in flight
        __syncthreads();   // the previous tile's readers are done with every buffer
        fl_stage<D>(ks, k + kr * d, nk, d, ldq);
        fl_stage<D>(vs, v + kr * dv, nk, dv, ldv);
        fl_commit();
        float ak[4][NC], av[4][NC];
        bool seen[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            seen[a] = false;
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                ak[a][n] = 0.0f;
                av[a][n] = -0.0f;
            }
        }
        while (qt < nqt) {
            const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal);
            __syncthreads();   // P, dS, q, g of the previous query tile consumed
            fl_stage<D>(qs, q + qe * d + (fl_u64)i0 * ldq, nr, d, ldq);
            fl_stage<D>(gs, g + qe * dv + (fl_u64)i0 * ldv, nr, dv, ldv);
            fl_commit();
            // this thread's 4 query columns: their statistics, read while the copies fly
            float cm[4], cl[4], cd[4];
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const unsigned i = tx + 16 * bb;
                const fl_u64 row = qrow0 + i0 + (i < nr ? i : 0);
                cm[bb] = stats[row * 2];
                cl[bb] = stats[row * 2 + 1];
                cd[bb] = ddv[row];
            }
            fl_wait<0>();
            __syncthreads();
            float s[4][4], dp[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = dp[a][bb] = 0.0f;
            bool part[4][4];   // (mask bytes read before the products: their latency overlaps)
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nk, nr, false, causal, tx, ty);
            fl_qk<D>(s, ks, qs, tx, ty);    // [key][query]
            fl_qk<D>(dp, vs, gs, tx, ty);
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
#pragma unroll
                for (int a = 0; a < 4; ++a) {
                    fl_p_ds(s[a][bb], dp[a][bb], part[a][bb], cm[bb], cl[bb], cd[bb], scale);
                    seen[a] = seen[a] || part[a][bb];
                }
            }
            if (ds != nullptr) {   // dS of the tile as [key][query] for tl_flash_dqs
                float* tile = ds + (((fl_u64)b * nqt + qt) * nkt + kt) * (FL_T * FL_T);
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int bb = 0; bb < 4; ++bb)
                        tile[(ty * 4 + a) * FL_T + tx + 16 * bb] = dp[a][bb];
            }
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int i = tx + 16 * bb;
                *reinterpret_cast<float4*>(ps + i * FL_LD + ty * 4) =
                    make_float4(s[0][bb], s[1][bb], s[2][bb], s[3][bb]);
                *reinterpret_cast<float4*>(dss + i * FL_LD + ty * 4) =
                    make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
                if (flag != 1u)
                    *reinterpret_cast<unsigned*>(fT + i * FL_T + ty * 4) = fl_pack(part, bb);
            }
            __syncthreads();
            if (flag == 1u) {
                fl_mma<NC, FL_T, false>(av, ps, gs, LN, nullptr, tx, ty);
                fl_mma<NC, FL_T, false>(ak, dss, qs, LN, nullptr, tx, ty);
            } else {
                fl_mma<NC, FL_T, true>(av, ps, gs, LN, fT, tx, ty);
                fl_mma<NC, FL_T, true>(ak, dss, qs, LN, fT, tx, ty);
            }
            qt = fl_next_q(flags, b, qt + 1, kt, nqt, nkt, Lq, Lk, causal);
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
            {   // every lane must reach the shuffle (no short circuit)
                const int other = __shfl_xor_sync(0xffffffffu, (int)seen[a], off);
                seen[a] = seen[a] || other;
            }
            const unsigned r = ty * 4 + a;
            if (r >= nk) continue;
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                const unsigned c = fl_col<NC>(tx, n);
                if (c < d)
                    dk[(kr + (fl_u64)r * H) * d + c] = (ak[a][n] == 0.0f) ? 0.0f : ak[a][n] * scale;
                if (c < dv) dvo[(kr + (fl_u64)r * H) * dv + c] = seen[a] ? av[a][n] : 0.0f;
            }
        }
    }
}

template <int D>
__device__ __forceinline__ void fl_dq(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v,
                                      const unsigned char* __restrict__ mask,
                                      const unsigned char* __restrict__ flags,
                                      const float* __restrict__ g, const float* __restrict__ stats,
                                      const float* __restrict__ ddv, float* __restrict__ dq,
                                      unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                      unsigned dv, float scale, unsigned H, bool causal) {
    constexpr int NC = D / 16;
    constexpr int LN = D + 4;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* qs = smem;                       // [64 queries][D + 4]
    float* gs = qs + FL_T * LN;             // [64 queries][D + 4]
    float* ks0 = gs + FL_T * LN;            // [64 keys][D + 4], two buffers
    float* vs = ks0 + 2 * FL_T * LN;        // [64 keys][D + 4]
    float* dsT = vs + FL_T * LN;            // dS as [key][query]
    unsigned char* fT = reinterpret_cast<unsigned char*>(dsT + FL_T * FL_LD);   // [key][query]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nqt; blk += gridDim.x) {
        // every batch entry's last (causal: longest) query tile first, then the next ones: the
        // longest work starts in the first wave, so no long block is left for the tail
        const unsigned b = (unsigned)(blk % B);
        const unsigned qt = nqt - 1 - (unsigned)(blk / B);
        const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;   // stats, dd and mask rows
        const unsigned ldq = H * d, ldv = H * dv;
        const fl_u64 qe = fl_row0(b, Lq, H), ke = fl_row0(b, Lk, H);
        unsigned kt = fl_next_k(flags, b, qt, 0, nqt, nkt, Lq, Lk, causal);
        fl_wait<0>();      // no copy of the previous tile is still in flight
        __syncthreads();   // the previous tile's readers are done with every buffer
        fl_stage<D>(qs, q + qe * d + (fl_u64)i0 * ldq, nr, d, ldq);
        fl_stage<D>(gs, g + qe * dv + (fl_u64)i0 * ldv, nr, dv, ldv);
        if (kt < nkt) {
            const unsigned nk = fl_min(FL_T, Lk - kt * FL_T);
            fl_stage<D>(ks0, k + ke * d + (fl_u64)kt * FL_T * ldq, nk, d, ldq);
            fl_stage<D>(vs, v + ke * dv + (fl_u64)kt * FL_T * ldv, nk, dv, ldv);
        }
        fl_commit();
        float m[4], inv_l[4], dd[4], aq[4][NC];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            const fl_u64 row = qrow0 + i0 + (r < nr ? r : 0);
            m[a] = stats[row * 2];
            inv_l[a] = stats[row * 2 + 1];
            dd[a] = ddv[row];
#pragma unroll
            for (int n = 0; n < NC; ++n) aq[a][n] = 0.0f;
        }
        int cur = 0;
        while (kt < nkt) {
            const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal);
            const unsigned kn = fl_next_k(flags, b, qt, kt + 1, nqt, nkt, Lq, Lk, causal);
            float* ks = ks0 + cur * FL_T * LN;
            fl_wait<0>();
            __syncthreads();   // this tile's k and v landed; dS, flags, the other K consumed
            float s[4][4], dp[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = dp[a][bb] = 0.0f;
            bool part[4][4];   // (mask bytes read before the products: their latency overlaps)
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nr, nk, true, causal, tx, ty);
            fl_qk<D>(s, qs, ks, tx, ty);    // [query][key]
            fl_qk<D>(dp, gs, vs, tx, ty);
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb)
                    fl_p_ds(s[a][bb], dp[a][bb], part[a][bb], m[a], inv_l[a], dd[a], scale);
            __syncthreads();   // every thread has read vs: the next tile's k and v may land
            if (kn < nkt) {
                const unsigned nk1 = fl_min(FL_T, Lk - kn * FL_T);
                fl_stage<D>(ks0 + (cur ^ 1) * FL_T * LN, k + ke * d + (fl_u64)kn * FL_T * ldq,
                            nk1, d, ldq);
                fl_stage<D>(vs, v + ke * dv + (fl_u64)kn * FL_T * ldv, nk1, dv, ldv);
            }
            fl_commit();
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int j = tx + 16 * bb;
                *reinterpret_cast<float4*>(dsT + j * FL_LD + ty * 4) =
                    make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
                if (flag != 1u)
                    *reinterpret_cast<unsigned*>(fT + j * FL_T + ty * 4) = fl_pack(part, bb);
            }
            __syncthreads();
            if (flag == 1u) fl_mma<NC, FL_T, false>(aq, dsT, ks, LN, nullptr, tx, ty);
            else fl_mma<NC, FL_T, true>(aq, dsT, ks, LN, fT, tx, ty);
            cur ^= 1;
            kt = kn;
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            if (r >= nr) continue;
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                const unsigned c = fl_col<NC>(tx, n);
                if (c < d)
                    dq[(qe + (fl_u64)(i0 + r) * H) * d + c] =
                        (aq[a][n] == 0.0f) ? 0.0f : aq[a][n] * scale;
            }
        }
    }
}

template <int D>
__device__ __forceinline__ void fl_dqs(const float* __restrict__ k,
                                       const unsigned char* __restrict__ mask,
                                       const unsigned char* __restrict__ flags,
                                       const float* __restrict__ ds, float* __restrict__ dq,
                                       unsigned B, unsigned Lq, unsigned Lk, unsigned d,
                                       float scale, unsigned H, bool causal) {
    constexpr int NC = D / 16;
    constexpr int LN = D + 4;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* ks0 = smem;                      // [64 keys][D + 4], two buffers
    float* dsT0 = ks0 + 2 * FL_T * LN;      // dS as [key][query], two buffers
    unsigned char* fT = reinterpret_cast<unsigned char*>(dsT0 + 2 * FL_T * FL_LD);
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nqt; blk += gridDim.x) {
        // every batch entry's last (causal: longest) query tile first, then the next ones: the
        // longest work starts in the first wave, so no long block is left for the tail
        const unsigned b = (unsigned)(blk % B);
        const unsigned qt = nqt - 1 - (unsigned)(blk / B);
        const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;   // mask rows
        const unsigned ldq = H * d;
        const fl_u64 qe = fl_row0(b, Lq, H), ke = fl_row0(b, Lk, H);
        const float* dsq = ds + ((fl_u64)b * nqt + qt) * nkt * (FL_T * FL_T);
        unsigned kt = fl_next_k(flags, b, qt, 0, nqt, nkt, Lq, Lk, causal);
        fl_wait<0>();      // no copy of the previous tile is still in flight
        __syncthreads();   // the previous tile's readers are done with every buffer
        if (kt < nkt) {
            fl_stage<D>(ks0, k + ke * d + (fl_u64)kt * FL_T * ldq, fl_min(FL_T, Lk - kt * FL_T), d,
                        ldq);
            fl_stage_t(dsT0, dsq + (fl_u64)kt * (FL_T * FL_T));
        }
        fl_commit();
        float aq[4][NC];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int n = 0; n < NC; ++n) aq[a][n] = 0.0f;
        int cur = 0;
        while (kt < nkt) {
            const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, Lq, Lk, causal);
            const unsigned kn = fl_next_k(flags, b, qt, kt + 1, nqt, nkt, Lq, Lk, causal);
            fl_wait<0>();
            __syncthreads();   // this tile landed; the other buffers and fT are consumed
            if (kn < nkt) {
                fl_stage<D>(ks0 + (cur ^ 1) * FL_T * LN, k + ke * d + (fl_u64)kn * FL_T * ldq,
                            fl_min(FL_T, Lk - kn * FL_T), d, ldq);
                fl_stage_t(dsT0 + (cur ^ 1) * FL_T * FL_LD, dsq + (fl_u64)kn * (FL_T * FL_T));
            }
            fl_commit();
            const float* ks = ks0 + cur * FL_T * LN;
            const float* dsT = dsT0 + cur * FL_T * FL_LD;
            if (flag == 1u) {
                fl_mma<NC, FL_T, false>(aq, dsT, ks, LN, nullptr, tx, ty);
            } else {
                bool part[4][4];
                fl_part(part, flag, mask, qrow0, Lk, i0, j0, nr, nk, true, causal, tx, ty);
#pragma unroll
                for (int bb = 0; bb < 4; ++bb)
                    *reinterpret_cast<unsigned*>(fT + (tx + 16 * bb) * FL_T + ty * 4) =
                        fl_pack(part, bb);
                __syncthreads();
                fl_mma<NC, FL_T, true>(aq, dsT, ks, LN, fT, tx, ty);
            }
            cur ^= 1;
            kt = kn;
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            if (r >= nr) continue;
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                const unsigned c = fl_col<NC>(tx, n);
                if (c < d)
                    dq[(qe + (fl_u64)(i0 + r) * H) * d + c] =
                        (aq[a][n] == 0.0f) ? 0.0f : aq[a][n] * scale;
            }
        }
    }
}

// NB: the blocks per multiprocessor the register budget is cut for (launch bounds): shared memory
// allows 3 forward blocks and 2 backward ones at D <= 64, one of each at D = 128.
#define FL_FWD(name, D, NB)                                                                        \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, NB) name(                               \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, float* out, float* stats, unsigned B, unsigned Lq,            \
        unsigned Lk, unsigned d, unsigned dv, float scale, unsigned H, unsigned causal) {         \
        fl_forward<D>(q, k, v, mask, flags, out, stats, B, Lq, Lk, d, dv, scale, H, causal != 0); \
    }
#define FL_DKDV(name, D, NB)                                                                       \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, NB) name(                               \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, const float* g, const float* stats, const float* dd,          \
        float* dk, float* dvo, float* ds, unsigned B, unsigned Lq, unsigned Lk, unsigned d,       \
        unsigned dv, float scale, unsigned H, unsigned causal) {                                  \
        fl_dkdv<D>(q, k, v, mask, flags, g, stats, dd, dk, dvo, ds, B, Lq, Lk, d, dv, scale, H,   \
                   causal != 0);                                                                  \
    }
#define FL_DQS(name, D, NB)                                                                       \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, NB) name(                              \
        const float* k, const unsigned char* mask, const unsigned char* flags, const float* ds,   \
        float* dq, unsigned B, unsigned Lq, unsigned Lk, unsigned d, float scale, unsigned H,     \
        unsigned causal) {                                                                        \
        fl_dqs<D>(k, mask, flags, ds, dq, B, Lq, Lk, d, scale, H, causal != 0);                   \
    }
#define FL_DQ(name, D, NB)                                                                         \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, NB) name(                               \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, const float* g, const float* stats, const float* dd,          \
        float* dq, unsigned B, unsigned Lq, unsigned Lk, unsigned d, unsigned dv, float scale,    \
        unsigned H, unsigned causal) {                                                            \
        fl_dq<D>(q, k, v, mask, flags, g, stats, dd, dq, B, Lq, Lk, d, dv, scale, H, causal != 0);\
    }

FL_FWD(tl_flash_fwd_32, 32, 3)
FL_FWD(tl_flash_fwd_64, 64, 3)
FL_FWD(tl_flash_fwd_128, 128, 1)
FL_DKDV(tl_flash_dkdv_32, 32, 2)
FL_DKDV(tl_flash_dkdv_64, 64, 2)
FL_DKDV(tl_flash_dkdv_128, 128, 1)
FL_DQ(tl_flash_dq_32, 32, 2)
FL_DQ(tl_flash_dq_64, 64, 2)
FL_DQ(tl_flash_dq_128, 128, 1)
FL_DQS(tl_flash_dqs_32, 32, 3)
FL_DQS(tl_flash_dqs_64, 64, 3)
FL_DQS(tl_flash_dqs_128, 128, 2)
