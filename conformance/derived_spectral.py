"""Derived error bounds of the spectral family (packed rfft, irfft, fft_fno), forward and VJP.

The FFT bound. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed. (SIAM 2002),
section 24.1, Theorem 24.2: a radix-2 Cooley-Tukey FFT of length n = 2^L with computed twiddles
of error |w_hat - w| <= mu satisfies

    ||y_hat - y||_2 <= L eta / (1 - L eta) ||y||_2,   eta = mu + gamma_4 (sqrt 2 + mu),

and ||y||_2 = sqrt(n) ||x||_2 (Parseval), so every element, real or imaginary part, is within
that much of the exact DFT. `fft_factor(n)` is the factor F(n) in |error| <= F(n) ||y||_2:

- mu = 2u: cuFFT's float twiddles are within a float32 rounding of the exact roots of unity
  (sqrt 2 u for a complex value rounded per part; 2u covers it). NumPy's float64 twiddles are far
  better, and the reference capsule rounds its float64 result once, which this bound covers.
- n a power of two: L = log2 n + 1 and a safety factor 2 (declared): R2C and C2R are computed
  as a complex FFT of length n / 2 plus one twiddle stage that splits (merges) the even and odd
  halves; that stage is one more butterfly level of the theorem's kind (L + 1), and the factor
  2 covers the split stage's extra addition per output.
- any other n (cuFFT's radix-3, 5, 7 kernels, or Bluestein's algorithm for other primes): a
  declared bound, L = 2 ceil(log2(2n - 1)) + 2 and a safety factor 8. Bluestein computes the DFT as
  a chirp product, two radix-2 FFTs of length M >= 2n - 1 and a second chirp product: two
  theorem-24.2 transforms of length M (2 log2 M levels), two complex products (2 more), and the
  norms of its intermediates exceed ||y||_2 by at most sqrt(M / n) <= 2 each (the factor 8
  covers both and the pointwise product); a mixed-radix length-r butterfly is an r-term DFT per
  level, within the same count of levels for r <= 7. This is not a theorem for cuFFT's actual
  kernels (NVIDIA does not publish them): it is declared, with this reason, and the evidence says
  how close the campaigns came to it.
- n = 1: no arithmetic (the transform is the identity on the real part): F = 0.

Everything else is first order in u: the mode mix's complex dot products are gamma_(2 width + 1)
of their sum of |terms|, each scaling by 1/n or w_k / n adds u relative, and the errors of an
earlier stage propagate through the linear stages by the triangle inequality. Each bound adds the
reference's own float64 error (references/_spectral.py, F64_RELATIVE of the same norms) and, when
the policy lets subnormals flush, 2 n L 2^-126 per element.
"""
from __future__ import annotations

import math

import numpy as np

from conformance.error_terms import DerivedRule, OVERFLOW, TINY, flush_allowed, gamma
from engine.types import BackendOp as Op, RuntimeEntry as Entry

# The reference's float64 path (references/_spectral.py): Higham's factor with u = 2^-53 at
# lengths up to 2^32 (log2 n <= 33 levels, the factor 8 below for mixed radix and Bluestein):
# 8 * 33 * (2^-53 + gamma_4 (sqrt 2 + 2^-53)) < 8 * 33 * 7 * 2^-53.
F64_RELATIVE = 8 * 33 * 7 * 2.0 ** -53


