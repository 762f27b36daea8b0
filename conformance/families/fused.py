"""The fused family (engine/ops/fused.py): bias_gelu, gelu(x + b) with b broadcast over the rows
(gpt2's MLP), forward and VJP (dx, db).

Edge set (25 cases): BIAS_GELU_FORMS: d in E over 1..3 rows, rows 4097 / 65537 over 3 / 2
columns, X as one row and as one column, rows 0, d 0, (1, 1); values mixed.

Derived error bounds of bias_gelu (RuntimeEntry), forward and VJP, for s = float32(x + b) (one
rounding that the reference shares: not an error) and gelu evaluated in float64 and rounded once
(native_cuda.bias_gelu's bias_gelu.cu and reference.bias_gelu's NumPy). elementwise.py's gelu rules
are the model, with float64's u64 = 2^-53 inside and the policy's float32 unit at the end.

Assumption (as cross_entropy's, families/reduction.py): float64 exp and tanh within 2 float64
ulps (relative 2^-51).

Forward: y = s / (1 + exp(-z)), z = 2 C (s + K s^3): z carries 6 roundings (|dz| <= 6 u64 |z|,
all terms one sign, plus the constants' 2 u64), which moves sigmoid(z) by (1 - sigmoid(z)) |dz|
relatively; exp (2^-51), 1 + e and the division (2 u64):
  |got - y| <= (u + rho (1 + u)) (1 + 4u) |y|,  rho = (1 - sigmoid(z)) 8 u64 |z| + 2^-51 + 2 u64.
VJP dx = g d(s), d = 0.5 (1 + t) + 0.5 s (1 - t^2) P, P = C (1 + 3 K s^2), t = tanh(w),
w = C (s + K s^3): twelve roundings over the terms' magnitude M_d = 0.5 (1 + |t|) + 0.5 |s|
(1 + t^2) P, and t's error dt = (1 - t^2) 6 u64 |w| + 2^-51 |t| moved by |dd/dt| <= 0.5 + |s t| P
(the derivative cancels near s = -0.7518: the bound is absolute there, as gelu's VJP rule):
  |got - dx| <= (|g| (12 u64 M_d + (0.5 + |s t| P) dt) + (u + u64) |dx|) (1 + 4u).
db = sum over the rows of g d(s) in float64, any order: the terms' errors above (without the
float32 rounding), gamma64_rows sum |terms|, the reference's own REFERENCE_REL (sum |terms| +
|db|) (references/bias_gelu.py sums float64-nearest terms), and one float32 rounding u |db|."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from conformance.bad_inputs import filled, foreign
from conformance.edges import EXTENTS, MIXED, PAST_2_20, Edge
from conformance.error_terms import DerivedRule, clean as _clean, gamma as _gamma
from conformance.families.elementwise import gelu_f32_parts, gelu_f32_vjp_bound
from conformance.families.spec import (DIMS, ELEMENTARY_ORDER, EXP_EDGE, RANK, AuditCase,
                                       CapsuleRules, OpSpec, m23, normal, param, shaped_inputs)
from conformance.samplers import EDGE_EXTENTS, F32, far_tail, small_shape
from engine import ops
from engine.errors import DeviceMismatchError, ShapeError
from engine.types import RuntimeEntry as Entry

GROUP = "elementwise"


# --- layout and values ----------------------------------------------------------------------------

def bias_gelu_layout(rng, cls):
    """x [..., d] (rank 1 to 3) and b [d]: an edge extent on d or on the leading axis for
    "shapes", an empty leading axis or d = 0 for "empty"."""
    if cls == "shapes":
        edge, small = int(rng.choice(EDGE_EXTENTS)), int(rng.integers(1, 4))
        x = (edge, small) if rng.integers(0, 2) else (small, edge)
    elif cls == "empty":
        x = (0, int(rng.integers(1, 5))) if rng.integers(0, 2) else (int(rng.integers(1, 4)), 0)
    else:
        x = small_shape(rng, int(rng.integers(1, 4)), 1, 9 if cls == "normal" else 12)
    return [x, (x[-1],)], {}


def bias_gelu_values(arrays, cls, index, rng):
    """normal and shapes, the classes the campaign runs the inner-product identity on
    (conformance/vjp.py): |x| kept within 2^-4 .. 2^4 of its column's |b| (x's sign kept), so each
    input's step of 2^7 ulps moves the float32 sum s = x + b exactly (add_layer_norm_values'
    reasoning: against an addend over 2^7 times larger a step is lost in the sum's rounding, the
    central differences see the float32 add's staircase and the identity fails an honest kernel,
    as reference.bias_gelu's did at seed 5). cancellation: x in gelu's negative tail, where the
    result is tiny (samplers.far_tail), b scaled by 1/8 so that s stays there. The other classes
    and the edge set keep addends of any ratio."""
    if cls == "cancellation":
        x, b = far_tail(3.0, 13.0)(list(arrays[:1]), cls, index, rng)[0], arrays[1]
        return [x, (np.asarray(b, np.float64) / 8).astype(F32)] + list(arrays[2:])
    if cls not in ("normal", "shapes"):
        return arrays
    x, b = (np.asarray(a, np.float64) for a in arrays[:2])
    bound = np.broadcast_to(np.abs(b), x.shape)
    x = np.copysign(np.clip(np.abs(x), bound / 16, bound * 16), x).astype(F32)
    return [x, arrays[1]] + list(arrays[2:])


# --- the fixed edge set ---------------------------------------------------------------------------
# x (rows, d): d in E over 1..3 rows (db sums a few terms per column), rows in E over a few
# columns (db sums long columns: the VJP's row chunks), X both ways, and the empty forms
BIAS_GELU_FORMS = tuple((1 + i % 3, d) for i, d in enumerate(EXTENTS)) + (
    (4097, 3), (65537, 2), (1, PAST_2_20), (PAST_2_20, 1), (0, 4), (3, 0), (1, 1))


def _bias_gelu() -> list[Edge]:
    return [Edge(((rows, d), (d,)), (), MIXED) for rows, d in BIAS_GELU_FORMS]


# --- derived bounds -------------------------------------------------------------------------------

U64 = 2.0 ** -53
FN64_REL = 2.0 ** -51          # float64 exp / tanh within 2 ulps (the module docstring)
REFERENCE_REL = 2.0 ** -52     # references/bias_gelu.py's fsum of float64-nearest terms
C, K = math.sqrt(2.0 / math.pi), 0.044715


def _s(ctx):
    x, b = (np.asarray(a, np.float32) for a in ctx.inputs[:2])
    with np.errstate(all="ignore"):
        return (x + b).astype(np.float64)


def forward_bound(ref, ctx, unit):
    s = _s(ctx)
    with np.errstate(all="ignore"):
        z = 2 * C * (s + K * s ** 3)
        one_minus = _clean(1.0 / (1.0 + np.exp(z)))
        rho = _clean(one_minus * 8 * U64 * np.abs(z)) + FN64_REL + 2 * U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


def _term_error(ctx):
    """|g| (12 u64 M_d + |dd/dt| dt) per element: the float64 error of g d(s) before rounding."""
    s = _s(ctx)
    g = np.abs(np.asarray(ctx.g, np.float64))
    with np.errstate(all="ignore"):
        w = C * (s + K * s ** 3)
        t = np.tanh(w)
        p = C * (1 + 3 * K * s * s)
        m_d = 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(s) * (1 + t * t) * p
        dt = (1 - t * t) * 6 * U64 * np.abs(w) + FN64_REL * np.abs(t)
        e = g * (12 * U64 * m_d + (0.5 + np.abs(s * t) * p) * dt)
    return _clean(e)


def vjp_bound(ref, ctx, unit):
    exact = _clean(np.abs(ref.exact))
    if getattr(ctx, "input_index", 0) == 0:
        return (_term_error(ctx) + (unit + U64) * exact) * (1 + 4 * unit)
    x_shape = np.shape(ctx.inputs[0])
    rows = math.prod(x_shape[:-1])
    terms_err = _term_error(ctx).reshape(rows, x_shape[-1]).sum(axis=0)
    mag = _clean(np.asarray(ref.magnitude, np.float64))
    b = (terms_err + (U64 + float(_gamma(max(rows, 1), U64))) * mag + REFERENCE_REL * (mag + exact)
         + unit * exact)
    return b * (1 + 4 * unit)


BIAS_GELU_FORWARD = DerivedRule(
    "derived: (u + (1 - sigmoid(z)) 8u64|z| + 2^-51 + 2u64) |y|",
    "the float32 sum x + b (shared with the reference), then gelu in float64, rounded once",
    forward_bound)
BIAS_GELU_VJP = DerivedRule(
    "derived: dx |g| (12u64 M_d + |dd/dt| dt) + u|dx|; db their sum + gamma64_rows M + u|db|",
    "g gelu'(s) in float64 rounded once, and its float64 sum over the rows rounded once",
    vjp_bound)


# --- native_cuda.bias_gelu's float32 VJP ----------------------------------------------------------
# The derived bound of native_cuda.bias_gelu's float32 VJP (engine/csrc/cuda/bias_gelu.cu
# tl_bias_gelu_bwd_f32 and tl_bias_gelu_db), that capsule's own (OpSpec.capsule_rules); the accurate
# variant keeps the op's rule (above). Its forward
# is GeluF32 of s = float32(x + b) and carries native_cuda.gelu's declared bound (the capsule
# declares the same DeclaredBound): no rule here. u = 2^-24 (`unit`), u64 = 2^-53.
#
# dx = GeluBF32(s, g), the float32 VJP functor of native_cuda.gelu at s (x + b rounded once: the
# reference's own input, not an error): native_cuda.gelu's rule at s (elementwise.GELU_F32), e_i.
#
# db_j = the double sum over the rows of the float terms t_i = dx_i (each within e_i of the exact
# g_i gelu'(s_i)), in a fixed order (rows within a warp, the warps, the chunks), rounded once:
#   |got - db| <= (E + gamma64_rows (M + E) + REFERENCE_REL (M + |db|) + u |db|) (1 + 4u),
# E = sum_i e_i, M = sum_i |g_i gelu'(s_i)| (the reference's magnitude; sum |t_i| <= M + E), the
# reference's own fsum error REFERENCE_REL (above) and the final rounding (the
# (1 + 4u) factor takes it relative to the computed sum). e_i needs each term's exact value
# (its relative part on [-1, -0.625]): float64's g s(z) (1 + X) (elementwise.gelu_f32_parts) stands
# in, with 2^-50 |g| added for its absolute error there (the factor cancels near its root).
F32_CAPSULE = "native_cuda.bias_gelu"
TERM_ABS = 2.0 ** -50          # float64 g gelu'(s)'s absolute error near the factor's root


def _f32_term_bounds(ctx, exact, unit):
    """e_i: native_cuda.gelu's VJP rule at s = float32(x + b), per element of x."""
    s = _s(ctx)
    g = np.broadcast_to(np.asarray(ctx.g, np.float64), s.shape)
    at_s = SimpleNamespace(inputs=(s,), g=g)
    return gelu_f32_vjp_bound(SimpleNamespace(exact=exact), at_s, unit)


