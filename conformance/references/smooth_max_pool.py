"""Reference for smooth_max_pool(beta): y = pivot + log(S) / beta per window, S = sum exp(beta (v - pivot)) = 1 + rest,
pivot = max (beta > 0) or min (beta < 0) of the window, padded cells counted as the value 0; beta is the
parameter rounded to float32. Kind 'composite', magnitude |pivot| + |log(S) / beta| (the sum can cancel),
terms win. A window holding a NaN, or whose pivot is infinite, gives NaN (the IEEE formula); an infinite
cell on the far side of a finite pivot has weight exp(-inf) = 0 and drops out exactly.
VJP: dx_i = sum over the windows o holding cell i of g_o w_oi, w_oi = exp(beta (v_i - pivot_o)) / S_o (no
gradient to padding): kind 'reduction' (a dot product of g with the weights), terms the number of windows,
magnitude sum |g_o| w_oi. Elements touched by a NaN window, a non-finite g or an infinite v_i follow the
IEEE formula in float64.

Fast path, certified: the formula in float64 with a running error bound E (below); where y - E and y + E
round to the same float32 that is the correctly rounded value, and y (within E of the exact value, E far
under a float32 ulp) stands for the exact one. The rest go through the Ziv loop over mpmath intervals
(rounding.ziv, up to _MAX_PREC bits). Error bound, first order in 2^-52 with margin: an exponent a = beta (v - pivot) carries
|a| 2^-52 (two roundings), so exp(a) carries (|a| + 2) 2^-52 relative (glibc's exp within 1 ulp); the sum S
of positive terms adds win 2^-53. The first pivot's term is exp(0) = 1 exactly and stays out of
rest = S - 1 (so log1p(rest) keeps a rest below 2^-53): rest errs by err_rest = 2^-52 sum' e (|a| + 2) +
win 2^-53 rest, log1p(rest) by err_rest / (1 + rest) plus 2^-52 of itself, log1p(rest) / beta by that over
|beta| plus 2^-51 |L|, and the final addition by 2^-53 |y|; rho = err_rest / (1 + rest) + 2^-53 bounds S. For the VJP, w = e / S carries
(|a| + 3) 2^-52 + rho, the product g w one more 2^-53, and the sum of m terms m 2^-53 of their magnitude.
"""

import numpy as np
from mpmath.libmp import from_float

from conformance import rounding
from conformance.references._common import Reference, iv_add_exact, iv_exp, iv_log1p, param_f32
from conformance.references._pool import checked, grad

OP = "smooth_max_pool"
_EPS = 2.0 ** -52
_FLOOR = 2.0 ** -1060   # float64 underflow in the evaluation: far below float32's 2^-150
# The Ziv loop's last precision: an exact value within about 2^-300 of its own size from a float32
# midpoint is taken to be on it (weights such as 1 / (1 + exp(-1e30)) sit that close to 1, and a sum
# of g at such weights on a midpoint of g's; 2560 bits would decide nothing more for those)
_MAX_PREC = 320


def _stats(v: np.ndarray, beta: float):
    """Per window of v [..., win] (float64): (pivot, a, e, rest, rho, err_rest, bad): the terms e and
    their |exponents| a, rest = S - 1 (every term but the first pivot's, which is exp(0) = 1), S's
    relative error bound rho and rest's absolute one err_rest (the docstring's bound)."""
    nan = np.isnan(v)
    with np.errstate(invalid="ignore", over="ignore"):
        masked = np.where(nan, -np.inf if beta > 0 else np.inf, v)
        pick = (np.argmax if beta > 0 else np.argmin)(masked, axis=-1)[..., None]
        pivot = np.take_along_axis(masked, pick, -1)
        bad = nan.any(axis=-1, keepdims=True) | ~np.isfinite(pivot)
        live = np.isfinite(v) & ~bad
        arg = np.where(live, beta * (v - np.where(bad, 0.0, pivot)), -np.inf)
        e = np.exp(arg)
        others = np.arange(v.shape[-1]) != pick
        rest = np.where(others, e, 0.0).sum(axis=-1, keepdims=True)
        a = np.where(live & (e > 0), np.abs(arg), 0.0)
        err_rest = _EPS * np.sum(np.where(others, e * (a + 2.0), 0.0), axis=-1, keepdims=True) + \
            v.shape[-1] * _EPS / 2 * rest
        rho = err_rest / (1.0 + rest) + _EPS / 2
    return pivot, a, e, rest, rho, err_rest, bad


def _decided(y: np.ndarray, err: np.ndarray) -> np.ndarray:
    lo = rounding.round_f64_to_f32(y - err)
    hi = rounding.round_f64_to_f32(y + err)
    return (lo == hi) & np.isfinite(y)   # a zero of either sign is one value (no model reads its sign)


def _iv_window(k: int, beta_raw):
    """Interval formula of one window's value over its live cells, the pivot at position k."""
    def fn(ctx, *vals):
        b = ctx.make_mpf((beta_raw, beta_raw))
        rest = ctx.mpf(0)
        for j, v in enumerate(vals):
            if j != k:
                rest += iv_exp(ctx, b * (v - vals[k]))
        return iv_add_exact(ctx, vals[k]._mpi_[0], iv_log1p(ctx, rest) / b)
    return fn


