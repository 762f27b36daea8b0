"""Spectral ops: the packed real FFT entry points (rfft, irfft: RuntimeEntry capsules, not
BackendOps) and the fused 1-D spectral convolution fft_fno, with their local VJP rules.

Conventions (docs/OPS.md): theta_jk = 2 pi j k / n, m = n // 2 + 1 bins, w_k = 1 at k = 0 and, for
even n, at k = n / 2 (the bins C2R reads as real), 2 elsewhere.
  rfft:  z[b, k] = sum_j x[b, j] e^{-i theta_jk}, packed as [re, im]; unnormalised.
  irfft: x[b, j] = (1/n) sum_k w_k (zr_k cos theta_jk - zi_k sin theta_jk): the imaginary parts
         of the DC and Nyquist bins are dropped, as by cuFFT's C2R and numpy.fft.irfft.
  fft_fno: X = rfft over grid; Z[k, o] = sum_c X[k, c] (w_re + i w_im)[k, c, o] for k < modes,
         0 above; y = irfft(Z) (so C2R(Z) / grid, divided by grid once).
The VJP rules below follow from these real-linear maps (the adjoint of each)."""
from __future__ import annotations

import numpy as np

from engine.errors import NonFiniteInputError, ParameterTypeError, ParameterValueError, \
    ShapeError, UInt32OverflowError
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops._xp import xp_of
from engine.registry import device_rule
from engine.runtime.buffer import UINT32_MAX
from engine.tensor import Tensor
from engine.types import BackendOp as Op, RuntimeEntry as Entry


def bins(n: int) -> int:
    """The half spectrum's length n // 2 + 1."""
    return n // 2 + 1


