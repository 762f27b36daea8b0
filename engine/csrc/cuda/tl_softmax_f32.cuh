// Fast float32 softmax / log_softmax forward over rows held in registers (softmax.cu includes
// this after TlGroup; the plain capsules native_cuda.softmax and native_cuda.log_softmax run it,
// the accurate variants keep softmax.cu's float64 kernels). A group of G threads takes a row of
// n <= G K contiguous entries; thread t holds j = t + G k (coalesced), the K loads issued first
// with no branch between them (past the row's end: the row's last entry, ignored).
//
// Order: m = the row's max (an order-free fold: NaN if any entry is NaN, exact otherwise); per
// thread the terms added in double over k in order, then tl_group_sum's fixed tree: bitwise
// repeatable run to run in either mode. Every value is float32 except the row sum (a double
// addition per entry), its reciprocal or log1p (per row) and their splits into two floats.
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
// - log_softmax: y = d - L, L = log(S) = log1p(T), T = the sum without the first max entry's 1
//   (as the reference: a tiny T keeps tiny outputs accurate). T's terms are evaluated scaled,
//   exp(d + 64) = expf(a_h) (1 + a_l) with a_h + a_l = d_h + 64 + d_l (Fast2Sum: exact), so
//   terms down to d = -151 stay normal (unscaled, n subnormal terms with half-ulp errors of one
//   sign would move a T of their size by ~2^-6 relative), |a_l| <= 2^-16; T = the scaled sum
//   times e^-64 (a float64 constant) within 4u + 2^-32 relative; L = log1p(T) in double, so
//   |dL| <= 4.003u T/(1+T) <= 4.003u L. y = d - L has no cancellation (d <= 0 <= L), so
//   |dL| <= 4.003u |y|; the write is a float-float difference (TwoSum(d_h, -L_h) + (d_l - L_l)),
//   u^2 |y| before its one rounding. |y - v| < (4.004 + 1.5) ulp(v) < 6 ulp (subnormal y: under
//   4.5 subnormal ulps).
// - entries with d < -200 are left out of T: together under n e^-200 < 2^-275, below float32's
//   range in L and y; d_h = -inf (x = -inf, or x - m beyond the float range) gives softmax 0
//   and log_softmax -inf, as the reference.
// Special rows as softmax.cu's kernels (docs/OPS.md): a NaN or +inf entry, or a row of -inf
// (m not finite), makes the whole row NaN.
#ifndef TL_SOFTMAX_F32_CUH
#define TL_SOFTMAX_F32_CUH

#define TL_F32_NAN __int_as_float(0x7fc00000)
#define TL_F32_MAX 3.40282347e38f

// max that propagates NaN (any order gives the same value: exact max, or NaN)
struct TlMaxNanF {
    __device__ float operator()(float a, float b) const {
        return (a != a || b != b) ? TL_F32_NAN : fmaxf(a, b);
    }
};

// Knuth's TwoSum: s + e == a + b exactly (round to nearest, no overflow).
__device__ __forceinline__ void tl_two_sum(float a, float b, float& s, float& e) {
    s = a + b;
    const float bb = s - a;
    e = (a - (s - bb)) + (b - bb);
}

// x - m as d_h + d_l exactly; d_h = -inf (overflow or x = -inf) gets d_l = 0, not NaN.
__device__ __forceinline__ void tl_split_diff(float x, float m, float& dh, float& dl) {
    tl_two_sum(x, -m, dh, dl);
    dl = (dh >= -TL_F32_MAX) ? dl : 0.0f;
}

