// Group reductions for the register-path row kernels (softmax.cu, norm.cu): a group is G
// consecutive threads of a block (G = 32, 64, 128 or TL_BLOCK, dividing TL_BLOCK) that owns a row.
//   tl_group_sum<G>(v)          fixed-order double sum over the group: xor-shuffle tree in each
//                               warp, then the group's warps in order; every thread of the group
//                               returns the same total
//   tl_group_sum2<G>(a, b)      two such sums through one pair of barriers
//   tl_group_sum3<G>(a, b, c)   three
//   tl_group_argmax<G>(v, i)    tl_pick over the group (see tl_common.cuh), same result everywhere
//   tl_group_max<G>(v)          fmax over the group (exact: any order gives the same value)
//   tl_group_or<G>(u), tl_group_min<G>(u)   bitwise or / minimum of unsigned values
//   tl_exp_table_init(t)        fills a block's __shared__ double t[64] with 2^(j/64); a barrier
//   tl_exp_nonpos(d, t)         exp(d) for d <= 0 (NaN kept) within 2^-50 relative (below)
// For G > 32 every thread of the block must make the same calls (they contain __syncthreads):
// the kernels walk rows in block-uniform steps. Include after tl_common.cuh (tl_pick, TL_BLOCK):
// the loader inlines one level of headers, so this one includes none.
#ifndef TL_ROWS_CUH
#define TL_ROWS_CUH

template <int G>
__device__ __forceinline__ unsigned tl_group_first_warp() {
    return (threadIdx.x / G) * (G / 32);
}

template <int G>
__device__ __forceinline__ double tl_group_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (G == 32) return v;
    __shared__ double sv[TL_BLOCK / 32];
    __syncthreads();   // the slots may still be read by a previous call
    if ((threadIdx.x & 31u) == 0) sv[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    double total = sv[w0];
    for (unsigned w = 1; w < G / 32; ++w) total += sv[w0 + w];
    return total;
}

template <int G>
__device__ __forceinline__ void tl_group_sum2(double& a, double& b) {
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, off);
        b += __shfl_xor_sync(0xffffffffu, b, off);
    }
    if (G == 32) return;
    __shared__ double sa[TL_BLOCK / 32], sb[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) { sa[threadIdx.x >> 5] = a; sb[threadIdx.x >> 5] = b; }
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    a = sa[w0];
    b = sb[w0];
    for (unsigned w = 1; w < G / 32; ++w) { a += sa[w0 + w]; b += sb[w0 + w]; }
}

template <int G>
__device__ __forceinline__ void tl_group_sum3(double& a, double& b, double& c) {
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, off);
        b += __shfl_xor_sync(0xffffffffu, b, off);
        c += __shfl_xor_sync(0xffffffffu, c, off);
    }
    if (G == 32) return;
    __shared__ double sa[TL_BLOCK / 32], sb[TL_BLOCK / 32], sc[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) {
        sa[threadIdx.x >> 5] = a;
        sb[threadIdx.x >> 5] = b;
        sc[threadIdx.x >> 5] = c;
    }
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    a = sa[w0];
    b = sb[w0];
    c = sc[w0];
    for (unsigned w = 1; w < G / 32; ++w) { a += sa[w0 + w]; b += sb[w0 + w]; c += sc[w0 + w]; }
}

