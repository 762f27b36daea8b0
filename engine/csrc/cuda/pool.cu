// max_pool, avg_pool and smooth_max_pool over the trailing r spatial axes (docs/OPS.md, pooling).
// The input is viewed as [planes][in_size] (planes = N * C, in_size = the spatial product) and the
// output as [planes][out_size]. Every window cell is an input offset within its plane or padding;
// cells are visited in row-major window order (last kernel axis fastest), which decides the
// first-maximum tie rule and the order of every float32 fold.
//
// Compiled with OPTIONS (engine/runtime/loader.py). No #defines expected. Tensors hold fewer than
// 2^32 elements (the wrapper checked every extent, stride, padding, dilation and both spatial
// products against UInt32), so flat offsets are unsigned; window positions o*s - p + t*d are
// formed in 64-bit signed arithmetic (they can be negative, or exceed 2^32 before the check).
//
// Geometry: the 2-D kernels (suffix 2d) take (H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw) as
// scalars; the N-D kernels (suffix nd, rank 1..8) read `geo`, 48 int64 on the device: in[8],
// out[8], k[8], s[8], p[8], d[8] (entries past the rank unused). `win` = prod k.
//
// Every kernel comes as a 2-D fast path (_2d) and an N-D form (_nd).
// Forward, one thread per output element:
//   tl_max_pool_2d, tl_max_pool_nd   padding is -inf; the window's first NaN, else its first
//                                    maximum
//   tl_avg_pool_2d, tl_avg_pool_nd   float32 left fold of the window's input cells (padding adds
//                                    nothing), then one division by win (float; in double,
//                                    rounded once, when win exceeds 2^24 and is not exact in float)
//   tl_smooth_max_pool_2d, tl_smooth_max_pool_nd   in double: pivot = max (beta > 0) or min
//                                    (beta < 0) of the values, padding counted as 0;
//                                    pivot + log1p(rest) / beta, rest = sum exp(beta (v - pivot))
//                                    over the cells but the first pivot (S = 1 + rest), rounded
//                                    once to float32 (a NaN or an infinite pivot gives NaN)
// Backward, default mode (atomics; one thread per output window, dx zeroed first):
//   tl_max_pool_bwd_atomic_2d, tl_max_pool_bwd_atomic_nd   recompute the window's argmax,
//                                    atomicAdd(dx[arg], g); nothing for a padding argmax
//   tl_avg_pool_bwd_atomic_2d, tl_avg_pool_bwd_atomic_nd   atomicAdd(dx[cell], g / win) into
//                                    every input cell of the window
//   tl_smooth_max_pool_bwd_atomic_2d, tl_smooth_max_pool_bwd_atomic_nd   atomicAdd(dx[cell],
//                                    f32(g w)), w = exp(beta (v - pivot)) / S in double
// Backward, deterministic mode (one thread per input element gathers the windows that hold it in
// ascending output order; no atomics, bitwise repeatable):
//   tl_max_pool_argmax_2d, tl_max_pool_argmax_nd   argmax per output (TL_NONE for padding)
//   tl_max_pool_bwd_gather_2d, tl_max_pool_bwd_gather_nd   dx[i] = left fold of g[o] over the
//                                    windows whose argmax is i
//   tl_avg_pool_bwd_gather_2d, tl_avg_pool_bwd_gather_nd   dx[i] = (left fold of g[o] over the
//                                    windows holding i) / win
//   tl_smooth_max_pool_stats_2d, tl_smooth_max_pool_stats_nd   pivot and S per window (double)
//   tl_smooth_max_pool_bwd_gather_2d, tl_smooth_max_pool_bwd_gather_nd
//                                    dx[i] = f32(sum_o g[o] exp(beta (v_i - pivot_o)) / S_o), the
//                                    sum in double in ascending o

#include "tl_common.cuh"

#define TL_POOL_MAX_RANK 8

struct Geo2 {
    unsigned H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
    __device__ unsigned in_size() const { return H * W; }
    __device__ unsigned out_size() const { return OH * OW; }

    // f(cell): cell = offset in the plane, or -1 for padding, in row-major window order
    template <class F> __device__ void window(unsigned o, F f) const {
        const long long oy = o / OW, ox = o % OW;
        const long long y0 = oy * sh - (long long)ph, x0 = ox * sw - (long long)pw;
        for (unsigned ty = 0; ty < kh; ++ty) {
            const long long y = y0 + (long long)ty * dh;
            const bool row = y >= 0 && y < (long long)H;
            for (unsigned tx = 0; tx < kw; ++tx) {
                const long long x = x0 + (long long)tx * dw;
                f((row && x >= 0 && x < (long long)W) ? y * W + x : -1LL);
            }
        }
    }

