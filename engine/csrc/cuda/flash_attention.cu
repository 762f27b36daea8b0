// Tiled online-softmax attention in float32 (FlashAttention-2's schedule) with hard masks: the
// kernels of the capsule native_cuda.flash_attention (forward and backend VJP; engine/providers/
// native_cuda/flash_attention.py launches them, conformance/derived_flash.py bounds them).
//
// Layout: q [B][Lq][d], k [B][Lk][d], v [B][Lk][dv], g and out [B][Lq][dv], mask [B][Lq][Lk] bool
// bytes or null (all participate). Semantics as attention.cu and conformance/references/
// scaled_dot_product_attention.py: a blocked entry takes no part at all (its score, and q, k, v, g
// data only blocked entries use, even inf or NaN, never enter an operation: the mask decides, never
// a -inf sentinel); a query row with no participant gives +0 outputs and +0 dq; a key no query
// attends gets +0 dk and dv; an output whose participating terms are all -0 stays -0 (out and dv
// start at -0); an exact zero dq or dk is +0. A participating NaN or +inf score, or only -inf
// ones, makes the row's probabilities NaN (running max NaN-propagating; 0 / 0 at the end).
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true, so every fused multiply-add below is an explicit fmaf (one rounding) and every
// other operation rounds once; expf and logf are libdevice's (2 and 1 ulp). No atomics: every
// output element is owned by one thread of one block and every sum has a fixed order (bitwise
// repeatable).
//
// Schedule. Tiles of FL_T = 64 query rows by 64 keys; 256 threads, thread (ty, tx) = (tid / 16,
// tid % 16) owns the 4 x 4 sub-tile rows ty*4+a, columns tx*4+b of every 64 x 64 product (register
// tiling) and, of a 64 x D product, rows ty*4+a and D/16 columns (fl_col). Operands are staged in
// shared memory: "T" tiles transposed ([feature][row], leading dimension FL_LD = 68 so float4
// reads stay aligned), "N" tiles natural ([row][feature], leading dimension D + 4). One micro-
// kernel (fl_mma) does every product as a left fold of fmaf over the reduction index.
// Kernels are instantiated for D in {32, 64, 128}: d and dv may differ, both are padded with zeros
// to D (a zero feature adds exactly nothing to a dot product).
//
//   tl_flash_tiles(mask, flags, B, Lq, Lk): flags[(b * nqt + qt) * nkt + kt] = 0 when no entry of
//       the (query tile, key tile) participates, 1 when all 64 x 64 do (and the tile is whole),
//       2 otherwise ("mixed": per-element mask reads, and products skip blocked entries). One
//       block per tile, __syncthreads_and/_or. The kernels below skip tiles flagged 0 (a causal
//       mask's upper triangle) and read no mask byte in tiles flagged 1.
// Kernels (D = the suffix: tl_flash_fwd_32 tl_flash_fwd_64 tl_flash_fwd_128, tl_flash_dkdv_32
// tl_flash_dkdv_64 tl_flash_dkdv_128, tl_flash_dq_32 tl_flash_dq_64 tl_flash_dq_128):
//   tl_flash_fwd_D(q, k, v, mask, flags, out, stats, g, B, Lq, Lk, d, dv, scale):
//       one block per (batch entry, query tile), the longest causal tiles first. Per key tile:
//       S = q k^T (fmaf over d, then * scale), the tile's row max over participants, m_new =
//       max(m, tile max), alpha = expf(m - m_new), p = expf(s - m_new) (0 where blocked), l =
//       fmaf(l, alpha, rowsum p) (rowsum: 4 terms serially, then a 16-lane xor tree), O = O alpha
//       then O += p v (fmaf over the tile's keys). At the end out = O / l (+0 for a row with no
//       participant). With `stats` non-null (the VJP's pass) the p v product is skipped and each
//       row writes stats[row] = (m, 1 / l, D = sum_c g_c out_c (fmaf over dv)), the pass
//       recomputing exactly the forward's m and l bits. Shared: qT, kT, pT (64 x FL_LD floats
//       each, D x FL_LD for the first two when D = 128), v (64 x (D + 4)), 4 KiB of flags.
//   tl_flash_dkdv_D(q, k, v, mask, flags, g, stats, dk, dv_out, B, Lq, Lk, d, dv, scale):
//       one block per (batch entry, key tile); a pass over query tiles recomputes S^T = k q^T,
//       P = expf(s - m) (1/l), dP^T = v g^T, dS = P (dP - D) and accumulates dv += P^T g and
//       dk += dS^T q (fmaf over query rows; dk times scale at the end). Shared: kT, vT, qT (then
//       P), gT (then dS), q and g natural, flags: 211 KiB at D = 128.
//   tl_flash_dq_D(q, k, v, mask, flags, g, stats, dq, B, Lq, Lk, d, dv, scale):
//       one block per (batch entry, query tile); a pass over key tiles recomputes P and dS as
//       above and accumulates dq += dS k (fmaf over keys; times scale at the end).
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

