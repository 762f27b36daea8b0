"""The spectral family (engine/ops/spectral.py): the packed rfft and irfft entry points and
fft_fno (the Fourier neural operator's spectral layer). They take finite inputs only (their
wrappers raise NonFiniteInputError): no "special" class.

Edge sets: rfft (21): (batch, n), batch cycling 1..3, n in FFT_EDGE_LENGTHS (powers of two,
their neighbours, odd and prime lengths, 1 and 2), n = X on its own row, an empty batch; irfft
(21): (batch, n // 2 + 1, 2) with n; fft_fno (20): grids of FNO_EDGE_GRIDS with width 1..4 and
modes cycling 1, grid // 2 + 1 and one between, a case past 2^20 input elements, an empty batch.
Values normal.

Derived bounds, forward and VJP. The FFT bound. Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed. (SIAM 2002), section 24.1, Theorem 24.2: a radix-2 Cooley-Tukey FFT of length n = 2^L with computed twiddles
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
the policy lets subnormals flush, 2 n L 2^-126 per element."""
from __future__ import annotations

import math

import numpy as np

from conformance.bad_inputs import filled, lying
from conformance.edges import NORMAL, PAST_2_20, Edge
from conformance.error_terms import DerivedRule, OVERFLOW, TINY, flush_allowed, gamma
from conformance.families.spec import (COUNT, DIMS, FINITE, RANK, AuditCase, OpSpec, Skip, normal,
                                       param, shaped_inputs)
from engine import ops
from engine.errors import (NonFiniteInputError, ParameterTypeError, ParameterValueError,
                           ShapeError, UInt32OverflowError)
from engine.types import BackendOp as Op, RuntimeEntry as Entry

GROUP = "linear algebra"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------
# powers of two and odd / prime lengths (cuFFT runs radix kernels on the first, mixed radix or
# Bluestein on the others), 1 and 2 (no interior bin), odd and even (with and without a Nyquist bin)
FFT_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 32, 64)


def _fft_length(rng, cls) -> int:
    return int(rng.choice(FFT_LENGTHS)) if cls != "shapes" else int(rng.choice((1, 2, 97, 128,
                                                                                 251, 256)))


def _fft_batch(rng, cls) -> int:
    return 0 if cls == "empty" else int(rng.integers(1, 4))


def rfft_layout(rng, cls):
    """x (batch, n)."""
    return [(_fft_batch(rng, cls), _fft_length(rng, cls))], {}


