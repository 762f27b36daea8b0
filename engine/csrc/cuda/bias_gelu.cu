// bias_gelu (RuntimeEntry, the fused add + gelu of section 5.3.7), forward and VJP: x [rows][d]
// row-major (any leading axes flattened), b [d]. s = x + b as one float addition (the
// composition's rounded sum), then gelu(s). Two capsules: the plain native_cuda.bias_gelu runs
// the float32 kernels (tl_act_f32.cuh's GeluF32 and GeluBF32, as native_cuda.gelu), the accurate
// variant native_cuda.bias_gelu.accurate today's float64 ones.
//
// Compiled with OPTIONS (engine/runtime/loader.py): --fmad=false keeps x + b one rounding. No
// #defines expected. 32-bit unsigned indexing of elements (the wrapper checks counts fit UInt32).
//
// gelu(s) = s / (1 + exp(-2u)), u = C (s + K s^3), C = sqrt(2/pi), K = 0.044715 (the gelu op's
// formula, docs/OPS.md); gelu(-inf) = -0 and gelu(+inf) = +inf (the limits). gelu'(s) =
// 0.5 (1 + t) + 0.5 s (1 - t^2) C (1 + 3 K s^2), t = tanh(u) (engine/ops/elementwise.py's
// gelu_slope), -0 at -inf and 1 at +inf.
//
// Accurate variant (every value a double, libdevice exp and tanh, rounded once to float):
//   tl_bias_gelu_fwd(x, b, y, n, d)             y[i] = f32(gelu(x[i] + b[i % d]))
//   tl_bias_gelu_bwd(x, b, g, gx, part, rows, d, chunk)   block (c, r): columns
//       c * TL_BLOCK + threadIdx.x, rows [r chunk, (r + 1) chunk): gx = f32(g gelu'(s)) and
//       part[r][j] = the double sum of g gelu'(s) over those rows, in row order
//   tl_bias_gelu_db(part, db, chunks, d)        db[j] = f32(sum_r part[r][j]), r in order
// Plain capsule (float32, tl_act_f32.cuh; float4 loads and stores where d % 4 == 0 and the
// pointers are 16-byte aligned, the bias then 4 consecutive floats; scalar otherwise):
//   tl_bias_gelu_f32(x, b, y, n, d)             y[i] = GeluF32(x[i] + b[i % d])
//   tl_bias_gelu_bwd_f32(x, b, g, gx, part, rows, d, chunk, col_blocks)   block k: column block
//       k % col_blocks (128 columns as float4, 32 scalar), rows [c chunk, (c + 1) chunk), c =
//       k / col_blocks; warp w takes the rows first + w, first + w + 8, ... in order, lane l its
//       V = 4 (or 1) columns: gx = GeluBF32(s, g) (a float), each float term added to a double
//       in row order, then the 8 warps' doubles in warp order (shared memory): part[c][j]
//   tl_bias_gelu_db as above: the chunks in order, rounded once.
// Every sum runs in a fixed order (rows within a warp, warps, chunks) and the chunk count is the
// host's function of the shape alone: bitwise repeatable, no atomics (both reduction modes).

#define TL_BLOCK 256
#include "tl_common.cuh"

#define TL_GELU_C 0.7978845608028654    // sqrt(2/pi)
#define TL_GELU_K 0.044715
#include "tl_act_f32.cuh"

__device__ __forceinline__ bool tl_bg_aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull;
}

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
        // unrolled so 16 loads are in flight (few threads when d is small: the float32 VJP's
        // 99 chunks at d = 1024); the adds keep their order
#pragma unroll 16
        for (unsigned r = 0; r < chunks; ++r) acc += part[(unsigned long long)r * d + j];
        db[j] = (float)acc;
    }
}

// ---- the plain capsule: float32 (tl_act_f32.cuh) ------------------------------------------------

// The entry points' signatures with their resident blocks per SM (registers: __launch_bounds__),
// as macros whose first argument names the kernel (as elementwise.cu's TL_UNARY_FWD_ONE): the
// source map's checks and scripts/sanitize_kernels.py find them so.
#define TL_BG_FWD(name, blocks)                                                                  \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, blocks) name(                         \
        const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,         \
        unsigned n, unsigned d)
#define TL_BG_BWD(name, blocks)                                                                  \
    extern "C" __global__ void __launch_bounds__(TL_BLOCK, blocks) name(                         \
        const float* __restrict__ x, const float* __restrict__ b, const float* __restrict__ g,   \
        float* __restrict__ gx, double* __restrict__ part, unsigned rows, unsigned d,            \
        unsigned chunk, unsigned col_blocks, unsigned vec)

