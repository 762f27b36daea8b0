// The exhaustive sweep's fused kernels: each helper of sweep_helpers.cuh over a chunk in one
// launch (conformance/exhaustive/fused.py says why). Loaded through engine/runtime/loader.module_of
// with the engine's default flag set (--fmad=false --ftz=false), never the flag matrix's: the
// harness's arithmetic does not change with the kernels under audit.
#include "sweep_helpers.cuh"

#define TL_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; \
                           i < (n); i += (long long)gridDim.x * blockDim.x)

__device__ inline void tl_add_counts(tl_u64 *local, tl_u64 *global, int k) {
    for (int j = 0; j < k; ++j) {        /* every thread of the block reaches here */
        tl_u64 c = local[j];
        for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xFFFFFFFFu, c, off);
        if ((threadIdx.x & 31) == 0 && c) atomicAdd(global + j, c);
    }
}

extern "C" __global__ void tl_k_f32_to_f64(const unsigned *x, double *y, long long n) {
    TL_LOOP(i, n) y[i] = tl_f32_to_f64(x[i]);
}

extern "C" __global__ void tl_k_f64_to_f32(const double *x, unsigned *y, long long n) {
    TL_LOOP(i, n) y[i] = tl_f64_to_f32(x[i]);
}

extern "C" __global__ void tl_k_subnormal32(const unsigned *x, bool *y, long long n) {
    TL_LOOP(i, n) y[i] = tl_sub32(x[i]);
}

/* bound, sign, dom: arrays of n elements, or of one (stride 0) */
extern "C" __global__ void tl_k_certify(const double *v, const double *bound, long long bs,
                                        const signed char *sign, long long ss, const bool *dom,
                                        long long ds, int ovf, unsigned *r, bool *dec,
                                        long long n) {
    TL_LOOP(i, n) {
        bool d;
        r[i] = tl_certify(v[i], bound[i * bs], sign[i * ss], dom[i * ds], ovf != 0, &d);
        dec[i] = d;
    }
}

extern "C" __global__ void tl_k_classify(const unsigned *x, const unsigned *y,
                                         const unsigned *ref, const unsigned *out,
                                         unsigned poison, unsigned char *code, tl_u64 *counts,
                                         long long n) {
    tl_u64 c[6] = {0, 0, 0, 0, 0, 0};
    TL_LOOP(i, n) code[i] = (unsigned char)tl_classify(x[i], y[i], ref[i], out[i], poison, c);
    tl_add_counts(c, counts, 6);
}

/* exhaustive_refs._gelu (vjp 0) and _gelu_vjp (vjp 1): the NumPy expressions operation for
   operation in Python's order (no contraction: --fmad=false; exp is CUDA's double exp, the one
   CuPy's ufunc calls), the constants as the Python code makes them, passed in: bit for bit the
   CuPy array code's (v64, bound), in one pass instead of some thirty. -(-t) is t exactly. */
extern "C" __global__ void tl_k_gelu_ref(const double *x, double *v, double *b, int vjp,
                                         double c, double kappa, double k3, double c8d,
                                         double lib, double c2d, double c3d, double c5d,
                                         double c9d, long long n) {
    TL_LOOP(i, n) {
        const double a = x[i];
        const double t = 2.0 * (c * (a + kappa * ((a * a) * a)));
        const double s_pos = 1.0 / (1.0 + exp(-t));
        const double s_neg = 1.0 / (1.0 + exp(t));
        const double at = fabs(t);
        if (!vjp) {
            v[i] = a * s_pos;
            b[i] = 1.01 * ((((c8d * at) * s_neg) + lib) + c5d);
            continue;
        }
        const double du = c * (1.0 + k3 * (a * a));
        const double q = ((2.0 * a) * s_neg) * du;
        const double e_pos = (((c8d * at) * s_neg) + lib) + c2d;
        const double e_neg = (((c8d * at) * s_pos) + lib) + c2d;
        const double e_q = e_neg + c9d;
        b[i] = 1.01 * ((e_pos + ((fabs(q) * e_q) / fabs(1.0 + q))) + c3d);
        v[i] = s_pos * (1.0 + q);
    }
}

/* counts[TL_TALLY]: the largest live key (atomicMax) */
extern "C" __global__ void tl_k_tally(const bool *ok, const double *ulps, const unsigned *ref,
                                      const unsigned *got, tl_u64 *counts, long long n) {
    tl_u64 c[TL_TALLY] = {0}, best = 0;
    TL_LOOP(i, n) {
        tl_u64 k = tl_tally(ok[i], ulps[i], ref[i], got[i], c);
        best = k > best ? k : best;
    }
    tl_add_counts(c, counts, TL_TALLY);
    for (int off = 16; off > 0; off >>= 1) {
        tl_u64 o = __shfl_down_sync(0xFFFFFFFFu, best, off);
        best = o > best ? o : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax(counts + TL_TALLY, best);
}
