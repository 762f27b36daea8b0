"""The softmax family (engine/ops/softmax.py): softmax, log_softmax and hard_masked_softmax.

Edge set (25 cases per op): SOFTMAX_TABLE: rows of n entries for n in E and X, along the last axis
and along a leading one (axis 0, 1, -1, -2); empty rows (3, 0), no rows (0, 5), length-1 rows
(4, 1); masks (hard_masked_softmax) cycle all open / random / random with the first row fully
blocked; values softmax. SOFTMAX_TILE_ROWS: 66 and 191 rows (a partial 64-row tile after whole
ones) under the causal triangle and a random mask; SOFTMAX_SINGLE_ENTRY: 8 rows of one entry,
values `specials` (NaN, +inf, -inf, a normal in turn).

Derived bounds (conformance/error_terms.py states the method and E): the value and the gradients
of all three; hard_masked_softmax's are softmax's over the participating entries."""
from __future__ import annotations

import numpy as np

from conformance.edges import (BLOCKED_ROW, CAUSAL, OPEN, PAST_2_20, RANDOM, SOFTMAX, SPECIALS,
                               Edge, norm_axis)
from conformance.error_terms import DerivedRule, e_rel
from conformance.error_terms import clean as _clean, fwd_err as _fwd_err, gamma as _gamma, \
    k_of as _k
from conformance.families.spec import (AXES, DIMS, ELEMENTARY_ORDER, RANK, OpSpec, m23, param,
                                       unary)
from conformance.focus import ROW
from conformance.bad_inputs import filled
from conformance.layouts import signed_axis
from conformance.samplers import (EDGE_EXTENTS, F32, empty_shape, past_first_tile, small_shape)
from engine import ops
from engine.errors import ShapeError
from engine.types import BackendOp as Op

GROUP = "softmax family"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def _row_layout(rng, cls):
    if cls == "shapes":
        rank = int(rng.integers(1, 4))
        shape = [int(x) for x in rng.choice([1, 2, 3], size=rank)]
        ax = int(rng.integers(0, rank))
        shape[ax] = int(rng.choice(EDGE_EXTENTS))
        return tuple(shape), signed_axis(rng, ax, rank)
    shape = empty_shape(rng) if cls == "empty" else small_shape(rng, int(rng.integers(1, 5)), 1, 9)
    ax = int(rng.integers(0, len(shape)))
    if cls == "cancellation" and shape[ax] < 2:    # a row that one entry can dominate
        shape = shape[:ax] + (2,) + shape[ax + 1:]
    return shape, signed_axis(rng, ax, len(shape))


def softmax_layout(rng, cls):
    shape, axis = _row_layout(rng, cls)
    return [shape], {"axis": axis}


def masked_softmax_layout(rng, cls):
    if cls == "masks" and rng.integers(0, 2):     # half the masks: 64k + r rows, causal or random
        t = past_first_tile(rng)
        shape = (t, t) if rng.integers(0, 2) else (t, int(rng.integers(2, 10)))
        causal = shape[0] == shape[1]
        mask = np.tril(np.ones(shape, bool)) if causal else rng.random(shape) < 0.6
        return [shape], {"mask": mask, "axis": -1 if rng.integers(0, 2) else 1}   # both spellings
    shape, axis = _row_layout(rng, cls)
    if cls == "masks":
        kind = rng.integers(0, 3)
        if kind == 0:
            mask = np.ones(shape, dtype=bool)                      # all open
        else:
            mask = rng.random(shape) < 0.5
            if kind == 2 and mask.size:                            # some fully blocked rows
                rows = np.moveaxis(mask, axis, -1)
                rows[rng.random(rows.shape[:-1]) < 0.5] = False
    else:
        mask = rng.random(shape) < 0.7
    return [shape], {"mask": mask, "axis": axis}