// NaN-propagating max: a NaN score of a participant makes the row NaN (the reference's rule).
__device__ __forceinline__ float fl_max(float a, float b) {
    return (b > a || b != b) ? b : a;
}

// Column n of the D/16 columns thread tx owns in a 64 x D product (D = 32: 2, D >= 64: groups of 4
// per 64 columns, so 16 threads read 64 consecutive floats).
template <int NC>
__device__ __forceinline__ int fl_col(int tx, int n) {
    return NC >= 4 ? (n >> 2) * 64 + tx * 4 + (n & 3) : tx * NC + n;
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

// dst[c * FL_LD + r] = src[r][c] (row stride w) for r < nr, c < w; zeros elsewhere up to 64 x D.
template <int D>
__device__ __forceinline__ void fl_load_t(float* dst, const float* __restrict__ src, unsigned nr,
                                          unsigned w) {
    for (unsigned t = threadIdx.x; t < FL_T * D; t += TL_BLOCK) {
        const unsigned r = t / D, c = t - r * D;
        dst[c * FL_LD + r] = (r < nr && c < w) ? src[(fl_u64)r * w + c] : 0.0f;
    }
}

// dst[r * (D + 4) + c] = src[r][c] for r < nr, c < w; zeros elsewhere up to 64 x D.
template <int D>
__device__ __forceinline__ void fl_load_n(float* dst, const float* __restrict__ src, unsigned nr,
                                          unsigned w) {
    for (unsigned t = threadIdx.x; t < FL_T * D; t += TL_BLOCK) {
        const unsigned r = t / D, c = t - r * D;
        dst[r * (D + 4) + c] = (r < nr && c < w) ? src[(fl_u64)r * w + c] : 0.0f;
    }
}

// The tile's flag: from the summary, or (no mask) 1 for a whole tile and 2 for a partial one.
__device__ __forceinline__ unsigned fl_flag(const unsigned char* flags, unsigned b, unsigned qt,
                                            unsigned kt, unsigned nqt, unsigned nkt, unsigned nr,
                                            unsigned nk) {
    if (flags) return flags[((fl_u64)b * nqt + qt) * nkt + kt];
    return (nr == FL_T && nk == FL_T) ? 1u : 2u;
}

// part[a][bb]: whether (row r0 + a', key c0 + b') participates, for the thread's 4 x 4 sub-tile
// at rows ty*4+a, columns tx*4+bb of a tile of nr valid rows and nk valid columns. `rows_are_q`
// says whether the tile's rows are queries (S) or keys (S^T).
__device__ __forceinline__ void fl_part(bool (&part)[4][4], unsigned flag,
                                        const unsigned char* __restrict__ mask, fl_u64 mrow0,
                                        unsigned Lk, unsigned i0, unsigned j0, unsigned nr,
                                        unsigned nc, bool rows_are_q, int tx, int ty) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int bb = 0; bb < 4; ++bb) {
            const unsigned r = ty * 4 + a, c = tx * 4 + bb;
            bool on = flag == 1u;
            if (flag == 2u) {
                const unsigned qi = rows_are_q ? r : c, kj = rows_are_q ? c : r;
                on = r < nr && c < nc;
                if (on && mask) on = mask[(mrow0 + i0 + qi) * Lk + j0 + kj] != 0;
            }
            part[a][bb] = on;
        }
    }
}

