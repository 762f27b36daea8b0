"""The exhaustive sweep's hot helpers as fused CUDA kernels, for the CuPy path only.

refs.py and judge.py write each helper as a chain of array operations, one
CuPy kernel (and one full pass over the chunk) per operation; on the H200 those passes, their
launches and the host syncs of their counts were most of a sweep's time. Here each helper is one
kernel of one module (one NVRTC compile on a fresh machine), computing exactly what the NumPy
function computes, bit for bit: integer and float64 arithmetic only, since CuPy builds its own
kernels with -ftz=true (refs.py) and -fmad=false is given so that no product and sum
is contracted into an FMA the NumPy code does not do.

The element-wise logic is in `HELPERS`, `__host__ __device__` functions: the CPU tests compile
the same text with the host compiler and compare it with the NumPy functions
(tests/test_exhaustive_fused_host.py); tests/test_cuda_exhaustive_fused.py compares the kernels
themselves on the GPU. The NumPy path (and the CPU stand-in for CuPy) keeps the array code.
"""
from __future__ import annotations

import numpy as np

HELPERS = r"""
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
"""

KERNELS = r"""
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
"""

SOURCE = HELPERS + KERNELS
OPTIONS = ("--std=c++17", "--fmad=false")
THREADS = 256
MAX_BLOCKS = 4096
TALLY = 15               # tl_tally's counters (TL_TALLY)

_MODULE: dict = {}        # device -> the compiled module
_FUNCTIONS: dict = {}     # (device, name) -> its kernel: looked up once, launched per chunk


def enabled(xp) -> bool:
    """True for CuPy itself: the only array module these kernels run on."""
    return getattr(xp, "__name__", None) == "cupy"


def references_enabled(xp) -> bool:
    """Whether the reference formulas' kernels (tl_k_gelu_ref) run: with the fused path, on CuPy
    only. They call CUDA's double exp, which the host twin (tests/emulated) cannot reproduce bit
    for bit, so the CPU tests' twin path keeps the array code for them."""
    return enabled(xp) and getattr(xp, "__name__", None) == "cupy"


def _kernel(name: str):
    import cupy
    dev = cupy.cuda.runtime.getDevice()
    fn = _FUNCTIONS.get((dev, name))
    if fn is None:
        if dev not in _MODULE:
            _MODULE[dev] = cupy.RawModule(code=SOURCE, options=OPTIONS)
        fn = _FUNCTIONS[(dev, name)] = _MODULE[dev].get_function(name)
    return fn


def _launch(name: str, n: int, *args) -> None:
    if n:
        blocks = min((n + THREADS - 1) // THREADS, MAX_BLOCKS)
        _kernel(name)((blocks,), (THREADS,), (*args, np.int64(n)))


def _to_host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _flat(xp, a, dtype):
    """A contiguous 1-d view of a (same bits, reinterpreted as dtype of the same size)."""
    a = xp.ascontiguousarray(a).reshape(-1)
    return a if a.dtype == dtype else a.view(dtype)


def f32_to_f64(xp, x32):
    x = _flat(xp, x32, np.uint32)
    y = xp.empty(x.shape, np.float64)
    _launch("tl_k_f32_to_f64", x.size, x, y)
    return y.reshape(x32.shape)


def f64_to_f32(xp, v64):
    v = _flat(xp, xp.asarray(v64, dtype=np.float64), np.float64)
    y = xp.empty(v.shape, np.uint32)
    _launch("tl_k_f64_to_f32", v.size, v, y)
    return y.view(np.float32).reshape(v.shape)


def subnormal32(xp, x32):
    x = _flat(xp, x32, np.uint32)
    y = xp.empty(x.shape, bool)
    _launch("tl_k_subnormal32", x.size, x, y)
    return y.reshape(x32.shape)


def _strided(xp, a, dtype, n):
    """(array, stride) for a kernel argument that is per element or one value for all."""
    a = xp.asarray(a, dtype=dtype)
    if a.size == 1:
        return a.reshape(1), np.int64(0)
    if a.size != n:
        raise ValueError(f"certify: an argument of {a.size} elements for {n} values")
    return _flat(xp, a, dtype), np.int64(1)


def certify(xp, v64, bound, sign, dom, overflow_exact: bool):
    """(v32, decided) as refs.certify; sign and dom None where the formula has none."""
    v = _flat(xp, xp.asarray(v64, dtype=np.float64), np.float64)
    n = int(v.size)
    b, bs = _strided(xp, bound, np.float64, n)
    s, ss = _strided(xp, 0 if sign is None else sign, np.int8, n)
    d, ds = _strided(xp, False if dom is None else dom, bool, n)
    r = xp.empty(v.shape, np.uint32)
    dec = xp.empty(v.shape, bool)
    _launch("tl_k_certify", n, v, b, bs, s, ss, d, ds, np.int32(bool(overflow_exact)), r, dec)
    return r.view(np.float32), dec


def gelu(xp, x64, vjp: bool, c: float, kappa: float, d: float, lib: float):
    """(v64, bound) of refs._gelu (vjp False) or _gelu_vjp, bit for bit, in one
    kernel; c, kappa, d (one float64 rounding) and lib as refs defines them."""
    x = _flat(xp, xp.asarray(x64, dtype=np.float64), np.float64)
    v, b = xp.empty(x.shape, np.float64), xp.empty(x.shape, np.float64)
    f = np.float64
    _launch("tl_k_gelu_ref", x.size, x, v, b, np.int32(bool(vjp)), f(c), f(kappa),
            f(3.0 * kappa), f(8 * d), f(lib), f(2 * d), f(3 * d), f(5 * d), f(9 * d))
    return v.reshape(x64.shape), b.reshape(x64.shape)


def classify(xp, x, got, ref_value, out, poison_bits: int):
    """(code, counts) of _judge's pre-filter: code 0 same, 1 device, 2 host per element; counts
    {same, same_subnormal, subnormal_inputs, device, host, poison} (one host sync)."""
    xs = _flat(xp, x, np.uint32)
    n = int(xs.size)
    code = xp.empty(n, np.uint8)
    counts = xp.zeros(6, np.uint64)
    _launch("tl_k_classify", n, xs, _flat(xp, got, np.uint32), _flat(xp, ref_value, np.uint32),
            _flat(xp, got if out is None else out, np.uint32), np.uint32(poison_bits), code,
            counts)
    names = ("same", "same_subnormal", "subnormal_inputs", "device", "host", "poison")
    return code, dict(zip(names, (int(c) for c in _to_host(counts))))


def tally(xp, ok, ulps, ref_value, got):
    """Tally.add's counts (one host sync): failed, flushed_accepted, hist (8 bins),
    not_correctly_rounded, nan/inf/signed-zero mismatches, live, and the largest live ulps
    (None when no element is live)."""
    o = _flat(xp, xp.asarray(ok, dtype=bool), bool)
    n = int(o.size)
    counts = xp.zeros(TALLY + 1, np.uint64)
    _launch("tl_k_tally", n, o, _flat(xp, xp.asarray(ulps, dtype=np.float64), np.float64),
            _flat(xp, ref_value, np.uint32), _flat(xp, got, np.uint32), counts)
    c = [int(v) for v in _to_host(counts)]
    key = c[TALLY]
    worst = None
    if c[14]:
        k = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
        worst = float(np.uint64(k).view(np.float64))
    return {"failed": c[0], "flushed": c[1], "hist": c[2:10], "ncr": c[10], "nan": c[11],
            "inf": c[12], "signed_zero": c[13], "live": c[14], "worst": worst}