# --- the fixed edge set ---------------------------------------------------------------------------
# (shape, axis, mask kind): rows of each n of E and X along the last or a leading axis
SOFTMAX_TABLE = (
    ((2, 7), -1, OPEN), ((31, 3), 0, RANDOM), ((2, 32), 1, BLOCKED_ROW), ((33, 2), -2, OPEN),
    ((3, 251), -1, RANDOM), ((255, 2), 0, BLOCKED_ROW), ((2, 256), -1, OPEN),
    ((257, 3), -2, RANDOM), ((2, 1023), 1, BLOCKED_ROW), ((1024, 2), 0, OPEN),
    ((3, 1025), -1, RANDOM), ((4095, 2), -2, BLOCKED_ROW), ((2, 4096), -1, OPEN),
    ((4097, 1), 0, RANDOM), ((2, 4099), -1, BLOCKED_ROW), ((2, 65535), -1, BLOCKED_ROW),
    ((65536, 2), -2, OPEN), ((1, 65537), -1, RANDOM), ((PAST_2_20,), 0, RANDOM),
    ((3, 0), -1, OPEN), ((0, 5), -1, RANDOM), ((4, 1), -1, BLOCKED_ROW),
)


# issue 35: rows past the first 64-row tile with a partial last tile (64k + r rows, r > 1) under a
# causal and a random mask, and rows of one entry holding each special value (SPECIALS)
SOFTMAX_TILE_ROWS = (((66, 66), -1, CAUSAL), ((191, 9), 1, RANDOM))
SOFTMAX_SINGLE_ENTRY = ((8, 1), -1, OPEN)


def _edges(masked: bool):
    """The edge set of softmax and log_softmax, or with masks, of hard_masked_softmax."""
    def build() -> list[Edge]:
        out = [_special_rows(masked)]
        for shape, axis, mask in SOFTMAX_TABLE + SOFTMAX_TILE_ROWS:
            ax = norm_axis(axis, len(shape))
            out.append(Edge((shape,), (("axis", axis),), SOFTMAX, marked=(ax,),
                            mask=mask if masked else "", mask_shape=shape if masked else (),
                            mask_axis=ax, nan_row=True))
        return out
    return build


def _special_rows(masked: bool) -> Edge:
    shape, axis, mask = SOFTMAX_SINGLE_ENTRY
    return Edge((shape,), (("axis", axis),), SPECIALS, mask=mask if masked else "",
                mask_shape=shape if masked else (), mask_axis=norm_axis(axis, len(shape)))


def _row_terms(case) -> int:
    """The row length (0 when the output is empty)."""
    a = case.inputs[0]
    return a.shape[case.params.get("axis", -1) % a.ndim] if a.size else 0


def _participants(case) -> int:
    """The participating entries of the fullest row."""
    a = case.inputs[0]
    if a.size == 0:
        return 0
    return int(np.asarray(case.params["mask"]).sum(axis=case.params.get("axis", -1)).max())


# --- the cancellation class's dominating entries --------------------------------------------------

DOMINANT_MARGINS = ((26.0, 45.0), (5.0, 15.0))


