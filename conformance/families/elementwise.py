"""The elementwise family (engine/ops/elementwise.py): add, sub, mul, max, min, scale, abs, sqrt,
clamp, relu, gelu, sigmoid, tanh, softplus, exp, log, sin, cos, inv and safe_log, each one record
with everything the harness knows about testing it.

Edge set (23 cases per op): (n,) for n in E and X; (0,), (3, 0, 2), (1, 1, 1), (); values mixed
(85% of the elements non-negative for sqrt, log, safe_log); params cycle: scale alpha over
SCALE_ALPHAS, clamp (lo, hi) over CLAMP_BOUNDS, safe_log eps over SAFE_LOG_EPS.

Derived bounds (conformance/error_terms.py states the method and E): gelu's value, and the
gradients of sqrt, exp, inv, sin, cos, sigmoid, tanh, softplus and gelu; native_cuda.gelu's float32
VJP has its own (below, GELU_F32_CAPSULE)."""
from __future__ import annotations

import numpy as np

from conformance.edges import MIXED, Edge, cycle, flat_shapes
from conformance.error_terms import DerivedRule, e_rel
from conformance.error_terms import clean as _clean, fwd_err as _fwd_err
from conformance.families.spec import (DIMS, EXP_EDGE, CapsuleRules, OpSpec,
                                       binary, m23, param, unary)
from conformance.focus import ELEMENTWISE
from conformance.layouts import base_shape, binary_layout, unary_layout
from conformance.samplers import F32, cancel_pair, far_tail
from engine import ops
from engine.errors import ParameterTypeError, ParameterValueError
from engine.types import BackendOp as Op

GROUP = "elementwise"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def scale_layout(rng, cls):
    alphas = [0.5, -1.0, 3.0, 0.1, 2.0 ** -100, 1e30, 0.0, -0.0]
    alpha = float(rng.choice(alphas)) if cls == "params" or rng.integers(0, 2) else float(
        F32(rng.standard_normal()))
    return [base_shape(rng, cls)], {"alpha": alpha}


def clamp_layout(rng, cls):
    lo, hi = sorted(float(F32(x)) for x in rng.standard_normal(2))
    if cls == "params" and rng.integers(0, 2):
        hi = lo
    return [base_shape(rng, cls)], {"lo": lo, "hi": hi}


def safe_log_layout(rng, cls):
    eps = float(rng.choice([1e-12, 1e-3, 0.5, 1e-30]))
    return [base_shape(rng, cls)], {"eps": eps}


# --- the fixed edge set ---------------------------------------------------------------------------

SCALE_ALPHAS = (0.5, -1.0, 3.0, 0.1, 2.0 ** -100, 1e30, 0.0, -0.0, -2.0 ** -149)
CLAMP_BOUNDS = ((-1.0, 1.0), (0.0, 0.0), (-0.0, 0.0), (-2.5, -0.5), (0.25, 3.0), (-1e30, 1e-30))
SAFE_LOG_EPS = (1e-12, 1e-3, 0.5, 1e-30)


def _edges(arity: int = 1, params=None):
    """The edge set of an elementwise op of `arity` inputs; params(i) -> the i-th case's params."""
    def build() -> list[Edge]:
        return [Edge((s,) * arity, params(i) if params else (), MIXED)
                for i, s in enumerate(flat_shapes())]
    return build


def _clamp_bounds(i):
    lo, hi = cycle(CLAMP_BOUNDS, i)
    return (("lo", lo), ("hi", hi))


_UNARY, _BINARY = _edges(1), _edges(2)
_SCALE = _edges(params=lambda i: (("alpha", cycle(SCALE_ALPHAS, i)),))
_CLAMP = _edges(params=_clamp_bounds)
_SAFE_LOG = _edges(params=lambda i: (("eps", cycle(SAFE_LOG_EPS, i)),))


# --- derived bounds -------------------------------------------------------------------------------

KAPPA, C_GELU = 0.044715, float(np.sqrt(2.0 / np.pi))


