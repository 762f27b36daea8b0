// The activations' fast float64 path (elementwise.cu: sigmoid, softplus, gelu forward; the exp,
// sigmoid, tanh, softplus and gelu VJPs): exp, a Newton reciprocal, log1p and the float<->double
// conversions, for the arguments most data has (|exp argument| <= 64). Outside that range, and
// for infinities, NaN and subnormal results, elementwise.cu keeps libdevice's double functions.
//
// Budget. A value with relative error e before its one rounding to float32 is within
// 0.5 + e 2^24 float32 ulps of the exact result (ulp(v) >= |v| 2^-24 for a normal float v, and
// subnormal results only gain), so a 1-ulp bound needs e <= 2^-25. These helpers are built for
// e <= 2^-31 and no more: exp under 2^-41, 1/d under 2^-39.4, log1p under 2^-31.2 (figures of
// each function below). tests/test_act_fast_emulated.py replays every operation on the host
// (each fma rounded once) against mpmath and asserts them, with the constants read from here.
//
// Cost. At 2^26 elements and ~4 TB/s an H200 forward has about 33 FP64 issue slots per element,
// and a float<->double conversion (F2F) costs four of them (a quarter of the DFMA rate on sm_90).
// So the input's double and the result's rounding are integer bit operations where the value is
// known to be a normal float (tl_f2d_bits, tl_d2f_normal), and exp's range reduction picks
// 2^(j/4) from four constants in registers by bit selects (no table indexing).
#ifndef TL_ACT_FAST_CUH
#define TL_ACT_FAST_CUH

// a's value as a double by integer operations: exact for normal a. Zero and subnormal a give a
// value of a's sign whose magnitude is in [2^-127, 2^-126) (not a's value): callers use it only
// where that changes nothing (exp's argument, where e^y for any |y| < 2^-126 rounds to 1 in
// double; a term under 2^-70 of the sum it joins; an input whose result is selected away).
// Infinities and NaN are not normal floats: callers keep them off this path.
__device__ __forceinline__ double tl_f2d_bits(float a) {
    const unsigned b = __float_as_uint(a);
    const unsigned hi = (b & 0x80000000u) | (((b & 0x7fffffffu) >> 3) + 0x38000000u);
    return __hiloint2double((int)hi, (int)(b << 29));
}

// v rounded to the nearest float (ties to even) by integer operations on its bits: the float's
// 23 fraction bits are the double's top 23, and adding 2^28 - 1 plus the lowest kept bit to the
// 29 dropped ones carries into the kept part exactly when round-to-nearest-even rounds up (a
// carry out of the fraction steps the exponent, as it should). Valid where |v| rounds to a
// normal float (2^-126 <= |v| < 2^128 - 2^103): the low 32 bits of u >> 29 hold the exponent
// modulo 2^9, and subtracting (1023 - 127) 2^23 modulo 2^32 leaves the float's exponent
// (1 to 254, bit 31 clear) there.
__device__ __forceinline__ float tl_d2f_normal(double v) {
    unsigned long long u = (unsigned long long)__double_as_longlong(v);
    u += 0x0fffffffull + ((u >> 29) & 1ull);
    const unsigned sign = (unsigned)(u >> 32) & 0x80000000u;
    return __uint_as_float(sign | ((unsigned)(u >> 29) - 0xc0000000u));
}

// e^r 2^(n/4) for |r| <= ln2/8 (1 + 2^-13), |n| <= 371: 2^(n/4) = 2^(j/4) 2^m with j = n & 3
// (one of four correctly rounded constants, picked by two bit selects) and m = n >> 2 added to
// its exponent bits (|m| <= 93: a normal double). e^r - 1 = r P(r) with P of degree 5 fitted by
// Chebyshev interpolation (mpmath) on [-0.0867, 0.0867]: under 2^-41.8 relative to e^r. With
// the roundings of Horner's fmas, of q, of the last fma and of 2^(j/4): under 2^-41 relative.
__device__ __forceinline__ double tl_exp_reduced(int n, double r) {
    double p = 1.3891685613716422e-03;
    p = fma(p, r, 8.3355707657532010e-03);
    p = fma(p, r, 4.1666665878295400e-02);
    p = fma(p, r, 1.6666666035950630e-01);
    p = fma(p, r, 5.0000000000032920e-01);
    p = fma(p, r, 1.0000000000026340e+00);
    const double q = p * r;
    const double t01 = (n & 1) ? 1.189207115002721 : 1.0;
    const double t23 = (n & 1) ? 1.681792830507429 : 1.4142135623730951;
    const double t = (n & 2) ? t23 : t01;
    const double s = __hiloint2double(__double2hiint(t) + (n >> 2) * 0x100000, __double2loint(t));
    return fma(s, q, s);
}