    // f(o): the windows holding input cell i, in ascending output order
    template <class F> __device__ void windows_of(unsigned i, F f) const {
        const long long y = i / W, x = i % W;
        for (int ty = (int)kh - 1; ty >= 0; --ty) {
            const long long ny = y + ph - (long long)ty * dh;
            if (ny < 0 || ny % sh) continue;
            const long long oy = ny / sh;
            if (oy >= OH) continue;
            for (int tx = (int)kw - 1; tx >= 0; --tx) {
                const long long nx = x + pw - (long long)tx * dw;
                if (nx < 0 || nx % sw) continue;
                const long long ox = nx / sw;
                if (ox >= OW) continue;
                f((unsigned)(oy * OW + ox));
            }
        }
    }
};

struct GeoN {
    int rank;
    const long long* g;   // in[8], out[8], k[8], s[8], p[8], d[8]
    __device__ long long in(int j) const { return g[j]; }
    __device__ long long out(int j) const { return g[8 + j]; }
    __device__ long long k(int j) const { return g[16 + j]; }
    __device__ long long s(int j) const { return g[24 + j]; }
    __device__ long long p(int j) const { return g[32 + j]; }
    __device__ long long d(int j) const { return g[40 + j]; }

    template <class F> __device__ void window(unsigned o, F f) const {
        long long start[TL_POOL_MAX_RANK], t[TL_POOL_MAX_RANK];
        unsigned rest = o;
        for (int j = rank - 1; j >= 0; --j) {
            const long long oj = rest % (unsigned long long)out(j);
            rest = (unsigned)(rest / (unsigned long long)out(j));
            start[j] = oj * s(j) - p(j);
            t[j] = 0;
        }
        for (;;) {
            long long cell = 0;
            bool inside = true;
            for (int j = 0; j < rank; ++j) {
                const long long q = start[j] + t[j] * d(j);
                inside = inside && q >= 0 && q < in(j);
                cell = cell * in(j) + q;
            }
            f(inside ? cell : -1LL);
            int j = rank - 1;   // odometer: last kernel axis fastest
            for (; j >= 0; --j) {
                if (++t[j] < k(j)) break;
                t[j] = 0;
            }
            if (j < 0) return;
        }
    }

    template <class F> __device__ void windows_of(unsigned i, F f) const {
        long long q[TL_POOL_MAX_RANK], t[TL_POOL_MAX_RANK];
        unsigned rest = i;
        for (int j = rank - 1; j >= 0; --j) {
            q[j] = rest % (unsigned long long)in(j);
            rest = (unsigned)(rest / (unsigned long long)in(j));
            t[j] = k(j) - 1;   // t descending gives o ascending on each axis
        }
        for (;;) {
            long long o = 0;
            bool hit = true;
            for (int j = 0; j < rank && hit; ++j) {
                const long long n = q[j] + p(j) - t[j] * d(j);
                hit = n >= 0 && n % s(j) == 0 && n / s(j) < out(j);
                o = o * out(j) + (hit ? n / s(j) : 0);
            }
            if (hit) f((unsigned)o);
            int j = rank - 1;   // odometer downwards: last kernel axis fastest
            for (; j >= 0; --j) {
                if (t[j] > 0) { --t[j]; break; }
                t[j] = k(j) - 1;
            }
            if (j < 0) return;
        }
    }

    __device__ unsigned in_size() const {
        unsigned long long n = 1;
        for (int j = 0; j < rank; ++j) n *= (unsigned long long)in(j);
        return (unsigned)n;
    }
    __device__ unsigned out_size() const {
        unsigned long long n = 1;
        for (int j = 0; j < rank; ++j) n *= (unsigned long long)out(j);
        return (unsigned)n;
    }
};

// ---- the per-window rules -----------------------------------------------------------------------

// The first NaN, else the first maximum, in window order; padding is -inf (arg -1).
template <class G>
__device__ float max_window(const G& geo, const float* xp, unsigned o, long long& arg) {
    const float pad = __int_as_float(0xff800000);   // -inf (NVRTC has no INFINITY)
    float best = 0.0f;
    bool first = true;
    geo.window(o, [&](long long cell) {
        const float v = cell >= 0 ? xp[cell] : pad;
        if (first || (best == best && (v != v || v > best))) {
            best = v;
            arg = cell;
            first = false;
        }
    });
    return best;
}