def _gelu_bound(ref, ctx, unit):
    # a / (1 + exp(-x)), x = 2 c (a + kappa a^3): x carries 7 roundings (5 operations and the float32
    # constants c, kappa), all terms one sign, so |dx| <= 7u|x|, which moves sigmoid(x) by
    # (1 - sigmoid(x)) |dx| relatively; then exp (E_REL), 1 + e and the division (2u).
    a = np.asarray(ctx.inputs[0], dtype=np.float64)
    with np.errstate(all="ignore"):
        x = 2 * C_GELU * (a + KAPPA * a ** 3)
        one_minus = _clean(1.0 / (1.0 + np.exp(x)))
        rel = _clean(one_minus * 7 * unit * np.abs(x)) + e_rel() + 2 * unit
    return _clean(np.abs(ref.exact)) * rel * (1 + 4 * unit)


GELU_FORWARD = DerivedRule("derived: |gelu| ((1 - sigmoid(x)) 7u|x| + E_REL + 2u)",
                           "float32 a * sigmoid(2u(a)): the argument's rounding is amplified by "
                           "sigmoid's log-derivative", _gelu_bound)


def _ex(ref):
    return _clean(np.abs(ref.exact))


def _g(ctx):
    return np.broadcast_to(np.abs(np.asarray(ctx.g, np.float64)), np.shape(ctx.fwd_ref.exact))


def _vjp_sqrt(ref, ctx, unit):
    # g / (2 out): one division (2 out is exact); out's relative error carries over one for one.
    out = np.abs(np.asarray(ctx.out, np.float64))
    with np.errstate(all="ignore"):
        rel_out = _clean(_fwd_err(ctx) / out)
    return _ex(ref) * (unit + rel_out) * (1 + 4 * unit)


def _vjp_exp(ref, ctx, unit):
    # g * out: one product, and g times out's error.
    return _ex(ref) * unit * (1 + 4 * unit) + _g(ctx) * _fwd_err(ctx)


def _vjp_inv(ref, ctx, unit):
    # -(g * out * out): two products; d(out^2) = (2|y| + |e|)|e| for an error e in out.
    e = _fwd_err(ctx)
    y = _clean(np.abs(ctx.fwd_ref.exact))
    return _ex(ref) * 2 * unit * (1 + 4 * unit) + _g(ctx) * (2 * y + e) * e


def _vjp_trig(ref, ctx, unit):
    # g * cos(a) (or -g * sin(a)): one elementary function and one product, both relative.
    return _ex(ref) * (e_rel() + unit) * (1 + 4 * unit)


def _vjp_sigmoid(ref, ctx, unit):
    # g * out * (1 - out): 1 - out is exact for out >= 1/2 (Sterbenz) and relative otherwise, then
    # two products: 3u relative; out's error e moves s(1 - s) by |1 - 2s| e + e^2.
    e = _fwd_err(ctx)
    s = _clean(ctx.fwd_ref.exact)
    return _ex(ref) * 3 * unit * (1 + 4 * unit) + _g(ctx) * (np.abs(1 - 2 * s) * e + e * e)


def _vjp_tanh(ref, ctx, unit):
    # g * (1 - out^2): out^2, the subtraction and the product give 3u of |g| (1 + t^2); out's error
    # e moves 1 - t^2 by (2|t| + e) e.
    e = _fwd_err(ctx)
    t = _clean(ctx.fwd_ref.exact)
    return 3 * unit * (1 + 4 * unit) * _g(ctx) * (1 + t * t) + _g(ctx) * (2 * np.abs(t) + e) * e


def _vjp_softplus(ref, ctx, unit):
    # g * sigmoid(a), sigmoid in float32: exp (E_REL), 1 + e and the division, then the product.
    return _ex(ref) * (e_rel() + 3 * unit) * (1 + 4 * unit)


def _vjp_gelu(ref, ctx, unit):
    # g * d(a), d = 0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3 kappa a^2), t = tanh(w): about ten
    # roundings over the terms' magnitude M_d, and t's error dt = (1 - t^2) 7u|w| + E_REL |t|
    # moved by |dd/dt| <= 0.5 + |a t| c (1 + 3 kappa a^2).
    a = np.asarray(ctx.inputs[0], dtype=np.float64)
    with np.errstate(all="ignore"):
        w = C_GELU * (a + KAPPA * a ** 3)
        t = np.tanh(w)
        poly = C_GELU * (1 + 3 * KAPPA * a * a)
        m_d = 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(a) * (1 + t * t) * poly
        dt = (1 - t * t) * 7 * unit * np.abs(w) + e_rel() * np.abs(t)
        b = _g(ctx) * (10 * unit * m_d + (0.5 + np.abs(a * t) * poly) * dt)
    return _clean(b) + _ex(ref) * unit


