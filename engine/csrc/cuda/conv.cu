// conv and conv_transpose: a generic N-D forward (spatial rank 1..8, one thread per output), its
// adjoint gather (conv's dInput and conv_transpose's forward, one thread per input element), the
// dKernel and dBias reductions in chunks (atomic or ordered), and a tiled 2-D implicit-GEMM forward.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true. Expects TL_BLOCK (default 256); the tiled kernel needs blockDim.x == 256.
//
// Index rule: output position o and kernel tap t read input position i = o s - p + t d on every
// axis; a tap with i outside [0, in) is skipped (no term: an inf or NaN weight facing padding adds
// nothing). Every output is a left fold in float32, `acc = acc + a * b` (two roundings), from the
// bias (or -0, the identity of IEEE addition, without one) over the terms in the fixed order below.
// The N-D forward and the tiled 2-D forward use the same order, so they agree bit for bit.
//
// geo: long long[TL_GEO_LEN] (engine/providers/native_cuda/conv.py writes it), the forward conv's
//   view: [0] rank r, [1] N, [2] C_in (x side), [3] C_out (y side), [4] groups, [5..12] input
//   extents, [13..20] output extents, [21..28] kernel extents, [29..36] strides, [37..44]
//   paddings, [45..52] dilations, [53] input positions, [54] output positions, [55] kernel taps.
//
//   tl_conv_fwd_nd(x, w, b, y, geo, total)   y[n][co][o] = b[co] + sum over ci in co's group
//       (ascending), taps t row-major, of x[n][ci][i] w[co][ci - group base][t]; b may be null
//   tl_conv_dx_nd(gy, w, b, dx, geo, total)  dx[n][ci][i] = b[ci] + sum over co in ci's group
//       (ascending), taps t in reverse row-major order, with o = (i + p - t d) / s whole and in
//       range, of gy[n][co][o] w[co][ci - base][t]; b may be null (conv's dInput and
//       conv_transpose's forward). At stride 1 this is the forward conv of gy with the flipped,
//       transposed kernel and padding d (k - 1) - p, taps in row-major order: the tiled 2-D
//       kernel runs it that way (its flip mode), bit for bit the same
//   tl_conv_neg_zeros(a, na, b, nb)  a[0..na) and b[0..nb) (b may be null) set to -0
//   tl_conv_dw_chunks(gy, x, out, geo, elems, chunks, span, atomic)
//       kernel element e = (co, ci', t) sums gy[n][co][o] x[n][ci][i] over positions q = n * outS
//       + o in chunk c = [c span, (c + 1) span), ascending; atomic: atomicAdd into out[e] (zeroed),
//       else out[c * elems + e] = the chunk's partial (chunks == 1: dw itself)
//   tl_conv_db_chunks(gy, out, C, S, N, chunks, span, atomic)  the same for db[c] over (n, s)
//   tl_conv_sum_chunks(part, out, elems, chunks)  out[e] = -0 + part[0][e] + part[1][e] + ...
//   tl_conv2d_fwd_tiled(x, w, b, y, N, C_in, H, W, C_out, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
//       groups, ctiles, flip)  the 2-D forward as an implicit GEMM: block (bx, by) computes 64
//       output channels (tile by % ctiles of group by / ctiles) x 128 output pixels (tile bx over N OH
//       OW), each thread 8 x 4 in registers, the K = C_in/groups kh kw axis staged 16 at a time
//       in double-buffered shared memory (weights, input patch values and their in-range flags);
//       b may be null. flip: w is the kernel of the conv whose dInput this is, [C_in][C_out /
//       groups][kh kw] in this launch's terms, read transposed and flipped on both axes
//       (wf[ci][co'][t] = w[co][ci'][kh kw - 1 - t], the kernel of the adjoint as a forward)
//   tl_conv2d_fwd_tiled_n64(the same arguments)  the same with 64-pixel tiles, each thread 8 x 2:
//       twice the blocks for grids that would not fill the GPU; the same fold and bits
//   tl_conv2d_dw_tiled(gy, x, out, N, C_in, H, W, C_out, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
//       groups, mtiles, span, atomic)  the 2-D dKernel as a split-K implicit GEMM over chunk
//       gridDim.z: the same chunks, order and outputs as tl_conv_dw_chunks, bit for bit

