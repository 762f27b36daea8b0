"""Reference for gelu_erf, the exact GELU a Phi(a) = a/2 (1 + erf(a / sqrt 2))
= a/2 erfc(-a / sqrt 2) (PyTorch's default F.gelu, jax.nn.gelu(approximate=False); the
engine's gelu op is the tanh form, docs/OPS.md), a function the engine has no op for (the ulp
table's: docs/EXHAUSTIVE.md): correctly rounded; gelu_erf(+-0) = +-0 and, as docs/OPS.md takes
the tanh form's, the limits at the infinities: gelu_erf(+inf) = +inf, gelu_erf(-inf) = -0
(a Phi(a) < 0 tends to 0 from below). Forward only.

Evaluated without the cancellation of 1 + erf(a / sqrt 2) for a < 0:
- a >= 8.5 rounds to a in float32 and float64: 0 < a - gelu_erf(a) = a erfc(a / sqrt 2) / 2 and
  erfc(6.01) / 2 < 2^-55, under half the float64 spacing below a (erf.py's bound).
- a <= -40 rounds to -0: |a Phi(a)| < phi(a) = e^(-a^2 / 2) / sqrt(2 pi) < e^-800 < 2^-1075
  (the Mills ratio bound Phi(-t) < phi(t) / t for t > 0).
- -1 < a < 8.5: a/2 + t, t = (a/2) erf(a / sqrt 2) >= 0 (both factors have a's sign) and
  t < 0.69 |a/2| for a > -1: the sum is formed on exact endpoints (iv_add_exact), so a/2 on a
  float32 midpoint (a subnormal a) still decides.
- -40 < a <= -1: (a/2) erfc(w), w = -a / sqrt 2 (_erf.iv_erfc: the asymptotic expansion with its
  remainder enclosed, or 1 - erf(w) at a precision the Ziv loop raises)."""

import math

import numpy as np
from mpmath.libmp import mpf_shift

from conformance.references._common import elementwise_ziv, f32_inputs, ieee64, iv_add_exact
from conformance.references._erf import iv_erf_series, iv_erfc

OP = "gelu_erf"
TO_A = 8.5
TO_ZERO = -40.0
_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def _ieee(x):
    core = 0.5 * x * _erfc64(-x / math.sqrt(2.0))
    return np.where(x >= TO_A, x, np.where(x <= TO_ZERO, -0.0, core))


def _gelu_erf(ctx, a):
    half = mpf_shift(a._mpi_[0], -1)                 # a/2, exact
    if a.a > -1:
        t = ctx.make_mpf((half, half)) * iv_erf_series(ctx, a / ctx.sqrt(2))
        return iv_add_exact(ctx, half, t)
    return ctx.make_mpf((half, half)) * iv_erfc(ctx, -a / ctx.sqrt(2))


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    route = (a >= TO_A) | (a <= TO_ZERO) | (a == 0)
    return elementwise_ziv(_gelu_erf, (a,), ieee64(_ieee, a), "composite", route=route)