SQRT_VJP = DerivedRule("derived: |dA| (u + rel. error of out)", "g / (2 out), one division, out's "
                       "relative error carried over", _vjp_sqrt)
EXP_VJP = DerivedRule("derived: u |dA| + |g| |out - exp(a)|", "g * out, one product", _vjp_exp)
INV_VJP = DerivedRule("derived: 2u |dA| + |g| (2|y| + e) e", "-(g out out), two products",
                      _vjp_inv)
SIN_VJP = DerivedRule("derived: (E_REL + u) |dA|", "g cos(a): elementary cos and a product",
                      _vjp_trig)
COS_VJP = DerivedRule("derived: (E_REL + u) |dA|", "-g sin(a): elementary sin and a product",
                      _vjp_trig)
SIGMOID_VJP = DerivedRule("derived: 3u |dA| + |g| (|1 - 2s| e + e^2)",
                          "g out (1 - out): out's error e propagated", _vjp_sigmoid)
TANH_VJP = DerivedRule("derived: 3u |g| (1 + t^2) + |g| (2|t| + e) e",
                       "g (1 - out^2): out's error e propagated", _vjp_tanh)
SOFTPLUS_VJP = DerivedRule("derived: (E_REL + 3u) |dA|", "g sigmoid(a) in float32",
                           _vjp_softplus)
GELU_VJP = DerivedRule("derived: |g| (10u M_d + |dd/dt| dt) + u |dA|",
                       "g d(a) of the tanh formula in float32", _vjp_gelu)


# --- native_cuda.gelu's float32 VJP ---------------------------------------------------------------
# The derived bound of native_cuda.gelu's float32 VJP (engine/csrc/cuda/tl_act_f32.cuh GeluBF32),
# held by gelu's record as that capsule's own (OpSpec.capsule_rules): tighter than the op's rule
# for the float32 tanh formula, which is absolute (10u of the terms' magnitude) where the factor d = gelu'(x) cancels
# near its root x0 = -0.75246 and so admitted ~1e7 ulp there. u = 2^-24 (`unit`), s = sigmoid(z),
# z = 2C (x + K x^3), c = 1 - s, X = x z' c, f = 1 + X, d = s f, dA = g d.
#
# In I = [-1, -0.625] (|X/f| > 3.36 only inside it) the kernel evaluates d through its root,
# d = (t - x0l) q(t), t = x - x0h exact, q a degree-7 float polynomial (tl_act_f32.cuh: the fit
# within 2^-24.93 relative with its float coefficients, Horner's running error 1.30u, the final fma
# u, fl(x0l q) at most u, the root's float64 residue 0.55u), then g d: relative
#   |got - dA| <= (2^-24.93 + 4.85u) |dA| (1 + 4u).
#
# Outside I, float32 throughout: s and c each within 2.2u relative (E1's half ulp 1.03u, its
# polynomial and r's rounding 2^-27.3, the reciprocal pair 2^-44, the value's one rounding u), x z'
# within 4u (x^2, the fma, the product: 3u; the float constants 2C and 6CK: u on the sum of two
# positive terms), X = x z' c within 6.2u, f = fl(1 + X) by one fma, d = fl(s f), g d: first order
#   |got - dA| <= |g| s (6.2u |X| + 5.2u |f|) (1 + 4u) + |g| (2 + |X|) 2^-148
# (|X/f| <= 3.36 there: within 26u of |dA| wherever s is normal),
# the last term for a subnormal s (x below about -10.3: three roundings of 0.54 subnormal ulp, times
# |f| <= 1 + |X|) and d's own subnormal rounding. Beyond x = 10 and below -11.5 the kernel returns
# the limits g and 0, within 2^-118 |g| and 2^-174 |g| of dA: under the terms above.
GELU_F32_CAPSULE = "native_cuda.gelu"
GELU_VJP_LO, GELU_VJP_HI = -1.0, -0.625                 # tl_act_f32.cuh TL_GELU_VJP_LO / TL_GELU_VJP_HI
GELU_ROOT_FIT_REL = 2.0 ** -24.93          # q's fit with float coefficients (mpmath, 20001 points)
GELU_ROOT_UNITS = 4.85                     # Horner 1.30 + fma 1 + fl(x0l q) 1 + residue 0.55 + g d 1
GELU_X_UNITS, GELU_F_UNITS = 6.2, 5.2           # outside I, first order (the comment above)
GELU_SUB_ABS = 2.0 ** -148