def weights(n: int, count: int) -> np.ndarray:
    """w_k for k < count: 1 at DC and (even n) Nyquist, 2 elsewhere (the bins' Hermitian weight)."""
    w = np.full(count, 2.0)
    w[0] = 1.0
    if n % 2 == 0 and n // 2 < count:
        w[n // 2] = 1.0
    return w


def real_bins(n: int, count: int) -> np.ndarray:
    """The bins whose imaginary part C2R drops: DC and (even n) Nyquist."""
    return weights(n, count) == 1.0


def _levels(n: int) -> tuple[float, float]:
    """(L, safety factor) of fft_factor's docstring."""
    if n & (n - 1) == 0:
        return math.log2(n) + 1, 2.0
    return 2 * math.ceil(math.log2(2 * n - 1)) + 2, 8.0


def fft_factor(n: int, unit: float) -> float:
    """F(n): a length-n R2C or C2R is within F(n) ||y||_2 of the exact DFT, per element."""
    if n <= 1:
        return 0.0
    levels, safety = _levels(n)
    mu = 2 * unit
    eta = mu + float(gamma(4, unit)) * (math.sqrt(2) + mu)
    return safety * levels * eta / (1 - levels * eta)


def _per_transform(n: int, unit: float) -> float:
    """The capsule's factor plus the reference's own (float64 path) error."""
    return fft_factor(n, unit) + F64_RELATIVE


def _floor(ctx, n: int) -> float:
    return 2 * n * _levels(max(n, 2))[0] * TINY if flush_allowed(ctx.policy) else 0.0


def _guard(bound, norm):
    """+inf where an intermediate of norm `norm` could overflow float32 (error_models: any result
    is admissible there, but an infinite rounded reference must still be met)."""
    return np.where(np.broadcast_to(norm, np.shape(bound)) * 4 >= OVERFLOW, np.inf, bound)


def _hermitian_norm(c, n: int) -> np.ndarray:
    """||Y||_2 of the length-n Hermitian extension of half spectra c [..., k] (k along axis -1):
    sum_k w_k |c_k|^2 with the imaginary parts of DC and Nyquist dropped (C2R reads only re)."""
    m = c.shape[-1]
    re, im = np.real(c), np.where(real_bins(n, m), 0.0, np.imag(c))
    return np.sqrt(np.sum(weights(n, m) * (re * re + im * im), axis=-1))


def _abs1(c):
    """|re| + |im|: bounds |c| and each part's error multiplier."""
    return np.abs(np.real(c)) + np.abs(np.imag(c))


# --- rfft and irfft ----------------------------------------------------------------------------

def _rfft_bound(ref, ctx, unit):
    x = np.asarray(ctx.inputs[0], np.float64)
    n = x.shape[1]
    norm_y = math.sqrt(n) * np.sqrt(np.sum(x * x, axis=1))            # ||y||_2 per row
    b = (_per_transform(n, unit) * norm_y * (1 + 8 * unit) + _floor(ctx, n))[:, None, None]
    return _guard(np.broadcast_to(b, np.shape(ref.exact)), norm_y[:, None, None])


def _irfft_bound(ref, ctx, unit):
    z = np.asarray(ctx.inputs[0], np.float64)
    n = int(ctx.params["n"])
    norm = _hermitian_norm(z[..., 0] + 1j * z[..., 1], n)              # ||Y||_2 per row
    c2r = _per_transform(n, unit) * math.sqrt(n) * norm / n             # C2R's error, over n
    b = (c2r * (1 + 8 * unit))[:, None] + unit * np.abs(np.asarray(ref.exact)) + _floor(ctx, n)
    return _guard(b, (math.sqrt(n) * norm)[:, None])


def _rfft_vjp_bound(ref, ctx, unit):
    # dx = C2R(g with interior bins halved): C2R's error on the halved spectrum's norm; halving is
    # exact above the subnormal range (a subnormal loses at most 2^-150 per bin, weighted by w_k)
    n = np.shape(ctx.inputs[0])[1]
    g = np.asarray(ctx.g, np.float64)
    gc = (g[..., 0] + 1j * g[..., 1]) / weights(n, g.shape[1])
    norm = _hermitian_norm(gc, n)
    b = _per_transform(n, unit) * math.sqrt(n) * norm * (1 + 8 * unit) + 2 * n * 2.0 ** -150
    b = np.broadcast_to((b + _floor(ctx, n))[:, None], np.shape(ref.exact))
    return _guard(b, (math.sqrt(n) * norm)[:, None])


def _irfft_vjp_bound(ref, ctx, unit):
    # dz = (w_k / n) R2C(g): R2C's error F sqrt(n) ||g||_2, scaled by w_k / n, and the scaling's u
    n = int(ctx.params["n"])
    g = np.asarray(ctx.g, np.float64)
    norm_s = math.sqrt(n) * np.sqrt(np.sum(g * g, axis=1))
    m = n // 2 + 1
    scale = weights(n, m) / n
    b = (_per_transform(n, unit) * norm_s[:, None] * scale[None, :] * (1 + 8 * unit))[..., None]
    b = b + unit * np.abs(np.asarray(ref.exact)) + _floor(ctx, n)
    return _guard(b, norm_s[:, None, None])


# --- fft_fno -------------------------------------------------------------------------------------

def _fno_parts(ctx, unit):
    """Shared pieces: x3, |w| (|re| + |im|), the spectrum X (float64), its error eX per column."""
    x = np.asarray(ctx.inputs[0], np.float64)
    x3 = x.reshape((-1,) + x.shape[-2:])
    grid = x3.shape[1]
    wr, wi = (np.asarray(a, np.float64) for a in ctx.inputs[1:])
    modes = wr.shape[0]
    xk = np.fft.rfft(x3, axis=1)[:, :modes]                              # (b, k, c)
    ex = _per_transform(grid, unit) * math.sqrt(grid) * np.sqrt(np.sum(x3 * x3, axis=1))  # (b, c)
    return x3, grid, modes, wr + 1j * wi, np.abs(wr) + np.abs(wi), xk, ex


def _fno_bound(ref, ctx, unit):
    x3, grid, modes, w, aw, xk, ex = _fno_parts(ctx, unit)
    width = x3.shape[2]
    f = _per_transform(grid, unit)
    gam = float(gamma(2 * width + 1, unit))
    m1 = np.einsum("bkc,kco->bko", _abs1(xk), aw)                     # sum_c |X||w|
    ez = gam * m1 + np.einsum("bc,kco->bko", ex, aw)                   # Z's error
    z = np.einsum("bkc,kco->bko", xk, w)
    wk = weights(grid, modes)[None, :, None]
    propagated = np.sum(wk * ez, axis=1) / grid                        # (b, o)
    zhat = np.abs(z) + ez
    norm_z = np.sqrt(np.sum(wk * zhat * zhat, axis=1))                  # ||Y_Z||_2 upper bound
    c2r = f * math.sqrt(grid) * norm_z / grid
    ref64 = F64_RELATIVE * np.sum(wk * (m1 + np.abs(z)), axis=1) / grid
    b = ((propagated + c2r + ref64) * (1 + 16 * unit))[:, None, :] + \
        unit * np.abs(np.asarray(ref.exact, np.float64)).reshape(x3.shape) + _floor(ctx, grid)
    b = _guard(b, (math.sqrt(grid) * (norm_z + np.max(ex, initial=0.0)))[:, None, :]
               * np.max(aw, initial=1.0))
    return b.reshape(np.shape(ref.exact))


def _fno_vjp_bound(ref, ctx, unit):
    x3, grid, modes, w, aw, xk, ex = _fno_parts(ctx, unit)
    width = x3.shape[2]
    f = _per_transform(grid, unit)
    g3 = np.asarray(ctx.g, np.float64).reshape(x3.shape)
    scale = (weights(grid, modes) / grid)[None, :, None]
    s = np.fft.rfft(g3, axis=1)[:, :modes]                              # (b, k, o)
    s.imag[:, real_bins(grid, modes)] = 0.0
    es = f * math.sqrt(grid) * np.sqrt(np.sum(g3 * g3, axis=1))         # (b, o)
    dz = s * scale
    edz = scale * es[:, None, :] + unit * np.abs(dz)                    # (b, k, o)
    big = _guard(np.zeros(1), np.max(np.abs(x3), initial=0.0) * np.max(np.abs(g3), initial=0.0)
                 * grid * grid * np.max(aw, initial=1.0) * max(x3.shape[0], width))
    if ctx.input_index == 0:
        gam = float(gamma(2 * width + 2, unit))
        dxk = np.einsum("bko,kco->bkc", dz, np.conj(w))
        edx = np.einsum("bko,kco->bkc", edz, aw) + gam * np.einsum("bko,kco->bkc", _abs1(dz), aw)
        spec = dxk / weights(grid, modes)[None, :, None]
        norm = np.sqrt(np.sum(weights(grid, modes)[None, :, None] * (np.abs(spec) +
                                                                     edx) ** 2, axis=1))
        ref64 = F64_RELATIVE * np.sum(np.einsum("bko,kco->bkc", _abs1(dz), aw), axis=1)
        b = (np.sum(edx, axis=1) + f * math.sqrt(grid) * norm + ref64) * (1 + 16 * unit)
        b = np.broadcast_to(b[:, None, :], x3.shape) + _floor(ctx, grid) + big[0]
        return np.asarray(b).reshape(np.shape(ref.exact))
    gam = float(gamma(2 * x3.shape[0] + 2, unit))
    ax = _abs1(xk)
    adz = _abs1(dz)
    edw = (np.einsum("bc,bko->kco", ex, adz) + np.einsum("bkc,bko->kco", ax, edz) +
           np.einsum("bc,bko->kco", ex, edz) + gam * np.einsum("bkc,bko->kco", ax, adz))
    ref64 = F64_RELATIVE * np.einsum("bkc,bko->kco", ax, adz)
    b = (edw + ref64) * (1 + 16 * unit) + _floor(ctx, grid) + big[0]
    return b.reshape(np.shape(ref.exact))


_FFT = "Higham Thm 24.2 (F(n) ||y||_2), declared factors for non-power-of-two n"
FORWARD_RULES = {
    Entry.rfft: DerivedRule("derived: F(n) ||y||_2 per element", _FFT, _rfft_bound),
    Entry.irfft: DerivedRule("derived: F(n) ||Y||_2 / sqrt(n) + u|x|",
                             _FFT + "; then the division by n", _irfft_bound),
    Op.fft_fno: DerivedRule("derived: X's F(n) error through the mix, gamma_(2w+1) of the mix, "
                            "C2R's F(n), the division",
                            _FFT + ", composed with the mode mix as complex dot products",
                            _fno_bound),
}
VJP_RULES = {
    Entry.rfft: DerivedRule("derived: F(n) sqrt(n) ||Y_g'||_2", _FFT + " for C2R of the halved "
                            "cotangent", _rfft_vjp_bound),
    Entry.irfft: DerivedRule("derived: (w_k / n) F(n) sqrt(n) ||g||_2 + u|dz|",
                             _FFT + " for R2C, then the bin weights", _irfft_vjp_bound),
    Op.fft_fno: DerivedRule("derived: the R2C errors of x and g through dW = X^H dZ and "
                            "dX = dZ W^H, C2R's F(n) for dx",
                            _FFT + ", composed with the backward mix", _fno_vjp_bound),
}