__device__ __forceinline__ float div_win(float v, unsigned win) {
    // float division is correctly rounded (--prec-div=true) when win is exact in float
    return win <= 16777216u ? v / (float)win : (float)((double)v / (double)win);
}

// pivot and rest = S - 1 = the sum of exp(beta (v - pivot)) over the window's cells other than the
// first pivot cell (whose term is exp(0) = 1 exactly), padding counted as the value 0. Keeping the 1
// out lets log1p(rest) keep a rest below 2^-53. A NaN or an infinite pivot makes rest NaN (the
// IEEE formula's exp(inf - inf)).
template <class G>
__device__ void smooth_stats(const G& geo, const float* xp, unsigned o, double beta,
                             double& pivot, double& rest) {
    bool first = true;
    unsigned at = 0, k = 0;
    pivot = 0.0;
    geo.window(o, [&](long long cell) {
        const double v = cell >= 0 ? (double)xp[cell] : 0.0;
        if (first) { pivot = v; first = false; }
        else if (pivot == pivot && (v != v || (beta > 0.0 ? v > pivot : v < pivot))) {
            pivot = v;   // a NaN stays the pivot once taken: the result is NaN
            k = at;
        }
        ++at;
    });
    double s = 0.0;
    const double pv = pivot;
    at = 0;
    geo.window(o, [&](long long cell) {
        const double v = cell >= 0 ? (double)xp[cell] : 0.0;
        if (at++ != k) s += exp(beta * (v - pv));
    });
    rest = (pv - pv == 0.0) ? s : pv - pv;
}

// ---- forward ------------------------------------------------------------------------------------

template <class G>
__device__ void max_fwd(const G& geo, const float* x, float* y, unsigned planes) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        long long arg;
        y[t] = max_window(geo, x + (unsigned long long)(t / out) * in, t % out, arg);
    }
}

template <class G>
__device__ void avg_fwd(const G& geo, const float* x, float* y, unsigned planes, unsigned win) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const float* xp = x + (unsigned long long)(t / out) * in;
        float acc = 0.0f;
        bool any = false;
        geo.window(t % out, [&](long long cell) {
            if (cell < 0) return;
            acc = any ? acc + xp[cell] : xp[cell];
            any = true;
        });
        y[t] = div_win(acc, win);
    }
}

template <class G>
__device__ void smooth_fwd(const G& geo, const float* x, float* y, unsigned planes, double beta) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        double pivot, rest;
        smooth_stats(geo, x + (unsigned long long)(t / out) * in, t % out, beta, pivot, rest);
        y[t] = (float)(pivot + log1p(rest) / beta);
    }
}

// ---- backward, default mode: scatter with atomics ------------------------------------------------

template <class G>
__device__ void max_bwd_atomic(const G& geo, const float* x, const float* g, float* dx,
                               unsigned planes) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned long long base = (unsigned long long)(t / out) * in;
        long long arg = -1;
        max_window(geo, x + base, t % out, arg);
        if (arg >= 0) atomicAdd(dx + base + arg, g[t]);
    }
}

template <class G>
__device__ void avg_bwd_atomic(const G& geo, const float* g, float* dx, unsigned planes,
                               unsigned win) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        float* dp = dx + (unsigned long long)(t / out) * in;
        const float q = div_win(g[t], win);
        geo.window(t % out, [&](long long cell) {
            if (cell >= 0) atomicAdd(dp + cell, q);
        });
    }
}

template <class G>
__device__ void smooth_bwd_atomic(const G& geo, const float* x, const float* g, float* dx,
                                  unsigned planes, double beta) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned long long base = (unsigned long long)(t / out) * in;
        const float* xp = x + base;
        double pivot, rest;
        smooth_stats(geo, xp, t % out, beta, pivot, rest);
        const double gd = (double)g[t], total = 1.0 + rest;
        geo.window(t % out, [&](long long cell) {
            if (cell < 0) return;
            const double w = exp(beta * ((double)xp[cell] - pivot)) / total;
            atomicAdd(dx + base + cell, (float)(gd * w));
        });
    }
}

// ---- backward, deterministic mode: gather per input element --------------------------------------

template <class G>
__device__ void max_argmax(const G& geo, const float* x, unsigned* arg_out, unsigned planes) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        long long arg = -1;
        max_window(geo, x + (unsigned long long)(t / out) * in, t % out, arg);
        arg_out[t] = arg >= 0 ? (unsigned)arg : TL_NONE;
    }
}