#ifndef TL_BLOCK
#define TL_BLOCK 256
#endif
#include "tl_common.cuh"

#define TL_MAXR 8
#define TL_GEO_LEN 56

struct TlGeo {
    int r;
    long long n, ci, co, g, in_s, out_s, k_s;
    long long in[TL_MAXR], out[TL_MAXR], k[TL_MAXR], s[TL_MAXR], p[TL_MAXR], d[TL_MAXR];
};

__device__ __forceinline__ void tl_load_geo(const long long* __restrict__ G, TlGeo& q) {
    q.r = (int)G[0];
    q.n = G[1]; q.ci = G[2]; q.co = G[3]; q.g = G[4];
    for (int a = 0; a < TL_MAXR; ++a) {
        q.in[a] = G[5 + a]; q.out[a] = G[13 + a]; q.k[a] = G[21 + a];
        q.s[a] = G[29 + a]; q.p[a] = G[37 + a]; q.d[a] = G[45 + a];
    }
    q.in_s = G[53]; q.out_s = G[54]; q.k_s = G[55];
}

// Row-major multi-index of `flat` over extents[0..r): idx[a]. 32-bit division (64-bit division
// is a long software routine): every flat index and extent here is under 2^32, a UInt32 count.
__device__ __forceinline__ void tl_unflat(long long flat, const long long* ext, int r,
                                          long long* idx) {
    unsigned f = (unsigned)flat;
    for (int a = r - 1; a >= 0; --a) {
        const unsigned e = (unsigned)ext[a], q = f / e;
        idx[a] = f - q * e;
        f = q;
    }
}

// The flat input position that output position o reads through tap t, or -1 when out of range.
__device__ __forceinline__ long long tl_tap_input(const TlGeo& q, const long long* o,
                                                  const long long* t) {
    long long flat = 0;
    for (int a = 0; a < q.r; ++a) {
        const long long i = o[a] * q.s[a] - q.p[a] + t[a] * q.d[a];
        if (i < 0 || i >= q.in[a]) return -1;
        flat = flat * q.in[a] + i;
    }
    return flat;
}

// The flat output position whose window reads input position i through tap t, or -1.
__device__ __forceinline__ long long tl_tap_output(const TlGeo& q, const long long* i,
                                                   const long long* t) {
    long long flat = 0;
    for (int a = 0; a < q.r; ++a) {
        const long long num = i[a] + q.p[a] - t[a] * q.d[a];   // < in + p < 2^32 when >= 0
        if (num < 0) return -1;
        const unsigned nu = (unsigned)num, su = (unsigned)q.s[a], o = nu / su;
        if (nu - o * su != 0 || o >= q.out[a]) return -1;
        flat = flat * q.out[a] + o;
    }
    return flat;
}

extern "C" __global__ void tl_conv_fwd_nd(const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ b, float* __restrict__ y,
                                          const long long* __restrict__ geo, unsigned total) {
    TlGeo q;
    tl_load_geo(geo, q);
    const long long cg = q.ci / q.g, og = q.co / q.g;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e = tl_next(e, stride, total)) {
        const unsigned outs = (unsigned)q.out_s, couts = (unsigned)q.co;   // both under 2^32
        const unsigned rest = e / outs, op = e - rest * outs;
        const long long co = rest % couts, n = rest / couts;
        long long o[TL_MAXR], t[TL_MAXR];
        tl_unflat(op, q.out, q.r, o);
        const long long base_ci = (co / og) * cg;
        float acc = b ? b[co] : -0.0f;
        for (long long c = 0; c < cg; ++c) {
            const float* xc = x + (n * q.ci + base_ci + c) * q.in_s;
            const float* wc = w + (co * cg + c) * q.k_s;
            for (long long tap = 0; tap < q.k_s; ++tap) {
                tl_unflat(tap, q.k, q.r, t);
                const long long i = tl_tap_input(q, o, t);
                if (i >= 0) acc = acc + xc[i] * wc[tap];
            }
        }
        y[e] = acc;
    }
}

