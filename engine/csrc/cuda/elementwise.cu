// Elementwise ops and activations: one forward and one backward kernel per op (docs/OPS.md).
//
// Compiled by engine/runtime/loader.py with OPTIONS = -std=c++17 --fmad=false --ftz=false
// --prec-div=true --prec-sqrt=true: no contraction of our a*b+c into FMA, subnormals kept,
// IEEE division and square root. Those flags are the capsules' numerical policy.
// No #defines expected. Indexing is 32-bit unsigned with overflow-safe grid-stride loops;
// every kernel takes the flat element count n last among its array arguments.
//
// Forward (out[i] from a[i] and b[i]):
//   tl_add_fwd tl_sub_fwd tl_mul_fwd tl_max_fwd tl_min_fwd            (a, b, out, n)
//   tl_abs_fwd tl_sqrt_fwd tl_relu_fwd tl_inv_fwd tl_neg               (a, out, n)
//   tl_exp_fwd tl_log_fwd tl_sin_fwd tl_cos_fwd tl_tanh_fwd            (a, out, n)   libdevice float
//   tl_sigmoid_fwd tl_softplus_fwd tl_gelu_fwd                         (a, out, n)   float64 inside
//   tl_scale_fwd (a, out, n, alpha)  tl_clamp_fwd (a, out, n, lo, hi)  tl_safe_log_fwd (a, out, n, eps)
// Backward (input gradients from the inputs and the cotangent g):
//   tl_mul_bwd tl_max_bwd tl_min_bwd                                   (a, b, g, ga, gb, n)
//   tl_abs_bwd tl_relu_bwd tl_log_bwd                                  (a, g, ga, n)  exact / IEEE
//   tl_sqrt_bwd tl_inv_bwd tl_exp_bwd tl_sin_bwd tl_cos_bwd            (a, g, ga, n)  float64 inside
//   tl_sigmoid_bwd tl_tanh_bwd tl_softplus_bwd tl_gelu_bwd             (a, g, ga, n)  float64 inside
//   tl_clamp_bwd (a, g, ga, n, lo, hi)  tl_safe_log_bwd (a, g, ga, n, eps)
//   add's VJP is the identity, sub's second gradient is tl_neg, scale's is tl_scale_fwd on g.
//
// "float64 inside" means: the input is widened to double, the formula is evaluated in double with
// libdevice's double functions (at most 2 double ulps each) and the result is rounded once to
// float. Where a float evaluation would amplify rounding (sigmoid and softplus through exp, gelu
// through exp(-2u) with |2u| up to ~100), this keeps the error under 1 float ulp.

#include "tl_common.cuh"
__device__ __forceinline__ bool tl_aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull;
}

// out[i] = f(a[i]); float4 loads and stores when every pointer is 16-byte aligned.
template <class F>
__device__ __forceinline__ void ew_1_1(const float* __restrict__ a, float* __restrict__ out,
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

// out[i] = f(x[i], y[i]).
template <class F>
__device__ __forceinline__ void ew_2_1(const float* __restrict__ x, const float* __restrict__ y,
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
            const float4 u = x4[i];
            const float4 v = y4[i];
            o4[i] = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
        }
        done = n4 << 2;
    }
    const unsigned rest = n - done;
    for (unsigned i = start; i < rest; i = tl_next(i, stride, rest)) {
        out[done + i] = f(x[done + i], y[done + i]);
    }
}

// (ga[i], gb[i]) = f(a[i], b[i], g[i]): the two gradients of a binary op in one pass.
template <class F>
__device__ __forceinline__ void ew_3_2(const float* __restrict__ a, const float* __restrict__ b,
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

#define TL_GELU_C 0.7978845608028654   /* sqrt(2/pi) */
#define TL_GELU_K 0.044715

struct Sigmoid {
    __device__ float operator()(float a) const { return (float)sigmoid_d((double)a); }
};
struct Softplus {
    __device__ float operator()(float a) const {
        const double x = a;
        return (float)(log1p(exp(-fabs(x))) + fmax(x, 0.0));   // NaN: the first term is NaN
    }
};
struct Gelu {
    // 0.5 a (1 + tanh(u)) = a * sigmoid(2u), u = sqrt(2/pi) (a + 0.044715 a^3). The limits at the
    // infinities (docs/OPS.md): gelu(-inf) = -0 (the formula gives -inf * 0 = NaN) and
    // gelu(+inf) = +inf.
    __device__ float operator()(float a) const {
        if (fabsf(a) == __int_as_float(0x7f800000)) return a < 0.0f ? -0.0f : a;
        const double x = a;
        const double u = TL_GELU_C * (x + TL_GELU_K * x * x * x);
        return (float)(x * sigmoid_d(2.0 * u));
    }
};

// ---- backward functors: (a, g) -> ga ------------------------------------------------------

struct AbsB {
    // g * sign(a): sign is 1, -1, 0, or NaN for NaN.
    __device__ float operator()(float a, float g) const {
        const float s = a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : (a == 0.0f ? 0.0f : a));
        return g * s;
    }
};
struct ReluB { __device__ float operator()(float a, float g) const { return a > 0.0f ? g : 0.0f; } };
struct LogB { __device__ float operator()(float a, float g) const { return g / a; } };
struct SqrtB {
    __device__ float operator()(float a, float g) const {
        return (float)((double)g / (2.0 * sqrt((double)a)));
    }
};
struct InvB {
    __device__ float operator()(float a, float g) const {
        const double x = a;
        return (float)(-(double)g / (x * x));
    }
};
struct ExpB {
    // g * exp(a) in double, rounded once. exp(a) overflows double for a > ~709 where the float32
    // product still may not; a zero g with a finite a is an exact zero of g's sign (0 * inf would
    // be NaN); a = +inf or NaN gives NaN, as engine/ops/elementwise.py's _exp_vjp.
    __device__ float operator()(float a, float g) const {
        if (g == 0.0f && a < __int_as_float(0x7f800000)) return g;
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
    __device__ float operator()(float a, float g) const { return (float)((double)g * dsigmoid_d((double)a)); }
};
struct TanhB {
    // 1 - tanh(x)^2 = 4 e / (1 + e)^2 with e = exp(-2|x|).
    __device__ float operator()(float a, float g) const {
        const double e = exp(-2.0 * fabs((double)a));
        const double d = 1.0 + e;
        return (float)((double)g * (4.0 * e / (d * d)));
    }
};
struct SoftplusB {
    __device__ float operator()(float a, float g) const { return (float)((double)g * sigmoid_d((double)a)); }
};
struct GeluB {
    // d/dx [x s(2u)] = s(2u) + x * 2 s(2u)(1 - s(2u)) * du/dx; the factor's limits are -0 at -inf
    // and 1 at +inf (the formula gives NaN there), as engine/ops/elementwise.py's _gelu_vjp.
    __device__ float operator()(float a, float g) const {
        if (fabsf(a) == __int_as_float(0x7f800000)) {
            return (float)((double)g * (a < 0.0f ? -0.0 : 1.0));
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
    __device__ float operator()(float a, float g) const { return a > eps ? g / a : 0.0f; }
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

extern "C" __global__ void tl_clamp_bwd(const float* __restrict__ a, const float* __restrict__ g,
                                        float* __restrict__ ga, unsigned n, float lo, float hi) {
    ew_2_1(a, g, ga, n, ClampB{lo, hi});
}
extern "C" __global__ void tl_safe_log_bwd(const float* __restrict__ a,
                                           const float* __restrict__ g, float* __restrict__ ga,
                                           unsigned n, float eps) {
    ew_2_1(a, g, ga, n, SafeLogB{eps});
}