template <class G>
__device__ void max_bwd_gather(const G& geo, const unsigned* arg, const float* g, float* dx,
                               unsigned planes) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * in;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned i = t % in;
        const unsigned long long base = (unsigned long long)(t / in) * out;
        float acc = 0.0f;
        bool any = false;
        geo.windows_of(i, [&](unsigned o) {
            if (arg[base + o] != i) return;
            acc = any ? acc + g[base + o] : g[base + o];
            any = true;
        });
        dx[t] = acc;
    }
}

template <class G>
__device__ void avg_bwd_gather(const G& geo, const float* g, float* dx, unsigned planes,
                               unsigned win) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * in;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned long long base = (unsigned long long)(t / in) * out;
        float acc = 0.0f;
        bool any = false;
        geo.windows_of(t % in, [&](unsigned o) {
            acc = any ? acc + g[base + o] : g[base + o];
            any = true;
        });
        dx[t] = div_win(acc, win);
    }
}

template <class G>
__device__ void smooth_stats_all(const G& geo, const float* x, double* pivot, double* total,
                                 unsigned planes, double beta) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * out;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        double rest;
        smooth_stats(geo, x + (unsigned long long)(t / out) * in, t % out, beta, pivot[t], rest);
        total[t] = 1.0 + rest;   // S, the weights' denominator
    }
}

template <class G>
__device__ void smooth_bwd_gather(const G& geo, const float* x, const double* pivot,
                                  const double* total, const float* g, float* dx,
                                  unsigned planes, double beta) {
    const unsigned out = geo.out_size(), in = geo.in_size(), n = planes * in;
    const unsigned stride = blockDim.x * gridDim.x;
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t = tl_next(t, stride, n)) {
        const unsigned long long base = (unsigned long long)(t / in) * out;
        const double v = (double)x[t];
        double acc = 0.0;
        geo.windows_of(t % in, [&](unsigned o) {
            const double w = exp(beta * (v - pivot[base + o])) / total[base + o];
            acc += (double)g[base + o] * w;
        });
        dx[t] = (float)acc;
    }
}

// ---- entry points -------------------------------------------------------------------------------

#define TL_GEO2_PARAMS unsigned H, unsigned W, unsigned OH, unsigned OW, unsigned kh, unsigned kw, \
    unsigned sh, unsigned sw, unsigned ph, unsigned pw, unsigned dh, unsigned dw
#define TL_GEO2 Geo2{H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw}
#define TL_GEON_PARAMS int rank, const long long* __restrict__ geo
#define TL_GEON GeoN{rank, geo}

extern "C" __global__ void tl_max_pool_2d(const float* __restrict__ x, float* __restrict__ y,
                                          unsigned planes, TL_GEO2_PARAMS) {
    max_fwd(TL_GEO2, x, y, planes);
}
extern "C" __global__ void tl_max_pool_nd(const float* __restrict__ x, float* __restrict__ y,
                                          unsigned planes, TL_GEON_PARAMS) {
    max_fwd(TL_GEON, x, y, planes);
}
extern "C" __global__ void tl_avg_pool_2d(const float* __restrict__ x, float* __restrict__ y,
                                          unsigned planes, unsigned win, TL_GEO2_PARAMS) {
    avg_fwd(TL_GEO2, x, y, planes, win);
}
extern "C" __global__ void tl_avg_pool_nd(const float* __restrict__ x, float* __restrict__ y,
                                          unsigned planes, unsigned win, TL_GEON_PARAMS) {
    avg_fwd(TL_GEON, x, y, planes, win);
}
extern "C" __global__ void tl_smooth_max_pool_2d(const float* __restrict__ x,
                                                 float* __restrict__ y, unsigned planes,
                                                 double beta, TL_GEO2_PARAMS) {
    smooth_fwd(TL_GEO2, x, y, planes, beta);
}
extern "C" __global__ void tl_smooth_max_pool_nd(const float* __restrict__ x,
                                                 float* __restrict__ y, unsigned planes,
                                                 double beta, TL_GEON_PARAMS) {
    smooth_fwd(TL_GEON, x, y, planes, beta);
}

