"""The spectral references' engine: the DFT and its real-linear adjoints, evaluated two ways.

- mpmath (cases of at most MP_PRODUCTS complex products): every twiddle e^{-2 pi i r / n} from
  mpmath's expjpi at PREC bits, every product and sum at PREC bits: the result is within
  2^(8 - PREC) sum|terms| of the exact DFT, far under any float32 rounding, and is rounded once to
  float32 (value) and float64 (exact).
- float64 (larger cases): numpy.fft (pocketfft) on the float32 values, exact in float64. By
  Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Thm 24.2 with u = 2^-53 (the
  bound `conformance/families/spectral.py` evaluates for float32), its error is below
  F64_RELATIVE * ||y||_2 per element; families/spectral.py adds that term to every bound, so the
  harness never charges the capsule with the reference's own error. Tests compare both paths.

Conventions as engine/ops/spectral.py: theta_jk = 2 pi j k / n, w_k = 1 at DC and (even n) Nyquist,
2 elsewhere; C2R (irfft) never reads the imaginary parts of those bins."""
from __future__ import annotations

import mpmath
import numpy as np

from conformance import rounding
from conformance.families.spectral import F64_RELATIVE, real_bins, weights  # noqa: F401
from conformance.references._common import Reference, ReferenceInputError

MP_PRODUCTS = 1 << 13
PREC = 113
def finite_inputs(arrays, op: str) -> None:
    for i, a in enumerate(arrays):
        if a.size and not np.all(np.isfinite(a)):
            raise ReferenceInputError(
                f"{op} takes finite inputs only (its wrapper raises NonFiniteInputError): input "
                f"{i} holds a NaN or an infinity")


# --- the mpmath path -----------------------------------------------------------------------------

def twiddles(n: int) -> list:
    """e^{-2 pi i r / n} for r < n at PREC bits."""
    return [mpmath.expjpi(mpmath.mpf(-2 * r) / n) for r in range(n)]


def mp_rfft(rows, n: int, count: int, tw=None) -> list[list]:
    """sum_j x_j e^{-i theta_jk} for k < count, per row (rows: float64 arrays of length n)."""
    tw = tw or twiddles(n)
    return [[mpmath.fsum(mpmath.mpf(float(x[j])) * tw[(j * k) % n] for j in range(n))
             for k in range(count)] for x in rows]


def mp_c2r(spectra, n: int, unit_weights: bool = False, tw=None) -> list[list]:
    """sum_k w_k Re(Z_k e^{i theta_jk}) for j < n (weights 1 with `unit_weights`: the adjoint of
    rfft), per row of spectra (lists of mpc, k < count); unnormalised."""
    tw = tw or twiddles(n)
    out = []
    for z in spectra:
        w = np.ones(len(z)) if unit_weights else weights(n, len(z))
        out.append([mpmath.fsum(float(w[k]) * (z[k] * mpmath.conj(tw[(j * k) % n])).real
                                for k in range(len(z))) for j in range(n)])
    return out


def to_arrays(values, shape) -> tuple[np.ndarray, np.ndarray]:
    """(float32 value, float64 exact) of nested mpf lists, each rounded once."""
    flat = [v for row in values for v in row] if values and isinstance(values[0], list) else \
        list(values)
    v32 = np.array([rounding.round_mpf_to_f32(v) for v in flat], np.float32).reshape(shape)
    v64 = np.array([float(v) for v in flat], np.float64).reshape(shape)
    return v32, v64


def use_mp(products: int) -> bool:
    return products <= MP_PRODUCTS


# --- results -------------------------------------------------------------------------------------

def composite(value32, exact64) -> Reference:
    return Reference(value32, exact64, kind="composite")


def from_float64(exact64) -> Reference:
    exact64 = np.asarray(exact64, np.float64)
    return Reference(rounding.round_f64_to_f32(exact64).reshape(exact64.shape), exact64,
                     kind="composite")


def packed(c) -> np.ndarray:
    """complex [..] -> float [.., 2]."""
    return np.stack([np.real(c), np.imag(c)], axis=-1)
