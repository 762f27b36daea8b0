// The tape's local VJP rules (engine/ops/*.py) evaluated on CUDA arrays: each kernel computes
// EXACTLY the NumPy formula of its rule, operation for operation and in the same precision, so
// the CUDA tape and the CPU tape agree bit for bit (up to libdevice vs libm in the float64
// transcendentals: exp, sin, cos, tanh, pow).
//
// Why not CuPy: CuPy compiles its own ufuncs with -ftz=true, which flushes subnormal operands and
// results of float32 arithmetic, comparisons and float32 <-> float64 conversions (relu's mask
// `a > 0` is false for a positive subnormal a). These kernels are compiled by
// engine/runtime/loader.py with OPTIONS = -std=c++17 --fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true: no contraction (NumPy rounds every product), subnormals kept, IEEE division.
// No #defines expected. 32-bit unsigned flat indexing, overflow-safe grid-stride loops; the flat
// element count n follows the array arguments. zeros are +0 (numpy.zeros_like).
//
// Rules of one array and the cotangent g (x is the input a, or the forward output y where noted):
//   tl_tape_neg(g, out, n)                 -g (sign bit flipped, as NumPy)  sub, and mse's -d
//   tl_tape_scale(g, out, n, alpha)        g * alpha                        scale
//   tl_tape_div_scalar(g, out, n, d)       g / d                            reduce_mean, d = f32(n)
//   tl_tape_abs(x, g, out, n)              g * sign(a)
//   tl_tape_sqrt(x = y, g, out, n)         g / (2 * y)
//   tl_tape_relu(x, g, out, n)             g where a > 0, else +0
//   tl_tape_sigmoid(x = y, g, out, n)      g * y * (1 - y)
//   tl_tape_tanh(x = y, g, out, n)         g * (1 - y * y)
//   tl_tape_log(x, g, out, n)              g / a
//   tl_tape_inv(x, g, out, n)              -(g / (a * a)) in float64
//   tl_tape_exp(x, g, out, n)              g * exp(a) in float64 (g where g == 0 and a < inf)
//   tl_tape_sin(x, g, out, n)              g * cos(a) in float64
//   tl_tape_cos(x, g, out, n)              -g * sin(a) in float64
//   tl_tape_softplus(x, g, out, n)         g / (1 + exp(-a)) in float64
//   tl_tape_gelu(x, g, out, n)             g * d/da gelu(a) in float64, tanh form (see Gelu)
//   tl_tape_clamp(x, g, out, n, lo, hi)    g where lo < a < hi, else +0
//   tl_tape_safe_log(x, g, out, n, eps)    g / a where a > eps, else +0
// Rules of two arrays:
//   tl_tape_mul(a, b, g, ga, gb, n)        (g * b, g * a)
//   tl_tape_max(a, b, g, ga, gb, n)        g to the larger, g * 0.5 to each on a tie, g to NaNs
//   tl_tape_min(a, b, g, ga, gb, n)        mirror of max
//   tl_tape_mse(p, t, g, dp, dt, n, count) d = (p - t) * (2 g / count) in float64, (d, -d);
//                                          g points to the rank-0 cotangent, count = max(n, 1)

#include "tl_common.cuh"

__device__ __forceinline__ float tl_flip_sign(float x) {
    return __int_as_float(__float_as_int(x) ^ 0x80000000);
}

#define TL_TAPE_INF __longlong_as_double(0x7ff0000000000000LL)

// numpy.sign: 1, -1, +0 for either zero, the NaN itself for NaN.
__device__ __forceinline__ float tl_np_sign(float a) {
    return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : (a == 0.0f ? 0.0f : a));
}

// out[i] = f(g[i]).
template <class F>
__device__ __forceinline__ void tape_g(const float* __restrict__ g, float* __restrict__ out,
                                       unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = f(g[i]);
    }
}

// out[i] = f(x[i], g[i]).
template <class F>
__device__ __forceinline__ void tape_xg(const float* __restrict__ x, const float* __restrict__ g,
                                        float* __restrict__ out, unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        out[i] = f(x[i], g[i]);
    }
}

// (ga[i], gb[i]) = f(a[i], b[i], g[i]).
template <class F>
__device__ __forceinline__ void tape_abg(const float* __restrict__ a, const float* __restrict__ b,
                                         const float* __restrict__ g, float* __restrict__ ga,
                                         float* __restrict__ gb, unsigned n, F f) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        float x, y;
        f(a[i], b[i], g[i], x, y);
        ga[i] = x;
        gb[i] = y;
    }
}

