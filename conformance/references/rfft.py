"""Reference for the packed rfft: x (batch, n) -> z (batch, n // 2 + 1, 2), z_k = sum_j x_j
e^{-2 pi i j k / n} as [re, im], unnormalised. VJP: dx_j = sum_k (gr_k cos theta_jk - gi_k sin
theta_jk), the adjoint of the real-linear map (weight 1 per bin). Kind 'composite': judged by the
derived FFT bound (conformance/families/spectral.py); the engine is references/_spectral.py."""

import mpmath
import numpy as np

from conformance.references import _spectral as S
from conformance.references._common import ReferenceInputError, f32_grad, f32_inputs

OP = "rfft"


def _checked(inputs):
    (x,) = f32_inputs(inputs, 1, OP)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ReferenceInputError(f"rfft takes x (batch, n) with n >= 1, got shape {x.shape}")
    S.finite_inputs((x,), OP)
    return x


def forward(inputs):
    x = _checked(inputs)
    b, n = x.shape
    m = n // 2 + 1
    if S.use_mp(b * n * m):
        with mpmath.workprec(S.PREC):
            spec = S.mp_rfft(x.astype(np.float64), n, m)
            flat = [[part for v in row for part in (v.real, v.imag)] for row in spec]
            return S.composite(*S.to_arrays(flat, (b, m, 2)))
    return S.from_float64(S.packed(np.fft.rfft(x.astype(np.float64), axis=1)))


def vjp(inputs, grad_out):
    x = _checked(inputs)
    b, n = x.shape
    m = n // 2 + 1
    g = f32_grad(grad_out, (b, m, 2), OP).astype(np.float64)
    gc = g[..., 0] + 1j * g[..., 1]
    if S.use_mp(b * n * m):
        with mpmath.workprec(S.PREC):
            spec = [[mpmath.mpc(float(v.real), float(v.imag)) for v in row] for row in gc]
            return (S.composite(*S.to_arrays(S.mp_c2r(spec, n, unit_weights=True), (b, n))),)
    # numpy's irfft weights bin k by w_k / n: undo both
    return (S.from_float64(np.fft.irfft(gc / S.weights(n, m), n=n, axis=1) * n),)