def f32_vjp_bound(ref, ctx, unit):
    exact = _clean(np.abs(ref.exact))
    if getattr(ctx, "input_index", 0) == 0:
        return _f32_term_bounds(ctx, exact, unit)
    x_shape = np.shape(ctx.inputs[0])
    rows, d = math.prod(x_shape[:-1]), x_shape[-1]
    s = _s(ctx)
    g = np.abs(np.broadcast_to(np.asarray(ctx.g, np.float64), x_shape))
    sig, _, f = gelu_f32_parts(s)            # gelu'(s) = sigmoid(z) (1 + X)
    with np.errstate(all="ignore"):
        terms = _clean(g * np.abs(sig * f)) + TERM_ABS * _clean(g)
    e = _clean(_f32_term_bounds(ctx, terms, unit)).reshape(rows, d).sum(axis=0)
    mag = _clean(np.asarray(ref.magnitude, np.float64))
    total = (e + float(_gamma(max(rows, 1), U64)) * (mag + e)
             + REFERENCE_REL * (mag + exact) + unit * exact)
    return total * (1 + 4 * unit)


BIAS_GELU_F32 = CapsuleRules(F32_CAPSULE, vjp=DerivedRule(
    "derived (bias_gelu f32): dx native_cuda.gelu's rule at s; db sum e_i + gamma64_rows (M + "
    "sum e_i) + u|db|",
    "dx = GeluBF32(x + b, g) in float32 (tl_act_f32.cuh), db the fixed-order double sum of those "
    "float terms rounded once", f32_vjp_bound))


