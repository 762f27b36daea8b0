"""Reference for fft_fno: x (grid, width) or (batch, grid, width), w_re and w_im (modes, width,
width) at (k*width + c)*width + o. X = rfft of every column over the grid; Z[k, o] = sum_c X[k, c]
(w_re + i w_im)[k, c, o] for k < modes, 0 above; y = irfft(Z) = C2R(Z) / grid.
VJP: dZ = (w_k / grid) rfft(g) with the imaginary parts of DC and (even grid) Nyquist 0;
dw = sum_b conj(X) dZ (dw_re its real part, dw_im its imaginary part); dX = sum_o dZ conj(w), and
dx = sum_k Re(dX_k e^{i theta_jk}) (the adjoint of rfft, weight 1 per bin).
Kind 'composite', judged by the derived bound of conformance/families/spectral.py."""

import mpmath
import numpy as np

from conformance.references import _spectral as S
from conformance.references._common import ReferenceInputError, f32_grad, f32_inputs

OP = "fft_fno"


def _checked(inputs):
    x, wr, wi = f32_inputs(inputs, 3, OP)
    if x.ndim not in (2, 3) or min(x.shape[-2:]) < 1:
        raise ReferenceInputError(f"fft_fno takes x (batch?, grid, width), got {x.shape}")
    grid, width = x.shape[-2:]
    if wr.shape != wi.shape or wr.ndim != 3 or wr.shape[1:] != (width, width) or \
            not 1 <= wr.shape[0] <= grid // 2 + 1:
        raise ReferenceInputError(f"fft_fno needs w_re, w_im (modes, {width}, {width}) with 1 <= "
                                  f"modes <= {grid // 2 + 1}, got {wr.shape} and {wi.shape}")
    S.finite_inputs((x, wr, wi), OP)
    return x.reshape((-1, grid, width)).astype(np.float64), wr, wi


def _products(x3, modes) -> int:
    b, grid, width = x3.shape
    return 2 * b * width * grid * (grid // 2 + 1) + 2 * b * modes * width * width


def _mp_w(wr, wi):
    return [[[mpmath.mpc(float(wr[k, c, o]), float(wi[k, c, o])) for o in range(wr.shape[2])]
             for c in range(wr.shape[1])] for k in range(wr.shape[0])]


def _columns(a3, b):
    return [a3[b, :, c] for c in range(a3.shape[2])]


def _mp_forward(x3, wr, wi):
    bsz, grid, width = x3.shape
    modes = wr.shape[0]
    w = _mp_w(wr, wi)
    tw = S.twiddles(grid)
    y = np.empty(x3.shape, dtype=object)
    for b in range(bsz):
        xk = S.mp_rfft(_columns(x3, b), grid, modes, tw)                 # [c][k]
        z = [[mpmath.fsum(xk[c][k] * w[k][c][o] for c in range(width)) for k in range(modes)]
             for o in range(width)]                                      # [o][k]
        for o, col in enumerate(S.mp_c2r(z, grid, tw=tw)):
            y[b, :, o] = [v / grid for v in col]
    return y


def forward(inputs):
    x3, wr, wi = _checked(inputs)
    shape = np.shape(inputs[0])
    if S.use_mp(_products(x3, wr.shape[0])):
        with mpmath.workprec(S.PREC):
            y = _mp_forward(x3, wr, wi)
            return S.composite(*S.to_arrays(list(y.reshape(-1)), shape))
    from engine.providers.reference import _fft_fno
    return S.from_float64(_fft_fno(x3, wr, wi).reshape(shape))


def _mp_vjp(x3, wr, wi, g3):
    bsz, grid, width = x3.shape
    modes = wr.shape[0]
    w = _mp_w(wr, wi)
    tw = S.twiddles(grid)
    scale = S.weights(grid, modes) / grid
    real = S.real_bins(grid, modes)
    dx = np.empty(x3.shape, dtype=object)
    dw = [[[mpmath.mpc(0) for _ in range(width)] for _ in range(width)] for _ in range(modes)]
    for b in range(bsz):
        xk = S.mp_rfft(_columns(x3, b), grid, modes, tw)                 # [c][k]
        sk = S.mp_rfft(_columns(g3, b), grid, modes, tw)                 # [o][k]
        dz = [[(mpmath.mpc(s.real, 0) if real[k] else s) * float(scale[k])
               for k, s in enumerate(row)] for row in sk]
        for k in range(modes):
            for c in range(width):
                for o in range(width):
                    dw[k][c][o] += mpmath.conj(xk[c][k]) * dz[o][k]
        dxk = [[mpmath.fsum(dz[o][k] * mpmath.conj(w[k][c][o]) for o in range(width))
                for k in range(modes)] for c in range(width)]
        for c, col in enumerate(S.mp_c2r(dxk, grid, unit_weights=True, tw=tw)):
            dx[b, :, c] = col
    flat_w = [dw[k][c][o] for k in range(modes) for c in range(width) for o in range(width)]
    return dx, [v.real for v in flat_w], [v.imag for v in flat_w]


def vjp(inputs, grad_out):
    x3, wr, wi = _checked(inputs)
    shape = np.shape(inputs[0])
    g3 = f32_grad(grad_out, shape, OP).astype(np.float64).reshape(x3.shape)
    if S.use_mp(2 * _products(x3, wr.shape[0])):
        with mpmath.workprec(S.PREC):
            dx, dwr, dwi = _mp_vjp(x3, wr, wi, g3)
            return (S.composite(*S.to_arrays(list(dx.reshape(-1)), shape)),
                    S.composite(*S.to_arrays(dwr, wr.shape)),
                    S.composite(*S.to_arrays(dwi, wr.shape)))
    dx, dwr, dwi = _f64_vjp(x3, wr, wi, g3)
    return S.from_float64(dx.reshape(shape)), S.from_float64(dwr), S.from_float64(dwi)


def _f64_vjp(x3, wr, wi, g3):
    """The float64 path: engine/ops/spectral.py's formula without its final rounding."""
    grid, modes = x3.shape[1], wr.shape[0]
    w = wr.astype(np.float64) + 1j * wi.astype(np.float64)
    xk = np.fft.rfft(x3, axis=1)[:, :modes]
    dz = np.fft.rfft(g3, axis=1)[:, :modes] * (S.weights(grid, modes) / grid)[None, :, None]
    dz.imag[:, S.real_bins(grid, modes)] = 0.0
    dw = np.einsum("bkc,bko->kco", np.conj(xk), dz)
    dxk = np.einsum("bko,kco->bkc", dz, np.conj(w))
    spec = np.zeros((x3.shape[0], grid // 2 + 1, x3.shape[2]), np.complex128)
    spec[:, :modes] = dxk / S.weights(grid, modes)[None, :, None]
    return np.fft.irfft(spec, n=grid, axis=1) * grid, dw.real, dw.imag
