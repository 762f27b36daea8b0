"""Reference for cross_entropy (logits [N, C], targets N ints in [0, C)): L = (1/N) sum_r l_r with
l_r = -log_softmax(x_r)[t_r] = log1p(R_r) - d_t, d_j = x_j - m exactly, m the row's max, R the sum
of exp(d_j) without the first max entry's 1 (log_softmax's form: d_t <= 0 <= log1p(R), so no term
cancels), evaluated exactly and rounded once. Kind 'composite', magnitude L (every term is
non-negative), terms C. VJP (g / N)(s_j - [j = t]), s = softmax(x_r): for the target, s_t - 1 is
-R / D at the first max (D = 1 + R) and -(D - e_t) / D elsewhere (D - e_t >= 1: no cancellation);
magnitude |g| / N (s_j + [j = t]).

Special rows follow log_softmax (references/log_softmax.py): a NaN or +inf entry, or all -inf,
makes l_r NaN, so L is NaN and that row's gradient NaN; a finite row whose target is -inf has
l_r = +inf (L = +inf unless another row is NaN) and gradient -g/N at the target, g/N * 0 elsewhere.
Exact zeros take the sign of the kernels' formula, (g/N)(e_j / D) off the target and
-(g/N)(R / D) or -(g/N)((D - e_t) / D) on it: sign(g) off the target, -sign(g) on it; L = +0 exactly when every row's only finite entry is its target. A non-finite cotangent is
evaluated by the formula in float64.

Every case takes the certified dd path of fast/rows.py first (Rows: d, R, D with error radii) and
rounds with fast/certify.py; what no certificate decides goes to the exact Ziv loop below, which
stays the oracle (fast.exact_only() forces it): the whole mean for the forward, per row for the VJP.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from mpmath.libmp import from_float, fzero, mpf_add, mpf_neg, mpf_sub

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (Reference, ReferenceInputError, check_indices,
                                            f32_grad, f32_inputs, iv_add_exact, iv_exp, iv_log1p)
from conformance.references.fast import ddmath
from conformance.references.fast import rows as fast_rows
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, pairwise_sum, where

OP = "cross_entropy"
f32 = np.float32


def _check(inputs, targets):
    (x,) = f32_inputs(inputs, 1, OP)
    if x.ndim != 2 or 0 in x.shape:
        raise ReferenceInputError(f"{OP} takes logits [N, C] with N, C >= 1, got shape {x.shape}")
    t = check_indices(targets, x.shape[1], OP)
    if t.size != x.shape[0]:
        raise ReferenceInputError(f"{OP}: {t.size} targets for {x.shape[0]} rows")
    return x.astype(np.float64), t


def _specials(rows, t):
    """(NaN rows, rows whose loss is +inf: finite elsewhere, target at -inf)."""
    nan_row = np.isnan(rows).any(1) | np.isposinf(rows).any(1) | np.isneginf(rows).all(1)
    return nan_row, ~nan_row & np.isneginf(rows[np.arange(rows.shape[0]), t])


def _live(x):
    live = np.flatnonzero(np.isfinite(x))
    return live, int(live[np.argmax(x[live])])   # the first max among the live entries


# ---------------------------------------------------------------- forward


def forward(inputs, *, targets):
    rows, t = _check(inputs, targets)
    nan_row, inf_row = _specials(rows, t)
    if nan_row.any() or inf_row.any():
        v = np.nan if nan_row.any() else np.inf
        return Reference(np.float32(v), v, 0.0, rows.shape[1], "composite")
    value, exact, slow = None, None, 0
    if fast_paths.enabled():
        value, exact = _fast_mean(rows, t)
    if value is None:
        value, exact = _exact_mean(rows, t)
        slow = rows.size
    return Reference(np.float32(value), exact, abs(exact), rows.shape[1], "composite", slow)


def _fast_mean(rows, t):
    """The certified dd mean, or (None, None) where the certificate cannot decide."""
    n = rows.shape[0]
    with np.errstate(all="ignore"):
        st = fast_rows.Rows(rows, np.ones(rows.shape, bool))
        at = np.searchsorted(st.idx, np.arange(n) * rows.shape[1] + t)
        loss = ddmath.log1p(st.r_sum) - DD(st.dh[at], st.dl[at])
        mean = pairwise_sum(loss) / float(n)
        if bool(np.all((st.dh[at] == 0) & (st.dl[at] == 0) & (st.n_live == 1))):
            return 0.0, 0.0                           # every l_r = log1p(0) - 0 = +0 exactly
        mean = DD(np.atleast_1d(mean.hi), np.atleast_1d(mean.lo), np.atleast_1d(mean.rad),
                  np.atleast_1d(mean.bad))
        v32, v64, ok = certify(mean)
    return (float(v32[0]), float(v64[0])) if ok[0] else (None, None)


def _row_parts(x, t):
    """(exact d_j = x_j - m for the live entries, their positions, k, d_t)."""
    live, k = _live(x)
    d = {int(j): mpf_sub(from_float(float(x[j])), from_float(float(x[k])), 0) for j in live}
    return d, live, k, d[int(t)]


def _exact_mean(rows, t):
    parts = [_row_parts(rows[r], t[r]) for r in range(rows.shape[0])]
    n = rows.shape[0]

    def fn(ctx):
        total = ctx.mpf(0)
        for d, live, k, dt in parts:
            big_r = ctx.mpf(0)
            for j in live:
                if j != k:
                    big_r += iv_exp(ctx, ctx.make_mpf((d[int(j)], d[int(j)])))
            total += iv_add_exact(ctx, mpf_neg(dt), iv_log1p(ctx, big_r))
        return [total / n]

    (v32,), (v64,) = rounding.ziv_many(fn)
    return float(v32), v64


# ---------------------------------------------------------------- VJP


def vjp(inputs, grad_out, *, targets):
    rows, t = _check(inputs, targets)
    g = f32_grad(grad_out, (), OP)
    n, c = rows.shape
    nan_row, _ = _specials(rows, t)
    gf = float(g)
    scale = gf / n
    onehot = np.zeros(rows.shape, bool)
    onehot[np.arange(n), t] = True
    s = _softmax64(rows)
    with np.errstate(all="ignore"):
        magnitude = abs(scale) * (s + onehot)
        ieee = scale * (s - onehot)
    value, exact = rounding.round_f64_to_f32(ieee), ieee.copy()
    value[nan_row], exact[nan_row] = np.nan, np.nan
    if not np.isfinite(gf):
        return (Reference(value, exact, magnitude, c, "composite"),)
    zero_sign = np.where(onehot, not np.signbit(gf), np.signbit(gf))   # the formula's zero signs
    todo = [r for r in range(n) if not nan_row[r]]
    if gf == 0:
        value[todo] = np.where(zero_sign[todo], np.float32(-0.0), np.float32(0.0))
        exact[todo] = np.where(zero_sign[todo], -0.0, 0.0)
        return (Reference(value, exact, magnitude, c, "composite"),)
    if fast_paths.enabled() and todo:
        todo = _fast_vjp(rows, t, gf, nan_row, value, exact, zero_sign)
    for r in todo:
        _exact_vjp_row(rows[r], int(t[r]), gf, n, zero_sign[r], value, exact, r)
    return (Reference(value, exact, magnitude, c, "composite", len(todo) * c),)


def _softmax64(rows):
    with np.errstate(all="ignore"):
        e = np.exp(rows - np.max(rows, axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


def _fast_vjp(rows, t, g, nan_row, value, exact, zero_sign):
    """Certify what the dd path decides in place; the rows left undecided. A target that is its
    row's only finite entry has s_t - 1 = -R / D = 0 exactly: the signed zero, no certificate."""
    n, c = rows.shape
    with np.errstate(all="ignore"):
        st = fast_rows.Rows(rows, ~nan_row[:, None] & np.ones(rows.shape, bool))
        one = DD(np.full(1, g)) / float(n)          # g / N, enclosed
        r = st.row
        scale = DD(*(np.full(r.size, a[0]) for a in (one.hi, one.lo, one.rad, one.bad)))
        is_t = (st.idx % max(c, 1)) == t[r]
        off = st.s_q * scale                          # scaled by 2^s_n: tiny s_j still round
        at_k = -((st.r_sum / st.d_sum)[r])
        other = -((st.d_sum[r] - st.e) / st.d_sum[r])
        got = where(is_t, where(st.is_k, at_k, other) * scale, off)
        v32, v64, done = st.certify_live(got, np.where(is_t, 0, st.s_n))
        alone = is_t & (st.n_live[r] == 1)
        neg = zero_sign.reshape(-1)[st.idx]
        v32 = np.where(alone, np.where(neg, f32(-0.0), f32(0.0)), v32)
        v64 = np.where(alone, np.where(neg, -0.0, 0.0), v64)
        done = done | alone
    flat_v, flat_e = value.reshape(-1), exact.reshape(-1)
    flat_v[st.idx[done]], flat_e[st.idx[done]] = v32[done], v64[done]
    # -inf entries of rows that are not NaN: off the target g/N * 0 (the formula's signed zero),
    # on it -g/N (s_t = 0), rounded once
    dead = ~np.isfinite(rows) & ~nan_row[:, None]
    for rr, j in zip(*np.nonzero(dead)):
        if j == t[rr]:
            q = -Fraction(g) / n
            flat_v[rr * c + j] = rounding.round_ratio_to_f32(q.numerator, q.denominator)
            flat_e[rr * c + j] = rounding.round_ratio_to_f64(q.numerator, q.denominator)
        else:
            z = -0.0 if np.signbit(g) else 0.0
            flat_v[rr * c + j], flat_e[rr * c + j] = z, z
    return sorted(set(r[~done].tolist()))