def gelu_f32_parts(x):
    """s, X and f of the exact formula at float64 x (x finite)."""
    with np.errstate(all="ignore"):
        z = 2 * C_GELU * (x + KAPPA * x ** 3)
        s = 1.0 / (1.0 + np.exp(-z))
        c = 1.0 / (1.0 + np.exp(z))
        big_x = x * 2 * C_GELU * (1 + 3 * KAPPA * x * x) * c
    return s, big_x, 1.0 + big_x


def gelu_f32_vjp_bound(ref, ctx, unit):
    x = np.asarray(ctx.inputs[0], dtype=np.float64)
    g = np.broadcast_to(np.abs(np.asarray(ctx.g, np.float64)), x.shape)
    exact = _clean(np.abs(ref.exact))
    s, big_x, f = gelu_f32_parts(x)
    with np.errstate(all="ignore"):
        near = (GELU_ROOT_FIT_REL + GELU_ROOT_UNITS * unit) * exact
        far = g * s * (GELU_X_UNITS * unit * np.abs(big_x) + GELU_F_UNITS * unit * np.abs(f))
        far = _clean(far) + _clean(g * (2 + np.abs(big_x))) * GELU_SUB_ABS
    inside = (x >= GELU_VJP_LO) & (x <= GELU_VJP_HI)
    return np.where(inside, near, far) * (1 + 4 * unit)


