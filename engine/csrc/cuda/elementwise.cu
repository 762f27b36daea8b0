// Elementwise ops and activations: one forward and one backward kernel per op (docs/OPS.md).
//
// Compiled by engine/runtime/loader.py with OPTIONS = -std=c++17 --fmad=false --ftz=false
// --prec-div=true --prec-sqrt=true: no contraction of our a*b+c into FMA, subnormals kept,
// IEEE division and square root. Those flags are the capsules' numerical policy.
// No #defines expected. Scalar indexing is 32-bit unsigned with overflow-safe grid-stride loops;
// every kernel takes the flat element count n last among its array arguments.
//
// Forward (out[i] from a[i] and b[i]):
//   tl_add_fwd tl_sub_fwd tl_mul_fwd tl_max_fwd tl_min_fwd            (a, b, out, n)
//   tl_abs_fwd tl_sqrt_fwd tl_relu_fwd tl_inv_fwd tl_neg               (a, out, n)
//   tl_exp_fwd tl_log_fwd tl_sin_fwd tl_cos_fwd tl_tanh_fwd            (a, out, n)   libdevice float
//   tl_sigmoid_fwd tl_softplus_fwd tl_gelu_fwd                         (a, out, n)   float64 inside
//   tl_sigmoid_f32 tl_softplus_f32 tl_gelu_f32                         (a, out, n)   float32
//   tl_scale_fwd (a, out, n, alpha)  tl_clamp_fwd (a, out, n, lo, hi)  tl_safe_log_fwd (a, out, n, eps)
// Backward (input gradients from the inputs and the cotangent g):
//   tl_mul_bwd tl_max_bwd tl_min_bwd                                   (a, b, g, ga, gb, n)
//   tl_abs_bwd tl_relu_bwd                                             (a, g, ga, n)  exact
//   tl_log_bwd tl_sqrt_bwd tl_inv_bwd tl_exp_bwd tl_sin_bwd tl_cos_bwd (a, g, ga, n)  float64 inside
//   tl_sigmoid_bwd tl_tanh_bwd tl_softplus_bwd tl_gelu_bwd             (a, g, ga, n)  float64 inside
//   tl_gelu_bwd_f32                                                    (a, g, ga, n)  float32
//   tl_clamp_bwd (a, g, ga, n, lo, hi)  tl_safe_log_bwd (a, g, ga, n, eps)
//   add's VJP is the identity, sub's second gradient is tl_neg, scale's is tl_scale_fwd on g.
//
// "float64 inside" means: the input is widened to double, the formula is evaluated in double and
// the result is rounded once to float. Where a float evaluation would amplify rounding (sigmoid
// and softplus through exp, gelu through exp(-2u) with |2u| up to ~100), this keeps the error
// under 1 float ulp. Where the data usually is (|exp argument| <= 64) the activations use
// tl_act_fast.cuh's double exp, reciprocal and log1p (the "fast float64 path" below, within
// 2^-31 relative before the rounding, with the input's double and the result's rounding
// by integer bit operations where both are normal floats); elsewhere, libdevice's double
// functions (at most 2 double ulps each). Index math of the float4 loops is 64-bit.

#include "tl_common.cuh"
#include "tl_act_fast.cuh"
__device__ __forceinline__ bool tl_aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull;
}

// The float4 loops keep two float4 of each input in flight per thread (both loaded before
// either is stored): with the grid capped at 8 blocks per SM (launch.py), one float4 per
// iteration leaves the H200's memory pipe short of bytes. Their indices are 64-bit: i + stride
// may pass 2^32 when n is near it. Only the schedule differs from one float4 at a time: every
// element still gets f of its own inputs, so results are bit-identical.

