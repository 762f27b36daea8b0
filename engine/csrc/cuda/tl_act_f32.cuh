// The float32 activations (elementwise.cu's tl_sigmoid_f32, tl_softplus_f32, tl_gelu_f32 and
// tl_gelu_bwd_f32: the plain capsules native_cuda.sigmoid / softplus / gelu; the accurate
// variants keep the float64 kernels of tl_act_fast.cuh). Float32 arithmetic throughout (gelu's
// argument z = 2u(x) and its reduction, whose rounding the exp would amplify |z| times, in float32
// pairs: tl_gelu_ee, which its forward and VJP share). No libdevice call: the error of every step
// is ours to bound (u = 2^-24).
//
// exp (tl_exp_neg_f32, tl_exp_core; sigmoid and softplus): e^y = 2^m E1 for y = -|arg| in
// [-110, 0].
// k = rint(16 y/ln2) from one float fma (|k| <= 3040, the float 16/ln2 moves y 16/ln2 by under
// 2^-12: |r| <= ln2/32 (1 + 2^-11) < 2^-5.5). r = y - k ln2/16 by Cody-Waite: C1 = 0x1.62ep-5
// has 12 bits, so k C1 and y - k C1 are exact (k != 0 means |y| >= 2^-5.6: both multiples of
// 2^-29, under 2^-5); r = fl(r1 - k C2) rounds once (2^-30), k (ln2/16 - C1 - C2) < 2^-31.8.
// e^r - 1 = p = r + r^2 (1/2 + r/6 + r^2/24):
// truncation 2^-34.5, p's fma rounding 2^-30, the others under 2^-34: |dp| < 2^-28.7 with r's.
// 2^(j/16) = T_hi + T_lo (16-entry table, one LDG.64, the pair within 2^-48); lo = fl(T_hi p +
// T_lo) (|lo| < 2^-4.5: 2^-29) and E1 = fl(T_hi + lo): E1 in [0.97, 2), within 0.5 ulp(E1) +
// 2^-27.3 E1 of 2^(j/16) e^r = 2^-m e^y.
// 1/D, D = 1 + E (softplus: 1 + E/2), E = E1 2^max(m, -60) (below that 1/D is 1 to 2^-59): D =
// dh + dl exactly (Fast2Sum: 1 >= E), w0 = rcp.approx(dh) (PTX: within 1 ulp, 2^-23 relative),
// eps = 1 - w0 D by two fma (|eps| < 2^-22.4, to 2^-46), w1 = fl(w0 eps): 1/D = w0 + w1 within
// 2^-44 relative.
// Scaling: results are formed unscaled in [0.48, 2) and multiplied by
// 2^(M+64) (exact) and 2^-64 (exact, unless the result is subnormal: there each of E1's
// rounding, the unscaled result's and this one is under 0.54 subnormal ulp).
//
// Bounds (ulps of the rounded reference v: a result y with |y - exact| < 1.6 ulp(v) is within 2
// ulp of v, the distance being a multiple of ulp(v), or of ulp(v)/2 below a power of two):
// - sigmoid = N/D rounded once, fl(N w0 + fl(N w1)), N = 1 (x >= 0) or E1 (x < 0, scaled by 2^m).
//   x >= 0: ds = dE/(1+E)^2, E < 1: under 0.3 ulp(s) before the rounding. x < 0: s = E/(1+E)
//   >= E/2, so 0.5 ulp(E) <= ulp(s): ds <= ulp(s)/(1+E)^2 + 2^-27.3 s < 1.1 ulp(s) before, 1.6
//   after it. Subnormal results: three roundings of 0.54 subnormal ulp. Within 2 ulp.
// - softplus = max(x, 0) + L, L = log1p(E) = 2 atanh(v/2), v = E/(1 + E/2) = e1 (w0 + w1) 2^m,
//   L = fl(e1 w0 + fl(vh w R(w) + e1 w1)) 2^m, w = fl(vh 2^m)^2 <= 4/9, R a degree-4 fit (2^-30.5
//   of L), the small term under 0.04 L with under 7u of it in roundings (0.3 ulp(L)). dL =
//   dE/(1+E) and L >= E/2 (0.5 ulp(E) <= ulp(L)): under 1.45 ulp(L) before the rounding for x <
//   0, so 1.95 after, within 2 ulp (and under 1.2 before where L drops a binade below E, E
//   small, the small term then E/2 of L). x >= 0: x + fl(L), fl(L) within 1.1 ulp(L) <= ulp(x +
//   L) while x + L < 1 (E > 0.73: dE/(1+E) < 0.3 ulp), half that above: under 1.6 ulp.
// - gelu forward (GeluF32): x s(z) = x N/D within 1.07u relative before its one rounding (its
//   derivation at GeluF32), so under 1.57 ulp(v) from the exact value: within 2 ulp.
// - gelu VJP: g s f, f = 1 + x z' c, c = 1 - s = s(-z), s and c each within 2.07u (its derivation
//   at GeluBF32), x z' in float (three roundings); on [-1, -0.625], where f cancels (its root x0 =
//   -0.75246), through the root instead (GeluBF32): not declared; the harness judges it by its own
//   derived rule (conformance/families/elementwise.py: relative on that interval, s (6.2u |X| + 5.2u
//   |f|) beyond, which assumes s and c within 2.2u). |x| > 11.5: g (x > 0), g 0 (the factor under
//   2^-170; -0 at -inf).
// tests/test_activations_emulated.py runs these functors on the host over a bit sweep against
// float64 under every admissible rcp.approx result.
#ifndef TL_ACT_F32_CUH
#define TL_ACT_F32_CUH

