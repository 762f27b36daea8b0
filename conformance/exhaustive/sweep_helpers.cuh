// The exhaustive sweep's element-wise helpers (conformance/exhaustive/fused.py): __host__ __device__
// functions, integer and float64 arithmetic only, that compute what the NumPy functions of
// conformance/exhaustive/refs.py and judge.py compute, bit for bit. sweep_kernels.cu includes
// them; the CPU tests compile this same file with the host compiler and compare it with NumPy
// (tests/test_exhaustive_fused_host.py).
#if !defined(__CUDACC_RTC__)
#include <cstring>
#include <math.h>
#endif
#ifndef TL_HD
#define TL_HD __host__ __device__
#endif
typedef unsigned long long tl_u64;

TL_HD inline double tl_f64(tl_u64 b) {
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)b);
#else
    double d; std::memcpy(&d, &b, 8); return d;
#endif
}
TL_HD inline tl_u64 tl_bits64(double d) {
#ifdef __CUDA_ARCH__
    return (tl_u64)__double_as_longlong(d);
#else
    tl_u64 b; std::memcpy(&b, &d, 8); return b;
#endif
}
TL_HD inline double tl_abs(double d) { return tl_f64(tl_bits64(d) & 0x7FFFFFFFFFFFFFFFull); }
TL_HD inline long long tl_rint(double d) {                 /* round to nearest, ties to even */
#ifdef __CUDA_ARCH__
    return __double2ll_rn(d);
#else
    return llrint(d);                                      /* the default rounding mode */
#endif
}
TL_HD inline double tl_pow2(int k) { return tl_f64((tl_u64)(k + 1023) << 52); }   /* normal k */
TL_HD inline bool tl_nan64(double d) {
    return (tl_bits64(d) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }
TL_HD inline bool tl_inf64(double d) {
    return (tl_bits64(d) & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull; }
TL_HD inline bool tl_finite64(double d) {
    return (tl_bits64(d) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull; }
TL_HD inline bool tl_nan32(unsigned b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }
TL_HD inline bool tl_sub32(unsigned b) { return (b & 0x7FFFFFFFu) - 1u < 0x7FFFFFu; }

/* exhaustive_refs.f32_to_f64: the exact value; NaN as NumPy's code makes it (np.nan, signed) */
TL_HD inline double tl_f32_to_f64(unsigned b) {
    unsigned e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
    tl_u64 s = (tl_u64)(b >> 31) << 63;
    if (e == 255u)
        return tl_f64(s | 0x7FF0000000000000ull | (m ? 0x0008000000000000ull : 0ull));
    if (e == 0u) {
        double mag = (double)m * tl_pow2(-149);          /* exact: m < 2^23 */
        return s ? -mag : mag;
    }
    return tl_f64(s | ((tl_u64)(e + 896u) << 52) | ((tl_u64)m << 29));
}

/* exhaustive_refs.f64_to_f32: RN-even, gradual underflow, overflow to inf; a NaN as x86's
   conversion (NumPy's astype) makes it: quieted, its payload's top bits kept */
TL_HD inline unsigned tl_f64_to_f32(double v) {
    tl_u64 b = tl_bits64(v);
    unsigned sign = (unsigned)(b >> 63) << 31;
    tl_u64 mag = b & 0x7FFFFFFFFFFFFFFFull;
    int e = (int)(mag >> 52);
    tl_u64 m = mag & 0xFFFFFFFFFFFFFull;
    if (e == 0x7FF)
        return sign | (m ? 0x7FC00000u | (unsigned)(m >> 29) : 0x7F800000u);
    if (e < 897) {                                      /* |v| < 2^-126: scale, round (exact) */
        return (unsigned)tl_rint(tl_abs(v) * tl_pow2(149)) | sign;
    }
    int e32 = e - 1023 + 127;
    if (e32 >= 255) return sign | 0x7F800000u;
    unsigned keep = (unsigned)(m >> 29);
    tl_u64 rest = m & 0x1FFFFFFFull;
    unsigned r = ((unsigned)e32 << 23) | keep;
    if (rest > 0x10000000ull || (rest == 0x10000000ull && (keep & 1u))) r += 1u;  /* carries */
    return sign | r;
}

/* exhaustive_refs.certify for one element (f32_boundaries inlined); s: tiny_sign (0: none),
   dom: nan_domain, ovf: overflow_exact. Returns the float32 bits; *dec: decided. */
TL_HD inline unsigned tl_certify(double v, double bound, int s, bool dom, bool ovf, bool *dec) {
    const double safe_up = 1.0 + tl_pow2(-51), safe_dn = 1.0 - tl_pow2(-51);
    const double tiny64 = tl_pow2(-1000), big = tl_pow2(127) * 2.0;
    const double threshold = big * (1.0 - tl_pow2(-25));
    double mag = tl_abs(v);
    unsigned r = tl_f64_to_f32(v);
    unsigned bits = r & 0x7FFFFFFFu;
    bool finite = bits < 0x7F800000u, top = bits == 0x7F7FFFFFu;
    unsigned up_bits = (finite && !top) ? bits + 1u : bits;
    double up = top ? big : tl_f32_to_f64(up_bits);
    double down = tl_f32_to_f64(bits > 0u ? bits - 1u : 0u);
    double a64 = tl_f32_to_f64(bits);
    double m_hi = finite ? (a64 + up) / 2 : tl_f64(0x7FF0000000000000ull);
    double m_lo = finite ? (bits > 0u ? (a64 + down) / 2 : 0.0) : threshold;
    double rr = mag * bound * safe_up;
    bool normal = tl_finite64(v) && mag >= tiny64;
    bool d = normal && ((mag - m_lo) * safe_dn > rr) && ((m_hi - mag) * safe_dn > rr);
    if (mag < tiny64 && s != 0) { r = s < 0 ? 0x80000000u : 0u; d = true; }
    if (ovf && tl_inf64(v)) d = true;
    if (dom) { r = 0x7FC00000u; d = true; }
    else d = d && !tl_nan64(v);
    *dec = d;
    return r;
}

/* exhaustive.py _judge's pre-filter for one element: 0 equal to the reference (passes every
   model), 1 to compare on the device, 2 to compare on the host (a float32 the comparison
   converts is subnormal). cnt: [same, same with a subnormal reference, subnormal inputs,
   device, host, poison] */
TL_HD inline int tl_classify(unsigned x, unsigned y, unsigned ref, unsigned out, unsigned poison,
                             tl_u64 *cnt) {
    bool pois = y == poison;
    bool same = (ref == y || (tl_nan32(ref) && tl_nan32(y))) && !pois;
    bool risky = tl_sub32(x) || tl_sub32(y) || tl_sub32(ref) || tl_sub32(out);
    cnt[0] += same; cnt[1] += same && tl_sub32(ref); cnt[2] += tl_sub32(x);
    cnt[3] += !same && !risky; cnt[4] += !same && risky; cnt[5] += pois;
    return same ? 0 : (risky ? 2 : 1);
}

/* exhaustive_judge.Tally.add's counts for one element. cnt: [failed, flushed_accepted,
   8 histogram bins, not_correctly_rounded, nan, inf, signed-zero mismatches, live];
   returns the ordered key of a live ulps value (0: not live) for the maximum */
#define TL_TALLY 15
TL_HD inline tl_u64 tl_tally(bool ok, double u, unsigned ref, unsigned got, tl_u64 *cnt) {
    const double inf = tl_f64(0x7FF0000000000000ull);
    const double edges[8] = {0.0, 0.5, 1.0, 2.0, 4.0, 16.0, 256.0, inf};
    bool flushed = ok && tl_sub32(ref) && (got & 0x7FFFFFFFu) == 0u;
    bool live = tl_finite64(u) && !flushed;
    cnt[0] += !ok; cnt[1] += flushed;
    if (live) {
        int idx = 0;                     /* searchsorted(edges, u, 'left'): edges below u */
        for (int i = 0; i < 8; ++i) idx += edges[i] < u;
        cnt[2 + (idx < 7 ? idx : 7)] += 1;
    }
    double v = tl_f32_to_f64(ref), y = tl_f32_to_f64(got);
    bool nv = tl_nan64(v), ny = tl_nan64(y), both = !nv && !ny;
    cnt[10] += both && v != y;
    cnt[11] += nv != ny;
    cnt[12] += both && (tl_inf64(v) || tl_inf64(y)) && v != y;
    cnt[13] += both && v == 0 && y == 0 && ((tl_bits64(v) >> 63) != (tl_bits64(y) >> 63));
    cnt[14] += live;
    if (!live) return 0ull;
    tl_u64 k = tl_bits64(u);
    return (k >> 63) ? ~k : (k | 0x8000000000000000ull);
}