template <int G>
__device__ __forceinline__ void tl_group_argmax(double& v, unsigned& i) {
    for (int off = 16; off > 0; off >>= 1) {
        const double v2 = __shfl_xor_sync(0xffffffffu, v, off);
        const unsigned i2 = __shfl_xor_sync(0xffffffffu, i, off);
        tl_pick(v, i, v2, i2);
    }
    if (G == 32) return;
    __shared__ double sv[TL_BLOCK / 32];
    __shared__ unsigned si[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) { sv[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    v = sv[w0];
    i = si[w0];
    for (unsigned w = 1; w < G / 32; ++w) tl_pick(v, i, sv[w0 + w], si[w0 + w]);
}

// One body for the order-free reductions: xor-shuffle in each warp, then the group's warps.
template <int G, class T, class Op>
__device__ __forceinline__ T tl_group_fold(T v, Op op) {
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (G == 32) return v;
    __shared__ T sv[TL_BLOCK / 32];
    __syncthreads();
    if ((threadIdx.x & 31u) == 0) sv[threadIdx.x >> 5] = v;
    __syncthreads();
    const unsigned w0 = tl_group_first_warp<G>();
    v = sv[w0];
    for (unsigned w = 1; w < G / 32; ++w) v = op(v, sv[w0 + w]);
    return v;
}

struct TlMax { __device__ double operator()(double a, double b) const { return fmax(a, b); } };
struct TlOr { __device__ unsigned operator()(unsigned a, unsigned b) const { return a | b; } };
struct TlMin { __device__ unsigned operator()(unsigned a, unsigned b) const { return min(a, b); } };

template <int G>
__device__ __forceinline__ double tl_group_max(double v) { return tl_group_fold<G>(v, TlMax()); }
template <int G>
__device__ __forceinline__ unsigned tl_group_or(unsigned v) { return tl_group_fold<G>(v, TlOr()); }
template <int G>
__device__ __forceinline__ unsigned tl_group_min(unsigned v) { return tl_group_fold<G>(v, TlMin()); }

// exp(d) for d <= 0, as the softmax forward needs it (d = x - max <= 0), in about ten float64
// operations instead of libdevice exp's ~25 (the forward is compute-bound on them otherwise):
// k = rint(64 d / ln2) by the 1.5 * 2^52 shift, r = d - k ln2/64 by two fma with ln2/64 split in
// a high and a low double (Cody-Waite; |k| < 2^17, so the low part's error k * 2^-106 is far
// below 2^-60), |r| <= ln2/128 + 2^-60; e^r - 1 by its degree-5 Taylor polynomial in Horner form
// (truncation |r|^6/720 * e^|r| < 2^-54.6; the five fma add < 2^-57 relative to e^r);
// e^d = 2^(k>>6) * t[k&63] * e^r with t[j] = exp2(j/64) from libdevice (within 2 float64 ulps:
// 2^-51), one fma, and an exact power-of-two scale (two steps below 2^-1020, one more rounding
// in double's subnormal range, which no float32 result reaches). Relative error < 2^-50 for every
// d in [-745.2, 0]; below that exp(d) < 2^-1075 and 0 is returned (correct to double); NaN in,
// NaN out; -inf gives 0.
__device__ __forceinline__ void tl_exp_table_init(double* t) {
    for (unsigned j = threadIdx.x; j < 64; j += blockDim.x) t[j] = exp2((double)j / 64.0);
    __syncthreads();
}

__device__ __forceinline__ double tl_exp_nonpos(double d, const double* t) {
    if (!(d >= -745.2)) return d != d ? d : 0.0;
    const double shift = 6755399441055744.0;                      // 1.5 * 2^52
    const double s = fma(d, 92.332482616893656877, shift);        // 64 / ln2
    const double k = s - shift;                                   // rint(64 d / ln2), exact
    const long long ki = __double_as_longlong(s) - __double_as_longlong(shift);
    double r = fma(-k, 1.0830424696249145e-02, d);                // ln2/64, high part
    r = fma(-k, 3.623510646634843e-19, r);                        // ln2/64 - high, rounded
    double p = fma(r, 1.0 / 120.0, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    const double em1 = p * r;                                     // e^r - 1
    const double tj = t[ki & 63];
    const double y = fma(tj, em1, tj);                            // t[j] e^r
    const long long q = ki >> 6;                                  // floor(k / 64)
    if (q >= -1020) return y * __longlong_as_double((q + 1023) << 52);
    return (y * __longlong_as_double((q + 1023 + 600) << 52)) * 0x1p-600;
}

#endif  // TL_ROWS_CUH