// 2^(j/16) = hi + lo, j = 0..15: hi the float nearest, lo the float nearest the rest (mpmath).
__device__ const float2 tl_exp2_16[16] = {
    {1.0f, 0.0f},
    {1.0442737340927124f, 4.8334701574503924e-08f},
    {1.0905077457427979f, -1.3077539939843064e-08f},
    {1.1387885808944702f, 5.386222312608879e-08f},
    {1.1892070770263672f, 3.797635272917432e-08f},
    {1.2418577671051025f, 4.496838101886169e-08f},
    {1.2968395948410034f, -4.018999533172973e-08f},
    {1.3542555570602417f, -1.0123349269974824e-08f},
    {1.4142135381698608f, 2.4203234971764687e-08f},
    {1.4768261909484863f, -4.500898853621038e-08f},
    {1.5422108173370361f, 8.070904833346049e-09f},
    {1.610490322113037f, 9.836217174097328e-09f},
    {1.6817928552627563f, -2.4755326677450284e-08f},
    {1.7562521696090698f, -9.235770370707996e-09f},
    {1.8340080976486206f, -1.1239277952768134e-08f},
    {1.9152065515518188f, 9.845328108326612e-09f},
};

#define TL_F32_ARG_MAX 110.0f    /* e^-110 < 2^-158: every result is its limit beyond */

// 2^e for e in [-126, 127] (a normal float); other e (a NaN's meaningless exponent) give some
// float, shifted as unsigned (defined behaviour in the host emulation too).
__device__ __forceinline__ float tl_pow2f(int e) {
    return __uint_as_float((unsigned)(e + 127) << 23);
}

// PTX rcp.approx.f32 ("maximum ulp error is 1 across the full range") of d in [1, 2].
__device__ __forceinline__ float tl_rcp_approx(float d) {
    float w;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(w) : "f"(d));
    return w;
}

// e^(k ln2/16 + r) = 2^m E1 (header); k <= 0 (any int for a NaN r: the index stays in the table).
__device__ __forceinline__ void tl_exp_core(int k, float r, float& e1, int& m) {
    const float q = fmaf(fmaf(r, 4.16666679e-02f, 1.66666672e-01f), r, 0.5f);
    const float p = fmaf(r * r, q, r);
    const float2 t = __ldg(&tl_exp2_16[k & 15]);
    e1 = t.x + fmaf(t.x, p, t.y);
    m = k >> 4;
}

// e^y = 2^m E1 for y in [-110, 0] or NaN.
__device__ __forceinline__ void tl_exp_neg_f32(float y, float& e1, int& m) {
    const float t = fmaf(y, 23.0831203f, 12582912.0f);   // 1.5 2^23 + rint(16 y / ln2)
    const float kf = t - 12582912.0f;
    float r = fmaf(kf, -0.0433197021484375f, y);           // C1 = 0x1.62ep-5: exact
    r = fmaf(kf, -1.99663646e-06f, r);                     // C2
    tl_exp_core(__float_as_int(t) - 0x4b400000, r, e1, m);
}