extern "C" __global__ void tl_conv_dx_nd(const float* __restrict__ gy, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ dx,
                                         const long long* __restrict__ geo, unsigned total) {
    TlGeo q;
    tl_load_geo(geo, q);
    const long long cg = q.ci / q.g, og = q.co / q.g;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e = tl_next(e, stride, total)) {
        const unsigned ins = (unsigned)q.in_s, cis = (unsigned)q.ci;     // both under 2^32
        const unsigned rest = e / ins, ip = e - rest * ins;
        const long long ci = rest % cis, n = rest / cis;
        long long i[TL_MAXR], t[TL_MAXR];
        tl_unflat(ip, q.in, q.r, i);
        const long long base_co = (ci / cg) * og, cl = ci % cg;
        float acc = b ? b[ci] : -0.0f;
        for (long long c = 0; c < og; ++c) {
            const long long co = base_co + c;
            const float* gc = gy + (n * q.co + co) * q.out_s;
            const float* wc = w + (co * cg + cl) * q.k_s;
            for (long long tap = q.k_s - 1; tap >= 0; --tap) {   // taps in reverse row-major
                tl_unflat(tap, q.k, q.r, t);
                const long long o = tl_tap_output(q, i, t);
                if (o >= 0) acc = acc + gc[o] * wc[tap];
            }
        }
        dx[e] = acc;
    }
}

extern "C" __global__ void tl_conv_dw_chunks(const float* __restrict__ gy,
                                             const float* __restrict__ x, float* __restrict__ out,
                                             const long long* __restrict__ geo, unsigned elems,
                                             unsigned chunks, unsigned long long span, int atomic) {
    TlGeo q;
    tl_load_geo(geo, q);
    const long long cg = q.ci / q.g, og = q.co / q.g;
    const long long positions = q.n * q.out_s;
    const unsigned total = elems * chunks;   // the caller keeps it under 2^31
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned u = blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u = tl_next(u, stride, total)) {
        const unsigned e = u % elems, c = u / elems;
        const unsigned ks = (unsigned)q.k_s, rest = e / ks;             // e < elems < 2^31
        const long long tap = e - rest * ks, cl = rest % (unsigned)cg, co = rest / (unsigned)cg;
        const long long ci = (co / og) * cg + cl;
        long long t[TL_MAXR], o[TL_MAXR];
        tl_unflat(tap, q.k, q.r, t);
        const long long lo = (long long)c * (long long)span;
        const long long hi = lo + (long long)span < positions ? lo + (long long)span : positions;
        float acc = -0.0f;
        const unsigned outs = (unsigned)q.out_s;   // positions = N outS < 2^32
        for (long long pos = lo; pos < hi; ++pos) {
            const unsigned p32 = (unsigned)pos, n = p32 / outs, op = p32 - n * outs;
            tl_unflat(op, q.out, q.r, o);
            const long long i = tl_tap_input(q, o, t);
            if (i >= 0) {
                acc = acc + gy[(n * q.co + co) * q.out_s + op] * x[(n * q.ci + ci) * q.in_s + i];
            }
        }
        if (atomic) atomicAdd(out + e, acc);
        else out[(unsigned long long)c * elems + e] = acc;
    }
}

extern "C" __global__ void tl_conv_db_chunks(const float* __restrict__ gy, float* __restrict__ out,
                                             unsigned C, unsigned S, unsigned N, unsigned chunks,
                                             unsigned long long span, int atomic) {
    const unsigned long long positions = (unsigned long long)N * S;
    const unsigned total = C * chunks;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned u = blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u = tl_next(u, stride, total)) {
        const unsigned ch = u % C, c = u / C;
        const unsigned long long lo = (unsigned long long)c * span;
        const unsigned long long hi = lo + span < positions ? lo + span : positions;
        float acc = -0.0f;
        for (unsigned long long pos = lo; pos < hi; ++pos) {
            const unsigned p32 = (unsigned)pos, n = p32 / S, s = p32 - n * S;   // N S < 2^32
            acc = acc + gy[((unsigned long long)n * C + ch) * S + s];
        }
        if (atomic) atomicAdd(out + ch, acc);
        else out[(unsigned long long)c * C + ch] = acc;
    }
}

extern "C" __global__ void tl_conv_sum_chunks(const float* __restrict__ part,
                                              float* __restrict__ out, unsigned elems,
                                              unsigned chunks) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < elems;
         e = tl_next(e, stride, elems)) {
        float acc = -0.0f;
        for (unsigned c = 0; c < chunks; ++c) acc = acc + part[(unsigned long long)c * elems + e];
        out[e] = acc;
    }
}