extern "C" __global__ void tl_flash_tiles(const unsigned char* __restrict__ mask,
                                          unsigned char* __restrict__ flags, unsigned B,
                                          unsigned Lq, unsigned Lk) {
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    const fl_u64 total = (fl_u64)B * nqt * nkt;
    for (fl_u64 blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const unsigned kt = (unsigned)(blk % nkt);
        const fl_u64 rest = blk / nkt;
        const unsigned qt = (unsigned)(rest % nqt), b = (unsigned)(rest / nqt);
        const unsigned i0 = qt * FL_T, j0 = kt * FL_T;
        const unsigned nr = fl_min(FL_T, Lq - i0), nk = fl_min(FL_T, Lk - j0);
        bool all = true, any = false;
        for (unsigned t = threadIdx.x; t < FL_T * FL_T; t += TL_BLOCK) {
            const unsigned r = t / FL_T, c = t - r * FL_T;
            if (r < nr && c < nk) {
                const bool on = mask[((fl_u64)b * Lq + i0 + r) * Lk + j0 + c] != 0;
                all = all && on;
                any = any || on;
            }
        }
        all = __syncthreads_and(all);
        any = __syncthreads_or(any);
        if (threadIdx.x == 0) {
            flags[blk] = !any ? 0 : (all && nr == FL_T && nk == FL_T) ? 1 : 2;
        }
    }
}

template <int D>
__device__ __forceinline__ void fl_forward(const float* __restrict__ q,
                                           const float* __restrict__ k,
                                           const float* __restrict__ v,
                                           const unsigned char* __restrict__ mask,
                                           const unsigned char* __restrict__ flags,
                                           float* __restrict__ out, float* __restrict__ stats,
                                           const float* __restrict__ g, unsigned B, unsigned Lq,
                                           unsigned Lk, unsigned d, unsigned dv, float scale) {
    constexpr int NC = D / 16;
    constexpr int DT = D > FL_T ? D : FL_T;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* qT = smem;                           // [D][FL_LD]
    float* kT = qT + DT * FL_LD;                // [D][FL_LD]
    float* pT = kT + DT * FL_LD;                // [64 keys][FL_LD]
    float* vs = pT + FL_T * FL_LD;              // [64 keys][D + 4]
    unsigned char* fT = reinterpret_cast<unsigned char*>(vs + FL_T * (D + 4));   // [key][row]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    const bool write_out = stats == nullptr;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nqt; blk += gridDim.x) {
        const unsigned b = (unsigned)(blk / nqt);
        const unsigned qt = nqt - 1 - (unsigned)(blk - (fl_u64)b * nqt);   // longest first
        const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;
        __syncthreads();   // the previous tile's readers are done with qT
        fl_load_t<D>(qT, q + (qrow0 + i0) * d, nr, d);
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
        for (unsigned kt = 0; kt < nkt; ++kt) {
            const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, nr, nk);
            if (flag == 0u) continue;   // uniform over the block
            __syncthreads();            // kT, pT, vs, fT of the previous key tile consumed
            fl_load_t<D>(kT, k + ((fl_u64)b * Lk + j0) * d, nk, d);
            if (write_out) fl_load_n<D>(vs, v + ((fl_u64)b * Lk + j0) * dv, nk, dv);
            __syncthreads();
            float s[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = 0.0f;
            fl_mma<4, D, false>(s, qT, kT, FL_LD, nullptr, tx, ty);
            bool part[4][4];
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nr, nk, true, tx, ty);
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                float mt = FL_NEG_INF;
                bool at = false;
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) {
                    s[a][bb] = s[a][bb] * scale;
                    if (part[a][bb]) {
                        mt = fl_max(mt, s[a][bb]);
                        at = true;
                    }
                }