// 1/D for D = dh + dl, dh in [1, 2] (or a power of two times that, every product normal:
// GeluBF32's [2^64, 2^65]): w0 and w1 = w0 eps, 1/D = w0 + w1 within 2^-44 relative.
__device__ __forceinline__ void tl_rcp_pair(float dh, float dl, float& w0, float& w1) {
    w0 = tl_rcp_approx(dh);
    w1 = w0 * fmaf(-w0, dl, fmaf(-w0, dh, 1.0f));
}

// From E = e^-|z| = 2^m e1: 1/(1 + E) = w0 + w1 (w1 under 2^-20 w0). s(z) = N (w0 + w1) 2^M
// with N = 1, M = 0 for z >= 0 and N = e1, M = m otherwise (SigmoidF32).
struct TlSigmoidPair {
    float e1, w0, w1;
    int m;
    __device__ __forceinline__ TlSigmoidPair(float e1_, int m_) : e1(e1_), m(m_) {
        const float e = e1 * tl_pow2f(m > -60 ? m : -60);
        const float dh = 1.0f + e;
        const float dl = (1.0f - dh) + e;                  // exact: 1 >= e
        tl_rcp_pair(dh, dl, w0, w1);
    }
    // s(z) for first (z >= 0), s(-z) otherwise, rounded once: fl(N w0 + fl(N w1)), to be
    // scaled by 2^M
    __device__ __forceinline__ float value(bool first, int& M) const {
        const float n = first ? 1.0f : e1;
        M = first ? 0 : m;
        return fmaf(n, w0, n * w1);
    }
};

// v 2^M rounded once more only where it is subnormal (M >= -190: 2^(M+64) a normal float).
__device__ __forceinline__ float tl_scale_out(float v, int M) {
    return (v * tl_pow2f(M + 64)) * 5.42101086e-20f;       // 2^-64
}

struct SigmoidF32 {
    __device__ float operator()(float a) const {
        const float ax = fabsf(a);
        float e1;
        int m, M;
        tl_exp_neg_f32(ax > TL_F32_ARG_MAX ? -TL_F32_ARG_MAX : -ax, e1, m);   // NaN stays NaN
        const float s = TlSigmoidPair(e1, m).value(a >= 0.0f, M);
        return tl_scale_out(s, M);
    }
};

struct SoftplusF32 {
    // max(x, 0) + log1p(e^-|x|); NaN: fmaxf gives 0, the log1p term NaN.
    __device__ float operator()(float a) const {
        const float ax = fabsf(a);
        float e1;
        int m;
        tl_exp_neg_f32(ax > TL_F32_ARG_MAX ? -TL_F32_ARG_MAX : -ax, e1, m);
        const float sc = tl_pow2f(m > -60 ? m : -60);
        const float e = e1 * sc;
        const float dh = fmaf(e, 0.5f, 1.0f);
        const float dl = fmaf(e, 0.5f, 1.0f - dh);          // exact
        float w0, w1;
        tl_rcp_pair(dh, dl, w0, w1);
        const float vh = e1 * w0;                            // v = E/(1 + E/2), unscaled
        const float vs = vh * sc;
        const float w = vs * vs;
        // R(w) ~ (2 atanh(v/2) - v)/(v w) on [0, 4/9]: degree 4, weighted least squares on
        // Chebyshev nodes (mpmath), float32 coefficients: v + v w R within 2^-30.5 of L
        float R = 1.18657139e-04f;
        R = fmaf(R, w, 4.18508658e-04f);
        R = fmaf(R, w, 2.23569432e-03f);
        R = fmaf(R, w, 1.24996491e-02f);
        R = fmaf(R, w, 8.33333433e-02f);
        // L = e1 w0 (exact in the fma) + (vh w R + e1 w1): one rounding, unscaled
        const float L = fmaf(e1, w0, fmaf(vh * w, R, e1 * w1));
        return fmaxf(a, 0.0f) + tl_scale_out(L, m);
    }
};

