"""The exhaustive sweep's hot helpers as fused CUDA kernels, for the CuPy path only.

refs.py and judge.py write each helper as a chain of array operations, one
CuPy kernel (and one full pass over the chunk) per operation; on the H200 those passes, their
launches and the host syncs of their counts were most of a sweep's time. Here each helper is one
kernel of one module (one NVRTC compile on a fresh machine), computing exactly what the NumPy
function computes, bit for bit: integer and float64 arithmetic only (so no flushing setting can
touch it), and -fmad=false so that no product and sum is contracted into an FMA the NumPy code
does not do.

The element-wise logic is in sweep_helpers.cuh, `__host__ __device__` functions, and the kernels
in sweep_kernels.cu, compiled by the engine's loader (engine/runtime/loader.module_of: NVRTC, not
CuPy's cache). The CPU tests compile the helpers with the host compiler and compare them with
the NumPy functions (tests/test_exhaustive_fused_host.py); tests/test_cuda_exhaustive_fused.py
compares the kernels themselves on the GPU. The NumPy path (and the CPU stand-in for CuPy) keeps the array code.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.runtime import flag_sets

HELPERS_PATH = Path(__file__).with_name("sweep_helpers.cuh")
KERNELS_PATH = Path(__file__).with_name("sweep_kernels.cu")
HELPERS = HELPERS_PATH.read_text()       # what the CPU tests' host twin compiles
# The engine's default flag set, whatever TORCHLEAN_NVRTC_FLAG_SET says: the compile-flag matrix
# rebuilds the kernels under audit, never the harness's (--fmad=false above all: no product and
# sum contracted into an FMA the NumPy code does not do).
OPTIONS = flag_sets.options_for("default")
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
            from engine.runtime import loader
            _MODULE[dev] = loader.module_of(KERNELS_PATH, OPTIONS)
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
