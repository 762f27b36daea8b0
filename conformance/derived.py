"""Derived error bounds for composites that declare none, forward and VJP: the docs/OPS.md formula
evaluated in float32, each basic operation rounded once (relative error <= u, or, under
implementation-defined rounding, 4u: CUDA's approximate division under -prec-div=false is within
2 ulp), each elementary function (exp, log, tanh, sin, cos) within E ulps, to first order in u.

E is error_terms.elementary_ulps(): ELEMENTARY_ULPS = 2, an assumption stated here once, the largest
maximum error the CUDA C Programming Guide lists for expf, logf, tanhf, sinf and cosf outside
fast-math; for native-cuda capsules whose build declares --use_fast_math, the bound of __expf (the
only elementary function a float32 composite kernel calls; tests/test_kernel_declarations.py
checks the sources), error_models.elementary_ulps_for. A capsule whose elementary functions are
looser still declares its own bound in its value contract instead.

An E-ulp result has relative error at most E * 2^-23 (an ulp of x is at most 2u |x|): e_rel(), which
conformance/error_terms.py defines with elementary_ulps().
VJP bounds also inherit the error of the forward output the rule consumes (the `output` argument of
the calling convention): that term is computed from the capsule's actual forward error, first order.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from conformance import (derived_attention_heads, derived_bias_gelu, derived_loss,
                         derived_norm_attention, derived_spectral)
from conformance.error_terms import DerivedRule, e_rel
from conformance.error_terms import clean as _clean, fwd_err as _fwd_err, gamma as _gamma, \
    k_of as _k
from engine.types import BackendOp as Op, RuntimeEntry as Entry

KAPPA, C_GELU = 0.044715, float(np.sqrt(2.0 / np.pi))


def _rows(x, axis):
    """x with `axis` moved last and flattened to rows, and the inverse."""
    moved = np.moveaxis(np.asarray(x), axis, -1)
    shape = moved.shape
    # explicit row count: reshape(-1, 0) cannot infer the rows of an empty axis
    width = shape[-1] if shape else 1
    return moved.reshape(int(np.prod(shape[:-1])) if shape else 1, width), \
        lambda r: np.moveaxis(np.asarray(r).reshape(shape), -1, axis)


# --- forward -----------------------------------------------------------------------------------

def _softmax_parts(ctx, unit):
    a = np.asarray(ctx.inputs[0], dtype=np.float64)
    axis = ctx.params.get("axis", -1) % max(a.ndim, 1)
    mask = ctx.params.get("mask")
    part = np.ones(a.shape, bool) if mask is None else np.asarray(mask, bool)
    rows, back = _rows(a, axis)
    prow, _ = _rows(part, axis)
    with np.errstate(all="ignore"):
        live = prow & np.isfinite(rows)
        m = np.max(np.where(live, rows, -np.inf), axis=-1, keepdims=True, initial=-np.inf)
        d = _clean(np.where(live, rows - m, 0.0))
        e = np.where(live, np.exp(d), 0.0)
        s = e / np.where(e.sum(-1, keepdims=True) > 0, e.sum(-1, keepdims=True), 1.0)
        # relative error of S = sum e_j: each e_j carries u|d_j| (its rounded argument) and E_REL
        rho_s = np.sum(s * (unit * np.abs(d) + e_rel()), -1, keepdims=True) + \
            _gamma(_k(ctx, np.maximum(prow.sum(-1, keepdims=True), 1)), unit)
    return rows, back, live, d, s, rho_s


def _softmax_bound(ref, ctx, unit):
    # s_i = e_i / S: e_i's error (u|d_i| + E_REL), S's error rho_S, and the division's u.
    _, back, live, d, s, rho_s = _softmax_parts(ctx, unit)
    rel = unit * np.abs(d) + e_rel() + rho_s + unit
    return back(np.where(live, s * rel * (1 + 4 * unit), 0.0))


def _log_softmax_bound(ref, ctx, unit):
    # y_i = d_i - log S: u|d_i| for d_i, rho_S + E_REL |log S| for log S, u |y_i| for the subtraction.
    _, back, live, d, s, rho_s = _softmax_parts(ctx, unit)
    with np.errstate(all="ignore"):
        big_l = _clean(np.log(np.sum(np.where(live, np.exp(d), 0.0), -1, keepdims=True)))
    y = np.abs(d - big_l)
    b = unit * np.abs(d) + rho_s + e_rel() * np.abs(big_l) + unit * y
    return back(np.where(live, b * (1 + 4 * unit), 0.0))


def _mse_bound(ref, ctx, unit):
    # n squared differences (subtract, square: one product, so k as for a dot product), the sum,
    # and the division by n: gamma_{k + 2} of the mean itself (every term is >= 0).
    n = max(int(np.asarray(ctx.inputs[0]).size), 1)
    return _gamma(_k(ctx, n, products=True) + 2, unit) * _clean(ref.magnitude)


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


FORWARD_RULES = {
    Op.softmax: DerivedRule("derived: s_i (u|d_i| + E_REL + rho_S + u)",
                            "float32 exp(a - max) / sum: argument rounding, elementary exp, "
                            "the sum (gamma_k of the policy) and the division", _softmax_bound),
    Op.hard_masked_softmax: DerivedRule("derived: as softmax over participants; blocked exactly 0",
                                        "softmax's derivation on participating entries; blocked "
                                        "entries and blocked rows are exact zeros", _softmax_bound),
    Op.log_softmax: DerivedRule("derived: u|d_i| + rho_S + E_REL|log S| + u|y_i|",
                                "float32 (a - max) - log(sum exp(a - max))", _log_softmax_bound),
    Op.mse_loss: DerivedRule("derived: gamma_{k+2} * mean", "squared differences summed under the "
                             "reduction policy, then divided by n", _mse_bound),
    Op.gelu: DerivedRule("derived: |gelu| ((1 - sigmoid(x)) 7u|x| + E_REL + 2u)",
                         "float32 a * sigmoid(2u(a)): the argument's rounding is amplified by "
                         "sigmoid's log-derivative", _gelu_bound),
    # the normalisation and attention rules live in their own module
    **derived_norm_attention.FORWARD_RULES,
    # so do the spectral family's (the FFT bound)
    **derived_spectral.FORWARD_RULES,
    # and the fused cross-entropy's (float64 rows, rounded once)
    **derived_loss.FORWARD_RULES,
    **derived_bias_gelu.FORWARD_RULES,
    **derived_attention_heads.FORWARD_RULES,
}


# --- VJP -----------------------------------------------------------------------------------------

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


def _vjp_softmax(ref, ctx, unit):
    # s_i (g_i - sum_j g_j s_j): the dot product (gamma_{k+1} of sum |g_j s_j|), the subtraction
    # and the product: gamma_{k+3} of the reference's magnitude s_i (|g_i| + sum |g_j| s_j).
    # Forward errors e_j in out: |g_i - dot| e_i + s_i sum_j |g_j| e_j.
    axis = ctx.params.get("axis", -1) % max(np.ndim(ctx.out), 1)
    s, back = _rows(_clean(ctx.fwd_ref.exact), axis)
    g, _ = _rows(np.asarray(ctx.g, np.float64), axis)
    e, _ = _rows(_fwd_err(ctx), axis)
    n = np.maximum(np.asarray(ref.terms if ref.terms is not None else s.shape[-1]), 1)
    n_rows, _ = _rows(np.broadcast_to(n, np.shape(ctx.out)), axis)
    dot = np.sum(g * s, -1, keepdims=True)
    inherited = np.abs(g - dot) * e + s * np.sum(np.abs(g) * e, -1, keepdims=True)
    k = _k(ctx, n_rows, products=True) + 3
    return back(_gamma(k, unit) * _rows(_clean(ref.magnitude), axis)[0] + _clean(inherited))


def _vjp_log_softmax(ref, ctx, unit):
    # g_i - exp(out_i) sum_j g_j: the sum (gamma_k), exp (E_REL), product and subtraction: gamma_{k+2}
    # of the magnitude |g_i| + s_i sum |g_j|, plus E_REL s_i |sum g| and exp's inherited error.
    axis = ctx.params.get("axis", -1) % max(np.ndim(ctx.out), 1)
    y, back = _rows(np.asarray(ctx.fwd_ref.exact, np.float64), axis)
    g, _ = _rows(np.asarray(ctx.g, np.float64), axis)
    e, _ = _rows(_fwd_err(ctx), axis)
    with np.errstate(all="ignore"):
        s = _clean(np.exp(y))
        sum_g = np.abs(np.sum(g, -1, keepdims=True))
        inherited = s * sum_g * _clean(np.expm1(e))
    k = _k(ctx, y.shape[-1]) + 2
    b = _gamma(k, unit) * _rows(_clean(ref.magnitude), axis)[0] + e_rel() * s * sum_g + inherited
    return back(_clean(b))


def _vjp_mse(ref, ctx, unit):
    # (p - t) * (2 g / n): the subtraction, the division and the product: 3u relative.
    return _ex(ref) * 3 * unit * (1 + 4 * unit)


VJP_RULES = {
    Op.sqrt: DerivedRule("derived: |dA| (u + rel. error of out)", "g / (2 out), one division, out's "
                         "relative error carried over", _vjp_sqrt),
    Op.exp: DerivedRule("derived: u |dA| + |g| |out - exp(a)|", "g * out, one product", _vjp_exp),
    Op.inv: DerivedRule("derived: 2u |dA| + |g| (2|y| + e) e", "-(g out out), two products",
                        _vjp_inv),
    Op.sin: DerivedRule("derived: (E_REL + u) |dA|", "g cos(a): elementary cos and a product",
                        _vjp_trig),
    Op.cos: DerivedRule("derived: (E_REL + u) |dA|", "-g sin(a): elementary sin and a product",
                        _vjp_trig),
    Op.sigmoid: DerivedRule("derived: 3u |dA| + |g| (|1 - 2s| e + e^2)",
                            "g out (1 - out): out's error e propagated", _vjp_sigmoid),
    Op.tanh: DerivedRule("derived: 3u |g| (1 + t^2) + |g| (2|t| + e) e",
                         "g (1 - out^2): out's error e propagated", _vjp_tanh),
    Op.softplus: DerivedRule("derived: (E_REL + 3u) |dA|", "g sigmoid(a) in float32",
                             _vjp_softplus),
    Op.gelu: DerivedRule("derived: |g| (10u M_d + |dd/dt| dt) + u |dA|",
                         "g d(a) of the tanh formula in float32", _vjp_gelu),
    Op.softmax: DerivedRule("derived: gamma_{k+3} M + inherited", "s (g - sum g s) in float32",
                            _vjp_softmax),
    Op.hard_masked_softmax: DerivedRule("derived: gamma_{k+3} M + inherited",
                                        "softmax's VJP over participants", _vjp_softmax),
    Op.log_softmax: DerivedRule("derived: gamma_{k+2} M + E_REL s |sum g| + inherited",
                                "g - exp(out) sum g in float32", _vjp_log_softmax),
    Op.mse_loss: DerivedRule("derived: 3u |dA|", "(p - t)(2 g / n) in float32", _vjp_mse),
    **derived_norm_attention.VJP_RULES,
    **derived_spectral.VJP_RULES,
    **derived_loss.VJP_RULES,
    **derived_bias_gelu.VJP_RULES,
    **derived_attention_heads.VJP_RULES,
}


# --- selective_scan: the recurrence's bound for the sequential and the chunked parallel order, and
# its float64 VJP (the derivation is conformance/derived_scan.py's docstring) ---------------------
from conformance import derived_scan  # noqa: E402  (a block of its own, appended for the merge)

FORWARD_RULES[Op.selective_scan] = DerivedRule(
    "derived: u (K_t + C_t) / (1 - (2t + 3) u) + underflow; +inf where an intermediate may "
    "overflow",
    "float32 recurrence h = A h + B X: each term of h_t carries at most 2(t - s) + 3 roundings in "
    "the sequential and the chunked parallel order (K_t: the terms' magnitudes weighted by their "
    "counts, C_t: their sum)", derived_scan.forward_bound)
VJP_RULES[Op.selective_scan] = DerivedRule(
    "derived: u |exact| + gamma64_{6(seq+2)} M + underflow; +inf where float64 can overflow",
    "the adjoint's reverse-time recurrence evaluated in float64 and rounded once per gradient",
    derived_scan.vjp_bound)


# --- add_layer_norm (RuntimeEntry): its forward [s, y] has a declared bound in both capsules'
# value contracts; a gradient contract declares none, so the VJP takes layer_norm's rule at the
# float32 sum s for the cotangent g[1] of y --------------------------------------------------------
U64 = 2.0 ** -53


def _add_layer_norm_vjp_bound(ref, ctx, unit):
    """dgamma, dbeta: layer_norm's bounds at s for g[1]. dx = dr = g[0] + layer_norm's dx: that
    dx's bound (its exact value and magnitude are the reference's less g[0], to float64 rounding),
    the addition's rounding u |dx + g[0]|, and the reference's own float64 error (2 u64 of |dx| and
    of |dx + g[0]|: references/add_layer_norm.py adds float64 values)."""
    x, r, gamma, beta = (np.asarray(a, np.float32) for a in ctx.inputs[:4])
    with np.errstate(all="ignore"):
        s = (x + r).astype(np.float32)
    g = np.asarray(ctx.g, np.float32)
    index = getattr(ctx, "input_index", 0)
    ln_ctx = dataclasses.replace(
        ctx, op=Op.layer_norm, inputs=(s, gamma, beta), g=g[1], input_index=max(index - 1, 0),
        out=None if ctx.out is None else np.asarray(ctx.out)[1], fwd_ref=None)
    bound = VJP_RULES[Op.layer_norm].bound
    if index >= 2:
        return bound(ref, ln_ctx, unit)
    g0 = g[0].astype(np.float64)
    total = np.asarray(ref.exact, np.float64)
    with np.errstate(all="ignore"):
        dx = total - g0
        ln_ref = dataclasses.replace(
            ref, value=np.asarray(dx, np.float32), exact=dx,
            magnitude=np.maximum(_clean(np.asarray(ref.magnitude, np.float64)) - np.abs(g0), 0.0))
        b = bound(ln_ref, ln_ctx, unit) + (unit + 2 * U64) * _clean(np.abs(total)) + \
            2 * U64 * _clean(np.abs(dx))
    return b * (1 + 4 * unit)


VJP_RULES[Entry.add_layer_norm] = DerivedRule(
    "derived: layer_norm's VJP bounds at s = float32(x + r) for g[1]; dx = dr adds g[0]: "
    "+ (u + 2u64) |dx + g[0]|",
    "g[0] + layer_norm's dx at the float32 sum (float32 statistics or better), one rounding more",
    _add_layer_norm_vjp_bound)


# --- capsule-specific rules: a kernel whose evaluation differs from what its op's rule assumes
# declares its own, looked up by capsule name before the op's (conformance/derived_flash.py: the
# online softmax of native_cuda.flash_attention; derived_gelu_f32.py: native_cuda.gelu's VJP;
# derived_bias_gelu_f32.py: native_cuda.bias_gelu's float32 VJP) ---
from conformance import derived_bias_gelu_f32, derived_flash, derived_gelu_f32  # noqa: E402

CAPSULE_FORWARD_RULES = {**derived_flash.FORWARD_RULES,
                         **derived_attention_heads.CAPSULE_FORWARD_RULES}
# native_cuda.gelu's float32 VJP: relative where the op's tanh-formula rule is absolute
CAPSULE_VJP_RULES = {**derived_flash.VJP_RULES, **derived_gelu_f32.VJP_RULES,
                     **derived_bias_gelu_f32.VJP_RULES,
                     **derived_attention_heads.CAPSULE_VJP_RULES}


def rule_for(op, capsule: str | None = None, vjp: bool = False) -> DerivedRule | None:
    """The derived rule of a capsule's value (vjp False) or gradient: its own, else its op's."""
    own = (CAPSULE_VJP_RULES if vjp else CAPSULE_FORWARD_RULES).get(capsule)
    return own if own is not None else (VJP_RULES if vjp else FORWARD_RULES).get(op)