extern "C" __global__ void tl_max_pool_bwd_atomic_2d(const float* __restrict__ x,
                                                     const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     TL_GEO2_PARAMS) {
    max_bwd_atomic(TL_GEO2, x, g, dx, planes);
}
extern "C" __global__ void tl_max_pool_bwd_atomic_nd(const float* __restrict__ x,
                                                     const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     TL_GEON_PARAMS) {
    max_bwd_atomic(TL_GEON, x, g, dx, planes);
}
extern "C" __global__ void tl_avg_pool_bwd_atomic_2d(const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     unsigned win, TL_GEO2_PARAMS) {
    avg_bwd_atomic(TL_GEO2, g, dx, planes, win);
}
extern "C" __global__ void tl_avg_pool_bwd_atomic_nd(const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     unsigned win, TL_GEON_PARAMS) {
    avg_bwd_atomic(TL_GEON, g, dx, planes, win);
}
extern "C" __global__ void tl_smooth_max_pool_bwd_atomic_2d(const float* __restrict__ x,
                                                            const float* __restrict__ g,
                                                            float* __restrict__ dx,
                                                            unsigned planes, double beta,
                                                            TL_GEO2_PARAMS) {
    smooth_bwd_atomic(TL_GEO2, x, g, dx, planes, beta);
}
extern "C" __global__ void tl_smooth_max_pool_bwd_atomic_nd(const float* __restrict__ x,
                                                            const float* __restrict__ g,
                                                            float* __restrict__ dx,
                                                            unsigned planes, double beta,
                                                            TL_GEON_PARAMS) {
    smooth_bwd_atomic(TL_GEON, x, g, dx, planes, beta);
}

extern "C" __global__ void tl_max_pool_argmax_2d(const float* __restrict__ x,
                                                 unsigned* __restrict__ arg, unsigned planes,
                                                 TL_GEO2_PARAMS) {
    max_argmax(TL_GEO2, x, arg, planes);
}
extern "C" __global__ void tl_max_pool_argmax_nd(const float* __restrict__ x,
                                                 unsigned* __restrict__ arg, unsigned planes,
                                                 TL_GEON_PARAMS) {
    max_argmax(TL_GEON, x, arg, planes);
}
extern "C" __global__ void tl_max_pool_bwd_gather_2d(const unsigned* __restrict__ arg,
                                                     const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     TL_GEO2_PARAMS) {
    max_bwd_gather(TL_GEO2, arg, g, dx, planes);
}
extern "C" __global__ void tl_max_pool_bwd_gather_nd(const unsigned* __restrict__ arg,
                                                     const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     TL_GEON_PARAMS) {
    max_bwd_gather(TL_GEON, arg, g, dx, planes);
}
extern "C" __global__ void tl_avg_pool_bwd_gather_2d(const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     unsigned win, TL_GEO2_PARAMS) {
    avg_bwd_gather(TL_GEO2, g, dx, planes, win);
}
extern "C" __global__ void tl_avg_pool_bwd_gather_nd(const float* __restrict__ g,
                                                     float* __restrict__ dx, unsigned planes,
                                                     unsigned win, TL_GEON_PARAMS) {
    avg_bwd_gather(TL_GEON, g, dx, planes, win);
}
extern "C" __global__ void tl_smooth_max_pool_stats_2d(const float* __restrict__ x,
                                                       double* __restrict__ pivot,
                                                       double* __restrict__ total,
                                                       unsigned planes, double beta,
                                                       TL_GEO2_PARAMS) {
    smooth_stats_all(TL_GEO2, x, pivot, total, planes, beta);
}
extern "C" __global__ void tl_smooth_max_pool_stats_nd(const float* __restrict__ x,
                                                       double* __restrict__ pivot,
                                                       double* __restrict__ total,
                                                       unsigned planes, double beta,
                                                       TL_GEON_PARAMS) {
    smooth_stats_all(TL_GEON, x, pivot, total, planes, beta);
}
extern "C" __global__ void tl_smooth_max_pool_bwd_gather_2d(const float* __restrict__ x,
                                                            const double* __restrict__ pivot,
                                                            const double* __restrict__ total,
                                                            const float* __restrict__ g,
                                                            float* __restrict__ dx,
                                                            unsigned planes, double beta,
                                                            TL_GEO2_PARAMS) {
    smooth_bwd_gather(TL_GEO2, x, pivot, total, g, dx, planes, beta);
}
extern "C" __global__ void tl_smooth_max_pool_bwd_gather_nd(const float* __restrict__ x,
                                                            const double* __restrict__ pivot,
                                                            const double* __restrict__ total,
                                                            const float* __restrict__ g,
                                                            float* __restrict__ dx,
                                                            unsigned planes, double beta,
                                                            TL_GEON_PARAMS) {
    smooth_bwd_gather(TL_GEON, x, pivot, total, g, dx, planes, beta);
}
