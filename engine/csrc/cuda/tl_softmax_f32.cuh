// Fast float32 softmax / log_softmax forward over rows held in registers (softmax.cu includes
// this after TlGroup; the plain capsules native_cuda.softmax and native_cuda.log_softmax run it,
// the accurate variants keep softmax.cu's float64 kernels). A group of G threads takes a row of
// n <= G C W contiguous entries in chunks of W (1, or 4: one 16-byte load and store, for n % 4
// == 0 and aligned arrays); thread t holds chunks q = t + G c, c < C (coalesced), entries
// j = W q + i, the C loads issued first with no branch between them (past the row's end: -inf).
// One read and one write of the row; no per-entry test of the row's end, of NaN or of the max's
// position (the costs that kept the earlier version from the memory roofline).
//
// Order: m = the row's max (an order-free fmaxf fold: exact; a NaN entry is dropped there but
// reaches every output through the row sum, below); per thread the terms added in double over
// its entries in order, then tl_group_sum's fixed tree: bitwise repeatable run to run in either
// mode. Every value is float32 except the row sum (a double addition per entry), its
// reciprocal or log1p (per row) and their splits into two floats.
//
// Error analysis (u = 2^-24; expf is within 2 ulp = 4u relative: CUDA C Programming Guide,
// single-precision table, full range, not fast-math; --ftz=false keeps subnormals):
// - d = x - m is split exactly by TwoSum: d_h = fl(x - m), d_l = (x - m) - d_h, |d_l| <= 2^-18
//   wherever exp(d) is not 0 in float32 (|d_h| < 128). exp(d) = expf(d_h) (1 + d_l) within
//   4u + 2^-37 relative (the dropped d_l^2/2).
// - softmax: S = sum_j e_h,j (1 + d_l,j): the e_h added in double (K 2^-53), the corrections
//   e_h d_l (< 2^-18 e_h) in float (K u 2^-18), double across the group (2^-49): S within
//   4u + 2^-32 relative, and
//   S >= 1 (the max's own term is expf(0) = 1), so subnormal terms (expf within 2 ulp of the
//   subnormal grid) move S by < n 2^-148. r = 1/S in double, split r_h + r_l; the write
//   s = fl(e_h r_h + e_h fl(d_l r_h + r_l)) rounds once (the small term's errors < 2^-40).
//   Before the final rounding s carries < 8.003u relative; the rounding adds 0.5 ulp of the
//   result, and measuring from the rounded reference v another 0.5 ulp(v) with ulp(result) <=
//   2 ulp(v): |s - v| < (8.003 + 1.5) ulp(v) < 10 ulp (subnormal results: expf's 2 subnormal
//   ulps times r <= 1, plus < 4.5 ulp: also < 10).
// - log_softmax: y = d - L, L = log1p(T), T = the sum without the first max entry's 1 (as the
//   reference: a tiny T keeps tiny outputs accurate). One pass where T >= 2^-12: S = the sum of
//   every term, the entries with d_h == 0 (exactly those with x == m: a float difference is 0
//   only for equal operands) contributing an exact 1 (expf(0) is not relied on), each other
//   term expf(d_h) (1 + d_l) as softmax's; T = S - 1 in double. The double additions' roundings
//   (under (K + 13) 2^-53 S: K entries per thread, 13 the deepest group tree) stay under 2^-35 T
//   for T >= 2^-12, S - 1 is exact for S <= 2 (2^-53 T otherwise), subnormal terms (expf within
//   2 subnormal ulps) move T by under n 2^-148 < 2^-122 T, and the corrections' float sum
//   (terms under 2^-18 of their e_h, the 1's have d_l = 0) under K u 2^-18 T: T within
//   4u + 2^-32 relative (the terms' 4u; the 1's are exact). Otherwise (T < 2^-12; a NaN T
//   keeps the first) a second pass over the registers: the ties are counted, not summed, and
//   T = the sum of the others + (count - 1), the count exact in double; the terms are evaluated
//   scaled, exp(d + 64) = expf(a_h) (1 + a_l) with a_h + a_l = d_h + 64 + d_l (Fast2Sum: exact),
//   so terms down to d = -151 stay normal (unscaled, n subnormal terms with half-ulp errors of
//   one sign would move a T of their size by ~2^-6 relative), |a_l| <= 2^-16; T = the scaled
//   sum times e^-64 (a float64 constant) within 4u + 2^-32 relative. Either way L = log1p(T)
//   in double, so |dL| <= 4.003u T/(1+T) <= 4.003u L. y = d - L has no cancellation (d <= 0
//   <= L), so |dL| <= 4.003u |y|; the write is a float-float difference (TwoSum(d_h, -L_h) +
//   (d_l - L_l)), u^2 |y| before its one rounding. |y - v| < (4.004 + 1.5) ulp(v) < 6 ulp
//   (subnormal y: under 4.5 subnormal ulps).
// - terms whose scaled argument is below expf's range (d + 64 < -103.9: e^(d + 64) < 2^-150)
//   may come back as up to 2 subnormal ulps instead of ~0: under n 2^-148 e^-64 < 2^-226 in T
//   and L altogether, while every y is a multiple of 2^-149 (no effect on the bound);
//   d_h = -inf (x = -inf, or x - m beyond the float range) gives softmax 0 and log_softmax
//   -inf, as the reference (its d_l is NaN: clamped where it meets a zero term, and in the
//   write, so that no 0 * NaN or -inf + NaN appears).
// Special rows as softmax.cu's kernels (docs/OPS.md): a NaN or +inf entry, or a row of -inf,
// makes the whole row NaN: m (fmaxf) skips a NaN entry, but that entry's term is NaN; a +inf
// entry makes m = +inf and its own d = inf - inf NaN; a row of -inf has d = NaN everywhere; the
// NaN sum reaches every output (softmax: e_h r with r NaN, 0 * NaN included; log_softmax: y =
// d - L with L NaN).
#ifndef TL_SOFTMAX_F32_CUH
#define TL_SOFTMAX_F32_CUH