def forward(inputs, *, beta, **params):
    x, w = checked(inputs, params, OP)
    b = float(param_f32(beta))
    v = w.plane_values(x, 0.0).reshape(-1, w.win)
    pivot, a, e, rest, rho, err_rest, bad = _stats(v, b)
    with np.errstate(all="ignore"):
        big_l = np.log1p(rest) / b
        y = np.where(bad, np.nan, pivot + big_l)[:, 0]
        # log1p(rest) errs by err_rest / (1 + rest) plus its own float64 ulp or two
        err = (2.0 ** -51 * (np.abs(pivot) + np.abs(big_l) + np.abs(pivot + big_l))
               + 1.01 * err_rest / (1.0 + rest) / abs(b) + _FLOOR)[:, 0]
        magnitude = np.where(bad, np.nan, np.abs(pivot) + np.abs(big_l))[:, 0]
    value = rounding.round_f64_to_f32(y).astype(np.float32)
    exact = y.copy()
    slow = 0
    for i in np.flatnonzero(~bad[:, 0] & ~_decided(y, err)):
        live = np.isfinite(v[i])
        vals = v[i][live]
        k = int(np.argmax(vals) if b > 0 else np.argmin(vals))
        value[i], exact[i] = rounding.ziv(_iv_window(k, from_float(b)), *vals, max_prec=_MAX_PREC,
                                          negative_zero=bool(np.signbit(y[i])))
        slow += 1
    return Reference(value.reshape(w.shape), exact.reshape(w.shape), magnitude.reshape(w.shape), w.win,
                     "composite", slow)


def _iv_element(windows, beta_raw):
    """Interval formula of sum_o g_o e_oi / S_o; windows: (k pivot position, i cell position, n cells)."""
    def fn(ctx, *args):
        b = ctx.make_mpf((beta_raw, beta_raw))
        total, at = ctx.mpf(0), 0
        for k, i, n in windows:
            vals, g = args[at:at + n], args[at + n]
            at += n + 1
            rest = ctx.mpf(0)
            for j, v in enumerate(vals):
                if j != k:
                    rest += iv_exp(ctx, b * (v - vals[k]))
            e_i = ctx.mpf(1) if i == k else iv_exp(ctx, b * (vals[i] - vals[k]))
            total += g * e_i / (1 + rest)
        return total
    return fn


def vjp(inputs, grad_out, *, beta, **params):
    x, w = checked(inputs, params, OP)
    b = float(param_f32(beta))
    g = grad(grad_out, w, OP).reshape(w.planes, w.cells.shape[0], 1).astype(np.float64)
    v = w.plane_values(x, 0.0)                                   # [planes, out, win]
    pivot, a, e, rest, rho, _, bad = _stats(v, b)
    with np.errstate(all="ignore"):
        weight = np.where(bad, np.nan, e / (1.0 + rest))
        terms = g * weight
        rel = (a + 4.0) * _EPS + rho
        # specials: a NaN window, a non-finite g, an infinite cell (weight exactly 0)
        special = bad | ~np.isfinite(g) | ~np.isfinite(v)
    every = np.broadcast_to((w.cells >= 0)[None], v.shape)
    matrix, valid, counts = w.gathered(every, terms)
    err_m, _, _ = w.gathered(every, np.abs(terms) * rel)
    spec_m, _, _ = w.gathered(every, special.astype(np.float64))
    # which (window, cell position) each gathered term came from, for the slow path
    o_m, _, _ = w.gathered(every, np.broadcast_to(np.arange(v.shape[1])[None, :, None], v.shape)
                           .astype(np.float64))
    t_m, _, _ = w.gathered(every, np.broadcast_to(np.arange(v.shape[2])[None, None, :], v.shape)
                           .astype(np.float64))
    with np.errstate(all="ignore"):
        y = np.where(valid, matrix, 0.0).sum(axis=-1)
        magnitude = np.where(valid, np.abs(matrix), 0.0).sum(axis=-1)
        err = err_m.sum(axis=-1) + counts * (_EPS / 2) * magnitude + _FLOOR
    spec = (spec_m.sum(axis=-1) > 0) | ~np.isfinite(y)
    value = rounding.round_f64_to_f32(y).astype(np.float32)
    exact = y.copy()
    slow = 0
    for flat in np.flatnonzero(~spec & ~_decided(y, err)):
        plane = int(flat) // w.in_size
        windows, args = [], []
        cols = np.flatnonzero(valid[flat])
        for o, t in zip(o_m[flat, cols].astype(np.int64), t_m[flat, cols].astype(np.int64)):
            # the window's cells, padding as 0; far-side infinities weigh exactly 0 and drop out
            fin = np.isfinite(v[plane, o])
            vals = v[plane, o][fin]
            k = int(np.argmax(vals) if b > 0 else np.argmin(vals))
            windows.append((k, int(np.count_nonzero(fin[:t])), vals.size))
            args += list(vals) + [float(g[plane, o, 0])]
        value[flat], exact[flat] = rounding.ziv(_iv_element(windows, from_float(b)), *args,
                                                max_prec=_MAX_PREC,
                                                negative_zero=bool(np.signbit(y[flat])))
        slow += 1
    shape = x.shape
    return (Reference(value.reshape(shape), exact.reshape(shape), magnitude.reshape(shape),
                      counts.reshape(shape), "reduction", slow),)