// gelu's forward, all float32 (GeluF32): x s(z), z = x P, P = 2C + 2CK x^2 (C = sqrt(2/pi), K =
// 0.044715), s(z) = 1/(1 + e^-z). In units of L = ln2/32 (P~ = P/L = P0 + P1 x^2, every
// constant from mpmath), for |x| <= 10.8 (the limits beyond):
// - P~ = ph + pl: ph = fl(P1H x^2 + P0H) < 458. P0H is P0 on the grid of 2^-15, so d = P0H - ph
//   is exact (Sterbenz up to 2 P0H = 147; beyond, a multiple of 2^-16 under 2^8 or of 2^-15
//   under 2^9) and eps = fma(P1H, x^2, d) is ph's rounding error (under 2^-16) to 2^-40; x^2 =
//   fl(x x) + x2l exactly (fma; for |x| < 2^-63 to 2^-149, a part of P~ under 2^-146). pl =
//   fl(fl(P1H x2l + eps) + fl(P1L x^2 + P0L)), |pl| < 2^-14.3, three roundings under 2^-38
//   together; the constants' splits are within 2^-41.3 (P0) and 2^-41.2 (P1 x^2): |ph + pl -
//   P~| < 2^-37, so |x| (ph + pl) is |z|/L to 2^-33.5.
// - Reduction: t = fl(S - |x| ph), S = 1.5 2^23, is S + k, k = rint(-|x| ph) in [-4946, 0];
//   rh = fl(-|x| ph + (S - t)) (S - t = -k exactly; the exact value is in [-1/2, 1/2]: 2^-26)
//   and r = fl(-|x| pl + rh) (|r| < 0.501: 2^-25): r = -|z|/L - k within 2^-24.4 (L r: 2^-29.9).
// - e^(L r) - 1 = p = r (a1 + r (a2 + r a3)): a least-squares fit on 200 Chebyshev nodes of
//   [-0.5005, 0.5005] (mpmath), float coefficients: 2^-32.8 on |r| <= 0.502; the roundings of
//   the inner fma (2^-37, times r^2), of the outer (2^-30, times |r|) and of p (|p| < 0.011:
//   2^-31): |p - (e^(L r) - 1)| < 2^-29.8.
// - k = 32m + j (m = k >> 5 >= -155, j = k & 31). t's bits are 0x4b400000 + k, so bits 2^18 +
//   191 2^23 (mod 2^32, one LEA) are those of sc = 2^(m+64) (1 + j/32): the exponent and
//   mantissa fields (m + 191 in [36, 191], j). V_j = 2^(j/32)/(1 + j/32) in [0.942, 1] is
//   tl_gelu_v32[j] = (hi, lo, Vf, 0): hi to 18 bits (hi sc is exact: 18 + 6 bits), hi + lo
//   within 2^-44 of V_j, Vf = fl(V_j). lo' = fl(Vf p + lo) (Vf's 2^-25 times |p|: 2^-31.5; the
//   rounding, |lo'| < 2^-6.5: 2^-31), ee = fl(lo' sc + hi sc), one rounding of sc (hi + lo') =
//   2^64 2^(k/32) e^(L r) (1 + d4), |d4| < 2^-28.1 with p's and r's errors: ee = 2^64 E (1 +
//   dE), E = e^-|z|, E1 = ee 2^-(m+64) in [0.989, 1.979): its half ulp is at most u E1 (E1 >= 1,
//   0.51u below), |dE| < 1.06u.
// - s: D' = 2^64 (1 + E') = dh + dl exactly (E' = ee 2^-64 <= 1, Fast2Sum), N' = 2^64 (x >= 0,
//   s = 1/(1 + E')) or ee (x < 0, s = E'/(1 + E')): N'/D' is s within |dE|/(1 + E) (x < 0:
//   1.06u) or E |dE|/(1 + E) (x >= 0: 0.53u) relative. Every factor is a normal float (ee >=
//   2^-91), so x N'/D' is the result itself, with no scaling after its rounding.
// - x N'/D': w0 = rcp.approx(dh) (1 ulp: |w0 dh - 1| <= 2^-23), nh + nl = x N' exactly (fma;
//   the factors' spacings multiply to at least 2^-138), q0 = fl(nh w0) within 2^-21.9 relative
//   of Q = x N'/D' (2^-149 more where subnormal), res = fl(q0 dl + fl(fl(q0 dh - nh) - nl)) is
//   q0 D' - x N' = D' (q0 - Q) to 2^-43.9 |x N'| (three roundings of values under 2^-21.4 |x
//   N'|), and G = q0 - res w0 = Q + (q0 - Q)(1 - D' w0) - (res's error) w0 is Q within 2^-43
//   |Q| + 2^-172 (|1 - D' w0| < 2^-22.4), rounded once: g = fl(G).
// - Bound: |G - gelu(x)| < (1.06u + 2^-43) |gelu(x)| + 2^-172 < 1.07 ulp(v) (u |gelu| < ulp(v)
//   for a normal v; 2^-170 of one ulp for a subnormal one), so |g - gelu(x)| < 1.57 ulp(v) and g
//   is within 2 ulp of v (the distance a multiple of ulp(v)/2 under 2.07 ulp(v)); subnormal
//   results within 1 ulp. tests/test_activations_emulated.py checks |g - gelu| <= 0.5 ulp(g) +
//   1.07u |gelu| on its sweep; the host emulation over every float of [-10.8, 10.8] (rcp.approx
//   exact, float64's formula for gelu) measured at most 1.49 ulp of the exact value, 1 of v.
// - Limits (one select: |x| > 10.8 gives fmaxf(x, -0)): x > 10.8 gives x (1 - s < 2^-154: x
//   rounds to itself; +inf); x < -10.8 gives -0 (|gelu| < 3.3e-46 < 2^-150, falling with x;
//   -inf). NaN propagates (nh = NaN; t's NaN bits index the table harmlessly). x = +-0 and
//   subnormal x: k = 0, E' = 1, N'/D' = 1/2 and G = x/2 + (q0 - x/2)(1 - D' w0) (x/2 itself
//   where rcp.approx is exact at 2^65); the signs of q0 - res w0's zeros keep gelu(-0) = -0.
//   ph's exactness needs |x| < 11.8, k's range |x| <= 10.8: huge or infinite x give meaningless
//   intermediates that the select discards.
// 40.5 SASS instructions an element on sm_90 (the loop included), none FP64 and no conversion.
// The table: 512 bytes, 128-aligned (4 lines).
alignas(128) __device__ const float4 tl_gelu_v32[32] = {
    {1.0f, 0.0f, 1.0f, 0.0f},
    {0.9909324645996094f, -1.8962078e-06f, 0.9909305572509766f, 0.0f},
    {0.9828453063964844f, 6.0647636e-07f, 0.9828459024429321f, 0.0f},
    {0.9756698608398438f, 1.3626361e-06f, 0.9756712317466736f, 0.0f},
    {0.9693412780761719f, -1.0712627e-06f, 0.9693402051925659f, 0.0f},
    {0.9637947082519531f, -7.687096e-07f, 0.963793933391571f, 0.0f},
    {0.9589805603027344f, -6.5734974e-07f, 0.9589799046516418f, 0.0f},
    {0.9548530578613281f, -1.8916849e-06f, 0.9548511505126953f, 0.0f},
    {0.9513664245605469f, -7.3255836e-07f, 0.9513657093048096f, 0.0f},
    {0.948486328125f, -5.8375e-07f, 0.9484857320785522f, 0.0f},
    {0.9461784362792969f, -1.0556519e-06f, 0.9461773633956909f, 0.0f},
    {0.9444084167480469f, 1.5979062e-06f, 0.9444100260734558f, 0.0f},
    {0.9431571960449219f, -1.1562987e-06f, 0.9431560635566711f, 0.0f},
    {0.9423904418945312f, 5.9907954e-08f, 0.942390501499176f, 0.0f},
    {0.9420890808105469f, 1.7344499e-06f, 0.9420908093452454f, 0.0f},
    {0.9422378540039062f, -1.3386243e-06f, 0.9422365427017212f, 0.0f},
    {0.94281005859375f, -1.0170116e-06f, 0.9428090453147888f, 0.0f},
    {0.9437904357910156f, 1.1116225e-06f, 0.9437915682792664f, 0.0f},
    {0.9451675415039062f, 1.1918974e-06f, 0.9451687335968018f, 0.0f},
    {0.9469261169433594f, 5.827231e-07f, 0.9469267129898071f, 0.0f},
    {0.9490547180175781f, -1.9023819e-06f, 0.9490528106689453f, 0.0f},
    {0.9515342712402344f, 1.3333532e-06f, 0.9515355825424194f, 0.0f},
    {0.9543647766113281f, -1.3545622e-07f, 0.9543646574020386f, 0.0f},
    {0.9575309753417969f, -5.153249e-07f, 0.9575304388999939f, 0.0f},
    {0.9610252380371094f, -7.6346146e-07f, 0.9610244631767273f, 0.0f},
    {0.9648399353027344f, -1.0310936e-06f, 0.9648389220237732f, 0.0f},
    {0.9689674377441406f, -7.285727e-07f, 0.9689667224884033f, 0.0f},
    {0.9734001159667969f, 1.4162383e-06f, 0.9734015464782715f, 0.0f},
    {0.9781379699707031f, -3.2388573e-07f, 0.9781376719474792f, 0.0f},
    {0.9831695556640625f, 3.5075445e-07f, 0.9831699132919312f, 0.0f},
    {0.988494873046875f, -1.1639387e-06f, 0.9884936809539795f, 0.0f},
    {0.9941062927246094f, -1.3407625e-06f, 0.9941049814224243f, 0.0f},
};