// ---- rules of g alone ------------------------------------------------------------------------

struct TapeNeg { __device__ float operator()(float g) const { return tl_flip_sign(g); } };
struct TapeScale {
    float alpha;
    __device__ float operator()(float g) const { return g * alpha; }
};
struct TapeDiv {
    float d;
    __device__ float operator()(float g) const { return g / d; }
};

// ---- rules of (x, g): x is the input a, or the output y for sqrt, sigmoid, tanh --------------

struct TapeAbs {
    __device__ float operator()(float a, float g) const { return g * tl_np_sign(a); }
};
struct TapeSqrt {   // g / (f32(2) * out)
    __device__ float operator()(float y, float g) const { return g / (2.0f * y); }
};
struct TapeRelu {   // where(a > 0, g, 0): the input itself is compared, subnormals included
    __device__ float operator()(float a, float g) const { return a > 0.0f ? g : 0.0f; }
};
struct TapeSigmoid {   // g * out * (1 - out), left to right
    __device__ float operator()(float y, float g) const { return (g * y) * (1.0f - y); }
};
struct TapeTanh {   // g * (1 - out * out)
    __device__ float operator()(float y, float g) const { return g * (1.0f - y * y); }
};
struct TapeLog {   // g / a
    __device__ float operator()(float a, float g) const { return g / a; }
};
struct TapeInv {   // (-(g64 / (a64 * a64))).astype(float32)
    __device__ float operator()(float a, float g) const {
        const double x = a;
        return (float)(-((double)g / (x * x)));
    }
};
struct TapeExp {   // where((g64 == 0) & (a64 < inf), g64, g64 * exp(a64)).astype(float32)
    __device__ float operator()(float a, float g) const {
        const double g64 = g, a64 = a;
        return (float)((g64 == 0.0 && a64 < TL_TAPE_INF) ? g64 : g64 * exp(a64));
    }
};
struct TapeSin {   // (g64 * cos(a64)).astype(float32)
    __device__ float operator()(float a, float g) const {
        return (float)((double)g * cos((double)a));
    }
};
struct TapeCos {   // (-g64 * sin(a64)).astype(float32)
    __device__ float operator()(float a, float g) const {
        return (float)((-(double)g) * sin((double)a));
    }
};
struct TapeSoftplus {   // s = 1.0 / (1.0 + exp(-a64)); (g64 * s).astype(float32)
    __device__ float operator()(float a, float g) const {
        const double s = 1.0 / (1.0 + exp(-(double)a));
        return (float)((double)g * s);
    }
};

// engine/ops/elementwise.py's _gelu_vjp, in its order of operations (Python evaluates a chain of
// products left to right; 3 * 0.044715 is one constant, 0.134145 to the double):
//   u = C * (x + 0.044715 * x ** 3)          x ** 3 is pow(x, 3.0) in NumPy
//   t = tanh(u)
//   d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C * (1 + 3 * 0.044715 * x * x)
//   d = -0.0 at x = -inf, 1.0 at x = +inf;   result (g64 * d).astype(float32)
#define TL_TAPE_GELU_C 0.7978845608028654   /* math.sqrt(2.0 / math.pi), repr */
#define TL_TAPE_GELU_K 0.044715
#define TL_TAPE_GELU_3K 0.134145            /* 3 * 0.044715 in double, repr */
struct TapeGelu {
    __device__ float operator()(float a, float g) const {
        const double x = a;
        const double u = TL_TAPE_GELU_C * (x + TL_TAPE_GELU_K * pow(x, 3.0));
        const double t = tanh(u);
        double d = 0.5 * (1.0 + t)
                   + ((((0.5 * x) * (1.0 - t * t)) * TL_TAPE_GELU_C)
                      * (1.0 + (TL_TAPE_GELU_3K * x) * x));
        if (x == -TL_TAPE_INF) d = -0.0;
        else if (x == TL_TAPE_INF) d = 1.0;
        return (float)((double)g * d);
    }
};
struct TapeClamp {   // where((a > f32(lo)) & (a < f32(hi)), g, 0)
    float lo, hi;
    __device__ float operator()(float a, float g) const { return (a > lo && a < hi) ? g : 0.0f; }
};
struct TapeSafeLog {   // where(a > f32(eps), g / a, 0)
    float eps;
    __device__ float operator()(float a, float g) const { return a > eps ? g / a : 0.0f; }
};

