"""Correctly rounded references of unary functions in bfloat16 and float16, certified.

Each function is evaluated in float64 by a formula whose relative error is far below MARGIN
(NumPy's libm functions are within a few float64 ulps; the compositions below avoid cancellation:
gelu as x / (1 + exp(-2u)), sigmoid and softplus split at 0). Rounding that value to a 16-bit
format gives the correctly rounded result unless the value lies within MARGIN (relative) of a
midpoint between two format values, where float64's own error or a second rounding could decide
it: those inputs (almost none: a 16-bit midpoint is 2^-8 or 2^-11 relative apart, MARGIN is
2^-40) are evaluated again by mpmath at 120 bits and rounded from that value directly.
"""
from __future__ import annotations

import math
from typing import Callable

import mpmath
import numpy as np

from conformance.lowp.formats import Format

MARGIN = 2.0 ** -40         # relative: well above the float64 formulas' error (<= 2^-42.4)
MP_PREC = 120
GELU_C = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(x):
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _gelu(x):
    u = GELU_C * (x + GELU_K * x * x * x)
    with np.errstate(over="ignore"):
        out = x / (1.0 + np.exp(-2.0 * u))
    # the limits at the infinities (docs/OPS.md): gelu(-inf) = -0, gelu(+inf) = +inf
    return np.where(np.isneginf(x), -0.0, np.where(np.isposinf(x), np.inf, out))


def _mp_gelu(x):
    u = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(GELU_K) * x ** 3)
    return x / (1 + mpmath.exp(-2 * u))


_erf = np.vectorize(math.erf, otypes=[np.float64])

# name -> (float64 formula, mpmath formula of a finite input, exact: no rounding question)
FUNCTIONS: dict[str, tuple[Callable, Callable | None]] = {
    "exp": (np.exp, mpmath.exp),
    "log": (np.log, mpmath.log),
    "sin": (np.sin, mpmath.sin),
    "cos": (np.cos, mpmath.cos),
    "tanh": (np.tanh, mpmath.tanh),
    "sigmoid": (_sigmoid, lambda x: 1 / (1 + mpmath.exp(-x))),
    "softplus": (_softplus, lambda x: mpmath.log1p(mpmath.exp(x))),
    "gelu": (_gelu, _mp_gelu),
    "sqrt": (np.sqrt, mpmath.sqrt),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), lambda x: 1 / mpmath.sqrt(x)),
    "erf": (_erf, mpmath.erf),
    "abs": (np.abs, None),
    # docs/OPS.md: a if a > 0 else +0, NaN kept (relu(+inf) = +inf, relu(-inf) = relu(-0) = +0)
    "relu": (lambda x: np.where(np.isnan(x), x, np.where(x > 0, x, 0.0)), None),
}


def _round_mp(fmt: Format, y) -> float:
    """An mpmath value rounded to the format, ties to even, decided in mpmath (no float64
    rounding in between)."""
    if not mpmath.isfinite(y):
        return float(y)
    if y == 0:
        return 0.0
    a = abs(y)
    e = int(mpmath.floor(mpmath.log(a, 2)))
    if mpmath.ldexp(1, e) > a:          # log's rounding at an exact power of two
        e -= 1
    elif mpmath.ldexp(1, e + 1) <= a:
        e += 1
    if e > fmt.emax:                    # past every binade: float() of it is not to be trusted
        return math.copysign(math.inf, float(mpmath.sign(y)))
    q = mpmath.ldexp(1, max(e, fmt.emin) - (fmt.precision - 1))
    n = a / q
    r = mpmath.floor(n)
    frac = n - r
    if frac > 0.5 or (frac == 0.5 and int(r) % 2 == 1):
        r += 1
    value = float(r * q)                # exact: at most `precision` bits
    if value > fmt.max_finite:
        value = math.inf
    return math.copysign(value, float(y))


def round_certified(fmt: Format, y: np.ndarray, err: np.ndarray, exact_of) -> list:
    """float64 approximations `y`, each within `err` (absolute) of its exact value, rounded to
    the format in place of a float64 rounding: where a midpoint between two format values (or
    the boundary to infinity) lies within err of y, the rounding is not decided by y and
    `exact_of(index)` (an mpmath value) decides it. Returns (rounded, the indices so decided)."""
    with np.errstate(all="ignore"):
        rounded = fmt.round(y)
        # the midpoint nearest y: half a format ulp from the rounded value, towards y
        ulp = fmt.ulp(np.where(np.isfinite(rounded), rounded, fmt.max_finite))
        mid = rounded + np.copysign(ulp / 2, y - rounded)
        close = np.isfinite(y) & ((np.abs(y - mid) <= err) | ((y == 0) & (err > 0)))
        top = fmt.max_finite + fmt.ulp(fmt.max_finite) / 2
        close |= np.isfinite(y) & (np.abs(np.abs(y) - top) <= np.maximum(err, MARGIN * top))
    decided = list(zip(*np.nonzero(close)))
    for idx in decided:
        rounded[idx] = _round_mp(fmt, exact_of(idx))
    return rounded, decided


def reference(fmt: Format, name: str, x: np.ndarray, table: dict | None = None
              ) -> tuple[np.ndarray, np.ndarray, int]:
    """(correctly rounded values in the format, float64 approximations of the exact values,
    how many inputs mpmath decided) of function `name` of `table` (default FUNCTIONS; a formula
    may return (value, absolute error bound) where MARGIN relative does not hold) at float64
    inputs `x` (values of fmt)."""
    f64, mp = (table or FUNCTIONS)[name]
    with np.errstate(all="ignore"):
        y = f64(x)
        y, err = y if isinstance(y, tuple) else (y, None)
        y = np.asarray(y, dtype=np.float64)
        err = MARGIN * np.abs(y) if err is None else np.maximum(err, MARGIN * np.abs(y))
    if mp is None:
        return fmt.round(y), y, 0

    def exact_of(idx):
        exact = mp(mpmath.mpf(float(x[idx])))
        y[idx] = float(exact)
        return exact
    with mpmath.workprec(MP_PREC):
        rounded, decided = round_certified(fmt, y, err, exact_of)
    return rounded, y, len(decided)