// &tl_gelu_v32[j] by one IMAD.WIDE.U32 (ptxas otherwise forms 16 j with two instructions and
// adds it to the 64-bit base with two more; the host emulation's builder replaces this asm)
__device__ __forceinline__ const float4* tl_gelu_v32_at(unsigned j) {
    unsigned long long off;
    asm("mul.wide.u32 %0, %1, 16;" : "=l"(off) : "r"(j));
    return reinterpret_cast<const float4*>(reinterpret_cast<const char*>(tl_gelu_v32) + off);
}

#define TL_GELU_P0H 73.670654296875f        /* P0 = 2C 32/ln2 on the grid of 2^-15 */
#define TL_GELU_P0L 8.043743e-06f           /* fl(P0 - P0H) */
#define TL_GELU_P1H 3.2941837f              /* fl(P1), P1 = 2CK 32/ln2 */
#define TL_GELU_P1L -6.451835e-08f          /* fl(P1 - P1H) */
#define TL_GELU_SHIFT 12582912.0f           /* 1.5 2^23 */
#define TL_F32_2P64 1.84467441e19f          /* 2^64 */

// ee = 2^64 e^-|z| within 1.06u (GeluF32's derivation above; for |x| <= 11.5, both functors'
// range: k >= -5860, m + 191 >= 7, sc and ee normal). Huge, infinite or NaN x give meaningless
// (or NaN) values that the callers select away or propagate.
__device__ __forceinline__ float tl_gelu_ee(float a, float ax) {
    // P~ = ph + pl (d = P0H - ph exact, eps = ph's rounding error)
    const float x2 = a * a;
    const float x2l = fmaf(a, a, -x2);
    const float ph = fmaf(TL_GELU_P1H, x2, TL_GELU_P0H);
    const float eps = fmaf(TL_GELU_P1H, x2, TL_GELU_P0H - ph);
    const float pl = fmaf(TL_GELU_P1H, x2l, eps) + fmaf(TL_GELU_P1L, x2, TL_GELU_P0L);
    // -|z|/L = k + r: t = S + k, S - t = -k exactly
    const float t = fmaf(-ax, ph, TL_GELU_SHIFT);
    const float rh = fmaf(-ax, ph, TL_GELU_SHIFT - t);
    const float r = fmaf(-ax, pl, rh);
    const float p = r * fmaf(fmaf(r, 1.6938634e-06f, 2.3459812e-04f), r, 2.166085e-02f);
    // ee = 2^64 e^-|z| = sc (hi + fl(Vf p + lo)), sc = 2^(m+64) (1 + j/32) from t's bits
    const unsigned bits = __float_as_uint(t);
    const float4 v = __ldg(tl_gelu_v32_at(bits & 31u));
    const float sc = __uint_as_float(bits * 0x40000u + 0x5f800000u);
    return fmaf(fmaf(v.z, p, v.y), sc, v.x * sc);
}