// One float4 (or, on the scalar path, one float) per thread and grid-stride beyond: the host
// launches ceil(n / 4 / TL_BLOCK) blocks where the float4 path applies, ceil(n / TL_BLOCK)
// otherwise. d % 4 == 0 makes n a multiple of 4 and the bias of float4 i the float4 i % (d / 4).
TL_BG_FWD(tl_bias_gelu_f32, 8) {
    const GeluF32 f;
    const unsigned stride = blockDim.x * gridDim.x;
    const unsigned start = blockIdx.x * blockDim.x + threadIdx.x;
    if ((d & 3u) == 0u && tl_bg_aligned16(x) && tl_bg_aligned16(b) && tl_bg_aligned16(y)) {
        const unsigned n4 = n >> 2, d4 = d >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (unsigned i = start; i < n4; i = tl_next(i, stride, n4)) {
            const float4 v = x4[i], c = b4[i % d4];
            y4[i] = make_float4(f(v.x + c.x), f(v.y + c.y), f(v.z + c.z), f(v.w + c.w));
        }
        return;
    }
    for (unsigned i = start; i < n; i = tl_next(i, stride, n)) y[i] = f(x[i] + b[i % d]);
}

#define TL_BG_WARPS (TL_BLOCK / 32)

// The VJP's body for V columns per lane (4: float4 loads and stores; 1: scalar).
template <int V>
__device__ __forceinline__ void tl_bias_gelu_bwd_cols(
        const float* __restrict__ x, const float* __restrict__ b, const float* __restrict__ g,
        float* __restrict__ gx, double* __restrict__ part, unsigned rows, unsigned d,
        unsigned chunk, unsigned col_blocks) {
    __shared__ double red[TL_BG_WARPS][32 * 4];
    const GeluBF32 f;
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const unsigned c = blockIdx.x / col_blocks;
    const unsigned j = ((blockIdx.x - c * col_blocks) * 32u + lane) * V;   // first column
    const unsigned first = c * chunk;
    const unsigned last = (rows - first > chunk) ? first + chunk : rows;
    double acc[V];
    for (int k = 0; k < V; ++k) acc[k] = 0.0;
    if (j < d && w < last - first) {   // (first + w could wrap for rows near 2^32)
        if constexpr (V == 4) {
            const float4 bj = *reinterpret_cast<const float4*>(b + j);
            for (unsigned r = first + w; r < last; r = tl_next(r, TL_BG_WARPS, last)) {
                const unsigned i = r * d + j;
                const float4 v = *reinterpret_cast<const float4*>(x + i);
                const float4 h = *reinterpret_cast<const float4*>(g + i);
                const float4 o = make_float4(f(v.x + bj.x, h.x), f(v.y + bj.y, h.y),
                                             f(v.z + bj.z, h.z), f(v.w + bj.w, h.w));
                *reinterpret_cast<float4*>(gx + i) = o;
                acc[0] += (double)o.x;
                acc[1] += (double)o.y;
                acc[2] += (double)o.z;
                acc[3] += (double)o.w;
            }
        } else {
            const float bj = b[j];
            for (unsigned r = first + w; r < last; r = tl_next(r, TL_BG_WARPS, last)) {
                const unsigned i = r * d + j;
                const float o = f(x[i] + bj, g[i]);
                gx[i] = o;
                acc[0] += (double)o;
            }
        }
    }
    for (int k = 0; k < V; ++k) red[w][lane * V + k] = acc[k];
    __syncthreads();
    if (w == 0 && j < d) {
        for (int k = 0; k < V; ++k) {
            double t = red[0][lane * V + k];
            for (unsigned q = 1; q < TL_BG_WARPS; ++q) t += red[q][lane * V + k];
            part[(unsigned long long)c * d + j + k] = t;
        }
    }
}

// 40 registers at 6 blocks of 256 an SM (ptxas -v, sm_90: no spills; 8 blocks spill), 16 KiB of
// shared memory each. col_blocks = ceil(d / 128) on the float4 path (d % 4 == 0 and x, b, g, gx
// 16-byte aligned: the host decides, as it must know col_blocks), ceil(d / 32) on the scalar
// one; `vec` says which.
TL_BG_BWD(tl_bias_gelu_bwd_f32, 6) {
    if (vec)
        tl_bias_gelu_bwd_cols<4>(x, b, g, gx, part, rows, d, chunk, col_blocks);
    else
        tl_bias_gelu_bwd_cols<1>(x, b, g, gx, part, rows, d, chunk, col_blocks);
}