#pragma unroll
                for (int off = 8; off > 0; off >>= 1) {
                    mt = fl_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
                    // every lane must reach the shuffle: no `at || shfl(...)` short circuit
                    const int other = __shfl_xor_sync(0xffffffffu, (int)at, off);
                    at = at || other;
                }
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
#pragma unroll
                for (int off = 8; off > 0; off >>= 1) ls = ls + __shfl_xor_sync(0xffffffffu, ls, off);
                l[a] = fmaf(l[a], alpha, ls);
                m[a] = mn;
                any[a] = any[a] || at;
                if (write_out) {
#pragma unroll
                    for (int n = 0; n < NC; ++n) o[a][n] = o[a][n] * alpha;
                }
            }
            if (!write_out) continue;
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int key = tx * 4 + bb;
                *reinterpret_cast<float4*>(pT + key * FL_LD + ty * 4) =
                    make_float4(s[0][bb], s[1][bb], s[2][bb], s[3][bb]);
                *reinterpret_cast<unsigned*>(fT + key * FL_T + ty * 4) =
                    (unsigned)part[0][bb] | ((unsigned)part[1][bb] << 8) |
                    ((unsigned)part[2][bb] << 16) | ((unsigned)part[3][bb] << 24);
            }
            __syncthreads();
            if (flag == 1u) fl_mma<NC, FL_T, false>(o, pT, vs, D + 4, nullptr, tx, ty);
            else fl_mma<NC, FL_T, true>(o, pT, vs, D + 4, fT, tx, ty);
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
                    if (c < dv) out[row * dv + c] = any[a] ? o[a][n] / l[a] : 0.0f;
                }
            } else if (tx == 0) {
                float dd = 0.0f;   // D = g . out, a left fold of fmaf over dv
                for (unsigned c = 0; c < dv; ++c) dd = fmaf(g[row * dv + c], out[row * dv + c], dd);
                stats[row * 3 + 0] = m[a];
                stats[row * 3 + 1] = 1.0f / l[a];
                stats[row * 3 + 2] = any[a] ? dd : 0.0f;
            }
        }
    }
}