// out[i] = f(a[i]); float4 loads and stores when every pointer is 16-byte aligned.
template <class F>
__device__ __forceinline__ void ew_1_1(const float* __restrict__ a, float* __restrict__ out,
                                       unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned done = 0;
    if (tl_aligned16(a) && tl_aligned16(out)) {
        const unsigned long long n4 = n >> 2, step = stride;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (unsigned long long i = start; i < n4; i += 2 * step) {
            const unsigned long long j = i + step;
            const bool second = j < n4;
            const float4 v = a4[i];
            const float4 w = second ? a4[j] : v;
            o4[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
            if (second) o4[j] = make_float4(f(w.x), f(w.y), f(w.z), f(w.w));
        }
        done = (n >> 2) << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) out[done + i] = f(a[done + i]);
}

// out[i] = f(x[i], y[i]).
template <class F>
__device__ __forceinline__ void ew_2_1(const float* __restrict__ x, const float* __restrict__ y,
                                       float* __restrict__ out, unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned done = 0;
    if (tl_aligned16(x) && tl_aligned16(y) && tl_aligned16(out)) {
        const unsigned long long n4 = n >> 2, step = stride;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* y4 = reinterpret_cast<const float4*>(y);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (unsigned long long i = start; i < n4; i += 2 * step) {
            const unsigned long long j = i + step;
            const bool second = j < n4;
            const float4 u = x4[i];
            const float4 v = y4[i];
            const float4 s = second ? x4[j] : u;
            const float4 t = second ? y4[j] : v;
            o4[i] = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
            if (second) o4[j] = make_float4(f(s.x, t.x), f(s.y, t.y), f(s.z, t.z), f(s.w, t.w));
        }
        done = (n >> 2) << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) {
        out[done + i] = f(x[done + i], y[done + i]);
    }
}

// The compute-heavy float32 activations (gelu forward and VJP: ~40 and ~62 SASS instructions an
// element, tl_act_f32.cuh) are issue-bound beside their loads, so their loop differs: one float4
// of each input an iteration, in 32 registers (__launch_bounds__(TL_BLOCK, 8): a full SM, where
// ew_1_1's two float4 took 40 registers (the VJP 48) and left a quarter of the SM empty). On the
// H200 at 2^26 this ran the gelu forward 4% faster than ew_1_1 with the same functor and the VJP
// 10% faster; loading the next float4 before this one's arithmetic (40 registers, or spills in
// 32) and persistent grids were no better (one interleaved run). Each element still gets f of
// its own inputs: bit-identical to ew_1_1 / ew_2_1. Their float4 index is 32-bit (n4 < 2^30;
// tl_next saturates instead of wrapping): IMAD.WIDE forms each address in one instruction: 9
// loop instructions per float4 where the 64-bit index took 11 (ew_2_1_one: 3 fewer).
template <class F>
__device__ __forceinline__ void ew_1_1_one(const float* __restrict__ a, float* __restrict__ out,
                                           unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned done = 0;
    if (tl_aligned16(a) && tl_aligned16(out)) {
        const unsigned n4 = n >> 2;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (unsigned i = start; i < n4; i = tl_next(i, stride, n4)) {
            const float4 v = a4[i];
            o4[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
        }
        done = n4 << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) out[done + i] = f(a[done + i]);
}

template <class F>
__device__ __forceinline__ void ew_2_1_one(const float* __restrict__ x,
                                           const float* __restrict__ y,
                                           float* __restrict__ out, unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned done = 0;
    if (tl_aligned16(x) && tl_aligned16(y) && tl_aligned16(out)) {
        const unsigned n4 = n >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* y4 = reinterpret_cast<const float4*>(y);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (unsigned i = start; i < n4; i = tl_next(i, stride, n4)) {
            const float4 u = x4[i], v = y4[i];
            o4[i] = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
        }
        done = n4 << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) {
        out[done + i] = f(x[done + i], y[done + i]);
    }
}

// (ga[i], gb[i]) = f(a[i], b[i], g[i]): the two gradients of a binary op in one pass; float4
// loads and stores when all five pointers are 16-byte aligned (three float4 in flight).
template <class F>
__device__ __forceinline__ void ew_3_2(const float* __restrict__ a, const float* __restrict__ b,
                                       const float* __restrict__ g, float* __restrict__ ga,
                                       float* __restrict__ gb, unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned done = 0;
    if (tl_aligned16(a) && tl_aligned16(b) && tl_aligned16(g) && tl_aligned16(ga) &&
        tl_aligned16(gb)) {
        const unsigned n4 = n >> 2;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        const float4* g4 = reinterpret_cast<const float4*>(g);
        float4* ga4 = reinterpret_cast<float4*>(ga);
        float4* gb4 = reinterpret_cast<float4*>(gb);
        for (unsigned i = start; i < n4; i = tl_next(i, stride, n4)) {
            const float4 u = a4[i], v = b4[i], w = g4[i];
            float4 p, q;
            f(u.x, v.x, w.x, p.x, q.x);
            f(u.y, v.y, w.y, p.y, q.y);
            f(u.z, v.z, w.z, p.z, q.z);
            f(u.w, v.w, w.w, p.w, q.w);
            ga4[i] = p;
            gb4[i] = q;
        }
        done = n4 << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) {
        float x, y;
        f(a[done + i], b[done + i], g[done + i], x, y);
        ga[done + i] = x;
        gb[done + i] = y;
    }
}

// ---- forward functors ----------------------------------------------------------------------

struct Add { __device__ float operator()(float a, float b) const { return a + b; } };
struct Sub { __device__ float operator()(float a, float b) const { return a - b; } };
struct Mul { __device__ float operator()(float a, float b) const { return a * b; } };
// max: a if a > b, b if b > a, a on ties; NaN if either operand is NaN.
struct Max {
    __device__ float operator()(float a, float b) const {
        if (a != a) return a;
        if (b != b) return b;
        return (b > a) ? b : a;
    }
};
struct Min {
    __device__ float operator()(float a, float b) const {
        if (a != a) return a;
        if (b != b) return b;
        return (b < a) ? b : a;
    }
};
struct Neg { __device__ float operator()(float a) const { return -a; } };
struct Abs { __device__ float operator()(float a) const { return fabsf(a); } };
struct Sqrt { __device__ float operator()(float a) const { return sqrtf(a); } };
struct Relu {
    // relu(-0) = +0, relu(NaN) = NaN.
    __device__ float operator()(float a) const { return a > 0.0f ? a : (a != a ? a : 0.0f); }
};
struct Inv { __device__ float operator()(float a) const { return 1.0f / a; } };
struct Exp { __device__ float operator()(float a) const { return expf(a); } };
struct Log { __device__ float operator()(float a) const { return logf(a); } };
struct Sin { __device__ float operator()(float a) const { return sinf(a); } };
struct Cos { __device__ float operator()(float a) const { return cosf(a); } };
struct Tanh { __device__ float operator()(float a) const { return tanhf(a); } };
struct Scale {
    float alpha;
    __device__ float operator()(float a) const { return alpha * a; }
};
struct Clamp {
    float lo, hi;
    // min(max(a, lo), hi), NaN propagating, ties keeping a (as numpy.maximum/minimum do).
    __device__ float operator()(float a) const {
        if (a != a) return a;
        const float m = (a < lo) ? lo : a;
        return (m > hi) ? hi : m;
    }
};
struct SafeLog {
    float eps;
    __device__ float operator()(float a) const { return logf((a != a || a > eps) ? a : eps); }
};

// sigmoid(x) in double without overflow: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise.
__device__ __forceinline__ double sigmoid_d(double x) {
    if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}
// sigmoid(x) (1 - sigmoid(x)) = e/(1+e)^2 with e = exp(-|x|): no cancellation at either tail.
__device__ __forceinline__ double dsigmoid_d(double x) {
    const double e = exp(-fabs(x));
    const double d = 1.0 + e;
    return e / (d * d);
}

// ---- the fast float64 path of the activations -------------------------------------------
// tl_act_fast.cuh: libdevice's double exp and IEEE double division made sigmoid, softplus and
// gelu compute-bound on the H200. For the inputs most data has (|exp argument| <= 64) the
// functors below evaluate the same formulas in double with that header's exp, reciprocal and
// log1p (under 2^-31 relative before the one rounding: under 0.5 + 2^-7 float32 ulp), and take
// today's libdevice path (exact limits, NaN, tails, subnormal results) only outside that range.

#define TL_FAST_EXP_ARG 64.0f   /* |argument of exp| of the fast path (tl_exp_fast) */
#define TL_FAST_GELU_X 8.0f     /* |x| <= 8: |2u| <= 49.3 */

#define TL_GELU_C 0.7978845608028654   /* sqrt(2/pi) */
#define TL_GELU_K 0.044715
// gelu's 2u = x (2C + 2CK x^2) and 2x u' = x (2C + 6CK x^2), C = sqrt(2/pi), K = 0.044715: each
// constant rounded to double, three roundings in all (|2u| <= 49.3 off by under 2^-45.8).
#define TL_GELU_2C 1.5957691216057308
#define TL_GELU_2CK 0.07135481627260025
#define TL_GELU_6CK 0.21406444881780073

struct Sigmoid {
    __device__ float operator()(float a) const {
        if (fabsf(a) <= TL_FAST_EXP_ARG) {   // results in [2^-93, 1]: normal floats
            double s, c;
            tl_sigmoid_pair(tl_exp_fast(-fabsf(a)), a >= 0.0f, s, c);
            return tl_d2f_normal(s);
        }
        return (float)sigmoid_d((double)a);   // tails (subnormal results), infinities, NaN
    }
};
struct Softplus {
    __device__ float operator()(float a) const {
        if (fabsf(a) <= TL_FAST_EXP_ARG) {
            // a sum of two non-negative terms: no cancellation; results in [2^-93, 65]. For a
            // subnormal positive a, tl_f2d_bits's stand-in (under 2^-126) is under 2^-70 ulp of
            // the sum's double (>= ln 2): the same double.
            const double lp = tl_log1p_01(tl_exp_fast(-fabsf(a)));
            return tl_d2f_normal(a > 0.0f ? lp + tl_f2d_bits(a) : lp);
        }
        const double x = a;
        return (float)(log1p(exp(-fabs(x))) + fmax(x, 0.0));   // NaN: the first term is NaN
    }
};
struct Gelu {
    // 0.5 a (1 + tanh(u)) = a * sigmoid(2u), u = sqrt(2/pi) (a + 0.044715 a^3). The limits at the
    // infinities (docs/OPS.md): gelu(-inf) = -0 (the formula gives -inf * 0 = NaN) and
    // gelu(+inf) = +inf.
    __device__ float operator()(float a) const {
        if (fabsf(a) <= TL_FAST_GELU_X) {
            // |a| < 2^-60: gelu(a) = (a/2)(1 + d) with |d| < 0.8|a| < 2^-60, so the float a/2
            // (exact, or a subnormal rounded once) is within 0.5 + 2^-36 ulp; signed zeros kept.
            // Otherwise |gelu(a)| >= 2^-61 (and >= 8 e^-49.3 near -8): a normal float result.
            const double x = tl_f2d_bits(a);
            const double z = x * fma(x * x, TL_GELU_2CK, TL_GELU_2C);
            double s, c;
            tl_sigmoid_pair(tl_exp_fast_d(-fabs(z)), a >= 0.0f, s, c);
            const float fast = tl_d2f_normal(x * s);
            return fabsf(a) < 0x1p-60f ? 0.5f * a : fast;
        }
        if (fabsf(a) == __int_as_float(0x7f800000)) return a < 0.0f ? -0.0f : a;
        const double x = a;
        const double u = TL_GELU_C * (x + TL_GELU_K * x * x * x);
        return (float)(x * sigmoid_d(2.0 * u));
    }
};

// ---- the float32 activations (tl_act_f32.cuh): the plain capsules' kernels -------------------
// sigmoid, softplus and gelu in float32 within 2 ulp, gelu's VJP in float32; the kernels above
// are the accurate variants'.
#include "tl_act_f32.cuh"

// ---- backward functors: (a, g) -> ga ------------------------------------------------------

struct AbsB {
    // g * sign(a): sign is 1, -1, 0, or NaN for NaN.
    __device__ float operator()(float a, float g) const {
        const float s = a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : (a == 0.0f ? 0.0f : a));
        return g * s;
    }
};
struct ReluB { __device__ float operator()(float a, float g) const { return a > 0.0f ? g : 0.0f; } };
// g / a as a float64 quotient rounded once: correctly rounded (53 >= 2 * 24 + 2 bits make the
// double rounding innocuous), as the capsule declares (f64_vjp), and whatever the float32 flags:
// under --use_fast_math a float32 `/` is __fdividef, which returns 0 for 2^126 < |a| < 2^128
// (the compile-flag matrix's fast-math column caught it).
__device__ inline float tl_quotient(float g, float a) { return (float)((double)g / (double)a); }
struct LogB { __device__ float operator()(float a, float g) const { return tl_quotient(g, a); } };
struct SqrtB {
    __device__ float operator()(float a, float g) const {
        // Positive normal a: a correctly rounded float 1/sqrt(a) (within 2^-24 relative) and one
        // Newton step y (1 + (1 - a y^2)/2) in double leave under 2^-46.5 relative; zero,
        // subnormal, infinite, negative and NaN a take the IEEE double division.
        if (a >= 1.17549435e-38f && a <= 3.40282347e38f) {
            const double x = a;
            const double y = (double)__frsqrt_rn(a);
            const double t = fma(-x * y, y, 1.0);
            return (float)((double)g * (0.5 * fma(0.5 * y, t, y)));
        }
        return (float)((double)g / (2.0 * sqrt((double)a)));
    }
};
struct InvB {
    __device__ float operator()(float a, float g) const {
        const double x = a;
        // 2^-126 <= |a| <= 2^126: 1/a is a normal float; its correctly rounded float value and
        // one Newton step in double leave 1/a within 2^-45.9 relative, its square within 2^-44.8.
        if (fabsf(a) >= 0x1p-126f && fabsf(a) <= 0x1p126f) {
            const double y0 = (double)__frcp_rn(a);
            const double y = fma(y0, fma(-x, y0, 1.0), y0);
            return (float)(-(double)g * (y * y));
        }
        return (float)(-(double)g / (x * x));
    }
};
struct ExpB {
    // g * exp(a) in double, rounded once. exp(a) overflows double for a > ~709 where the float32
    // product still may not; a zero g with a finite a is an exact zero of g's sign (0 * inf would
    // be NaN); a = +inf or NaN gives NaN, as engine/ops/elementwise.py's _exp_vjp.
    __device__ float operator()(float a, float g) const {
        if (g == 0.0f && a < __int_as_float(0x7f800000)) return g;
        if (fabsf(a) <= TL_FAST_EXP_ARG) return (float)((double)g * tl_exp_fast(a));
        return (float)((double)g * exp((double)a));
    }
};
struct SinB {
    __device__ float operator()(float a, float g) const { return (float)((double)g * cos((double)a)); }
};
struct CosB {
    __device__ float operator()(float a, float g) const { return (float)(-(double)g * sin((double)a)); }
};
struct SigmoidB {
    __device__ float operator()(float a, float g) const {
        if (fabsf(a) <= TL_FAST_EXP_ARG) {   // s (1 - s) = y * e y, whatever a's sign
            double s, c;
            tl_sigmoid_pair(tl_exp_fast(-fabsf(a)), true, s, c);
            return (float)((double)g * (s * c));
        }
        return (float)((double)g * dsigmoid_d((double)a));
    }
};
struct TanhB {
    // 1 - tanh(x)^2 = 4 e / (1 + e)^2 with e = exp(-2|x|).
    __device__ float operator()(float a, float g) const {
        if (fabsf(a) <= 0.5f * TL_FAST_EXP_ARG) {   // -2|a| is exact in float
            const double e = tl_exp_fast(-2.0f * fabsf(a));
            const double y = tl_rcp_1_2(1.0 + e);
            return (float)((double)g * (4.0 * e * y * y));
        }
        const double e = exp(-2.0 * fabs((double)a));
        const double d = 1.0 + e;
        return (float)((double)g * (4.0 * e / (d * d)));
    }
};
struct SoftplusB {
    __device__ float operator()(float a, float g) const {
        if (fabsf(a) <= TL_FAST_EXP_ARG) {
            double s, c;
            tl_sigmoid_pair(tl_exp_fast(-fabsf(a)), a >= 0.0f, s, c);
            return (float)((double)g * s);
        }
        return (float)((double)g * sigmoid_d((double)a));
    }
};
struct GeluB {
    // d/dx [x s(2u)] = s(2u) + x * 2 s(2u)(1 - s(2u)) * du/dx; the factor's limits are -0 at -inf
    // and 1 at +inf (the formula gives NaN there), as engine/ops/elementwise.py's _gelu_vjp.
    __device__ float operator()(float a, float g) const {
        if (fabsf(a) == __int_as_float(0x7f800000)) {
            return (float)((double)g * (a < 0.0f ? -0.0 : 1.0));
        }
        if (fabsf(a) <= TL_FAST_GELU_X) {
            // d = s (1 + 2 x u' (1 - s)) = s f. A zero or subnormal a (tl_f2d_bits's stand-in
            // under 2^-126) moves d = 1/2 + O(a) by under 2^-125 relative. f cancels near
            // x = -0.7518 (where gelu' = 0): its term X = 2 x u' (1 - s) carries under 2^-39.2
            // relative error, so where |f| >= 2^-8 f is within (1 + 1/|f|) 2^-39.2 <= 2^-31.1
            // relative, d within 2^-31; the rare inputs with a smaller f take the libdevice path.
            const double x = tl_f2d_bits(a);
            const double x2 = x * x;
            const double z = x * fma(x2, TL_GELU_2CK, TL_GELU_2C);
            const double xdu = x * fma(x2, TL_GELU_6CK, TL_GELU_2C);
            double s, c;
            tl_sigmoid_pair(tl_exp_fast_d(-fabs(z)), a >= 0.0f, s, c);
            const double f = fma(xdu, c, 1.0);
            if (fabs(f) >= 0x1p-8) return (float)((double)g * (s * f));
        }
        const double x = a;
        const double u = TL_GELU_C * (x + TL_GELU_K * x * x * x);
        const double du = TL_GELU_C * (1.0 + 3.0 * TL_GELU_K * x * x);
        const double d = sigmoid_d(2.0 * u) + x * 2.0 * dsigmoid_d(2.0 * u) * du;
        return (float)((double)g * d);
    }
};
struct ClampB {
    float lo, hi;
    __device__ float operator()(float a, float g) const { return (lo < a && a < hi) ? g : 0.0f; }
};
struct SafeLogB {
    float eps;
    __device__ float operator()(float a, float g) const {
        return a > eps ? tl_quotient(g, a) : 0.0f;
    }
};

// ---- backward functors for binary ops: (a, b, g) -> (ga, gb) ------------------------------

struct MulB {
    __device__ void operator()(float a, float b, float g, float& ga, float& gb) const {
        ga = g * b;
        gb = g * a;
    }
};
// Selection gradient: g to the winner, g/2 to each on a tie, g to the NaN operand(s).
template <bool IS_MAX>
struct SelectB {
    __device__ void operator()(float a, float b, float g, float& ga, float& gb) const {
        const bool nan_a = (a != a), nan_b = (b != b);
        if (nan_a || nan_b) {
            ga = nan_a ? g : 0.0f;
            gb = nan_b ? g : 0.0f;
            return;
        }
        if (a == b) {
            ga = g * 0.5f;
            gb = ga;
            return;
        }
        const bool a_wins = IS_MAX ? (a > b) : (a < b);
        ga = a_wins ? g : 0.0f;
        gb = a_wins ? 0.0f : g;
    }
};

// ---- entry points -----------------------------------------------------------------------

#define TL_BINARY_FWD(name, F)                                                                   \
    extern "C" __global__ void name(const float* __restrict__ a, const float* __restrict__ b,   \
                                    float* __restrict__ out, unsigned n) {                      \
        ew_2_1(a, b, out, n, F());                                                               \
    }
#define TL_UNARY_FWD(name, F)                                                                    \
    extern "C" __global__ void name(const float* __restrict__ a, float* __restrict__ out,       \
                                    unsigned n) {                                                \
        ew_1_1(a, out, n, F());                                                                  \
    }
#define TL_UNARY_BWD(name, F)                                                                    \
    extern "C" __global__ void name(const float* __restrict__ a, const float* __restrict__ g,   \
                                    float* __restrict__ ga, unsigned n) {                        \
        ew_2_1(a, g, ga, n, F());                                                                \
    }
#define TL_BINARY_BWD(name, F)                                                                   \
    extern "C" __global__ void name(const float* __restrict__ a, const float* __restrict__ b,   \
                                    const float* __restrict__ g, float* __restrict__ ga,        \
                                    float* __restrict__ gb, unsigned n) {                        \
        ew_3_2(a, b, g, ga, gb, n, F());                                                         \
    }

TL_BINARY_FWD(tl_add_fwd, Add)
TL_BINARY_FWD(tl_sub_fwd, Sub)
TL_BINARY_FWD(tl_mul_fwd, Mul)
TL_BINARY_FWD(tl_max_fwd, Max)
TL_BINARY_FWD(tl_min_fwd, Min)

TL_UNARY_FWD(tl_neg, Neg)
TL_UNARY_FWD(tl_abs_fwd, Abs)
TL_UNARY_FWD(tl_sqrt_fwd, Sqrt)
TL_UNARY_FWD(tl_relu_fwd, Relu)
TL_UNARY_FWD(tl_inv_fwd, Inv)
TL_UNARY_FWD(tl_exp_fwd, Exp)
TL_UNARY_FWD(tl_log_fwd, Log)
TL_UNARY_FWD(tl_sin_fwd, Sin)
TL_UNARY_FWD(tl_cos_fwd, Cos)
TL_UNARY_FWD(tl_tanh_fwd, Tanh)
TL_UNARY_FWD(tl_sigmoid_fwd, Sigmoid)
TL_UNARY_FWD(tl_softplus_fwd, Softplus)
TL_UNARY_FWD(tl_gelu_fwd, Gelu)
TL_UNARY_FWD(tl_sigmoid_f32, SigmoidF32)
TL_UNARY_FWD(tl_softplus_f32, SoftplusF32)
// the float32 gelu kernels: ew_*_one (above), 8 blocks an SM resident (32 registers)
#define TL_UNARY_FWD_ONE(name, F)                                                                \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, 8) name(                              \
            const float* __restrict__ a, float* __restrict__ out, unsigned n) {                  \
        ew_1_1_one(a, out, n, F());                                                              \
    }
