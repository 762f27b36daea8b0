"""Correctly rounded references of unary functions in bfloat16 and float16, certified.

Each function is evaluated in float64 by a formula whose relative error is far below MARGIN
(NumPy's libm functions are within a few float64 ulps; the compositions below avoid cancellation:
gelu as x / (1 + exp(-2u)), sigmoid and softplus split at 0). Rounding that value to a 16-bit
format gives the correctly rounded result unless the value lies within MARGIN (relative) of a
midpoint between two format values, where float64's own error or a second rounding could decide
it: those inputs (almost none: a 16-bit midpoint is 2^-8 or 2^-11 relative apart, MARGIN is
2^-40) are evaluated again by mpmath at 120 bits, and at 4 times as many (up to MAX_PREC) while
that value lies within 2^(8 - precision) ulps of a midpoint, and rounded from it directly. (gelu
of a bfloat16 subnormal x is x/2 (1 + u) with u near 2^-133: exactly a midpoint in float64 and at
120 bits, above it in truth.) The midpoint below a power of two is a quarter of its ulp away, and
the one between 0 and the least subnormal half of that subnormal (near_midpoint).
"""
from __future__ import annotations

import math
from typing import Callable

import mpmath
import numpy as np

from conformance.lowp.formats import Format

MARGIN = 2.0 ** -40         # relative: well above the float64 formulas' error (<= 2^-42.4)
MP_PREC = 120
MAX_PREC = MP_PREC * 64         # bits: 7680, past every exponent gap of two 16-bit values
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
    rounding in between), at a precision that holds every bit of y (so a value a hair off a
    midpoint is not rounded onto it first)."""
    if not mpmath.isfinite(y):
        return float(y)
    if y == 0:
        return 0.0
    bits = y._mpf_[3] if hasattr(y, "_mpf_") else 0
    with mpmath.workprec(max(mpmath.mp.prec, bits + 8)):
        return _round_mp_exactly(fmt, y)


def _round_mp_exactly(fmt: Format, y) -> float:
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
        close = near_midpoint(fmt, y, err) | (np.isfinite(y) & (y == 0) & (err > 0))
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
        prec = MP_PREC
        while True:
            with mpmath.workprec(prec):
                exact = mp(mpmath.mpf(float(x[idx])))
                if prec >= MAX_PREC or not near_tie(fmt, exact, prec):
                    break
            prec *= 4
        y[idx] = float(exact)
        return exact
    with mpmath.workprec(MP_PREC):
        rounded, decided = round_certified(fmt, y, err, exact_of)
    return rounded, y, len(decided)


def near_midpoint(fmt: Format, y, err, xp=np):
    """Where the float64 values `y` lie within `err` (absolute) of a midpoint between two values
    of the format, or of the boundary to infinity: where their rounding is not decided by y. The
    midpoint below a power of two is a quarter of its ulp away (the gap below is half the gap
    above), which is why the two sides are taken apart."""
    with np.errstate(all="ignore"):
        ay = xp.abs(y)
        finite = xp.isfinite(ay)
        ar = xp.minimum(fmt.round(xp.where(finite, ay, 0.0), xp), fmt.max_finite)
        # the spacing above ar (at 0: the least subnormal's, which fmt.ulp does not give 0)
        above = ar + fmt.ulp(xp.maximum(ar, fmt.min_subnormal), xp) / 2
        below = ar - fmt.ulp(ar * (1 - 2.0 ** -20), xp) / 2
        mid = xp.where(ay >= ar, above, below)
        top = fmt.max_finite + float(fmt.ulp(np.array(fmt.max_finite))) / 2   # a float: CuPy too
        return finite & ((xp.abs(ay - mid) <= err) | (xp.abs(ay - top) <= err))


def near_tie(fmt: Format, x, prec: int) -> bool:
    """Whether the mpmath value x lies within 2^(8 - prec) ulps of the format of a midpoint (the
    boundary to infinity is the top binade's last one): where its rounding needs more precision
    to be sure."""
    if x == 0:
        return False
    _, k = mpmath.frexp(abs(x))              # |x| = m 2^k, 1/2 <= m < 1: exact
    quantum = mpmath.ldexp(1, max(k - 1, fmt.emin) - (fmt.precision - 1))
    scaled = abs(x) / quantum                # the midpoints of x's binade: k + 1/2
    frac = scaled - mpmath.floor(scaled)
    return abs(frac - mpmath.mpf(0.5)) <= mpmath.ldexp(scaled, 8 - prec)

