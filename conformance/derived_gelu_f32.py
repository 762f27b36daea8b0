"""The derived bound of native_cuda.gelu's float32 VJP (engine/csrc/cuda/tl_act_f32.cuh GeluBF32),
looked up by capsule name (derived.py CAPSULE_VJP_RULES): tighter than the op's rule for the float32
tanh formula, which is absolute (10u of the terms' magnitude) where the factor d = gelu'(x) cancels
near its root x0 = -0.75246 and so admitted ~1e7 ulp there. u = 2^-24 (`unit`), s = sigmoid(z),
z = 2C (x + K x^3), c = 1 - s, X = x z' c, f = 1 + X, d = s f, dA = g d.

In I = [-1, -0.625] (|X/f| > 3.36 only inside it) the kernel evaluates d through its root,
d = (t - x0l) q(t), t = x - x0h exact, q a degree-7 float polynomial (tl_act_f32.cuh: the fit
within 2^-24.93 relative with its float coefficients, Horner's running error 1.30u, the final fma
u, fl(x0l q) at most u, the root's float64 residue 0.55u), then g d: relative
  |got - dA| <= (2^-24.93 + 4.85u) |dA| (1 + 4u).

Outside I, float32 throughout: s and c each within 2.2u relative (E1's half ulp 1.03u, its
polynomial and r's rounding 2^-27.3, the reciprocal pair 2^-44, the value's one rounding u), x z'
within 4u (x^2, the fma, the product: 3u; the float constants 2C and 6CK: u on the sum of two
positive terms), X = x z' c within 6.2u, f = fl(1 + X) by one fma, d = fl(s f), g d: first order
  |got - dA| <= |g| s (6.2u |X| + 5.2u |f|) (1 + 4u) + |g| (2 + |X|) 2^-148
(|X/f| <= 3.36 there: within 26u of |dA| wherever s is normal),
the last term for a subnormal s (x below about -10.3: three roundings of 0.54 subnormal ulp, times
|f| <= 1 + |X|) and d's own subnormal rounding. Beyond x = 10 and below -11.5 the kernel returns
the limits g and 0, within 2^-118 |g| and 2^-174 |g| of dA: under the terms above.
"""
from __future__ import annotations

import numpy as np

from conformance.error_terms import DerivedRule, clean as _clean

CAPSULE = "native_cuda.gelu"
LO, HI = -1.0, -0.625                 # tl_act_f32.cuh TL_GELU_VJP_LO / TL_GELU_VJP_HI
ROOT_FIT_REL = 2.0 ** -24.93          # q's fit with float coefficients (mpmath, 20001 points)
ROOT_UNITS = 4.85                     # Horner 1.30 + fma 1 + fl(x0l q) 1 + residue 0.55 + g d 1
X_UNITS, F_UNITS = 6.2, 5.2           # outside I, first order (the module docstring)
SUB_ABS = 2.0 ** -148
C, K = float(np.sqrt(2.0 / np.pi)), 0.044715


def parts(x):
    """s, X and f of the exact formula at float64 x (x finite)."""
    with np.errstate(all="ignore"):
        z = 2 * C * (x + K * x ** 3)
        s = 1.0 / (1.0 + np.exp(-z))
        c = 1.0 / (1.0 + np.exp(z))
        big_x = x * 2 * C * (1 + 3 * K * x * x) * c
    return s, big_x, 1.0 + big_x


def vjp_bound(ref, ctx, unit):
    x = np.asarray(ctx.inputs[0], dtype=np.float64)
    g = np.broadcast_to(np.abs(np.asarray(ctx.g, np.float64)), x.shape)
    exact = _clean(np.abs(ref.exact))
    s, big_x, f = parts(x)
    with np.errstate(all="ignore"):
        near = (ROOT_FIT_REL + ROOT_UNITS * unit) * exact
        far = g * s * (X_UNITS * unit * np.abs(big_x) + F_UNITS * unit * np.abs(f))
        far = _clean(far) + _clean(g * (2 + np.abs(big_x))) * SUB_ABS
    inside = (x >= LO) & (x <= HI)
    return np.where(inside, near, far) * (1 + 4 * unit)


VJP_RULES = {CAPSULE: DerivedRule(
    "derived (gelu f32): x in [-1, -0.625]: (2^-24.93 + 4.85u) |dA|; elsewhere |g| s (6.2u |X| + "
    "5.2u |f|) + |g| (2 + |X|) 2^-148",
    "float32 g s (1 + X), s and 1 - s from one exp and reciprocal pair, X = x z' (1 - s); where "
    "1 + X cancels (x in [-1, -0.625]) d = (x - x0) q(x) through the root with a degree-7 "
    "float polynomial: relative there, no cancellation", vjp_bound)}