def _bias_gelu_audit(rng, idx):
    # gpt2-124m's MLP width over 4096 rows: db's 64 row chunks and their fixed-order sum
    return (normal(rng, 4096, 512), normal(rng, 512)), {}, (4096, 512)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Entry.bias_gelu, bias_gelu_layout, _bias_gelu, catalogue=50,
        near_overflow=EXP_EDGE / 2, cancellation=None,
        determinism=AuditCase(19, _bias_gelu_audit), values=bias_gelu_values,
        error_inputs=(
            *shaped_inputs(29, "bias_gelu", lambda s, a: ops.bias_gelu(a, filled(s, (3,))),
                           (2, 3)),
            param(145, "bias_gelu: b of the wrong length", DIMS,
                  lambda s: ops.bias_gelu(m23(s), filled(s, (2,))), ShapeError,
                  r"b must have shape \(d,\) = \(3,\) for x of shape \(2, 3\), got "
                  r"\(2,\)"),
            param(146, "bias_gelu: rank-0 x", RANK,
                  lambda s: ops.bias_gelu(filled(s, ()), filled(s, (1,))), ShapeError,
                  r"x must have rank >= 1"),
            param(147, "bias_gelu: b on the other device", "session targets the device",
                  lambda s: ops.bias_gelu(m23(s), foreign(s, (3,))), DeviceMismatchError,
                  r"input 1 lives on `\w+` but the session runs on `\w+`")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        forward_rule=BIAS_GELU_FORWARD, vjp_rule=BIAS_GELU_VJP, capsule_rules=(BIAS_GELU_F32,)),
)