struct GeluF32 {
    __device__ float operator()(float a) const {
        const float ax = fabsf(a);
        const float ee = tl_gelu_ee(a, ax);
        // D' = 2^64 + ee = dh + dl; x N'/D' = q0 corrected by its residual q0 D' - x N'
        const float dh = TL_F32_2P64 + ee;
        const float dl = ee - (dh - TL_F32_2P64);
        const float w0 = tl_rcp_approx(dh);
        const float n = a >= 0.0f ? TL_F32_2P64 : ee;
        const float nh = a * n;
        const float nl = fmaf(a, n, -nh);
        const float q0 = nh * w0;
        const float res = fmaf(q0, dl, fmaf(q0, dh, -nh) - nl);
        const float g = fmaf(-res, w0, q0);
        return ax > 10.8f ? fmaxf(a, -0.0f) : g;          // the limits; NaN keeps g
    }
};

#define TL_GELU_2C_F 1.59576912f      /* 2 sqrt(2/pi) */
#define TL_GELU_6CK_F 0.214064449f    /* 6 sqrt(2/pi) 0.044715 */

// The VJP factor's cancelling interval I = [-1, -0.625] (see GeluBF32): f = 1 + X, X = x z'
// (1 - s(z)), has |X/f| > 3.36 only inside I (2.91 at -1, 3.35 at -0.625, falling outward to 1),
// so outside it the float32 X's few u reach f amplified at most 3.36 times. Inside I the factor
// d = s f is evaluated through its root instead: d(x) = (x - x0) q(x), x0 = x0h + x0l (+ 2^-51.3)
// the root, -0.752461422071016..., t = x - x0h exact (Sterbenz: I is within [2 x0h, x0h/2]) and
// q a degree-7 polynomial in t (Chebyshev interpolation of d(x)/(x - x0) at 8 nodes of I in
// mpmath, monomials in t, coefficients rounded to float): q in [0.335, 0.480], within 2^-24.93
// relative with the rounded coefficients, Horner's seven fma add u sum |p_j| |t|^j <= 1.30u |q|
// (p_j the partial sums). d = fma(t, q, -fl(x0l q)): the fma u, fl(x0l q)'s u |x0l| / |t - x0l|
// <= u (t = 0; 0.24u otherwise: t is a multiple of 2^-24, x0l = 0.19 of it) and the root's
// residue 0.55u (at t = 0): d within 4.4u relative, g d within 5.4u, no cancellation left.
#define TL_GELU_VJP_LO -1.0f
#define TL_GELU_VJP_HI -0.625f
#define TL_GELU_X0H -0.75246143f
#define TL_GELU_X0L 1.1339628e-08f