GELU_F32 = CapsuleRules(GELU_F32_CAPSULE, vjp=DerivedRule(
    "derived (gelu f32): x in [-1, -0.625]: (2^-24.93 + 4.85u) |dA|; elsewhere |g| s (6.2u |X| + "
    "5.2u |f|) + |g| (2 + |X|) 2^-148",
    "float32 g s (1 + X), s and 1 - s from one exp and reciprocal pair, X = x z' (1 - s); where "
    "1 + X cancels (x in [-1, -0.625]) d = (x - x0) q(x) through the root with a degree-7 "
    "float polynomial: relative there, no cancellation", gelu_f32_vjp_bound))


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.add, binary_layout, _BINARY, catalogue=0,
        focus=ELEMENTWISE, error_inputs=binary(0, Op.add), summary_group=GROUP,
        cancellation=cancel_pair(-1)),
    OpSpec(Op.sub, binary_layout, _BINARY, catalogue=1,
        focus=ELEMENTWISE, error_inputs=binary(1, Op.sub), summary_group=GROUP,
        cancellation=cancel_pair(1)),
    OpSpec(Op.mul, binary_layout, _BINARY, catalogue=2,
        cancellation=None, focus=ELEMENTWISE, error_inputs=binary(2, Op.mul),
        summary_group=GROUP),
    OpSpec(Op.max, binary_layout, _BINARY, catalogue=3,
        focus=ELEMENTWISE, error_inputs=binary(3, Op.max), summary_group=GROUP,
        cancellation=cancel_pair(1)),
    OpSpec(Op.min, binary_layout, _BINARY, catalogue=4,
        focus=ELEMENTWISE, error_inputs=binary(4, Op.min), summary_group=GROUP,
        cancellation=cancel_pair(1)),
    OpSpec(Op.scale, scale_layout, _SCALE, catalogue=5,
        extra_classes=("params",), cancellation=None, focus=ELEMENTWISE,
        error_inputs=(
            *unary(12, Op.scale, lambda a: ops.scale(a, 2.0)),
            param(49, "scale: NaN alpha", DIMS, lambda s: ops.scale(m23(s), float("nan")),
                  ParameterValueError, r"alpha must be a number, got NaN"),
            param(50, "scale: string alpha", DIMS, lambda s: ops.scale(m23(s), "x"),
                  ParameterTypeError, r"alpha must be a real number, got str 'x'")),
        summary_group=GROUP),
    OpSpec(Op.abs, unary_layout, _UNARY, catalogue=6,
        cancellation=None, focus=ELEMENTWISE, error_inputs=unary(0, Op.abs),
        summary_group=GROUP),
    OpSpec(Op.sqrt, unary_layout, _UNARY, catalogue=7,
        domain="positive", cancellation=None, focus=ELEMENTWISE, error_inputs=unary(1, Op.sqrt),
        summary_group=GROUP, vjp_rule=SQRT_VJP),
    OpSpec(Op.clamp, clamp_layout, _CLAMP, catalogue=8,
        extra_classes=("params",), cancellation=None, focus=ELEMENTWISE,
        error_inputs=(
            *unary(13, Op.clamp, lambda a: ops.clamp(a, 0.0, 1.0)),
            param(48, "clamp: lo above hi", DIMS, lambda s: ops.clamp(m23(s), 1.0, 0.0),
                  ParameterValueError, r"lo=1.0 is above hi=0.0")),
        summary_group=GROUP),
    OpSpec(Op.relu, unary_layout, _UNARY, catalogue=9,
        cancellation=None, focus=ELEMENTWISE, error_inputs=unary(2, Op.relu),
        summary_group=GROUP),
    OpSpec(Op.gelu, unary_layout, _UNARY, catalogue=10,
        near_overflow=EXP_EDGE / 2, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(3, Op.gelu), values=far_tail(3.0, 11.0), summary_group=GROUP,
        forward_rule=GELU_FORWARD, vjp_rule=GELU_VJP, capsule_rules=(GELU_F32,)),
    OpSpec(Op.sigmoid, unary_layout, _UNARY, catalogue=11,
        near_overflow=EXP_EDGE, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(4, Op.sigmoid), values=far_tail(5.0, 105.0, both_signs=True),
        summary_group=GROUP, vjp_rule=SIGMOID_VJP),
    OpSpec(Op.tanh, unary_layout, _UNARY, catalogue=12,
        near_overflow=EXP_EDGE / 2, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(5, Op.tanh), summary_group=GROUP, vjp_rule=TANH_VJP),
    OpSpec(Op.softplus, unary_layout, _UNARY, catalogue=13,
        near_overflow=EXP_EDGE, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(6, Op.softplus), values=far_tail(5.0, 105.0),
        summary_group=GROUP, vjp_rule=SOFTPLUS_VJP),
    OpSpec(Op.exp, unary_layout, _UNARY, catalogue=14,
        near_overflow=EXP_EDGE, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(7, Op.exp), summary_group=GROUP, vjp_rule=EXP_VJP),
    OpSpec(Op.log, unary_layout, _UNARY, catalogue=15,
        domain="positive", cancellation=None, focus=ELEMENTWISE, error_inputs=unary(8, Op.log),
        summary_group=GROUP),
    OpSpec(Op.sin, unary_layout, _UNARY, catalogue=16,
        cancellation=None, focus=ELEMENTWISE, error_inputs=unary(9, Op.sin),
        summary_group=GROUP, vjp_rule=SIN_VJP),
    OpSpec(Op.cos, unary_layout, _UNARY, catalogue=17,
        cancellation=None, focus=ELEMENTWISE, error_inputs=unary(10, Op.cos),
        summary_group=GROUP, vjp_rule=COS_VJP),
    OpSpec(Op.inv, unary_layout, _UNARY, catalogue=18,
        near_overflow=2.0 ** 126, cancellation=None, focus=ELEMENTWISE,
        error_inputs=unary(11, Op.inv), summary_group=GROUP, vjp_rule=INV_VJP),
    OpSpec(Op.safe_log, safe_log_layout, _SAFE_LOG, catalogue=19,
        extra_classes=("params",), domain="positive", cancellation=None, focus=ELEMENTWISE,
        error_inputs=(
            *unary(14, Op.safe_log),
            param(51, "safe_log: eps 0", DIMS, lambda s: ops.safe_log(m23(s), 0.0),
                  ParameterValueError, r"eps must be positive, got 0.0")),
        summary_group=GROUP),
)