// Default mode's dKernel and dBias accumulators, -0 filled by one launch: a[0..na), b[0..nb)
extern "C" __global__ void tl_conv_neg_zeros(float* __restrict__ a, unsigned na,
                                             float* __restrict__ b, unsigned nb) {
    const unsigned total = na + nb;   // the caller keeps it under 2^31
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e = tl_next(e, stride, total)) {
        if (e < na) a[e] = -0.0f;
        else b[e - na] = -0.0f;
    }
}

// --- the tiled 2-D forward ---------------------------------------------------------------------

// Both tiled kernels: a block of 256 threads computes a 64 x 128 tile of a GEMM (the forward's
// n64 variant 64 x 64), each thread 8 x 4 (8 x 2) of it in registers, the reduction axis staged
// TL_BK entries at a time in double-buffered shared memory. The fold is untouched by the tiling:
// each accumulator takes its terms one at a time in ascending reduction order, and a term whose
// tap is out of range (or whose entry is past the end) is skipped by its flag, never added as
// 0 * w (that could turn a -0 sum into +0, or an inf weight facing padding into NaN).
#define TL_BM 64   // output channels per block (within one group)
#define TL_FN 128  // output pixels (forward) or kernel columns (dKernel) per block
#define TL_BK 16   // reduction entries (forward) or positions (dKernel) staged per step
#define TL_FR 8    // channels per thread (register rows); 4 pixels / columns per thread
#define TL_BLOCK_2D 256   // threads per block of both (blockDim.x)

// One reduction entry k = (ci', ky, kx) of the forward: the input plane offset ci' H W and the
// tap's row and column offsets ky dh, kx dw. A dead entry (k >= K) has dy = TL_DEAD, which puts
// every input row out of range: it is staged as a skipped tap, so the step needs no bound.
struct __align__(16) TlTap {
    long long plane;
    int dy, dx;
};
#define TL_DEAD (-(1 << 30))

__device__ __forceinline__ TlTap tl_fwd_tap(unsigned k, unsigned K, unsigned KK, unsigned KW,
                                            unsigned HW, int dh, int dw) {
    TlTap t;
    if (k >= K) {
        t.plane = 0; t.dy = TL_DEAD; t.dx = 0;
        return t;
    }
    const unsigned c = k / KK, r = k - c * KK, ky = r / KW, kx = r - ky * KW;
    t.plane = (long long)c * HW;
    t.dy = (int)ky * dh;
    t.dx = (int)kx * dw;
    return t;
}

// TN consecutive floats and their TN flag bytes from shared memory, as one vector load each
template <int TN> struct TlRow;
template <> struct TlRow<4> {
    static __device__ __forceinline__ void load(const float* p, float* v) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    }
    static __device__ __forceinline__ unsigned flags(const unsigned char* p) {
        return *reinterpret_cast<const unsigned*>(p);
    }
};
template <> struct TlRow<2> {
    static __device__ __forceinline__ void load(const float* p, float* v) {
        const float2 q = *reinterpret_cast<const float2*>(p);
        v[0] = q.x; v[1] = q.y;
    }
    static __device__ __forceinline__ unsigned flags(const unsigned char* p) {
        return *reinterpret_cast<const unsigned short*>(p);
    }
};