def dominant_rows(arrays, params, cls, index, rng):
    """The softmax family's cancellation class at odd case indices (even ones keep the sum
    cancellation's terms of +-2^20): standard normal rows along params["axis"], each with one
    entry (a participant, where params["mask"] says) above the row's other participants by a
    margin from DOMINANT_MARGINS[index // 2]: its probability is 1/(1 + T), 1 - tiny, and its
    log-probability -log1p(T) ~ -T, tiny, where log(softmax) and log(1 + T) lose T."""
    a = np.asarray(arrays[0])
    if cls != "cancellation" or index % 2 == 0 or a.ndim == 0 or a.size == 0:
        return arrays
    axis = int(params.get("axis", -1)) % a.ndim
    if a.shape[axis] < 2:
        return arrays
    mask = params.get("mask")
    part = np.ones(a.shape, bool) if mask is None else np.asarray(mask, bool)
    moved = np.moveaxis(rng.standard_normal(a.shape), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1]).copy()
    prow = np.moveaxis(part, axis, -1).reshape(rows.shape)
    # one participant per row, uniformly (a row without one picks any entry)
    score = rng.random(rows.shape) + prow
    pick = np.argmax(score, axis=1)
    mine = np.arange(rows.shape[1]) == pick[:, None]
    others = np.max(np.where(prow & ~mine, rows, -np.inf), axis=1)
    lo, hi = DOMINANT_MARGINS[index // 2 % len(DOMINANT_MARGINS)]
    top = others + rng.uniform(lo, hi, size=others.size)
    at = np.arange(rows.shape[0])
    rows[at, pick] = np.where(np.isfinite(top), top, rows[at, pick])
    back = np.moveaxis(rows.reshape(moved.shape), -1, axis)
    return [back.astype(F32)] + list(arrays[1:])


# --- derived bounds -------------------------------------------------------------------------------

def _rows(x, axis):
    """x with `axis` moved last and flattened to rows, and the inverse."""
    moved = np.moveaxis(np.asarray(x), axis, -1)
    shape = moved.shape
    # explicit row count: reshape(-1, 0) cannot infer the rows of an empty axis
    width = shape[-1] if shape else 1
    return moved.reshape(int(np.prod(shape[:-1])) if shape else 1, width), \
        lambda r: np.moveaxis(np.asarray(r).reshape(shape), -1, axis)


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


SOFTMAX_FORWARD = DerivedRule("derived: s_i (u|d_i| + E_REL + rho_S + u)",
                              "float32 exp(a - max) / sum: argument rounding, elementary exp, "
                              "the sum (gamma_k of the policy) and the division", _softmax_bound)
MASKED_SOFTMAX_FORWARD = DerivedRule("derived: as softmax over participants; blocked exactly 0",
                                     "softmax's derivation on participating entries; blocked "
                                     "entries and blocked rows are exact zeros", _softmax_bound)
LOG_SOFTMAX_FORWARD = DerivedRule("derived: u|d_i| + rho_S + E_REL|log S| + u|y_i|",
                                  "float32 (a - max) - log(sum exp(a - max))", _log_softmax_bound)


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


SOFTMAX_VJP = DerivedRule("derived: gamma_{k+3} M + inherited", "s (g - sum g s) in float32",
                          _vjp_softmax)
MASKED_SOFTMAX_VJP = DerivedRule("derived: gamma_{k+3} M + inherited",
                                 "softmax's VJP over participants", _vjp_softmax)
LOG_SOFTMAX_VJP = DerivedRule("derived: gamma_{k+2} M + E_REL s |sum g| + inherited",
                              "g - exp(out) sum g in float32", _vjp_log_softmax)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.softmax, softmax_layout, _edges(False), catalogue=24,
        focus=ROW, halvable=True, param_values=dominant_rows,
        error_inputs=(
            *unary(15, Op.softmax),
            param(3, "softmax: axis 3", AXES, lambda s: ops.softmax(m23(s), axis=3), ShapeError,
                  r"axis 3 is out of range for rank 2"),
            param(4, "softmax: rank 0", RANK, lambda s: ops.softmax(filled(s, ())), ShapeError,
                  r"needs rank >= 1, got a rank-0")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        forward_rule=SOFTMAX_FORWARD, vjp_rule=SOFTMAX_VJP, terms=_row_terms),
    OpSpec(Op.log_softmax, softmax_layout, _edges(False), catalogue=25,
        focus=ROW, halvable=True, param_values=dominant_rows,
        error_inputs=(
            *unary(16, Op.log_softmax),
            param(5, "log_softmax: rank 0", RANK, lambda s: ops.log_softmax(filled(s, ())),
                  ShapeError, r"needs rank >= 1")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        forward_rule=LOG_SOFTMAX_FORWARD, vjp_rule=LOG_SOFTMAX_VJP, terms=_row_terms),
    # not halvable: the mask would have to be halved with the row
    OpSpec(Op.hard_masked_softmax, masked_softmax_layout, _edges(True), catalogue=26,
        extra_classes=("masks",), focus=ROW, param_values=dominant_rows,
        error_inputs=(
            param(6, "hard_masked_softmax: float mask", DIMS,
                  lambda s: ops.hard_masked_softmax(m23(s), np.ones((2, 3))), ShapeError,
                  r"mask must be boolean, got dtype float64"),
            param(7, "hard_masked_softmax: mask shape", DIMS,
                  lambda s: ops.hard_masked_softmax(m23(s), np.ones((3, 2), bool)), ShapeError,
                  r"mask shape \(3, 2\) differs from scores shape \(2, 3\)")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        forward_rule=MASKED_SOFTMAX_FORWARD, vjp_rule=MASKED_SOFTMAX_VJP, terms=_participants),
)
