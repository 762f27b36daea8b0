// bias_gelu (RuntimeEntry, the fused add + gelu of section 5.3.7), forward and VJP: x [rows][d]
// row-major (any leading axes flattened), b [d]. s = x + b as one float addition (the
// composition's rounded sum), then gelu in double and one rounding to float.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false keeps x + b one rounding; every
// other value is a double (libdevice exp and tanh) rounded once to float. No #defines expected.
// 32-bit unsigned indexing of elements (the wrapper checks counts fit UInt32).
//
// gelu(s) = s / (1 + exp(-2u)), u = C (s + K s^3), C = sqrt(2/pi), K = 0.044715 (the gelu op's
// formula, docs/OPS.md); gelu(-inf) = -0 and gelu(+inf) = +inf (the limits). gelu'(s) =
// 0.5 (1 + t) + 0.5 s (1 - t^2) C (1 + 3 K s^2), t = tanh(u) (engine/ops/elementwise.py's
// gelu_slope), -0 at -inf and 1 at +inf.
//   tl_bias_gelu_fwd(x, b, y, n, d)             y[i] = f32(gelu(x[i] + b[i % d]))
//   tl_bias_gelu_bwd(x, b, g, gx, part, rows, d, chunk)   block (c, r): columns
//       c * TL_BLOCK + threadIdx.x, rows [r chunk, (r + 1) chunk): gx = f32(g gelu'(s)) and
//       part[r][j] = the double sum of g gelu'(s) over those rows, in row order
//   tl_bias_gelu_db(part, db, chunks, d)        db[j] = f32(sum_r part[r][j]), r in order
// Both sums run in a fixed order (rows within a chunk, then chunks): bitwise repeatable.

#define TL_BLOCK 256
#include "tl_common.cuh"

#define TL_GELU_C 0.7978845608028654    // sqrt(2/pi)
#define TL_GELU_K 0.044715

__device__ __forceinline__ double tl_gelu64(double a) {
    if (a == -__longlong_as_double(0x7ff0000000000000ll)) return -0.0;   // -inf (no INFINITY)
    const double u = TL_GELU_C * (a + TL_GELU_K * a * a * a);
    return a / (1.0 + exp(-2.0 * u));
}

__device__ __forceinline__ double tl_gelu_slope64(double a) {
    const double inf = __longlong_as_double(0x7ff0000000000000ll);
    if (a == -inf) return -0.0;
    if (a == inf) return 1.0;
    const double t = tanh(TL_GELU_C * (a + TL_GELU_K * a * a * a));
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * TL_GELU_C * (1.0 + 3.0 * TL_GELU_K * a * a);
}

extern "C" __global__ void tl_bias_gelu_fwd(const float* __restrict__ x,
                                            const float* __restrict__ b, float* __restrict__ y,
                                            unsigned n, unsigned d) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i = tl_next(i, stride, n)) {
        const float s = x[i] + b[i % d];
        y[i] = (float)tl_gelu64((double)s);
    }
}

extern "C" __global__ void tl_bias_gelu_bwd(const float* __restrict__ x,
                                            const float* __restrict__ b,
                                            const float* __restrict__ g, float* __restrict__ gx,
                                            double* __restrict__ part, unsigned rows, unsigned d,
                                            unsigned chunk) {
    const unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const unsigned first = blockIdx.y * chunk;
    const unsigned last = (rows - first > chunk) ? first + chunk : rows;
    const float bj = b[j];
    double acc = 0.0;
    for (unsigned r = first; r < last; ++r) {
        const unsigned i = r * d + j;
        const float s = x[i] + bj;
        const double v = (double)g[i] * tl_gelu_slope64((double)s);
        gx[i] = (float)v;
        acc += v;
    }
    part[(unsigned long long)blockIdx.y * d + j] = acc;
}

extern "C" __global__ void tl_bias_gelu_db(const double* __restrict__ part, float* __restrict__ db,
                                           unsigned chunks, unsigned d) {
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j = tl_next(j, stride, d)) {
        double acc = 0.0;
        for (unsigned r = 0; r < chunks; ++r) acc += part[(unsigned long long)r * d + j];
        db[j] = (float)acc;
    }
}