// e^y for a float |y| <= 64: n = rint(y 4/ln2) in float (the float 4/ln2 and the product's
// rounding are off by under 2^-14.5 for |y 4/ln2| <= 370, so |r| <= ln2/8 (1 + 2^-13)), read
// from the low bits of y 4/ln2 + 1.5 2^23; n as a double from its bits (1.5 2^52 + n less
// 1.5 2^52: exact); r = y - n ln2/4 by one fma with ln2/4 rounded to double (n times its error
// is under 2^-47.5, r's own rounding 2^-53 relative).
__device__ __forceinline__ double tl_exp_fast(float y) {
    const float t = fmaf(y, 5.77078009e+00f, 12582912.0f);
    const int n = __float_as_int(t) - 0x4b400000;
    const double nd = __hiloint2double(0x43380000 + (n >> 31), n) - 6755399441055744.0;
    return tl_exp_reduced(n, fma(-nd, 1.7328679513998632e-01, tl_f2d_bits(y)));
}

// e^y for a double |y| <= 64 (gelu's argument): the same with n = rint(y 4/ln2) from one double
// fma (n's low word of y 4/ln2 + 1.5 2^52, and subtracting the shift back is exact).
__device__ __forceinline__ double tl_exp_fast_d(double y) {
    const double shifted = fma(y, 5.7707801635558535, 6755399441055744.0);
    const int n = __double2loint(shifted);
    return tl_exp_reduced(n, fma(-(shifted - 6755399441055744.0), 1.7328679513998632e-01, y));
}

// 1/d for d in [1, 2]: the float f with d's exponent and leading 20 fraction bits (d/f in
// [1, 1 + 2^-20)), its reciprocal by PTX rcp.approx.f32 (MUFU.RCP; "maximum ulp error is 1 across
// the full range", PTX ISA: within 2^-23 relative of 1/f for f in [1, 2]; .ftz is moot for a
// normal f and a result in [0.5, 1]), widened back bit for bit: |1 - d y0| = |t| < 2^-19.8. One
// Newton step y0 + y0 t leaves t^2 < 2^-39.6; its two fmas (the inner one exact to 2^-73) keep
// the result under 2^-39.4 relative.
__device__ __forceinline__ double tl_rcp_1_2(double d) {
    const int hi = __double2hiint(d);
    const float f = __int_as_float(((hi - 0x3ff00000) << 3) + 0x3f800000);
    float rf;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rf) : "f"(f));
    // widened from its bits: a positive normal float (1 ulp of 1/f may put it below 0.5)
    const unsigned rb = __float_as_uint(rf);
    const double y0 = __hiloint2double((int)((rb >> 3) + 0x38000000u), (int)(rb << 29));
    return fma(y0, fma(-d, y0, 1.0), y0);
}

// log1p(e) for e in [0, 1] = 2 atanh(t), t = e/(2 + e) in [0, 1/3]: v = 2t = e/(1 + e/2) by the
// reciprocal above (2^-39.4), w = v^2 in [0, 4/9], and 2 atanh(v/2) = v + v w R(w) with R of
// degree 4 fitted by Chebyshev interpolation (mpmath) on [0, 4/9]: under 2^-31.26 relative.
// log1p's relative sensitivity to e is e/((1+e) log1p(e)) <= 1 and atanh's to t under 1.13, so
// with v's error and the roundings: under 2^-31.2 relative in all.
__device__ __forceinline__ double tl_log1p_01(double e) {
    const double v = e * tl_rcp_1_2(fma(e, 0.5, 1.0));
    const double w = v * v;
    double p = 1.1340004503917651e-04;
    p = fma(p, w, 4.2395655861094480e-04);
    p = fma(p, w, 2.2337779683049090e-03);
    p = fma(p, w, 1.2499908228728037e-02);
    p = fma(p, w, 8.3333334150659270e-02);
    return fma(v * w, p, v);
}

// e = e^-|x| (from the caller) to sigmoid(|x|) = y = 1/(1+e) and sigmoid(-|x|) = e y: no
// cancellation at either tail; relative error under 2^-39.3 (y) and 2^-38.8 (e y) with e's.
__device__ __forceinline__ void tl_sigmoid_pair(double e, bool nonneg, double& s, double& c) {
    const double y = tl_rcp_1_2(1.0 + e);
    const double ey = e * y;
    s = nonneg ? y : ey;
    c = nonneg ? ey : y;
}

#endif  // TL_ACT_FAST_CUH