// ---- rules of (a, b, g) ---------------------------------------------------------------------

struct TapeMul {
    __device__ void operator()(float a, float b, float g, float& ga, float& gb) const {
        ga = g * b;
        gb = g * a;
    }
};
// _select_vjp: NaN operands first (g to each NaN, +0 to the other), then ties (g * 0.5 to each),
// then the winner (a > b for max, a < b for min) takes g and the other +0.
template <bool IS_MAX>
struct TapeSelect {
    __device__ void operator()(float a, float b, float g, float& ga, float& gb) const {
        const bool nan_a = (a != a), nan_b = (b != b);
        if (nan_a || nan_b) {
            ga = nan_a ? g : 0.0f;
            gb = nan_b ? g : 0.0f;
        } else if (a == b) {
            ga = g * 0.5f;
            gb = ga;
        } else {
            const bool a_wins = IS_MAX ? (a > b) : (a < b);
            ga = a_wins ? g : 0.0f;
            gb = a_wins ? 0.0f : g;
        }
    }
};

// ---- entry points ----------------------------------------------------------------------------

#define TL_TAPE_XG(name, F)                                                                     \
    extern "C" __global__ void name(const float* __restrict__ x, const float* __restrict__ g,  \
                                    float* __restrict__ out, unsigned n) {                     \
        tape_xg(x, g, out, n, F());                                                             \
    }
#define TL_TAPE_ABG(name, F)                                                                    \
    extern "C" __global__ void name(const float* __restrict__ a, const float* __restrict__ b,  \
                                    const float* __restrict__ g, float* __restrict__ ga,       \
                                    float* __restrict__ gb, unsigned n) {                       \
        tape_abg(a, b, g, ga, gb, n, F());                                                      \
    }

extern "C" __global__ void tl_tape_neg(const float* __restrict__ g, float* __restrict__ out,
                                       unsigned n) {
    tape_g(g, out, n, TapeNeg());
}
extern "C" __global__ void tl_tape_scale(const float* __restrict__ g, float* __restrict__ out,
                                         unsigned n, float alpha) {
    tape_g(g, out, n, TapeScale{alpha});
}
extern "C" __global__ void tl_tape_div_scalar(const float* __restrict__ g,
                                              float* __restrict__ out, unsigned n, float d) {
    tape_g(g, out, n, TapeDiv{d});
}

TL_TAPE_XG(tl_tape_abs, TapeAbs)
TL_TAPE_XG(tl_tape_sqrt, TapeSqrt)
TL_TAPE_XG(tl_tape_relu, TapeRelu)
TL_TAPE_XG(tl_tape_sigmoid, TapeSigmoid)
TL_TAPE_XG(tl_tape_tanh, TapeTanh)
TL_TAPE_XG(tl_tape_log, TapeLog)
TL_TAPE_XG(tl_tape_inv, TapeInv)
TL_TAPE_XG(tl_tape_exp, TapeExp)
TL_TAPE_XG(tl_tape_sin, TapeSin)
TL_TAPE_XG(tl_tape_cos, TapeCos)
TL_TAPE_XG(tl_tape_softplus, TapeSoftplus)
TL_TAPE_XG(tl_tape_gelu, TapeGelu)

extern "C" __global__ void tl_tape_clamp(const float* __restrict__ x, const float* __restrict__ g,
                                         float* __restrict__ out, unsigned n, float lo,
                                         float hi) {
    tape_xg(x, g, out, n, TapeClamp{lo, hi});
}
extern "C" __global__ void tl_tape_safe_log(const float* __restrict__ x,
                                            const float* __restrict__ g,
                                            float* __restrict__ out, unsigned n, float eps) {
    tape_xg(x, g, out, n, TapeSafeLog{eps});
}

TL_TAPE_ABG(tl_tape_mul, TapeMul)
TL_TAPE_ABG(tl_tape_max, TapeSelect<true>)
TL_TAPE_ABG(tl_tape_min, TapeSelect<false>)

// d64 = (p64 - t64) * (2.0 * g64 / count); d = f32(d64); (d, -d).
extern "C" __global__ void tl_tape_mse(const float* __restrict__ p, const float* __restrict__ t,
                                       const float* __restrict__ g, float* __restrict__ dp,
                                       float* __restrict__ dt, unsigned n, double count) {
    const double c = (2.0 * (double)g[0]) / count;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        const float d = (float)(((double)p[i] - (double)t[i]) * c);
        dp[i] = d;
        dt[i] = tl_flip_sign(d);
    }
}