def _exact_vjp_row(x, t, g, n, zero_sign, value, exact, r):
    """Row r by intervals: (g / N)(s_j - [j = t]) for every entry."""
    live, k = _live(x)
    d = [mpf_sub(from_float(float(x[j])), from_float(float(x[k])), 0) for j in live]
    kk = int(np.flatnonzero(live == k)[0])
    gq = Fraction(g) / n
    scale_raw = (gq.numerator, gq.denominator)
    c = x.size
    position = {int(j): i for i, j in enumerate(live)}

    def fn(ctx):
        es = [ctx.mpf(1) if i == kk else iv_exp(ctx, ctx.make_mpf((v, v))) for i, v in enumerate(d)]
        big_r = ctx.mpf(0)
        for i, e in enumerate(es):
            if i != kk:
                big_r += e
        big_d = 1 + big_r
        sc = ctx.mpf(scale_raw[0]) / scale_raw[1]
        out = []
        for j in range(c):
            if j not in position:   # a -inf entry: s_j = 0
                out.append(-sc if j == t else sc * 0)
                continue
            i = position[j]
            if j != t:
                out.append(sc * (es[i] / big_d))
            elif i == kk:
                out.append(-(sc * (big_r / big_d)))
            else:
                rest = ctx.mpf(1)
                for i2, e in enumerate(es):
                    if i2 != kk and i2 != i:
                        rest += e
                out.append(-(sc * (rest / big_d)))
        return out

    v32, v64 = rounding.ziv_many(fn, negative_zero=list(zero_sign))
    value[r], exact[r] = v32, v64