__device__ __forceinline__ float tl_gelu_vjp_near_root(float a) {
    const float t = a - TL_GELU_X0H;
    float q = -0.0019335833f;
    q = fmaf(q, t, 0.0052953237f);
    q = fmaf(q, t, 0.01966899f);
    q = fmaf(q, t, -0.016620737f);
    q = fmaf(q, t, -0.113944374f);
    q = fmaf(q, t, -0.015782839f);
    q = fmaf(q, t, 0.38751844f);
    q = fmaf(q, t, 0.43040007f);
    return fmaf(t, q, -(TL_GELU_X0L * q));
}

// gelu's VJP, all float32 (GeluBF32): g s f, f = 1 + X, X = x z' c, z' = 2C (1 + 3K x^2), s =
// s(z), c = 1 - s = s(-z). For |x| <= 11.5 (the limits beyond):
// - E' = ee 2^-64 = E (1 + dE), |dE| < 1.06u: tl_gelu_ee, GeluF32's derivation, which holds to
//   |x| = 11.5 (|x| (ph + pl) within 11.5 2^-37 of |z|/L: 2^-33.5 still; k >= -5860, so m + 191
//   >= 7: sc and ee >= 2^-120 normal).
// - D' = 2^64 + ee = dh + dl exactly (Fast2Sum, ee <= 2^64); 1/D' = w0 + w1 within 2^-44 relative
//   (tl_rcp_pair: w0 ~ 2^-64, w0 dl < 2^-24 and w1 ~ 2^-86, all normal).
// - big = fl(2^64 w0 + 2^64 w1) (both products exact scalings) is 1/(1 + E') (1 + 2^-44) rounded
//   once; small = fl(ee w0 + fl(ee w1)) (ee w0 exact in the fma; ee w1 is under 2^-22 of the sum,
//   so its rounding is 2^-46 relative, or under 2^-150 where it is subnormal) is E'/(1 + E')
//   (1 + 2^-43.7) rounded once. E' for E moves 1/(1 + E) by E/(1 + E) |dE| <= 0.53u and E/(1
//   + E) by |dE|/(1 + E) <= 1.06u: before their roundings big and small are within 0.53u and
//   1.06u relative (+ 2^-43.7), after them within 1.53u and 2.07u (+ 2^-149 absolute where
//   small is subnormal: s for x below about -10, c above about 10). s = big, c = small for x >=
//   0, the other way below: each within 2.07u, where the harness's rule assumes 2.2u.
// - xdu = x z' by x (2C + 6CK x^2) (three roundings, the float constants' u: 4u), f = fma(xdu,
//   c, 1) (X = xdu c exact inside: within 6.07u |X|, then one rounding), d = fl(s f), g d: |got -
//   g s f| <= |g| s (6.07u |X| + 5.07u |f|) + |g| (|f| 2^-149 + 2^-150) to first order, inside
//   the rule's |g| s (6.2u |X| + 5.2u |f|) + |g| (2 + |X|) 2^-148. Outside I = [-1, -0.625]
//   |X/f| <= 3.36, so that is within 25.5u of |g d| wherever s is normal.
// - x on (10, 11.5]: E' < 2^-126, big rounds to 1, c < 2^-125 and X < 2^-117: f = 1 and d = 1
//   exactly, as beyond (gelu' = 1 within 2^-118 there); x in [-11.5, -10]: d = s f with s
//   subnormal or 0, within the absolute term above.
// - Zero and subnormal x: ee = 2^64 exactly (k = 0, p's 2^64 p under ulp(2^64)/2), so D' = 2^65,
//   w0 + w1 = 2^-65 (1 - eps^2) and big = small = 1/2 exactly (every rcp.approx result), f = 1:
//   d = 1/2, the factor's value at 0 (signs: g 1/2 keeps g's, as the reference's).
// - Limits (one compare, |x| > 11.5): 1 for x > 11.5 (+inf included), +0 below -11.5 (the
//   factor under 2^-170; the reference rule's float64 tanh formula rounds it to 0) and -0 at
//   -inf, as engine/ops/elementwise.py's _gelu_vjp. NaN: |x| > 11.5 is false and d is NaN (ee
//   NaN). Huge x: tl_gelu_ee's meaningless values are selected away.
// In I the factor through its root (tl_gelu_vjp_near_root, above) instead; both are formed for
// every element and one selected (no branch: random data has elements of I in nearly every
// warp). 62 SASS instructions an element on sm_90 (ew_2_1_one's loop included; 79.5 with the
// float64 argument it replaced and a 64-bit loop index), none FP64 and no conversion; 32
// registers, no spills.
// s = s(z) and c = s(-z) = 1 - s, each within 2.07u (+ 2^-149 where subnormal) for |x| <= 11.5
// (the derivation above; tests/test_activations_emulated.py checks them on their own)
__device__ __forceinline__ void tl_gelu_sc(float a, float& s, float& c) {
    const float ee = tl_gelu_ee(a, fabsf(a));
    // D' = 2^64 + ee = dh + dl, 1/D' = w0 + w1; 2^64/D' = 1/(1 + E'), ee/D' = E'/(1 + E')
    const float dh = TL_F32_2P64 + ee;
    const float dl = ee - (dh - TL_F32_2P64);
    float w0, w1;
    tl_rcp_pair(dh, dl, w0, w1);
    const float big = fmaf(TL_F32_2P64, w0, TL_F32_2P64 * w1);
    const float small = fmaf(ee, w0, ee * w1);
    s = a >= 0.0f ? big : small;
    c = a >= 0.0f ? small : big;
}

struct GeluBF32 {
    __device__ float operator()(float a, float g) const {
        float s, c;
        tl_gelu_sc(a, s, c);
        const bool pos = a >= 0.0f;
        const float xdu = a * fmaf(a * a, TL_GELU_6CK_F, TL_GELU_2C_F);
        const float d = s * fmaf(xdu, c, 1.0f);
        const float dr = tl_gelu_vjp_near_root(a);
        // below -11.5 the factor is +0 (-0 at -inf only), as the reference rule's float64 tanh
        // formula gives it (1 + tanh = 1 - tanh^2 = 0 there)
        const float tail = a == -__int_as_float(0x7f800000) ? -0.0f : 0.0f;
        const float mid = (a >= TL_GELU_VJP_LO && a <= TL_GELU_VJP_HI) ? dr : d;
        return g * (fabsf(a) > 11.5f ? (pos ? 1.0f : tail) : mid);
    }
};

#endif  // TL_ACT_F32_CUH
