"""The derived bound of native_cuda.bias_gelu's float32 VJP (engine/csrc/cuda/bias_gelu.cu
tl_bias_gelu_bwd_f32 and tl_bias_gelu_db), looked up by capsule name (derived.py
CAPSULE_VJP_RULES); the accurate variant keeps the op's rule (derived_bias_gelu.py). Its forward
is GeluF32 of s = float32(x + b) and carries native_cuda.gelu's declared bound (the capsule
declares the same DeclaredBound): no rule here. u = 2^-24 (`unit`), u64 = 2^-53.

dx = GeluBF32(s, g), the float32 VJP functor of native_cuda.gelu at s (x + b rounded once: the
reference's own input, not an error): native_cuda.gelu's rule at s (derived_gelu_f32.py), e_i.

db_j = the double sum over the rows of the float terms t_i = dx_i (each within e_i of the exact
g_i gelu'(s_i)), in a fixed order (rows within a warp, the warps, the chunks), rounded once:
  |got - db| <= (E + gamma64_rows (M + E) + REFERENCE_REL (M + |db|) + u |db|) (1 + 4u),
E = sum_i e_i, M = sum_i |g_i gelu'(s_i)| (the reference's magnitude; sum |t_i| <= M + E), the
reference's own fsum error REFERENCE_REL (derived_bias_gelu.py) and the final rounding (the
(1 + 4u) factor takes it relative to the computed sum). e_i needs each term's exact value
(its relative part on [-1, -0.625]): float64's g s(z) (1 + X) (derived_gelu_f32.parts) stands
in, with 2^-50 |g| added for its absolute error there (the factor cancels near its root).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from conformance import derived_bias_gelu, derived_gelu_f32
from conformance.error_terms import DerivedRule, clean as _clean, gamma as _gamma

CAPSULE = "native_cuda.bias_gelu"
U64 = 2.0 ** -53
TERM_ABS = 2.0 ** -50          # float64 g gelu'(s)'s absolute error near the factor's root


def _term_bounds(ctx, exact, unit):
    """e_i: native_cuda.gelu's VJP rule at s = float32(x + b), per element of x."""
    s = derived_bias_gelu._s(ctx)
    g = np.broadcast_to(np.asarray(ctx.g, np.float64), s.shape)
    at_s = SimpleNamespace(inputs=(s,), g=g)
    return derived_gelu_f32.vjp_bound(SimpleNamespace(exact=exact), at_s, unit)


def vjp_bound(ref, ctx, unit):
    exact = _clean(np.abs(ref.exact))
    if getattr(ctx, "input_index", 0) == 0:
        return _term_bounds(ctx, exact, unit)
    x_shape = np.shape(ctx.inputs[0])
    rows, d = math.prod(x_shape[:-1]), x_shape[-1]
    s = derived_bias_gelu._s(ctx)
    g = np.abs(np.broadcast_to(np.asarray(ctx.g, np.float64), x_shape))
    sig, _, f = derived_gelu_f32.parts(s)            # gelu'(s) = sigmoid(z) (1 + X)
    with np.errstate(all="ignore"):
        terms = _clean(g * np.abs(sig * f)) + TERM_ABS * _clean(g)
    e = _clean(_term_bounds(ctx, terms, unit)).reshape(rows, d).sum(axis=0)
    mag = _clean(np.asarray(ref.magnitude, np.float64))
    total = (e + float(_gamma(max(rows, 1), U64)) * (mag + e)
             + derived_bias_gelu.REFERENCE_REL * (mag + exact) + unit * exact)
    return total * (1 + 4 * unit)


VJP_RULES = {CAPSULE: DerivedRule(
    "derived (bias_gelu f32): dx native_cuda.gelu's rule at s; db sum e_i + gamma64_rows (M + "
    "sum e_i) + u|db|",
    "dx = GeluBF32(x + b, g) in float32 (tl_act_f32.cuh), db the fixed-order double sum of those "
    "float terms rounded once", vjp_bound)}