#define TL_F32_MAX 3.40282347e38f
#define TL_F32_NINF __int_as_float(0xff800000)

// fmaxf (a NaN operand is dropped: the row's NaN reaches every output through the sum instead)
struct TlMaxF {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Knuth's TwoSum: s + e == a + b exactly (round to nearest, no overflow).
__device__ __forceinline__ void tl_two_sum(float a, float b, float& s, float& e) {
    s = a + b;
    const float bb = s - a;
    e = (a - (s - bb)) + (b - bb);
}

// W consecutive floats (W = 1 or 4: one 16-byte load); chunk q of a row at p.
template <int W> struct TlChunk;
template <> struct TlChunk<1> {
    static __device__ __forceinline__ void load(const float* p, unsigned q, float* v) {
        v[0] = p[q];
    }
    static __device__ __forceinline__ void store(float* p, unsigned q, const float* v) {
        p[q] = v[0];
    }
};
template <> struct TlChunk<4> {
    static __device__ __forceinline__ void load(const float* p, unsigned q, float* v) {
        const float4 f = reinterpret_cast<const float4*>(p)[q];
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    }
    static __device__ __forceinline__ void store(float* p, unsigned q, const float* v) {
        reinterpret_cast<float4*>(p)[q] = make_float4(v[0], v[1], v[2], v[3]);
    }
};

// One row (xr, outr) of `chunks` chunks of W; thread t of the group. MODE 0: softmax, 1:
// log_softmax. FULL: chunks == G C (every chunk present: no test, no -inf fill).
template <int MODE, int G, int C, int W, bool FULL>
__device__ __forceinline__ void tl_softmax_f32_row(const float* __restrict__ xr,
                                                   float* __restrict__ outr, unsigned t,
                                                   unsigned chunks) {
    constexpr int K = C * W;
    // The C loads first (predicated, no branch between them); absent entries read -inf: they
    // leave the max alone and their term is exp(-inf) = 0 (or NaN where the row is NaN).
    float v[K];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const unsigned q = t + G * c;
        if (FULL) {
            TlChunk<W>::load(xr, q, v + W * c);
        } else {
#pragma unroll
            for (int i = 0; i < W; ++i) v[W * c + i] = TL_F32_NINF;
            if (q < chunks) TlChunk<W>::load(xr, q, v + W * c);
        }
    }
    float m = v[0];
#pragma unroll
    for (int k = 1; k < K; ++k) m = fmaxf(m, v[k]);
    m = tl_group_fold<G>(m, TlMaxF());
    if (MODE == 0) {
        // This thread's partial sum: the float terms added in double (exact but for 2^-53 per
        // addition; a float-float TwoSum would cost 6 float32 operations per term, the
        // conversion and the add issue on the float64 pipe beside them), the terms' small
        // corrections in float (each under 2^-16 of its term).
        float eh[K], dl[K];
        double part = 0.0;
        float corr = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float dh;
            tl_two_sum(v[k], -m, dh, dl[k]);
            // d_l is NaN only where d_h is infinite or NaN: e_h is then 0 (its d_l must not
            // make 0 * d_l NaN; any d_l < -1 only occurs with e_h = 0) or NaN (kept)
            dl[k] = fmaxf(dl[k], -1.0f);
            eh[k] = expf(dh);
            part += (double)eh[k];
            corr = fmaf(eh[k], dl[k], corr);   // the (1 + d_l) correction
        }
        const double total = tl_group_sum<G>(part + (double)corr);
        const double r = 1.0 / total;
        const float rh = (float)r, rl = (float)(r - (double)rh);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const float q = eh[k] * fmaf(dl[k], rh, rl);
            v[k] = fmaf(eh[k], rh, q);
        }
    } else {
        // Common case, one pass: S = the sum of every term, the ties' exact 1 included (the
        // select keeps expf's result live for corr, so that it stays branch-free), T = S - 1
        // in double; taken where T >= 2^-12, so that the double sum's roundings (relative to
        // S = 1 + T) stay under 2^-33 of T and subnormal terms (under n 2^-148 off) do not
        // count. Otherwise (T tiny: the max's output is -T to the last bit) T is summed
        // again without the ties and scaled (below).
        float dh[K], dl[K];
        double part = 0.0;
        float corr = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            tl_two_sum(v[k], -m, dh[k], dl[k]);   // d_h = -inf: d_l NaN (see the write)
            const float ex = expf(dh[k]);
            part += (double)(dh[k] == 0.0f ? 1.0f : ex);
            // d_l NaN (d_h infinite) or below -1 only where the term is 0 or NaN
            corr = fmaf(ex, fmaxf(dl[k], -1.0f), corr);
        }
        double big_t = tl_group_sum<G>(part + (double)corr) - 1.0;
        if (big_t < 0x1p-12) {   // the same for the whole group (NaN: false, kept)
            // d_h == 0 exactly where x == m (a float difference is 0 only for equal
            // operands): those entries' 1 are counted, not summed (the first is left out).
            // The terms are exp(d + 64) (no subnormal one down to d = -151): d + 64 = a_h +
            // a_l exactly: Fast2Sum (|64| >= |d_h|), and for |d_h| > 64 the sum is exact (64
            // is a multiple of d_h's ulp) and a_l = 0; a_l is NaN only for d_h = +-inf or
            // NaN, where the term is 0 (clamped a_l: no 0 * NaN) or NaN.
            part = 0.0;
            corr = 0.0f;
            float ties = 0.0f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const float ah = dh[k] + 64.0f;
                const float al = fmaxf((dh[k] - (ah - 64.0f)) + dl[k], -1.0f);
                const bool tie = dh[k] == 0.0f;
                const float e = expf(tie ? TL_F32_NINF : ah);   // expf(-inf) = 0
                ties += tie ? 1.0f : 0.0f;
                part += (double)e;
                corr = fmaf(e, al, corr);
            }
            // T = the scaled sum times e^-64 (a double constant: 2^-53) + the ties but one
            double sum = part + (double)corr, count = ties;
            tl_group_sum2<G>(sum, count);
            big_t = sum * 0x1.969d47321e4ccp-93 + (count - 1.0);
        }
        const double big_l = log1p(big_t);
        const float lh = (float)big_l, ll = (float)(big_l - (double)lh);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float p, q;
            tl_two_sum(dh[k], -lh, p, q);
            // d_h = -inf (and L finite): q and d_l are NaN, the clamp keeps y = p = -inf;
            // L NaN (a NaN row): p is NaN
            v[k] = p + fmaxf(q + (dl[k] - ll), -TL_F32_MAX);
        }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const unsigned q = t + G * c;
        if (FULL || q < chunks) TlChunk<W>::store(outr, q, v + W * c);
    }
}

