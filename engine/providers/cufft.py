"""The cufft provider: the packed rfft / irfft entry points and the fused spectral convolution
fft_fno, forward and VJP. cuFFT does the transforms (single-precision R2C and C2R through CuPy's
`cupy.cuda.cufft.Plan1d`); our kernels of engine/csrc/cuda/spectral.cu do everything else: the
layout moves, the mode mixing (forward Z = X W, backward dX = dZ W^H and dW = X^H dZ with the
Hermitian bin weights) and the 1/n scalings, so no CuPy float ufunc runs on any path (CuPy
compiles its kernels with -ftz=true; ours use the loader's --ftz=false).

Plans are cached per (type, n, rows), least recently used first out past PLAN_CACHE_SIZE; each
plan's work area comes from CuPy's allocator, i.e. the runtime's exact-size cache, and returns to
it when the plan is dropped (`release_plans()` drops them all).

cuFFT's single-precision results are not correctly rounded, its algorithm (radix, Bluestein for
large primes) and accumulation order are the library's, and NVIDIA documents no subnormal
behaviour: the policy says implementation-defined for all three, as for the cublas capsules.
C2R overwrites its input, so it is always handed a buffer of ours, never the caller's.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from engine.capsule import KernelHandler, standard_capsule
from engine.errors import ShapeError
from engine.runtime.kernel_source import NativeSource
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, RuntimeEntry as Entry, Subnormals, TrustLevel,
                          VJPMode)

SPECTRAL = "spectral.cu"
INT32_MAX = 2**31 - 1
PLAN_CACHE_SIZE = 16
# The cuFFT entry points and our kernels each capsule runs, forward and VJP: its provenance, and
# the files its build fingerprint hashes (conformance/fingerprint.py reads CUFFT_SOURCES).
CUFFT_SYMBOLS = {
    Entry.rfft: ("cufftExecR2C", "cufftExecC2R"),
    Entry.irfft: ("cufftExecC2R", "cufftExecR2C"),
    Op.fft_fno: ("cufftExecR2C", "cufftExecC2R"),
}
CUFFT_SOURCES = {
    Entry.rfft: NativeSource(SPECTRAL, ("tl_spec_pack_real",),
                             ("tl_spec_halve_interior", "tl_spec_real_bins", "tl_spec_real_part")),
    Entry.irfft: NativeSource(SPECTRAL, ("tl_spec_real_bins", "tl_spec_scale", "tl_spec_real_part"),
                              ("tl_spec_irfft_bwd", "tl_spec_pack_real")),
    Op.fft_fno: NativeSource(SPECTRAL, ("tl_spec_to_channels", "tl_spec_mix_fwd",
                                        "tl_spec_real_bins", "tl_spec_from_channels",
                                        "tl_spec_pack_real", "tl_spec_real_part"),
                             ("tl_spec_mix_bwd_dx", "tl_spec_mix_bwd_dw", "tl_spec_real_bins")),
}

_plans: "OrderedDict[tuple, object]" = OrderedDict()


def _launch():
    from engine.providers.native_cuda import launch
    return launch


def _plan(fft_type: str, n: int, rows: int):
    """The cached cuFFT plan of `rows` transforms of length n (n >= 2, rows >= 1)."""
    from cupy.cuda import cufft
    key = (fft_type, n, rows, _launch().cupy().cuda.Device().id)
    plan = _plans.get(key)
    if plan is None:
        if n > INT32_MAX or rows > INT32_MAX:
            raise ShapeError(f"cufft: {rows} transforms of length {n} exceed the int32 range of "
                             f"the cuFFT plan API ({INT32_MAX}); split the batch")
        kind = cufft.CUFFT_R2C if fft_type == "r2c" else cufft.CUFFT_C2R
        plan = _plans[key] = cufft.Plan1d(n, kind, rows)
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
    return plan


def release_plans() -> None:
    """Drop every cached plan: their work areas go back to the device cache."""
    _plans.clear()


def r2c(x):
    """Unnormalised R2C of each row of C-contiguous float32 (rows, n): complex64 (rows, m)."""
    L = _launch()
    cp = L.cupy()
    rows, n = x.shape
    out = cp.empty((rows, n // 2 + 1), np.complex64)
    if out.size == 0:
        return out
    if n == 1:
        L.kernel(SPECTRAL, "tl_spec_pack_real")(L.grid(rows), (x, out, L.U32(rows)))
        return out
    from cupy.cuda import cufft
    if x.data.ptr % 16:
        # cuFFT refuses real input that starts off a complex element's alignment
        # (CUFFT_INVALID_VALUE at a 4-byte offset), and the engine hands kernels views at 4-byte
        # multiples (the halves of autograd.split): such input is copied to a fresh block first
        x = L.copy(x)
    _plan("r2c", n, rows).fft(x, out, cufft.CUFFT_FORWARD)
    return out


def c2r(z, n: int):
    """Unnormalised C2R of each row of complex64 (rows, n//2+1), which it overwrites (cuFFT may,
    and the imaginary parts of DC and (even n) Nyquist are zeroed first: C2R's result is undefined
    for a non-Hermitian input, and they are not read by the op's rule): float32 (rows, n)."""
    L = _launch()
    rows = z.shape[0]
    out = L.empty((rows, n))
    if out.size == 0:
        return out
    if n == 1:
        L.kernel(SPECTRAL, "tl_spec_real_part")(L.grid(rows), (z, out, L.U32(rows)))
        return out
    from cupy.cuda import cufft
    L.kernel(SPECTRAL, "tl_spec_real_bins")(L.grid(rows), (z, L.U32(rows), L.U32(z.shape[1]),
                                                           L.U32(n)))
    _plan("c2r", n, rows).fft(z, out, cufft.CUFFT_INVERSE)
    return out


def _complex_copy(z):
    """A complex64 (rows, m) copy of packed float32 (rows, m, 2): C2R may overwrite its input."""
    return _launch().copy(z).view(np.complex64).reshape(z.shape[:2])


# --- rfft / irfft ---------------------------------------------------------------------------------

def _rfft(x):
    return r2c(x).view(np.float32).reshape(x.shape[0], x.shape[1] // 2 + 1, 2)


def rfft_vjp(inputs, output, g):
    """dx = C2R of g with its interior bins halved (C2R weights them 2, the adjoint 1)."""
    L = _launch()
    (x,) = inputs
    rows, n = x.shape
    m = n // 2 + 1
    half = L.empty((rows, m, 2))
    if half.size:
        L.kernel(SPECTRAL, "tl_spec_halve_interior")(
            L.grid(rows * m), (L.contiguous(g), half, L.U32(rows), L.U32(m), L.U32(n)))
    return (c2r(half.view(np.complex64).reshape(rows, m), n),)


def _irfft(z, n):
    L = _launch()
    raw = c2r(_complex_copy(z), n)
    out = L.empty(raw.shape)
    if out.size:
        L.kernel(SPECTRAL, "tl_spec_scale")(L.grid(out.size), (raw, out, L.U32(out.size),
                                                              L.U32(n)))
    return out


def irfft_vjp(inputs, output, g, n):
    """dz = (w_k / n) R2C(g), imaginary 0 at DC and (even n) Nyquist (C2R does not read them)."""
    L = _launch()
    (z,) = inputs
    rows, m = z.shape[0], z.shape[1]
    spec = r2c(L.contiguous(g))
    dz = L.empty((rows, m, 2))
    if dz.size:
        L.kernel(SPECTRAL, "tl_spec_irfft_bwd")(
            L.grid(rows * m), (spec, dz, L.U32(rows), L.U32(m), L.U32(n)))
    return (dz,)


# --- fft_fno --------------------------------------------------------------------------------------

def _dims(x, w_re):
    b, g, w = (x.shape if x.ndim == 3 else (1,) + x.shape)
    return b, g, w, g // 2 + 1, w_re.shape[0]


def _spectrum(x, b, g, w):
    """X = R2C over the grid of x (b, g, w): complex64 (b * w, g // 2 + 1), channels first."""
    L = _launch()
    xt = L.empty((b * w, g))
    L.kernel(SPECTRAL, "tl_spec_to_channels")(L.grid(xt.size), (L.contiguous(x), xt, L.U32(b),
                                                                 L.U32(g), L.U32(w)))
    return r2c(xt)


def _to_grid(spec, shape, b, g, w, n):
    """C2R of the channels-first spectrum (overwritten), back to (b, g, w), divided by n."""
    L = _launch()
    yt = c2r(spec, g)
    y = L.empty(shape)
    L.kernel(SPECTRAL, "tl_spec_from_channels")(L.grid(y.size), (yt, y, L.U32(b), L.U32(g),
                                                                 L.U32(w), L.U32(n)))
    return y


def _fft_fno(x, w_re, w_im):
    L = _launch()
    b, g, w, m, k = _dims(x, w_re)
    if x.size == 0:
        return L.empty(x.shape)
    spec = _spectrum(x, b, g, w)
    z = L.cupy().empty((b * w, m), np.complex64)
    L.kernel(SPECTRAL, "tl_spec_mix_fwd")(L.grid(z.size), (spec, w_re, w_im, z, L.U32(b),
                                                           L.U32(w), L.U32(m), L.U32(k)))
    return _to_grid(z, x.shape, b, g, w, g)


def fft_fno_vjp(inputs, output, g_out):
    """The fused backward: S = R2C(g), X = R2C(x) again, dW from X and S (fixed order over the
    batch), D = S W^H / grid, dx = C2R(D); see spectral.cu for the bin weights."""
    L = _launch()
    x, w_re, w_im = inputs
    b, g, w, m, k = _dims(x, w_re)
    if x.size == 0:   # an empty batch: nothing flows back, dW sums no terms
        return L.empty(x.shape), L.zeros(w_re.shape), L.zeros(w_im.shape)
    dwr, dwi = L.empty(w_re.shape), L.empty(w_im.shape)
    spec_x = _spectrum(x, b, g, w)
    spec_g = _spectrum(g_out, b, g, w)
    L.kernel(SPECTRAL, "tl_spec_mix_bwd_dw")(
        L.grid(dwr.size), (spec_x, spec_g, dwr, dwi, L.U32(b), L.U32(w), L.U32(m), L.U32(k),
                           L.U32(g)))
    d = L.cupy().empty((b * w, m), np.complex64)
    L.kernel(SPECTRAL, "tl_spec_mix_bwd_dx")(
        L.grid(d.size), (spec_g, w_re, w_im, d, L.U32(b), L.U32(w), L.U32(m), L.U32(k),
                         L.U32(g)))
    return _to_grid(d, x.shape, b, g, w, 1), dwr, dwi


# --- capsules -------------------------------------------------------------------------------------

CUFFT = NumericalPolicy(Rounding.nearest_even, Subnormals.implementation_defined,
                        Contraction.implementation_defined, Reduction.implementation_defined)
_SUMMARY = {
    Entry.rfft: "cuFFT single-precision R2C, unnormalised, packed [re, im]: within the FFT bound "
                "of conformance/families/spectral.py (Higham Thm 24.2 with a declared factor for non-"
                "power-of-two lengths); cuFFT results are not correctly rounded",
    Entry.irfft: "cuFFT single-precision C2R of a copy, then our division by n "
                 "(spectral.cu tl_spec_scale): within the derived FFT bound",
    Op.fft_fno: "cuFFT R2C over the grid, our double-accumulated mode mix (spectral.cu), cuFFT "
                "C2R, our division by grid: within the derived bound of the composition",
}
_FORWARD = {Entry.rfft: _rfft, Entry.irfft: _irfft, Op.fft_fno: _fft_fno}
_VJP = {Entry.rfft: rfft_vjp, Entry.irfft: irfft_vjp, Op.fft_fno: fft_fno_vjp}


def _unavailable() -> str | None:
    try:
        from cupy.cuda import cufft  # noqa: F401
    except Exception as exc:   # no CuPy, or a CuPy build without cuFFT
        return f"cuFFT is not available through CuPy ({type(exc).__name__}: {exc})"
    return None


def register_all(reg) -> None:
    for op, forward in _FORWARD.items():
        src = CUFFT_SOURCES[op]
        cap = standard_capsule(
            op, Provider.cufft, Device.cuda, trust=TrustLevel.checked,
            vjp_mode=VJPMode.backend_vjp, policy=CUFFT, source_file="engine/providers/cufft.py",
            native_symbol=", ".join(CUFFT_SYMBOLS[op] + tuple(f"{SPECTRAL}:{s}"
                                                              for _, s in src.kernels())),
            value_summary=_SUMMARY[op],
            notes="cuFFT plans cached per (type, n, rows); work areas from the device cache; "
                  "C2R only ever overwrites a buffer of ours")
        reg.register(cap, KernelHandler(cap.name, op, Provider.cufft, Device.cuda, forward,
                                        _VJP[op], unavailable=_unavailable))
        # engine/ops/spectral.py's local VJP rules run the same functions on CUDA, reached
        # through the registry (the ops never import a provider)
        reg.provide(op, _VJP[op])