// MODE 0: softmax, 1: log_softmax.
template <int MODE, int G, int K>
__device__ __forceinline__ void tl_softmax_f32_reg(const float* __restrict__ x,
                                                   float* __restrict__ out, unsigned rows,
                                                   unsigned n) {
    const TlGroup<G> grp;
    for (unsigned long long row = grp.first; row < rows; row += grp.stride) {
        const unsigned long long base = row * n;
        float v[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const unsigned j = grp.t + G * k;
            v[k] = x[base + (j < n ? j : n - 1)];
        }
        float m = v[0];   // a clamped load is the row's last entry: the max is unchanged
#pragma unroll
        for (int k = 1; k < K; ++k) m = TlMaxNanF()(m, v[k]);
        m = tl_group_fold<G>(m, TlMaxNanF());
        if (!(fabsf(m) <= TL_F32_MAX)) {   // NaN or +-inf: every entry of the row is NaN
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = grp.t + G * k;
                if (j < n) out[base + j] = TL_F32_NAN;
            }
            continue;
        }
        // This thread's partial sum: the float terms added in double (exact but for 2^-53 per
        // addition; a float-float TwoSum would cost 6 float32 operations per term, the
        // conversion and the add issue on the float64 pipe beside them), the terms' small
        // corrections in float (each under 2^-16 of its term).
        double part = 0.0;
        float corr = 0.0f;
        if (MODE == 0) {
            float eh[K], dl[K];
#pragma unroll
            for (int k = 0; k < K; ++k) {
                float dh;
                tl_split_diff(v[k], m, dh, dl[k]);
                eh[k] = (grp.t + G * k < n) ? expf(dh) : 0.0f;
                part += (double)eh[k];
                corr = fmaf(eh[k], dl[k], corr);   // the (1 + d_l) correction
            }
            const double total = tl_group_sum<G>(part + (double)corr);
            const double r = 1.0 / total;
            const float rh = (float)r, rl = (float)(r - (double)rh);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = grp.t + G * k;
                if (j >= n) continue;
                const float q = eh[k] * fmaf(dl[k], rh, rl);
                out[base + j] = fmaf(eh[k], rh, q);
            }
        } else {
            unsigned jm = TL_NONE;   // the first index of the max (carries the exact 1)
#pragma unroll
            for (int k = K - 1; k >= 0; --k) {
                const unsigned j = grp.t + G * k;
                if (j < n && v[k] == m) jm = j;
            }
            jm = tl_group_fold<G>(jm, TlMin());
            float dh[K], dl[K];
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = grp.t + G * k;
                tl_two_sum(v[k], -m, dh[k], dl[k]);   // d_h = -inf: d_l NaN, never used
                // d + 64 = a_h + a_l exactly: Fast2Sum (|64| >= |d_h|), and for |d_h| > 64
                // the sum is exact (64 is a multiple of d_h's ulp) and a_l = 0
                const float ah = dh[k] + 64.0f;
                const float al = (dh[k] - (ah - 64.0f)) + dl[k];
                const bool live = j < n && j != jm && dh[k] > -200.0f;
                const float e = live ? expf(ah) : 0.0f;
                part += (double)e;
                corr = live ? fmaf(e, al, corr) : corr;   // al is NaN for d_h = -inf
            }
            // T = the scaled sum times e^-64 (a double constant: 2^-53); L in double, split
            const double big_t = tl_group_sum<G>(part + (double)corr) * 0x1.969d47321e4ccp-93;
            const double big_l = log1p(big_t);
            const float lh = (float)big_l, ll = (float)(big_l - (double)lh);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const unsigned j = grp.t + G * k;
                if (j >= n) continue;
                float p, q;
                tl_two_sum(dh[k], -lh, p, q);
                const float y = p + (q + (dl[k] - ll));
                out[base + j] = (dh[k] >= -TL_F32_MAX) ? y : dh[k];   // d_h = -inf: -inf
            }
        }
    }
}

#define TL_SOFTMAX_F32(name, MODE, G, K)                                                        \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK) name(                               \
        const float* __restrict__ x, float* __restrict__ out, unsigned rows, unsigned n) {     \
        tl_softmax_f32_reg<MODE, G, K>(x, out, rows, n);                                      \
    }

#endif  // TL_SOFTMAX_F32_CUH