#define TL_UNARY_BWD_ONE(name, F)                                                                \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, 8) name(                              \
            const float* __restrict__ a, const float* __restrict__ g, float* __restrict__ ga,    \
            unsigned n) {                                                                        \
        ew_2_1_one(a, g, ga, n, F());                                                            \
    }
TL_UNARY_FWD_ONE(tl_gelu_f32, GeluF32)

extern "C" __global__ void tl_scale_fwd(const float* __restrict__ a, float* __restrict__ out,
                                        unsigned n, float alpha) {
    ew_1_1(a, out, n, Scale{alpha});
}
extern "C" __global__ void tl_clamp_fwd(const float* __restrict__ a, float* __restrict__ out,
                                        unsigned n, float lo, float hi) {
    ew_1_1(a, out, n, Clamp{lo, hi});
}
extern "C" __global__ void tl_safe_log_fwd(const float* __restrict__ a, float* __restrict__ out,
                                           unsigned n, float eps) {
    ew_1_1(a, out, n, SafeLog{eps});
}

TL_BINARY_BWD(tl_mul_bwd, MulB)
TL_BINARY_BWD(tl_max_bwd, SelectB<true>)
TL_BINARY_BWD(tl_min_bwd, SelectB<false>)

TL_UNARY_BWD(tl_abs_bwd, AbsB)
TL_UNARY_BWD(tl_relu_bwd, ReluB)
TL_UNARY_BWD(tl_log_bwd, LogB)
TL_UNARY_BWD(tl_sqrt_bwd, SqrtB)
TL_UNARY_BWD(tl_inv_bwd, InvB)
TL_UNARY_BWD(tl_exp_bwd, ExpB)
TL_UNARY_BWD(tl_sin_bwd, SinB)
TL_UNARY_BWD(tl_cos_bwd, CosB)
TL_UNARY_BWD(tl_sigmoid_bwd, SigmoidB)
TL_UNARY_BWD(tl_tanh_bwd, TanhB)
TL_UNARY_BWD(tl_softplus_bwd, SoftplusB)
TL_UNARY_BWD(tl_gelu_bwd, GeluB)
TL_UNARY_BWD_ONE(tl_gelu_bwd_f32, GeluBF32)

extern "C" __global__ void tl_clamp_bwd(const float* __restrict__ a, const float* __restrict__ g,
                                        float* __restrict__ ga, unsigned n, float lo, float hi) {
    ew_2_1(a, g, ga, n, ClampB{lo, hi});
}
extern "C" __global__ void tl_safe_log_bwd(const float* __restrict__ a,
                                           const float* __restrict__ g, float* __restrict__ ga,
                                           unsigned n, float eps) {
    ew_2_1(a, g, ga, n, SafeLogB{eps});
}