// The rows of the grid; W = 4 needs n % 4 == 0 and 16-byte aligned x and out. Full rows (n = G C
// W: the uniform branch is the same for every row of a launch) skip the end-of-row tests.
template <int MODE, int G, int C, int W>
__device__ __forceinline__ void tl_softmax_f32_reg(const float* __restrict__ x,
                                                   float* __restrict__ out, unsigned rows,
                                                   unsigned n) {
    const TlGroup<G> grp;
    const unsigned chunks = n / W;
    for (unsigned long long row = grp.first; row < rows; row += grp.stride) {
        if (chunks == (unsigned)(G * C))
            tl_softmax_f32_row<MODE, G, C, W, true>(x + row * n, out + row * n, grp.t, chunks);
        else
            tl_softmax_f32_row<MODE, G, C, W, false>(x + row * n, out + row * n, grp.t, chunks);
    }
}

// name(x, out, rows, n): K = C entries per thread (scalar loads); V: C float4 chunks per thread
#define TL_SOFTMAX_F32(name, MODE, G, C)                                                        \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, float* __restrict__ out, unsigned rows, unsigned n) {     \
        tl_softmax_f32_reg<MODE, G, C, 1>(x, out, rows, n);                                   \
    }
#define TL_SOFTMAX_F32V(name, MODE, G, C, MINB)                                                 \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, MINB) name(                         \
        const float* __restrict__ x, float* __restrict__ out, unsigned rows, unsigned n) {     \
        tl_softmax_f32_reg<MODE, G, C, 4>(x, out, rows, n);                                   \
    }

#endif  // TL_SOFTMAX_F32_CUH