def hermitian_weights(n: int, count: int) -> np.ndarray:
    """w_k for k < count: 1 at DC and (even n) Nyquist, 2 elsewhere."""
    w = np.full(count, 2.0)
    w[0] = 1.0
    if n % 2 == 0 and n // 2 < count:
        w[n // 2] = 1.0
    return w


def _finite(op: str, t: Tensor, what: str) -> None:
    """The FFT spreads one non-finite input over every output (and inf - inf makes NaNs whose
    places depend on the algorithm), so these ops take finite inputs only."""
    data = t.buffer.data
    if data.size and not bool(xp_of(data).isfinite(data).all()):
        raise NonFiniteInputError(
            f"{op}: {what} holds a NaN or an infinity; the transform takes finite values only "
            "(one non-finite input would spread over every output): clean the input first")


def _n_param(op: str, n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ParameterTypeError(f"{op}: n must be a whole number, got {type(n).__name__} {n!r}")
    if not 1 <= int(n) <= UINT32_MAX:
        raise ParameterValueError(f"{op}: n must be a whole number in [1, 2^32), got {n!r}")
    return int(n)


def _spectrum_fits(op: str, rows: int, m: int, width: int = 1) -> None:
    """The packed spectrum has 2 rows m width floats: it must fit UInt32 like every buffer."""
    count = 2 * rows * m * width
    if count > UINT32_MAX:
        raise UInt32OverflowError(
            f"{op}: the packed spectrum would hold {count} floats (2 x {rows} x {m}"
            + (f" x {width}" if width != 1 else "") + f"), over the UInt32 limit {UINT32_MAX}; "
            "split the batch")


def rfft(x: Tensor) -> Tensor:
    if x.ndim != 2:
        raise ShapeError(f"rfft: takes x (batch, n), got shape {x.shape}; reshape first")
    batch, n = x.shape
    if n < 1:
        raise ShapeError(f"rfft: the transform length n must be at least 1, got shape {x.shape}")
    _spectrum_fits("rfft", batch, bins(n))
    _finite("rfft", x, "x")
    return apply(Entry.rfft, (x,), (batch, bins(n), 2))


def irfft(z: Tensor, n: int) -> Tensor:
    n = _n_param("irfft", n)
    if z.ndim != 3 or z.shape[1:] != (bins(n), 2):
        raise ShapeError(f"irfft: takes z (batch, n // 2 + 1, 2) = (batch, {bins(n)}, 2) for "
                         f"n = {n}, got shape {z.shape}")
    _finite("irfft", z, "z")
    return apply(Entry.irfft, (z,), (z.shape[0], n), {"n": n})


def fft_fno(x: Tensor, w_re: Tensor, w_im: Tensor) -> Tensor:
    if x.ndim not in (2, 3):
        raise ShapeError(f"fft_fno: takes x (grid, width) or (batch, grid, width), got shape "
                         f"{x.shape}")
    grid, width = x.shape[-2:]
    if grid < 1 or width < 1:
        raise ShapeError(f"fft_fno: grid and width must be at least 1, got x shape {x.shape}")
    if w_re.ndim != 3 or w_re.shape != w_im.shape or w_re.shape[1:] != (width, width):
        raise ShapeError(f"fft_fno: w_re and w_im must both be (modes, width, width) = "
                         f"(modes, {width}, {width}), got {w_re.shape} and {w_im.shape}")
    modes = w_re.shape[0]
    if not 1 <= modes <= bins(grid):
        raise ShapeError(f"fft_fno: modes = w_re.shape[0] = {modes} is outside [1, grid // 2 + "
                         f"1] = [1, {bins(grid)}] for grid {grid}; keep at most that many modes")
    batch = x.shape[0] if x.ndim == 3 else 1
    _spectrum_fits("fft_fno", batch, bins(grid), width)
    for t, what in ((x, "x"), (w_re, "w_re"), (w_im, "w_im")):
        _finite("fft_fno", t, what)
    return apply(Op.fft_fno, (x, w_re, w_im), x.shape)


# --- local VJP rules (NumPy, float64 evaluation rounded once per gradient) ------------------------
# On CUDA each runs the cuFFT provider's VJP, lent through the registry (ops never import a
# provider).

def _c(z):
    """Packed [..., 2] float32 -> complex128."""
    z64 = z.astype(np.float64)
    return z64[..., 0] + 1j * z64[..., 1]


def _packed(c) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(np.float32)


@local_vjp(Entry.rfft, tape=("spectral.cu:tl_spec_halve_interior",))
def _rfft_vjp(inputs, out, g):
    (x,) = inputs
    if on_device(g):   # cuFFT C2R of g with its interior bins halved (spec_halve_interior)
        return device_rule(Entry.rfft)(inputs, out, g)
    n = x.shape[1]
    # dx_j = sum_k Re(g_k e^{i theta}) with weight 1: numpy's irfft weights w_k / n, so undo both
    gc = _c(g) / hermitian_weights(n, bins(n))
    return (np.fft.irfft(gc, n=n, axis=1) * n).astype(np.float32).reshape(x.shape),


@local_vjp(Entry.irfft, tape=("spectral.cu:tl_spec_irfft_bwd",))
def _irfft_vjp(inputs, out, g, n):
    (z,) = inputs
    if on_device(g):   # cuFFT R2C of g, weighted w_k / n, DC and Nyquist imaginary 0
        # (spec_irfft_bwd)
        return device_rule(Entry.irfft)(inputs, out, g, n)
    gc = np.fft.rfft(g.astype(np.float64), axis=1) * (hermitian_weights(n, bins(n)) / n)
    dz = _packed(gc)
    dz[:, 0, 1] = 0.0
    if n % 2 == 0:
        dz[:, -1, 1] = 0.0      # C2R never reads these imaginary parts: their gradient is 0
    return (dz,)


def fno_vjp_numpy(x, w_re, w_im, g):
    """(dx, dw_re, dw_im) of fft_fno in float64, rounded once each; x and g are (batch, grid,
    width). dZ = (w_k / grid) rfft(g) with the DC and Nyquist imaginary parts 0 (C2R drops them);
    dW = sum_b conj(X) dZ; dX = sum_o dZ conj(W), pulled back through rfft (weight 1 per bin)."""
    grid, modes = x.shape[1], w_re.shape[0]
    w = w_re.astype(np.float64) + 1j * w_im.astype(np.float64)          # (k, c, o)
    xk = np.fft.rfft(x.astype(np.float64), axis=1)[:, :modes]            # (b, k, c)
    dz = np.fft.rfft(g.astype(np.float64), axis=1)[:, :modes]            # (b, k, o)
    dz = dz * (hermitian_weights(grid, modes) / grid)[None, :, None]
    dz.imag[:, 0] = 0.0
    if grid % 2 == 0 and grid // 2 < modes:
        dz.imag[:, grid // 2] = 0.0
    dw = np.einsum("bkc,bko->kco", np.conj(xk), dz)
    dxk = np.einsum("bko,kco->bkc", dz, np.conj(w))
    # x_j -> X_k is real-linear; its adjoint maps dX to sum_k Re(dX_k e^{i theta}) (weight 1)
    spec = np.zeros((x.shape[0], bins(grid), x.shape[2]), np.complex128)
    spec[:, :modes] = dxk / hermitian_weights(grid, modes)[None, :, None]
    dx = np.fft.irfft(spec, n=grid, axis=1) * grid
    return dx.astype(np.float32), dw.real.astype(np.float32), dw.imag.astype(np.float32)


@local_vjp(Op.fft_fno, tape=("spectral.cu:tl_spec_mix_bwd_dx", "spectral.cu:tl_spec_mix_bwd_dw"))
def _fft_fno_vjp(inputs, out, g):
    x, w_re, w_im = inputs
    if on_device(g):   # the fused backward: cuFFT R2C, spec_mix_bwd_dx and spec_mix_bwd_dw, C2R
        return device_rule(Op.fft_fno)(inputs, out, g)
    shape3 = x.shape if x.ndim == 3 else (1,) + x.shape
    dx, dwr, dwi = fno_vjp_numpy(x.reshape(shape3), w_re, w_im, g.reshape(shape3))
    return dx.reshape(x.shape), dwr, dwi