def irfft_layout(rng, cls):
    """z (batch, n // 2 + 1, 2) and n."""
    n = _fft_length(rng, cls)
    return [(_fft_batch(rng, cls), n // 2 + 1, 2)], {"n": n}


def fft_fno_layout(rng, cls):
    """x (grid, width) or (batch, grid, width), w_re and w_im (modes, width, width) with modes 1,
    grid // 2 + 1 or between (the first and the last spectral bin kept)."""
    grid = _fft_length(rng, cls)
    width = int(rng.integers(1, 5))
    m = grid // 2 + 1
    modes = int(rng.choice((1, m, int(rng.integers(1, m + 1)))))
    batch = _fft_batch(rng, cls)
    lead = (batch,) if batch != 1 or rng.integers(0, 2) else ()
    return [lead + (grid, width), (modes, width, width), (modes, width, width)], {}


# --- the fixed edge sets --------------------------------------------------------------------------
# transform lengths: powers of two, their neighbours (odd, prime: mixed radix and Bluestein in
# cuFFT), 1 and 2 (no interior bin), X = 2^20 + 1 on its own row
FFT_EDGE_LENGTHS = (1, 2, 3, 7, 31, 32, 33, 64, 251, 255, 256, 257, 1023, 1024, 1025, 4096, 4099,
                    65536, 65537)
FNO_EDGE_GRIDS = (1, 2, 3, 7, 8, 31, 32, 33, 64, 251, 256, 257, 1024, 1025, 4096, 4099, 65536,
                  65537)


def _fno_edge(batch, grid, width, modes) -> Edge:
    lead = (batch,) if batch != 1 else ()
    return Edge((lead + (grid, width), (modes, width, width), (modes, width, width)), (), NORMAL)


def _fno_edges() -> list[Edge]:
    out = []
    for i, grid in enumerate(FNO_EDGE_GRIDS):
        m = grid // 2 + 1
        modes = (1, m, max(1, m // 2))[i % 3]
        out.append(_fno_edge(1 + i % 3, grid, 1 + i % 4, modes))
    return out + [_fno_edge(1, 262145, 4, 3), _fno_edge(0, 8, 2, 5)]


def _fft_rows() -> list[tuple[int, int]]:
    return [(1 + i % 3, n) for i, n in enumerate(FFT_EDGE_LENGTHS)] + [(1, PAST_2_20), (0, 8)]


def _rfft_edges() -> list[Edge]:
    return [Edge(((b, n),), (), NORMAL) for b, n in _fft_rows()]


def _irfft_edges() -> list[Edge]:
    return [Edge(((b, n // 2 + 1, 2),), (("n", n),), NORMAL) for b, n in _fft_rows()]


# --- derived bounds -------------------------------------------------------------------------------
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


# --- rfft and irfft -------------------------------------------------------------------------------

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


# --- fft_fno --------------------------------------------------------------------------------------

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
RFFT_FORWARD = DerivedRule("derived: F(n) ||y||_2 per element", _FFT, _rfft_bound)
IRFFT_FORWARD = DerivedRule("derived: F(n) ||Y||_2 / sqrt(n) + u|x|",
                            _FFT + "; then the division by n", _irfft_bound)
FNO_FORWARD = DerivedRule("derived: X's F(n) error through the mix, gamma_(2w+1) of the mix, "
                          "C2R's F(n), the division",
                          _FFT + ", composed with the mode mix as complex dot products",
                          _fno_bound)
RFFT_VJP = DerivedRule("derived: F(n) sqrt(n) ||Y_g'||_2", _FFT + " for C2R of the halved "
                       "cotangent", _rfft_vjp_bound)
IRFFT_VJP = DerivedRule("derived: (w_k / n) F(n) sqrt(n) ||g||_2 + u|dz|",
                        _FFT + " for R2C, then the bin weights", _irfft_vjp_bound)
FNO_VJP = DerivedRule("derived: the R2C errors of x and g through dW = X^H dZ and "
                      "dX = dZ W^H, C2R's F(n) for dx",
                      _FFT + ", composed with the backward mix", _fno_vjp_bound)


# --- the determinism cases and the guards ---------------------------------------------------------

def _fno(s, x=(4, 3), w=(2, 3, 3), wi=None, fill=1.0):
    return ops.fft_fno(filled(s, x, fill), filled(s, w), filled(s, wi or w))


_SPECTRUM = r"the packed spectrum would hold \d+ floats .* over the UInt32 limit 4294967295"
_NO_SPECIAL = Skip("class:special", "the FFT entry points and fft_fno take finite inputs only "
                                    "(their wrappers raise NonFiniteInputError: one non-finite "
                                    "value would spread over every output)")


# cuFFT's order is the library's (the capsules declare it implementation-defined): both entry
# points are audited at 2^20 transform elements, past the size where its C2R changed algorithm
def _rfft_audit(rng, idx):
    return (normal(rng, 256, 4096),), {}, (256, 2049, 2)


def _irfft_audit(rng, idx):
    return (normal(rng, 256, 2049, 2),), {"n": 4096}, (256, 4096)


def _fno_audit(rng, idx):
    x, wr, wi = normal(rng, 64, 256, 16), normal(rng, 96, 16, 16), normal(rng, 96, 16, 16)
    return (x, wr * np.float32(1 / 256), wi * np.float32(1 / 256)), {}, (64, 256, 16)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.fft_fno, fft_fno_layout, _fno_edges, catalogue=43,
        near_overflow=2.0 ** 45, cancellation=None, wide_max_exp=45, skips=(_NO_SPECIAL,),
        determinism=AuditCase(14, _fno_audit),
        error_inputs=(
            *shaped_inputs(26, "fft_fno", lambda s, a: ops.fft_fno(
                a, filled(s, (2, 3, 3)), filled(s, (2, 3, 3))), (4, 3)),
            param(100, "fft_fno: modes 0", DIMS, lambda s: _fno(s, w=(0, 3, 3)), ShapeError,
                  r"modes = w_re.shape\[0\] = 0 is outside \[1, grid // 2 \+ 1\] = \[1, 3\]"),
            param(101, "fft_fno: modes above grid // 2 + 1", DIMS,
                  lambda s: _fno(s, w=(4, 3, 3)), ShapeError,
                  r"modes = w_re.shape\[0\] = 4 is outside \[1, grid // 2 \+ 1\] = \[1, 3\] "
                  r"for grid 4"),
            param(102, "fft_fno: grid 0", DIMS, lambda s: _fno(s, x=(0, 3)), ShapeError,
                  r"grid and width must be at least 1, got x shape \(0, 3\)"),
            param(103, "fft_fno: width 0", DIMS,
                  lambda s: _fno(s, x=(2, 4, 0), w=(1, 0, 0)), ShapeError,
                  r"grid and width must be at least 1, got x shape \(2, 4, 0\)"),
            param(104, "fft_fno: w_im shape differs", DIMS,
                  lambda s: _fno(s, wi=(2, 3, 2)), ShapeError,
                  r"w_re and w_im must both be \(modes, width, width\) = \(modes, 3, 3\), "
                  r"got \(2, 3, 3\) and \(2, 3, 2\)"),
            param(105, "fft_fno: weight width", DIMS, lambda s: _fno(s, w=(2, 2, 2)),
                  ShapeError, r"got \(2, 2, 2\) and \(2, 2, 2\)"),
            param(106, "fft_fno: rank 4", RANK, lambda s: _fno(s, x=(1, 1, 4, 3)),
                  ShapeError, r"takes x \(grid, width\) or \(batch, grid, width\), got "
                               r"shape \(1, 1, 4, 3\)"),
            param(107, "fft_fno: batch x grid x width 2^32", COUNT,
                  lambda s: ops.fft_fno(lying(s, (2**16, 2**8, 2**8)), filled(s, (1, 256, 256)),
                                        filled(s, (1, 256, 256))),
                  UInt32OverflowError, _SPECTRUM),
            param(108, "fft_fno: NaN in x", FINITE, lambda s: _fno(s, fill=float("nan")),
                  NonFiniteInputError, r"fft_fno: x holds a NaN or an infinity"),
            param(109, "fft_fno: inf in w_im", FINITE,
                  lambda s: ops.fft_fno(filled(s, (4, 3)), filled(s, (2, 3, 3)),
                                        filled(s, (2, 3, 3), float("inf"))),
                  NonFiniteInputError, r"fft_fno: w_im holds a NaN or an infinity")),
        summary_group=GROUP, forward_rule=FNO_FORWARD, vjp_rule=FNO_VJP),
    OpSpec(Entry.rfft, rfft_layout, _rfft_edges, catalogue=44,
        near_overflow=2.0 ** 100, cancellation=None, wide_max_exp=100, skips=(_NO_SPECIAL,),
        determinism=AuditCase(16, _rfft_audit),
        error_inputs=(
            *shaped_inputs(24, "rfft", lambda s, a: ops.rfft(a), (2, 3)),
            param(110, "rfft: rank 1", RANK, lambda s: ops.rfft(filled(s, (3,))), ShapeError,
                  r"takes x \(batch, n\), got shape \(3,\)"),
            param(111, "rfft: n 0", DIMS, lambda s: ops.rfft(filled(s, (2, 0))), ShapeError,
                  r"transform length n must be at least 1, got shape \(2, 0\)"),
            param(112, "rfft: spectrum 2^32", COUNT,
                  lambda s: ops.rfft(lying(s, (2, 2**31))), UInt32OverflowError, _SPECTRUM),
            param(113, "rfft: NaN", FINITE,
                  lambda s: ops.rfft(filled(s, (2, 3), float("nan"))), NonFiniteInputError,
                  r"rfft: x holds a NaN or an infinity")),
        summary_group=GROUP, forward_rule=RFFT_FORWARD, vjp_rule=RFFT_VJP),
    OpSpec(Entry.irfft, irfft_layout, _irfft_edges, catalogue=45,
        near_overflow=2.0 ** 100, cancellation=None, wide_max_exp=100, skips=(_NO_SPECIAL,),
        determinism=AuditCase(17, _irfft_audit),
        error_inputs=(
            *shaped_inputs(25, "irfft", lambda s, a: ops.irfft(a, 2), (2, 2, 2)),
            param(114, "irfft: n 0", DIMS, lambda s: ops.irfft(filled(s, (2, 1, 2)), 0),
                  ParameterValueError, r"n must be a whole number in \[1, 2\^32\), got 0"),
            param(115, "irfft: float n", DIMS,
                  lambda s: ops.irfft(filled(s, (2, 3, 2)), 4.0), ParameterTypeError,
                  r"n must be a whole number, got float 4.0"),
            param(116, "irfft: bins differ", DIMS,
                  lambda s: ops.irfft(filled(s, (2, 4, 2)), 4), ShapeError,
                  r"\(batch, 3, 2\) for n = 4, got shape \(2, 4, 2\)"),
            param(117, "irfft: inf", FINITE,
                  lambda s: ops.irfft(filled(s, (2, 3, 2), float("inf")), 4),
                  NonFiniteInputError, r"irfft: z holds a NaN or an infinity")),
        summary_group=GROUP, forward_rule=IRFFT_FORWARD, vjp_rule=IRFFT_VJP),
)
