"""The VJP references of the 16-bit unary functions at a unit cotangent: f'(x), as docs/OPS.md
defines each rule (log's g / a also where a < 0; abs and relu 0 at 0; relu 0 at NaN), in the
form refs.reference certifies: a float64 formula with its absolute error bound where a
cancellation can make the relative one large (gelu's derivative crosses zero), and mpmath."""
from __future__ import annotations

import math

import mpmath
import numpy as np

from conformance.lowp.refs import GELU_C, GELU_K, _sigmoid

EPS = 2.0 ** -46      # a few float64 ulps of each term: the formulas' error, with room


def _sech2(x):
    e = np.exp(-2.0 * np.abs(x))
    return 4.0 * e / (1.0 + e) ** 2


def _sigmoid_grad(x):
    e = np.exp(-np.abs(x))
    return e / (1.0 + e) ** 2


def _gelu_grad(x):
    """d/dx x sigma(2u) = s + x s (1 - s) 2 u', u' = c (1 + 3 k x^2): two terms that cancel
    near x = -0.75, hence the absolute error bound of both; the limits 0 and 1 at -inf, +inf."""
    u = GELU_C * (x + GELU_K * x ** 3)
    s = _sigmoid(2.0 * u)
    t = x * _sigmoid_grad(2.0 * u) * 2.0 * GELU_C * (1.0 + 3.0 * GELU_K * x * x)
    t = np.where(np.isfinite(x), t, 0.0)
    value = np.where(np.isneginf(x), -0.0, s + t)     # docs/OPS.md: the factor -0 at -inf
    return value, EPS * (np.abs(s) + np.abs(t))


def _mp_gelu_grad(x):
    u = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(GELU_K) * x ** 3)
    du = mpmath.sqrt(2 / mpmath.pi) * (1 + 3 * mpmath.mpf(GELU_K) * x ** 2)
    s = 1 / (1 + mpmath.exp(-2 * u))
    return s + x * s * (1 - s) * 2 * du


_erf_grad = np.vectorize(lambda v: 2.0 / math.sqrt(math.pi) * math.exp(-v * v),
                         otypes=[np.float64])

DERIVATIVES = {
    "exp": (np.exp, mpmath.exp),
    "log": (lambda x: 1.0 / x, lambda x: 1 / x),
    "sin": (np.cos, mpmath.cos),
    "cos": (lambda x: -np.sin(x), lambda x: -mpmath.sin(x)),
    "tanh": (_sech2, lambda x: mpmath.sech(x) ** 2),
    "sigmoid": (_sigmoid_grad, lambda x: mpmath.exp(-x) / (1 + mpmath.exp(-x)) ** 2),
    "softplus": (_sigmoid, lambda x: 1 / (1 + mpmath.exp(-x))),
    "gelu": (_gelu_grad, _mp_gelu_grad),
    "sqrt": (lambda x: 0.5 / np.sqrt(x), lambda x: 1 / (2 * mpmath.sqrt(x))),
    "rsqrt": (lambda x: -0.5 / (x * np.sqrt(x)), lambda x: -1 / (2 * x * mpmath.sqrt(x))),
    "erf": (_erf_grad, lambda x: 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-x * x)),
    "abs": (lambda x: np.where(np.isnan(x), x, np.where(x == 0, 0.0, np.sign(x))), None),
    "relu": (lambda x: np.where(x > 0, 1.0, 0.0), None),
}
