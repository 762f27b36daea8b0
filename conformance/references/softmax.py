"""Reference for softmax along `axis`: s_i = exp(a_i - max) / sum_j exp(a_j - max), evaluated exactly as
e_i / (1 + R) (R the sum without the max entry, so nothing cancels) and rounded once. Kind 'composite',
magnitude s_i, terms n. VJP s_i (g_i - sum_j g_j s_j), magnitude s_i (|g_i| + sum_j |g_j| s_j).

Big inputs take the certified dd path of fast/rows.py first (per element, then per row, what it leaves
comes back to the exact row code below, which stays the oracle).

Special rows follow the IEEE formula: a NaN or +inf entry (max - max = NaN) or an all -inf row gives NaN;
a -inf entry gives +0. A row whose g holds inf or NaN is evaluated by the formula in float64 (the exact
s rounded to float64). The row machinery here also serves hard_masked_softmax and log_softmax.
"""

from __future__ import annotations

import math

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import Reference, f32_grad, f32_inputs, iv_exp, normalize_axis
from conformance.references.fast import rows as fast_rows

OP = "softmax"


def to_rows(a: np.ndarray, axis: int, op: str):
    """(rows [M, n] as float64, a function putting [M, n] results back into a's layout)."""
    ax = normalize_axis(axis, a.ndim, op)
    moved = np.moveaxis(a, ax, -1)
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1]).astype(np.float64)  # -1 fails on size 0
    return rows, lambda y: np.moveaxis(np.asarray(y).reshape(moved.shape), -1, ax)


def row_is_nan(x: np.ndarray) -> bool:
    """IEEE outcome of exp(a - max): NaN for a NaN or +inf entry, or when every entry is -inf."""
    return bool(np.any(np.isnan(x)) or np.any(np.isposinf(x)) or np.all(np.isneginf(x)))


def iv_softmax(ctx, xs, k: int):
    """Intervals for the softmax of finite points xs whose maximum is xs[k]: (s, e, R, D) with
    e_j = exp(x_j - max), R = sum of e_j over j != k, D = 1 + R and s_j = e_j / D."""
    es, r = [], ctx.mpf(0)
    for j, x in enumerate(xs):
        e = ctx.mpf(1) if j == k else iv_exp(ctx, x - xs[k])
        es.append(e)
        if j != k:
            r += e
    d = 1 + r
    return [e / d for e in es], es, r, d


_FAST_MIN = 256  # below this many entries the exact row loop is cheap


def softmax_rows(rows: np.ndarray, part: np.ndarray):
    """(value32, exact64) of the softmax over participating entries; +0 elsewhere and on empty rows.

    Big inputs take the certified dd path (fast/rows.py) first; an element it leaves is decided by
    intervals with the row's dd enclosure of the sum, and only a row still undecided then is
    recomputed here exactly."""
    return softmax_rows_counted(rows, part)[:2]


def softmax_rows_counted(rows, part):
    if not (fast_paths.enabled() and rows.size >= _FAST_MIN):
        return (*_exact_softmax_rows(rows, part), 0)
    value, exact, pending, st = fast_rows.softmax(rows, part)
    left_rows, slow = set(), 0
    for j in pending:
        slow += 1
        got = fast_rows.softmax_element(st, j)
        r, c = divmod(int(st.idx[j]), rows.shape[1])
        if got is None:
            left_rows.add(r)
        else:
            value[r, c], exact[r, c] = got
    for r in sorted(left_rows):
        value[r], exact[r] = (a[0] for a in _exact_softmax_rows(rows[r:r + 1], part[r:r + 1]))
        slow += int(part[r].sum())
    return value, exact, slow


def _exact_softmax_rows(rows: np.ndarray, part: np.ndarray):
    value, exact = np.zeros(rows.shape, np.float32), np.zeros(rows.shape)
    for r, (x, p) in enumerate(zip(rows, part)):
        if not p.any():
            continue
        if row_is_nan(x[p]):
            value[r, p], exact[r, p] = np.nan, np.nan
            continue
        live = np.flatnonzero(p & np.isfinite(x))  # -inf participants stay +0
        k = int(np.argmax(x[live]))
        v32, v64 = rounding.ziv_many(lambda ctx, *xs: iv_softmax(ctx, xs, k)[0], *x[live])
        value[r, live], exact[r, live] = v32, v64
    return value, exact


def softmax_vjp_rows(rows: np.ndarray, g_rows: np.ndarray, part: np.ndarray, s_exact: np.ndarray):
    """(value32, exact64, magnitude64) of s_i (g_i - sum_j g_j s_j) over participants; +0 elsewhere."""
    return softmax_vjp_rows_counted(rows, g_rows, part, s_exact)[:3]


def _vjp_ieee(g_rows, part, s_exact):
    with np.errstate(all="ignore"):
        gs = np.where(part, g_rows * s_exact, 0.0)
        ieee = s_exact * (g_rows - gs.sum(axis=-1, keepdims=True))
        magnitude = np.where(part, s_exact * (np.abs(g_rows) + np.where(part, np.abs(g_rows) * s_exact, 0.0)
                                              .sum(axis=-1, keepdims=True)), 0.0)
    return ieee, magnitude