// P and dS of a 4 x 4 sub-tile from recomputed scores s and dP: p = expf(s - m) (1/l), dS =
// p (dP - D); blocked entries get 0 (the flags keep them out of every product).
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
                                        const float* __restrict__ stats, float* __restrict__ dk,
                                        float* __restrict__ dvo, unsigned B, unsigned Lq,
                                        unsigned Lk, unsigned d, unsigned dv, float scale) {
    constexpr int NC = D / 16;
    constexpr int DT = D > FL_T ? D : FL_T;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* kT = smem;                       // [D][FL_LD]
    float* vT = kT + DT * FL_LD;            // [D][FL_LD]
    float* qT = vT + DT * FL_LD;            // [D][FL_LD], then P as [query][key]
    float* gT = qT + DT * FL_LD;            // [D][FL_LD], then dS as [query][key]
    float* qs = gT + DT * FL_LD;            // [64 queries][D + 4]
    float* gs = qs + FL_T * (D + 4);        // [64 queries][D + 4]
    unsigned char* fT = reinterpret_cast<unsigned char*>(gs + FL_T * (D + 4));   // [query][key]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nkt; blk += gridDim.x) {
        const unsigned b = (unsigned)(blk / nkt);
        const unsigned kt = (unsigned)(blk - (fl_u64)b * nkt);   // causal: key tile 0 is longest
        const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
        const fl_u64 krow0 = (fl_u64)b * Lk + j0, qrow0 = (fl_u64)b * Lq;
        __syncthreads();
        fl_load_t<D>(kT, k + krow0 * d, nk, d);
        fl_load_t<D>(vT, v + krow0 * dv, nk, dv);
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
        for (unsigned qt = 0; qt < nqt; ++qt) {
            const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, nr, nk);
            if (flag == 0u) continue;
            __syncthreads();   // P, dS, q, g of the previous query tile consumed
            fl_load_t<D>(qT, q + (qrow0 + i0) * d, nr, d);
            fl_load_t<D>(gT, g + (qrow0 + i0) * dv, nr, dv);
            fl_load_n<D>(qs, q + (qrow0 + i0) * d, nr, d);
            fl_load_n<D>(gs, g + (qrow0 + i0) * dv, nr, dv);
            __syncthreads();
            float s[4][4], dp[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = dp[a][bb] = 0.0f;
            fl_mma<4, D, false>(s, kT, qT, FL_LD, nullptr, tx, ty);    // [key][query]
            fl_mma<4, D, false>(dp, vT, gT, FL_LD, nullptr, tx, ty);
            bool part[4][4];
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nk, nr, false, tx, ty);
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const unsigned i = tx * 4 + bb;
                const float* st = stats + (qrow0 + i0 + (i < nr ? i : 0)) * 3;
                const float m = st[0], inv_l = st[1], dd = st[2];
#pragma unroll
                for (int a = 0; a < 4; ++a) {
                    fl_p_ds(s[a][bb], dp[a][bb], part[a][bb], m, inv_l, dd, scale);
                    seen[a] = seen[a] || part[a][bb];
                }
            }
            __syncthreads();   // every thread is done reading qT and gT
            float* ps = qT;    // [query][FL_LD]
            float* dss = gT;
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int i = tx * 4 + bb;
                *reinterpret_cast<float4*>(ps + i * FL_LD + ty * 4) =
                    make_float4(s[0][bb], s[1][bb], s[2][bb], s[3][bb]);
                *reinterpret_cast<float4*>(dss + i * FL_LD + ty * 4) =
                    make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
                *reinterpret_cast<unsigned*>(fT + i * FL_T + ty * 4) =
                    (unsigned)part[0][bb] | ((unsigned)part[1][bb] << 8) |
                    ((unsigned)part[2][bb] << 16) | ((unsigned)part[3][bb] << 24);
            }
            __syncthreads();
            if (flag == 1u) {
                fl_mma<NC, FL_T, false>(av, ps, gs, D + 4, nullptr, tx, ty);
                fl_mma<NC, FL_T, false>(ak, dss, qs, D + 4, nullptr, tx, ty);
            } else {
                fl_mma<NC, FL_T, true>(av, ps, gs, D + 4, fT, tx, ty);
                fl_mma<NC, FL_T, true>(ak, dss, qs, D + 4, fT, tx, ty);
            }
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
                if (c < d) dk[(krow0 + r) * d + c] = (ak[a][n] == 0.0f) ? 0.0f : ak[a][n] * scale;
                if (c < dv) dvo[(krow0 + r) * dv + c] = seen[a] ? av[a][n] : 0.0f;
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
                                      float* __restrict__ dq, unsigned B, unsigned Lq,
                                      unsigned Lk, unsigned d, unsigned dv, float scale) {
    constexpr int NC = D / 16;
    constexpr int DT = D > FL_T ? D : FL_T;
    extern __shared__ float4 fl_smem4[];
    float* smem = reinterpret_cast<float*>(fl_smem4);
    float* qT = smem;                       // [D][FL_LD]
    float* gT = qT + DT * FL_LD;            // [D][FL_LD]
    float* kT = gT + DT * FL_LD;            // [D][FL_LD], then dS as [key][query]
    float* vT = kT + DT * FL_LD;            // [D][FL_LD]
    float* ks = vT + DT * FL_LD;            // [64 keys][D + 4]
    unsigned char* fT = reinterpret_cast<unsigned char*>(ks + FL_T * (D + 4));   // [key][query]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned nqt = (Lq + FL_T - 1) / FL_T, nkt = (Lk + FL_T - 1) / FL_T;
    for (fl_u64 blk = blockIdx.x; blk < (fl_u64)B * nqt; blk += gridDim.x) {
        const unsigned b = (unsigned)(blk / nqt);
        const unsigned qt = nqt - 1 - (unsigned)(blk - (fl_u64)b * nqt);   // longest first
        const unsigned i0 = qt * FL_T, nr = fl_min(FL_T, Lq - i0);
        const fl_u64 qrow0 = (fl_u64)b * Lq;
        __syncthreads();
        fl_load_t<D>(qT, q + (qrow0 + i0) * d, nr, d);
        fl_load_t<D>(gT, g + (qrow0 + i0) * dv, nr, dv);
        float m[4], inv_l[4], dd[4], aq[4][NC];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            const float* st = stats + (qrow0 + i0 + (r < nr ? r : 0)) * 3;
            m[a] = st[0];
            inv_l[a] = st[1];
            dd[a] = st[2];
#pragma unroll
            for (int n = 0; n < NC; ++n) aq[a][n] = 0.0f;
        }
        for (unsigned kt = 0; kt < nkt; ++kt) {
            const unsigned j0 = kt * FL_T, nk = fl_min(FL_T, Lk - j0);
            const unsigned flag = fl_flag(flags, b, qt, kt, nqt, nkt, nr, nk);
            if (flag == 0u) continue;
            const fl_u64 krow0 = (fl_u64)b * Lk + j0;
            __syncthreads();
            fl_load_t<D>(kT, k + krow0 * d, nk, d);
            fl_load_t<D>(vT, v + krow0 * dv, nk, dv);
            fl_load_n<D>(ks, k + krow0 * d, nk, d);
            __syncthreads();
            float s[4][4], dp[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) s[a][bb] = dp[a][bb] = 0.0f;
            fl_mma<4, D, false>(s, qT, kT, FL_LD, nullptr, tx, ty);    // [query][key]
            fl_mma<4, D, false>(dp, gT, vT, FL_LD, nullptr, tx, ty);
            bool part[4][4];
            fl_part(part, flag, mask, qrow0, Lk, i0, j0, nr, nk, true, tx, ty);
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int bb = 0; bb < 4; ++bb)
                    fl_p_ds(s[a][bb], dp[a][bb], part[a][bb], m[a], inv_l[a], dd[a], scale);
            __syncthreads();   // every thread is done reading kT
            float* dst = kT;   // [key][FL_LD]
#pragma unroll
            for (int bb = 0; bb < 4; ++bb) {
                const int j = tx * 4 + bb;
                *reinterpret_cast<float4*>(dst + j * FL_LD + ty * 4) =
                    make_float4(dp[0][bb], dp[1][bb], dp[2][bb], dp[3][bb]);
                *reinterpret_cast<unsigned*>(fT + j * FL_T + ty * 4) =
                    (unsigned)part[0][bb] | ((unsigned)part[1][bb] << 8) |
                    ((unsigned)part[2][bb] << 16) | ((unsigned)part[3][bb] << 24);
            }
            __syncthreads();
            if (flag == 1u) fl_mma<NC, FL_T, false>(aq, dst, ks, D + 4, nullptr, tx, ty);
            else fl_mma<NC, FL_T, true>(aq, dst, ks, D + 4, fT, tx, ty);
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const unsigned r = ty * 4 + a;
            if (r >= nr) continue;
#pragma unroll
            for (int n = 0; n < NC; ++n) {
                const unsigned c = fl_col<NC>(tx, n);
                if (c < d) dq[(qrow0 + i0 + r) * d + c] = (aq[a][n] == 0.0f) ? 0.0f : aq[a][n] * scale;
            }
        }
    }
}