// The forward with TN pixels per thread: 64 channels x 32 TN pixels per block. TN = 4 is the
// main kernel; TN = 2 halves the pixel tile, for grids too small to fill the GPU otherwise
// (conv_forward picks; the fold of every output is the same, so are the bits).
template <int TN>
__device__ __forceinline__ void tl_conv2d_fwd_body(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
        float* __restrict__ y, unsigned N_, unsigned Cin_, unsigned H_, unsigned W_,
        unsigned Cout_, unsigned OH_, unsigned OW_, unsigned KH_, unsigned KW_, unsigned sh_,
        unsigned sw_, unsigned ph_, unsigned pw_, unsigned dh_, unsigned dw_, unsigned G_,
        unsigned ctiles_, unsigned flip) {
    constexpr int BN = 32 * TN;          // pixels per block
    constexpr int XR = TL_BLOCK_2D / BN; // entries one pass of the block stages
    constexpr int XQ = TL_BK / XR;       // input values per thread per step

    // The host (conv_forward) takes this kernel only where every row / column offset below,
    // o s - p + t d, lies within +-2^29 and H W < 2^31: int arithmetic there; flat indices and
    // plane offsets stay 64-bit.
    const int H = (int)H_, W = (int)W_, sh = (int)sh_, sw = (int)sw_, ph = (int)ph_;
    const int pw = (int)pw_, dh = (int)dh_, dw = (int)dw_;
    const unsigned cg = Cin_ / G_, og = Cout_ / G_, KK = KH_ * KW_;
    const unsigned K = cg * KK;                         // the kernel's row length, < 2^32
    const unsigned HW = H_ * W_, opix = OH_ * OW_;
    const long long npix = (long long)N_ * opix;
    const unsigned steps = (K + TL_BK - 1) / TL_BK;

    // double-buffered stage: weights [k][channel], input values and their in-range flags
    // [k][pixel], and the entry table one step ahead of the loads that use it
    __shared__ __align__(16) float ws[2][TL_BK][TL_BM + 4];   // +4: staging stores spread
    __shared__ __align__(16) float xs[2][TL_BK][BN];
    __shared__ __align__(16) unsigned char vs[2][TL_BK][BN];
    __shared__ TlTap taps[2][TL_BK];

    const unsigned tid = threadIdx.x;
    const unsigned tx = tid % 32, ty = tid / 32;   // pixels tx*TN..+TN-1, channels ty*8..+7
    const unsigned group = blockIdx.y / ctiles_;
    const unsigned m0 = (blockIdx.y % ctiles_) * TL_BM;          // first channel in the group
    const long long p0 = (long long)blockIdx.x * BN;          // first pixel

    // Input staging slot: one pixel (fixed), entries kk = tid / BN + XR q. A dead pixel gets a
    // row origin that no entry brings into range.
    const unsigned lp = tid % BN, lk_x = tid / BN;
    const long long lp_pix = p0 + lp;
    const bool lp_live = lp_pix < npix;
    const unsigned lp_n = lp_live ? (unsigned)(lp_pix / opix) : 0;
    const unsigned lp_r = lp_live ? (unsigned)(lp_pix - (long long)lp_n * opix) : 0;
    const int iy0 = lp_live ? (int)(lp_r / OW_) * sh - ph : TL_DEAD;
    const int ix0 = (int)(lp_r % OW_) * sw - pw;
    const float* __restrict__ xp = x + ((long long)lp_n * Cin_ + (long long)group * cg) * HW;
    // Weight staging slot: entry kk = tid % 16 (fixed), channels m = tid / 16 + 16 q.
    const unsigned lk_w = tid % TL_BK, lm_w = tid / TL_BK;

    float acc[TL_FR][TN];
    for (int i = 0; i < TL_FR; ++i) {
        const unsigned m = m0 + ty * TL_FR + i;
        const float init = (b != nullptr && m < og) ? b[group * og + m] : -0.0f;
        for (int j = 0; j < TN; ++j) acc[i][j] = init;
    }

    float xv[XQ], wv[4];
    unsigned char xok[XQ];
    // global -> registers for step s (its entry table in taps[s & 1])
    auto load = [&](unsigned s) {
        for (int q = 0; q < XQ; ++q) {
            const TlTap t = taps[s & 1][lk_x + XR * q];
            const int iy = iy0 + t.dy, ix = ix0 + t.dx;
            const bool ok = (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W;
            xv[q] = ok ? xp[t.plane + (unsigned)(iy * W + ix)] : 0.0f;
            xok[q] = ok;
        }
        // weight (channel ch, entry k) at w[wk + ch wstep]: row-major [C_out][K], or in flip
        // mode w[(group cg + c) og + ch][KK - 1 - t] for k = (c, t)
        const unsigned k = s * TL_BK + lk_w;
        long long wk = (long long)group * og * K + k, wstep = K;
        if (flip) {
            const unsigned c = k / KK, t = k - c * KK;
            wk = ((long long)(group * cg + c) * og) * KK + (KK - 1 - t);
            wstep = KK;
        }
        for (int q = 0; q < 4; ++q) {
            const unsigned ch = m0 + lm_w + 16 * q;
            wv[q] = (k < K && ch < og) ? w[wk + ch * wstep] : 0.0f;
        }
    };
    // registers -> shared stage buffer s & 1
    auto store = [&](unsigned s) {
        for (int q = 0; q < XQ; ++q) {
            xs[s & 1][lk_x + XR * q][lp] = xv[q];
            vs[s & 1][lk_x + XR * q][lp] = xok[q];
        }
        for (int q = 0; q < 4; ++q) ws[s & 1][lk_w][lm_w + 16 * q] = wv[q];
    };
    auto table = [&](unsigned s) {   // entry table of step s, by 16 threads
        if (tid < TL_BK) taps[s & 1][tid] = tl_fwd_tap(s * TL_BK + tid, K, KK, KW_, HW, dh, dw);
    };

    if (steps > 0) {
        table(0);
        __syncthreads();
        load(0);
        if (steps > 1) table(1);
        store(0);
        __syncthreads();
    }
    for (unsigned s = 0; s < steps; ++s) {
        // Step s computes from stage s & 1 while step s + 1's loads are in flight. taps[s & 1]
        // and stage (s + 1) & 1 were last read before the previous barrier: free to overwrite.
        const bool more = s + 1 < steps;
        if (more) load(s + 1);
        if (s + 2 < steps) table(s + 2);
        const unsigned buf = s & 1;
#pragma unroll
        for (int kk = 0; kk < TL_BK; ++kk) {
            // vector shared loads: this thread's 8 channels (a warp-wide broadcast), its TN
            // pixels, and their TN flag bytes as one word (little-endian, as both the GPU and
            // the host emulation are: one bit test per flag); a dead entry's flags are all 0
            float a[TL_FR], v[TN];
            TlRow<4>::load(&ws[buf][kk][ty * TL_FR], a);
            TlRow<4>::load(&ws[buf][kk][ty * TL_FR + 4], a + 4);
            TlRow<TN>::load(&xs[buf][kk][tx * TN], v);
            const unsigned f = TlRow<TN>::flags(&vs[buf][kk][tx * TN]);
            for (int i = 0; i < TL_FR; ++i) {
                for (int j = 0; j < TN; ++j) {
                    if (f & (1u << (8 * j))) acc[i][j] = acc[i][j] + v[j] * a[i];
                }
            }
        }
        if (more) store(s + 1);
        __syncthreads();
    }

    for (int j = 0; j < TN; ++j) {
        const long long pix = p0 + tx * TN + j;
        if (pix >= npix) continue;
        const long long n = pix / opix, r = pix - n * opix;
        for (int i = 0; i < TL_FR; ++i) {
            const unsigned m = m0 + ty * TL_FR + i;
            if (m < og) y[(n * Cout_ + group * og + m) * opix + r] = acc[i][j];
        }
    }
}

extern "C" __global__ void tl_conv2d_fwd_tiled(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
        float* __restrict__ y, unsigned N_, unsigned Cin_, unsigned H_, unsigned W_,
        unsigned Cout_, unsigned OH_, unsigned OW_, unsigned KH_, unsigned KW_, unsigned sh_,
        unsigned sw_, unsigned ph_, unsigned pw_, unsigned dh_, unsigned dw_, unsigned G_,
        unsigned ctiles_, unsigned flip) {
    tl_conv2d_fwd_body<4>(x, w, b, y, N_, Cin_, H_, W_, Cout_, OH_, OW_, KH_, KW_, sh_, sw_, ph_,
                          pw_, dh_, dw_, G_, ctiles_, flip);
}

extern "C" __global__ void tl_conv2d_fwd_tiled_n64(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
        float* __restrict__ y, unsigned N_, unsigned Cin_, unsigned H_, unsigned W_,
        unsigned Cout_, unsigned OH_, unsigned OW_, unsigned KH_, unsigned KW_, unsigned sh_,
        unsigned sw_, unsigned ph_, unsigned pw_, unsigned dh_, unsigned dw_, unsigned G_,
        unsigned ctiles_, unsigned flip) {
    tl_conv2d_fwd_body<2>(x, w, b, y, N_, Cin_, H_, W_, Cout_, OH_, OW_, KH_, KW_, sh_, sw_, ph_,
                          pw_, dh_, dw_, G_, ctiles_, flip);
}

// The 2-D dKernel as a split-K implicit GEMM: block (bx, by, bz) computes 64 output channels
// (tile by % mtiles of group by / mtiles) x 128 kernel columns (ci', ky, kx; tile bx) over the
// positions of chunk bz, [bz span, (bz + 1) span) of N OH OW, staged 16 at a time; each thread
// keeps 8 x 4 partials, a left fold from -0 over ascending positions (tl_conv_dw_chunks's order,
// bit for bit). atomic: atomicAdd into out[e] (-0 filled), else out[bz * elems + e]. The stage
// is double-buffered like the forward's, with a position table one step ahead.

// One position q = (n, oy, ox) of the dKernel: the offsets of image n in x and of (n, oy, ox)
// in gy's channel 0, and the window's first input row and column; a dead position (q >= the
// chunk's end) has iy = TL_DEAD, so no column brings it into range (its x flags are 0).
struct __align__(16) TlPos {
    long long xoff, goff;
    int iy, ix;
};

__device__ __forceinline__ TlPos tl_dw_pos(unsigned long long q, unsigned long long hi,
                                           unsigned opix, unsigned OW, unsigned long long CinHW,
                                           unsigned long long Cout_opix, int sh, int sw, int ph,
                                           int pw) {
    TlPos t;
    if (q >= hi) {
        t.xoff = 0; t.goff = 0; t.iy = TL_DEAD; t.ix = 0;
        return t;
    }
    const unsigned p32 = (unsigned)q;   // positions = N OH OW < 2^32
    const unsigned n = p32 / opix, r = p32 - n * opix, oy = r / OW, ox = r - oy * OW;
    t.xoff = (long long)(n * CinHW);
    t.goff = (long long)(n * Cout_opix + r);
    t.iy = (int)oy * sh - ph;
    t.ix = (int)ox * sw - pw;
    return t;
}

extern "C" __global__ void tl_conv2d_dw_tiled(
        const float* __restrict__ gy, const float* __restrict__ x, float* __restrict__ out,
        unsigned N_, unsigned Cin_, unsigned H_, unsigned W_, unsigned Cout_, unsigned OH_,
        unsigned OW_, unsigned KH_, unsigned KW_, unsigned sh_, unsigned sw_, unsigned ph_,
        unsigned pw_, unsigned dh_, unsigned dw_, unsigned G_, unsigned mtiles_,
        unsigned long long span, int atomic) {
    // int row / column offsets where the host allows them (conv_kernel_grad's guard, as the
    // forward's); flat indices and plane offsets 64-bit
    const int H = (int)H_, W = (int)W_, sh = (int)sh_, sw = (int)sw_, ph = (int)ph_;
    const int pw = (int)pw_, dh = (int)dh_, dw = (int)dw_;
    const unsigned cg = Cin_ / G_, og = Cout_ / G_, KK = KH_ * KW_, cols = cg * KK;
    const unsigned HW = H_ * W_, opix = OH_ * OW_;
    const unsigned long long positions = (unsigned long long)N_ * opix;
    const unsigned long long elems = (unsigned long long)Cout_ * cols;
    const unsigned long long lo = blockIdx.z * span;
    const unsigned long long hi = lo + span < positions ? lo + span : positions;
    const unsigned steps = lo < hi ? (unsigned)((hi - lo + TL_BK - 1) / TL_BK) : 0;

    __shared__ __align__(16) float as[2][TL_BK][TL_BM + 4];   // gy [position][channel]
    __shared__ __align__(16) float bs[2][TL_BK][TL_FN];       // x [position][column]
    __shared__ __align__(16) unsigned char vs[2][TL_BK][TL_FN];
    __shared__ TlPos pos[2][TL_BK];

    const unsigned tid = threadIdx.x;
    const unsigned tx = tid % 32, ty = tid / 32;   // columns tx*4..+3, channels ty*8..+7
    const unsigned group = blockIdx.y / mtiles_;
    const unsigned m0 = (blockIdx.y % mtiles_) * TL_BM;
    const unsigned c0 = blockIdx.x * TL_FN;

    // x staging slot: one kernel column (fixed), positions kk = tid / 128 + 2 q; a dead column
    // gets a row offset that no position brings into range
    const unsigned lc = tid % TL_FN, lk_b = tid / TL_FN, col = c0 + lc;
    const bool col_live = col < cols;
    const unsigned c_ci = col_live ? col / KK : 0, c_r = col_live ? col - c_ci * KK : 0;
    const int c_dy = col_live ? (int)(c_r / KW_) * dh : TL_DEAD;
    const int c_dx = (int)(c_r % KW_) * dw;
    const float* __restrict__ xp = x + ((long long)group * cg + c_ci) * HW;
    // gy staging slot: position kk = tid % 16 (fixed), channels m = tid / 16 + 16 q
    const unsigned lk_a = tid % TL_BK, lm_a = tid / TL_BK;
    const float* __restrict__ gp = gy + (long long)(group * og + m0) * opix;
    const unsigned long long Cout_opix = (unsigned long long)Cout_ * opix;

    float acc[TL_FR][4];
    for (int i = 0; i < TL_FR; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = -0.0f;

    float bv[TL_BK / 2], av[4];
    unsigned char bok[TL_BK / 2];
    auto load = [&](unsigned s) {   // global -> registers for step s (its table in pos[s & 1])
        for (int q = 0; q < TL_BK / 2; ++q) {
            const TlPos t = pos[s & 1][lk_b + 2 * q];
            const int iy = t.iy + c_dy, ix = t.ix + c_dx;
            const bool ok = (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W;
            bv[q] = ok ? xp[t.xoff + (unsigned)(iy * W + ix)] : 0.0f;
            bok[q] = ok;
        }
        const TlPos t = pos[s & 1][lk_a];
        const bool live = t.iy != TL_DEAD;
        for (int q = 0; q < 4; ++q) {
            const unsigned ch = m0 + lm_a + 16 * q;
            av[q] = (live && ch < og) ? gp[t.goff + (long long)(lm_a + 16 * q) * opix] : 0.0f;
        }
    };
    auto store = [&](unsigned s) {  // registers -> shared stage buffer s & 1
        for (int q = 0; q < TL_BK / 2; ++q) {
            bs[s & 1][lk_b + 2 * q][lc] = bv[q];
            vs[s & 1][lk_b + 2 * q][lc] = bok[q];
        }
        for (int q = 0; q < 4; ++q) as[s & 1][lk_a][lm_a + 16 * q] = av[q];
    };
    auto table = [&](unsigned s) {  // position table of step s, by 16 threads
        if (tid < TL_BK) {
            pos[s & 1][tid] = tl_dw_pos(lo + (unsigned long long)s * TL_BK + tid, hi, opix, OW_,
                                        (unsigned long long)Cin_ * HW, Cout_opix, sh, sw,
                                        ph, pw);
        }
    };

    if (steps > 0) {
        table(0);
        __syncthreads();
        load(0);
        if (steps > 1) table(1);
        store(0);
        __syncthreads();
    }
    for (unsigned s = 0; s < steps; ++s) {
        // as the forward: step s computes from stage s & 1 while step s + 1's loads are in
        // flight; pos[s & 1] and stage (s + 1) & 1 were last read before the previous barrier
        const bool more = s + 1 < steps;
        if (more) load(s + 1);
        if (s + 2 < steps) table(s + 2);
        const unsigned buf = s & 1;
#pragma unroll
        for (int kk = 0; kk < TL_BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&as[buf][kk][ty * TL_FR]);
            const float4 a1 = *reinterpret_cast<const float4*>(&as[buf][kk][ty * TL_FR + 4]);
            const float4 v4 = *reinterpret_cast<const float4*>(&bs[buf][kk][tx * 4]);
            const unsigned f4 = *reinterpret_cast<const unsigned*>(&vs[buf][kk][tx * 4]);
            const float a[TL_FR] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float v[4] = {v4.x, v4.y, v4.z, v4.w};
            const bool ok[4] = {(f4 & 0x1u) != 0, (f4 & 0x100u) != 0, (f4 & 0x10000u) != 0,
                                (f4 & 0x1000000u) != 0};
            for (int i = 0; i < TL_FR; ++i) {
                for (int j = 0; j < 4; ++j) {
                    if (ok[j]) acc[i][j] = acc[i][j] + a[i] * v[j];
                }
            }
        }
        if (more) store(s + 1);
        __syncthreads();
    }

    for (int i = 0; i < TL_FR; ++i) {
        const unsigned ch = m0 + ty * TL_FR + i;
        if (ch >= og) continue;
        const unsigned long long row = (unsigned long long)(group * og + ch) * cols;
        for (int j = 0; j < 4; ++j) {
            const unsigned c = c0 + tx * 4 + j;
            if (c >= cols) continue;
            if (atomic) atomicAdd(out + row + c, acc[i][j]);
            else out[blockIdx.z * elems + row + c] = acc[i][j];
        }
    }
}