def softmax_vjp_rows_counted(rows, g_rows, part, s_exact):
    ieee, magnitude = _vjp_ieee(g_rows, part, s_exact)
    if not (fast_paths.enabled() and rows.size >= _FAST_MIN):
        value, exact = _exact_vjp_rows(rows, g_rows, part, ieee, range(rows.shape[0]))
        return value, exact, magnitude, 0
    st = fast_rows.Rows(rows, part)
    with np.errstate(all="ignore"):
        g_ok = np.all(np.where(part, np.isfinite(g_rows), True), axis=1)
    normal = part.any(axis=1) & ~st.nan_row & g_ok
    v32, v64, done, zero = fast_rows.softmax_vjp(st, rows, g_rows, part, normal)
    # the exact path's values outside the live entries of normal rows: NaN rows, the float64 formula
    # where g is not finite, and the formula's signed zero at -inf participants (s = 0 exactly)
    value = np.zeros(rows.shape, np.float32)
    exact = np.zeros(rows.shape)
    nan_part = st.nan_row[:, None] & part
    formula = (~g_ok & part.any(axis=1) & ~st.nan_row)[:, None] & part
    dead = normal[:, None] & part & ~np.isfinite(rows)
    for mask in (formula, dead):
        value[mask], exact[mask] = rounding.round_f64_to_f32(ieee[mask]), ieee[mask]
    value[nan_part], exact[nan_part] = np.nan, np.nan
    flat = st.idx
    sign = np.signbit(ieee.reshape(-1)[flat])
    vals = np.where(zero, np.where(sign, np.float32(-0.0), np.float32(0.0)), v32)
    exs = np.where(zero, np.where(sign, -0.0, 0.0), v64)
    keep = normal[st.row]
    value.reshape(-1)[flat[keep]], exact.reshape(-1)[flat[keep]] = vals[keep], exs[keep]
    left = sorted(set(st.row[keep & ~done & ~zero].tolist()))
    if left:
        lv, le = _exact_vjp_rows(rows, g_rows, part, ieee, left)
        for r in left:
            value[r], exact[r] = lv[r], le[r]
    return value, exact, magnitude, int(sum(part[r].sum() for r in left))


def _exact_vjp_rows(rows, g_rows, part, ieee, which):
    value, exact = np.zeros(rows.shape, np.float32), np.zeros(rows.shape)
    for r in which:
        x, g, p = rows[r], g_rows[r], part[r]
        if not p.any():
            continue
        if row_is_nan(x[p]):
            value[r, p], exact[r, p] = np.nan, np.nan
            continue
        idx = np.flatnonzero(p)
        if not np.all(np.isfinite(g[idx])):
            value[r, idx], exact[r, idx] = rounding.round_f64_to_f32(ieee[r, idx]), ieee[r, idx]
            continue
        live = np.flatnonzero(p & np.isfinite(x))
        dead = np.flatnonzero(p & ~np.isfinite(x))  # s = 0 exactly: the formula gives a signed zero
        value[r, dead], exact[r, dead] = rounding.round_f64_to_f32(ieee[r, dead]), ieee[r, dead]
        n, k = len(live), int(np.argmax(x[live]))

        def grad(ctx, *args):
            # g_i - sum_j g_j s_j = (g_i - g_k) s_k + g_i S' - W' with S' = R / D and W' the sum of
            # g_j s_j off the max: this keeps 1 - s_k = R / D out of a subtraction (s_k can be 1 - e^-1000)
            s, e, r, d = iv_softmax(ctx, args[:n], k)
            gl = args[n:]
            w_rest = ctx.mpf(0)
            for j, (ej, gj) in enumerate(zip(e, gl)):
                if j != k:
                    w_rest += gj * ej
            w_rest, s_rest = w_rest / d, r / d
            return [si * ((gi - gl[k]) * s[k] + gi * s_rest - w_rest) for si, gi in zip(s, gl)]

        v32, v64 = rounding.ziv_many(grad, *x[live], *g[live], negative_zero=list(np.signbit(ieee[r, live])))
        value[r, live], exact[r, live] = v32, v64
    return value, exact


def forward(inputs, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    rows, back = to_rows(a, axis, OP)
    value, exact, slow = softmax_rows_counted(rows, np.ones(rows.shape, bool))
    return Reference(back(value), back(exact), back(np.abs(exact)), rows.shape[-1], "composite", slow)


def vjp(inputs, grad_out, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    rows, back = to_rows(a, axis, OP)
    g_rows, _ = to_rows(g, axis, OP)
    part = np.ones(rows.shape, bool)
    _, s_exact, _ = softmax_rows_counted(rows, part)
    value, exact, magnitude, slow = softmax_vjp_rows_counted(rows, g_rows, part, s_exact)
    return (Reference(back(value), back(exact), back(magnitude), rows.shape[-1], "composite", slow),)
