"""Reference for the packed irfft: z (batch, n // 2 + 1, 2), n -> x (batch, n), x_j = (1/n) sum_k
w_k (zr_k cos theta_jk - zi_k sin theta_jk), w_k = 1 at DC and (even n) Nyquist, 2 elsewhere (the
imaginary parts of those bins are not read, as by C2R). VJP: dz_k = (w_k / n) sum_j g_j e^{-i
theta_jk}, imaginary 0 at DC and Nyquist. Kind 'composite' (conformance/families/spectral.py)."""

import mpmath
import numpy as np

from conformance.references import _spectral as S
from conformance.references._common import ReferenceInputError, f32_grad, f32_inputs

OP = "irfft"


def _checked(inputs, n):
    (z,) = f32_inputs(inputs, 1, OP)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ReferenceInputError(f"irfft needs a whole n >= 1, got {n!r}")
    if z.ndim != 3 or z.shape[1:] != (n // 2 + 1, 2):
        raise ReferenceInputError(f"irfft takes z (batch, {n // 2 + 1}, 2) for n = {n}, got "
                                  f"{z.shape}")
    S.finite_inputs((z,), OP)
    return z, int(n)


def forward(inputs, n):
    z, n = _checked(inputs, n)
    b, m = z.shape[:2]
    z64 = z.astype(np.float64)
    zc = z64[..., 0] + 1j * z64[..., 1]
    if S.use_mp(b * n * m):
        with mpmath.workprec(S.PREC):
            spec = [[mpmath.mpc(float(v.real), float(v.imag)) for v in row] for row in zc]
            raw = S.mp_c2r(spec, n)
            return S.composite(*S.to_arrays([[v / n for v in row] for row in raw], (b, n)))
    return S.from_float64(np.fft.irfft(zc, n=n, axis=1))


def vjp(inputs, grad_out, n):
    z, n = _checked(inputs, n)
    b, m = z.shape[:2]
    g = f32_grad(grad_out, (b, n), OP).astype(np.float64)
    scale = S.weights(n, m) / n
    real = S.real_bins(n, m)
    if S.use_mp(b * n * m):
        with mpmath.workprec(S.PREC):
            spec = S.mp_rfft(g, n, m)
            zero = mpmath.mpf(0)
            flat = [[part for k, v in enumerate(row)
                     for part in (v.real * scale[k], zero if real[k] else v.imag * scale[k])]
                    for row in spec]
            return (S.composite(*S.to_arrays(flat, (b, m, 2))),)
    dz = S.packed(np.fft.rfft(g, axis=1) * scale)
    dz[:, real, 1] = 0.0
    return (S.from_float64(dz),)