#define FL_FWD(name, D)                                                                           \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                                  \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, float* out, float* stats, const float* g, unsigned B,         \
        unsigned Lq, unsigned Lk, unsigned d, unsigned dv, float scale) {                         \
        fl_forward<D>(q, k, v, mask, flags, out, stats, g, B, Lq, Lk, d, dv, scale);              \
    }
#define FL_DKDV(name, D)                                                                          \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                                  \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, const float* g, const float* stats, float* dk, float* dvo,    \
        unsigned B, unsigned Lq, unsigned Lk, unsigned d, unsigned dv, float scale) {             \
        fl_dkdv<D>(q, k, v, mask, flags, g, stats, dk, dvo, B, Lq, Lk, d, dv, scale);             \
    }
#define FL_DQ(name, D)                                                                            \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                                  \
        const float* q, const float* k, const float* v, const unsigned char* mask,                \
        const unsigned char* flags, const float* g, const float* stats, float* dq, unsigned B,    \
        unsigned Lq, unsigned Lk, unsigned d, unsigned dv, float scale) {                         \
        fl_dq<D>(q, k, v, mask, flags, g, stats, dq, B, Lq, Lk, d, dv, scale);                    \
    }

FL_FWD(tl_flash_fwd_32, 32)
FL_FWD(tl_flash_fwd_64, 64)
FL_FWD(tl_flash_fwd_128, 128)
FL_DKDV(tl_flash_dkdv_32, 32)
FL_DKDV(tl_flash_dkdv_64, 64)
FL_DKDV(tl_flash_dkdv_128, 128)
FL_DQ(tl_flash_dq_32, 32)
FL_DQ(tl_flash_dq_64, 64)
FL_DQ(tl_flash_dq_128, 128)
