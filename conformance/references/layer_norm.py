"""Reference for layer_norm: y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased
variance, eps rounded to float32 first), x [..., d], gamma [d], beta [d]. Kind 'composite' for every
output. The normalisation core here also serves batch_norm (statistics over other axes).

Big inputs take the certified dd path of fast/norm.py first; the elements (and parameters) it leaves
are evaluated exactly as below.

Exact evaluation. Per normalisation group of n float32 values x_i = X_i 2^-sx (integers X_i) put
D_i = n X_i - sum X (so x_i - mean = D_i 2^-sx / n) and W = n^2 4^sx (var + eps), an exact rational
Wn / Wd. Then xhat_i = D_i / sqrt(W) = D_i sqrt(M) / Wn with M = Wn Wd: every output is a rational
combination b + sum_k a_k sqrt(M_k) with exact a_k, b. It is rounded once by a Ziv loop on integer
enclosures: s = isqrt(M 4^q) bounds sqrt(M) in [s, s + 1] / 2^q, the endpoints of the enclosure are
rounded to float32 and float64, and q grows (64, 128, ... bits of the root) until both endpoints agree.
Radicands lose their factors of 4, equal radicands are merged and perfect squares become rational
first, so an exact result (zero included) is found exactly; any other result is irrational and the
loop ends (past 2^14 bits the midpoint is rounded, as rounding.ziv_many does).

Magnitudes (what u multiplies in a cancelling bound; the sum of |terms| of the final expression):
- forward: |xhat_i gamma_i| + |beta_i|; terms n (the group size).
- dx_i = rstd (dxhat_i - mean(dxhat) - xhat_i mean(dxhat xhat)), dxhat = g gamma:
  rstd (|dxhat_i| + mean|dxhat| + |xhat_i| mean|dxhat xhat|); terms n.
- dgamma = sum g xhat: sum |g xhat|; dbeta = sum g: sum |g|; terms = the number of summed elements.
  (dx's bracket is evaluated exactly: (n dxhat_i - sum dxhat) Wn - D_i (sum dxhat_j D_j) Wd, times
  2^sx sqrt(M) / Wn^2; so a gradient that is exactly 0, e.g. g = gamma = 1, is +0.)

Signed zeros: an exact zero forward value is -0 only when xhat gamma is a negative zero (IEEE sign of
(x - mean) gamma, with x - mean = +0 for x equal to the mean) and beta is -0; dgamma and dbeta are -0 only when
every summed term is -0; dx zeros are +0. Special values: a group holding inf or NaN, and elements
whose gamma, beta (forward) or g, gamma (VJP) are not finite, follow the IEEE formula in float64.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, ReferenceInputError, Sums, f32_grad, f32_inputs, ieee64, param_f32,
)
from conformance.references.fast import norm as fast_norm
from conformance.references.fast.certify import certify
from conformance.references.fast import sums as fast_sums

OP = "layer_norm"

_START_BITS = 64
_MAX_BITS = 1 << 14


# ---------------------------------------------------------------- correct rounding of surd sums


def _round_fraction(fr: Fraction, neg_zero: bool) -> tuple:
    n, d = fr.numerator, fr.denominator
    return rounding.round_ratio_to_f32(n, d, neg_zero), rounding.round_ratio_to_f64(n, d, neg_zero)


def _same(a: tuple, b: tuple) -> bool:
    """Both float32 roundings agree bit for bit and both float64 roundings agree (signed zero too)."""
    return (bool(a[0].view(np.uint32) == b[0].view(np.uint32)) and a[1] == b[1]
            and math.copysign(1.0, a[1]) == math.copysign(1.0, b[1]))


def _canonical(terms) -> tuple[Fraction, list]:
    """(rational part, [(a, m)]) of sum a_k sqrt(M_k): factors 4 leave the radicand, perfect squares
    become rational, equal radicands merge, zero coefficients drop."""
    rational, groups = Fraction(0), {}
    for a, m in terms:
        if a == 0 or m == 0:
            continue
        k = ((m & -m).bit_length() - 1) // 2  # pairs of trailing zero bits
        m >>= 2 * k
        a = a * (1 << k)
        r = math.isqrt(m)
        if r * r == m:
            rational += a * r
        else:
            groups[m] = groups.get(m, 0) + a
    return rational, [(a, m) for m, a in groups.items() if a != 0]


def round_surds(terms, b: Fraction = Fraction(0), neg_zero: bool = False) -> tuple:
    """(float32, float64) correct roundings of b + sum a_k sqrt(M_k) (a_k, b Fractions, M_k >= 0 ints).

    neg_zero gives the sign of an exact zero result. After _canonical the sum is either rational
    (rounded exactly) or irrational, which the Ziv loop below always decides.
    """
    rational, terms = _canonical(terms)
    b = b + rational
    if not terms:
        return _round_fraction(b, neg_zero)
    bits = _START_BITS
    while True:
        lo = hi = b
        for a, m in terms:
            q = max(0, bits - (m.bit_length() - 1) // 2)
            s = math.isqrt(m << (2 * q))  # s < sqrt(m) 2^q < s + 1 (m is not a square)
            low, high = Fraction(s, 1 << q), Fraction(s + 1, 1 << q)
            if a > 0:
                lo, hi = lo + a * low, hi + a * high
            else:
                lo, hi = lo + a * high, hi + a * low
        r_lo, r_hi = _round_fraction(lo, neg_zero), _round_fraction(hi, neg_zero)
        if _same(r_lo, r_hi):
            return r_lo
        if bits >= _MAX_BITS:
            return _round_fraction((lo + hi) / 2, neg_zero)
        bits *= 2


# ---------------------------------------------------------------- exact statistics of one group


class _Group:
    """Exact statistics of one normalisation group of finite float32 values (see the docstring)."""

    def __init__(self, x: np.ndarray, eps_int: int, eps_scale: int):
        n = x.size
        ints, sx = rounding.f32_to_scaled_ints(x)
        xs = [int(v) for v in ints.tolist()]
        total = sum(xs)
        self.n, self.sx = n, sx
        self.d = [n * v - total for v in xs]
        q = sum(v * v for v in self.d)
        w = Fraction((q << eps_scale) + ((n ** 3 * eps_int) << (2 * sx)), n << eps_scale)
        self.wn, self.wd = w.numerator, w.denominator
        self.m = self.wn * self.wd
        # float64 companions for magnitudes: rstd = n 2^sx / sqrt(W), xhat_i = D_i / sqrt(W)
        root = math.sqrt(self.wn) * math.sqrt(1.0 / self.wd) if self.wn else 0.0
        self.rstd64 = math.ldexp(n, sx) / root if root else math.inf
        self.xhat64 = np.array([float(Fraction(v, 1)) / root if root else math.nan for v in self.d])

    def xhat_term(self, i: int, coef: Fraction = Fraction(1)) -> tuple[Fraction, int]:
        """coef * xhat_i as a surd term (a, M)."""
        return coef * Fraction(self.d[i], self.wn), self.m


# ---------------------------------------------------------------- IEEE formulas for special values


def _ieee_forward(rows, gam, bet, eps):
    def fn(x, g, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b
    return ieee64(fn, rows, gam, bet)


def _ieee_vjp(rows, gam, g, eps):
    def fn(x, gm, gr):
        mu = x.mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
        xhat = (x - mu) * rstd
        h = gr * gm
        dx = rstd * (h - h.mean(axis=-1, keepdims=True) - xhat * (h * xhat).mean(axis=-1, keepdims=True))
        return np.stack([dx, gr * xhat])
    return ieee64(fn, rows, gam, g)


def _eps_parts(eps) -> tuple[float, int, int]:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(eps)) or not float(eps) > 0:
        raise ReferenceInputError(f"normalisation: eps must be a positive finite number, got {eps!r}")
    e32 = param_f32(eps)
    ints, scale = rounding.f32_to_scaled_ints(np.array([e32], np.float32))
    return float(e32), int(ints[0]), scale


def _groups(rows: np.ndarray, eps_int: int, eps_scale: int) -> list:
    out = []
    for x in rows:
        out.append(_Group(x, eps_int, eps_scale) if np.all(np.isfinite(x)) else None)
    return out


# ---------------------------------------------------------------- the shared core


_FAST_MIN = 256  # below this many elements the exact loops are cheap


def normalize_forward(rows, gam, bet, eps) -> Sums:
    """(value32, exact64, magnitude64) of xhat * gam + bet, statistics along the last axis of rows
    [R, n]; gam and bet [R, n] give each element its affine parameters. Big inputs take the certified
    dd path (fast/norm.py) first; the elements it leaves are rounded exactly here."""
    eps64, eps_int, eps_scale = _eps_parts(eps)
    if rows.shape[1] == 0:  # empty groups: nothing to normalise
        return Sums((np.zeros(rows.shape, np.float32), np.zeros(rows.shape), np.zeros(rows.shape)))
    if fast_paths.enabled() and rows.size >= _FAST_MIN:
        return _fast_forward(rows, gam, bet, eps64, eps_int, eps_scale)
    return Sums(_exact_forward(rows, gam, bet, eps64, eps_int, eps_scale))


def _exact_forward(rows, gam, bet, eps64, eps_int, eps_scale):
    ieee = _ieee_forward(rows, gam, bet, eps64)
    value, exact = rounding.round_f64_to_f32(ieee).copy(), ieee.copy()
    magnitude = np.zeros(rows.shape)
    groups = _groups(rows, eps_int, eps_scale)
    with np.errstate(all="ignore"):
        xhat_ieee = _ieee_forward(rows, np.ones_like(gam), np.zeros_like(bet), eps64)
    for r, grp in enumerate(groups):
        if grp is None or grp.wn == 0:
            magnitude[r] = np.abs(xhat_ieee[r] * gam[r]) + np.abs(bet[r])
            continue
        magnitude[r] = np.abs(grp.xhat64 * gam[r].astype(np.float64)) + np.abs(bet[r].astype(np.float64))
        for i in range(grp.n):
            gm, bt = gam[r, i], bet[r, i]
            if not (np.isfinite(gm) and np.isfinite(bt)):
                continue  # the IEEE formula stands
            t_neg = (grp.d[i] < 0) != bool(np.signbit(gm))
            neg_zero = t_neg and bool(np.signbit(bt))
            v32, v64 = round_surds([grp.xhat_term(i, Fraction(float(gm)))], Fraction(float(bt)), neg_zero)
            value[r, i], exact[r, i] = v32, v64
    return value, exact, magnitude


def _forward_element(grp, i: int, gm, bt) -> tuple:
    """The exact path for element i of a finite group, with its gamma and beta."""
    t_neg = (grp.d[i] < 0) != bool(np.signbit(gm))
    neg_zero = t_neg and bool(np.signbit(bt))
    return round_surds([grp.xhat_term(i, Fraction(float(gm)))], Fraction(float(bt)), neg_zero)


def _rounded_where(ieee: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """round_f64_to_f32(ieee) where mask is set, +0 elsewhere (the fast path fills the rest)."""
    out = np.zeros(ieee.shape, np.float32)
    out[mask] = rounding.round_f64_to_f32(ieee[mask])
    return out


def _fast_forward(rows, gam, bet, eps64, eps_int, eps_scale) -> Sums:
    ieee = _ieee_forward(rows, gam, bet, eps64)
    finite_rows = np.all(np.isfinite(rows), axis=1)[:, None]
    value = _rounded_where(ieee, ~(finite_rows & np.isfinite(gam) & np.isfinite(bet)))
    exact = ieee.copy()
    with np.errstate(all="ignore"):
        xhat_ieee = _ieee_forward(rows, np.ones_like(gam), np.zeros_like(bet), eps64)
        magnitude = np.abs(xhat_ieee * gam) + np.abs(bet)
    st = fast_norm.Stats(rows, eps64)
    v32, v64, done, xh = fast_norm.forward(st, gam, bet)
    fin = np.isfinite(gam.reshape(-1)[st.idx]) & np.isfinite(bet.reshape(-1)[st.idx])  # else IEEE stands
    vflat, eflat, mflat = value.reshape(-1), exact.reshape(-1), magnitude.reshape(-1)
    take = st.idx[done]
    vflat[take], eflat[take] = v32[done], v64[done]
    gm64, bt64 = gam.reshape(-1)[st.idx].astype(np.float64), bet.reshape(-1)[st.idx].astype(np.float64)
    mflat[st.idx] = np.abs(xh * gm64) + np.abs(bt64)
    left = np.flatnonzero(fin & ~done)
    groups = {}
    for j in left:
        r, i = divmod(int(st.idx[j]), rows.shape[1])
        if r not in groups:
            groups[r] = _Group(rows[r], eps_int, eps_scale)
        vflat[st.idx[j]], eflat[st.idx[j]] = _forward_element(groups[r], i, gam[r, i], bet[r, i])
    return Sums((value, exact, magnitude), left.size)


def normalize_vjp(rows, gam, g, eps, labels, nparams) -> tuple[Sums, Sums, Sums]:
    """((value32, exact64, magnitude64) of dx [R, n], of dgamma [nparams], of dbeta [nparams]):
    statistics along the last axis of rows; gam [R, n] each element's gamma; labels [R, n] the index
    of the affine parameter each element uses (dgamma and dbeta sum over equal labels). Big inputs
    whose labels are the rows (batch_norm) or the columns (layer_norm) take the certified dd path
    (fast/norm.py) first; what it leaves is computed exactly here."""
    eps64, eps_int, eps_scale = _eps_parts(eps)
    if rows.shape[1] == 0:  # empty groups: no dx, and dgamma = dbeta = +0 (empty sums)
        empty, zeros = np.zeros(rows.shape), np.zeros(nparams)
        return (Sums((empty.astype(np.float32), empty, empty)), Sums((zeros.astype(np.float32), zeros, zeros)),
                Sums((zeros.astype(np.float32), zeros, zeros)))
    r_n, n_n = rows.shape
    by_row = nparams == r_n and np.array_equal(labels, np.broadcast_to(np.arange(r_n)[:, None], rows.shape))
    by_col = nparams == n_n and np.array_equal(labels, np.broadcast_to(np.arange(n_n)[None, :], rows.shape))
    if fast_paths.enabled() and rows.size >= _FAST_MIN and (by_row or by_col):
        return _fast_vjp(rows, gam, g, eps64, eps_int, eps_scale, by_row, nparams)
    return tuple(Sums(part) for part in _exact_vjp(rows, gam, g, eps64, eps_int, eps_scale, labels, nparams))


def _exact_vjp(rows, gam, g, eps64, eps_int, eps_scale, labels, nparams):
    ieee_dx, ieee_gx = _ieee_vjp(rows, gam, g, eps64)
    dx_value, dx_exact = rounding.round_f64_to_f32(ieee_dx).copy(), ieee_dx.copy()
    dx_mag = np.zeros(rows.shape)
    groups = _groups(rows, eps_int, eps_scale)
    g64, gam64 = g.astype(np.float64), gam.astype(np.float64)
    gx_terms = [[] for _ in range(nparams)]
    special = np.zeros(nparams, bool)
    gx_mag = np.zeros(rows.shape)
    for r, grp in enumerate(groups):
        gr, gm = g[r], gam[r]
        finite_g = np.isfinite(gr)
        if grp is None or grp.wn == 0:
            special[labels[r]] = True
            with np.errstate(all="ignore"):
                dx_mag[r] = np.abs(ieee_dx[r])
                gx_mag[r] = np.abs(ieee_gx[r])
            continue
        h = np.abs(g64[r] * gam64[r])
        gx_mag[r] = np.abs(g64[r] * grp.xhat64)
        with np.errstate(all="ignore"):
            dx_mag[r] = grp.rstd64 * (h + h.mean() + np.abs(grp.xhat64) * (h * np.abs(grp.xhat64)).mean())
        special[labels[r][~finite_g]] = True
        for i in range(grp.n):
            if finite_g[i]:
                gx_terms[labels[r, i]].append((grp, i, gr[i]))
        if not (np.all(finite_g) and np.all(np.isfinite(gm))):
            continue  # the IEEE dx stands for this group
        hs = [Fraction(float(a)) * Fraction(float(b)) for a, b in zip(gr, gm)]
        p = sum(hs, Fraction(0))
        t = sum((h_i * d_i for h_i, d_i in zip(hs, grp.d)), Fraction(0))
        n = grp.n
        scale = Fraction(1 << grp.sx, grp.wn * grp.wn)
        for i in range(n):
            c = (n * hs[i] - p) * grp.wn - grp.d[i] * t * grp.wd
            dx_value[r, i], dx_exact[r, i] = round_surds([(c * scale, grp.m)])
    # dgamma = sum g xhat, dbeta = sum g over each label
    flat_labels, flat_g = labels.reshape(-1), g.reshape(-1)
    with np.errstate(all="ignore"):
        ieee_dgamma = np.bincount(flat_labels, ieee_gx.reshape(-1), nparams) if flat_labels.size else np.zeros(nparams)
        ieee_dbeta = np.zeros(nparams)
        np.add.at(ieee_dbeta, flat_labels, g64.reshape(-1))
    dg_mag = np.bincount(flat_labels, gx_mag.reshape(-1), nparams) if flat_labels.size else np.zeros(nparams)
    db_mag = np.bincount(flat_labels, np.abs(g64).reshape(-1), nparams) if flat_labels.size else np.zeros(nparams)
    dg_value, dg_exact = rounding.round_f64_to_f32(ieee_dgamma).copy(), ieee_dgamma.copy()
    db_value, db_exact = np.zeros(nparams, np.float32), np.zeros(nparams)
    g_finite_label = np.ones(nparams, bool)
    g_finite_label[flat_labels[~np.isfinite(flat_g)]] = False
    g_sums = [Fraction(0)] * nparams
    g_neg0 = [True] * nparams
    g_count = np.bincount(flat_labels, minlength=nparams) if flat_labels.size else np.zeros(nparams, int)
    for lab, v in zip(flat_labels.tolist(), flat_g.tolist()):
        if math.isfinite(v):
            g_sums[lab] += Fraction(v)
        g_neg0[lab] = g_neg0[lab] and v == 0 and math.copysign(1.0, v) < 0
    for p in range(nparams):
        neg0 = g_neg0[p] and g_count[p] > 0
        if g_finite_label[p]:
            db_value[p], db_exact[p] = _round_fraction(g_sums[p], neg0)
        else:
            db_exact[p] = ieee_dbeta[p]
            db_value[p] = rounding.round_f64_to_f32(np.array([ieee_dbeta[p]]))[0]
        if special[p]:
            continue
        terms, all_neg0 = [], g_count[p] > 0
        for grp, i, gv in gx_terms[p]:
            terms.append(grp.xhat_term(i, Fraction(float(gv))))
            zero = gv == 0 or grp.d[i] == 0
            all_neg0 = all_neg0 and zero and (bool(np.signbit(gv)) != (grp.d[i] < 0))
        dg_value[p], dg_exact[p] = round_surds(terms, Fraction(0), all_neg0)
    return (dx_value, dx_exact, dx_mag), (dg_value, dg_exact, dg_mag), (db_value, db_exact, db_mag)


def _dx_element(grp, hs_p_t, i) -> tuple:
    """The exact path's dx for element i of a finite group, given (h list, P, T) of that group."""
    hs, p, t = hs_p_t
    n = grp.n
    c = (n * hs[i] - p) * grp.wn - grp.d[i] * t * grp.wd
    return round_surds([(c * Fraction(1 << grp.sx, grp.wn * grp.wn), grp.m)])


def _fast_vjp(rows, gam, g, eps64, eps_int, eps_scale, by_row, nparams):
    r_n, n = rows.shape
    ieee_dx, ieee_gx = _ieee_vjp(rows, gam, g, eps64)
    g64, gam64 = g.astype(np.float64), gam.astype(np.float64)
    st = fast_norm.Stats(rows, eps64)
    fin_row = st.finite
    # dx: the dd formula on groups whose g and gamma are finite; the IEEE formula stands elsewhere
    row_ok = fin_row & np.all(np.isfinite(g64), axis=1) & np.all(np.isfinite(gam64), axis=1)
    dx_value = _rounded_where(ieee_dx, np.broadcast_to(~row_ok[:, None], rows.shape))
    dx_exact = ieee_dx.copy()
    v32, v64, done, zero = fast_norm.vjp_dx(st, gam, g)
    ok = row_ok[st.row]
    v32 = np.where(zero, np.float32(0.0), v32)
    v64 = np.where(zero, 0.0, v64)
    fill = ok & (done | zero)
    dx_value.reshape(-1)[st.idx[fill]], dx_exact.reshape(-1)[st.idx[fill]] = v32[fill], v64[fill]
    groups, parts = {}, {}
    slow = 0
    for j in np.flatnonzero(ok & ~done & ~zero):
        r, i = divmod(int(st.idx[j]), n)
        if r not in groups:
            groups[r] = _Group(rows[r], eps_int, eps_scale)
            hs = [Fraction(float(a)) * Fraction(float(b)) for a, b in zip(g[r], gam[r])]
            parts[r] = (hs, sum(hs, Fraction(0)), sum((h_i * d_i for h_i, d_i in zip(hs, groups[r].d)), Fraction(0)))
        dx_value[r, i], dx_exact[r, i] = _dx_element(groups[r], parts[r], i)
        slow += 1
    # magnitudes as the exact path defines them, from the dd xhat and rstd
    xh = np.zeros(rows.shape)
    xh.reshape(-1)[st.idx] = st.xhat.hi
    rstd = np.where(fin_row, float(n) / np.where(fin_row, st.root.hi, 1.0), 0.0)
    h = np.abs(g64 * gam64)
    with np.errstate(all="ignore"):
        dx_mag = np.where(fin_row[:, None], rstd[:, None] * (h + h.mean(axis=1, keepdims=True) + np.abs(xh)
                          * (h * np.abs(xh)).mean(axis=1, keepdims=True)), np.abs(ieee_dx))
        gx_mag = np.where(fin_row[:, None], np.abs(g64 * xh), np.abs(ieee_gx))
    axis = 1 if by_row else 0
    dg_mag, db_mag = gx_mag.sum(axis=axis), np.abs(g64).sum(axis=axis)
    # dgamma = sum g xhat and dbeta = sum g per parameter
    with np.errstate(all="ignore"):
        ieee_dgamma = ieee_gx.sum(axis=axis)
        ieee_dbeta = g64.sum(axis=axis)
    by_label = (lambda a: a) if by_row else (lambda a: a.T)
    g_lab = by_label(g64)
    fin_lab = by_label(np.broadcast_to(fin_row[:, None], rows.shape))
    special = ~np.all(np.isfinite(g_lab), axis=1) | ~fin_lab.all(axis=1)
    terms = fast_norm.label_sums(fast_norm.dgamma_terms(st, g), st, by_row)
    dg_value, dg_exact = rounding.round_f64_to_f32(ieee_dgamma).copy(), ieee_dgamma.copy()
    a32, a64, dg_ok = certify(terms)
    d_lab = np.zeros(rows.shape)
    d_lab.reshape(-1)[st.idx] = st.d.hi
    d_lab = by_label(d_lab)
    prod_zero = (g_lab == 0) | (d_lab == 0)  # each term g xhat is an exact zero
    all_zero = np.all(prod_zero, axis=1)
    neg0 = all_zero & np.all(np.signbit(g_lab) != (d_lab < 0), axis=1) & (g_lab.shape[1] > 0)
    # a channel (batch_norm: the label is the group) with constant g sums g xhat to c sum D / sqrt(W) = 0
    const_zero = np.zeros(nparams, bool)
    if by_row:
        with np.errstate(all="ignore"):
            const_zero = fin_row & (np.max(g_lab, axis=1) == np.min(g_lab, axis=1))
    a32 = np.where(all_zero | const_zero, np.where(neg0, np.float32(-0.0), np.float32(0.0)), a32)
    a64 = np.where(all_zero | const_zero, np.where(neg0, -0.0, 0.0), a64)
    good = ~special & (dg_ok | all_zero | const_zero)
    dg_value[good], dg_exact[good] = a32[good], a64[good]
    for p in np.flatnonzero(~special & ~good):
        slow += 1
        dg_value[p], dg_exact[p] = _dgamma_label(rows, g, p, by_row, groups, eps_int, eps_scale)
    # dbeta: exact sums of g per parameter (the IEEE sum where some g is not finite)
    finite_lab = np.all(np.isfinite(g_lab), axis=1)
    b32, b64, b_ok, b_zero = fast_sums.sum_rows(np.where(np.isfinite(g_lab), g_lab, 0.0))
    g_neg0 = np.all((g_lab == 0) & np.signbit(g_lab), axis=1) & (g_lab.shape[1] > 0)
    b32 = np.where(b_zero, np.where(g_neg0, np.float32(-0.0), np.float32(0.0)), b32)
    b64 = np.where(b_zero, np.where(g_neg0, -0.0, 0.0), b64)
    db_value = np.where(finite_lab, b32, rounding.round_f64_to_f32(ieee_dbeta))
    db_exact = np.where(finite_lab, b64, ieee_dbeta)
    for p in np.flatnonzero(finite_lab & ~b_ok):
        slow += 1
        db_value[p], db_exact[p] = _round_fraction(sum((Fraction(v) for v in g_lab[p].tolist()), Fraction(0)),
                                                   bool(g_neg0[p]))
    return (Sums((dx_value, dx_exact, dx_mag), slow), Sums((dg_value, dg_exact, dg_mag)),
            Sums((db_value, db_exact, db_mag)))


def _dgamma_label(rows, g, p, by_row, groups, eps_int, eps_scale) -> tuple:
    """The exact path's dgamma for one parameter: its surd sum over the elements that use it."""
    n = rows.shape[1]
    members = [(p, i) for i in range(n)] if by_row else [(r, p) for r in range(rows.shape[0])]
    terms, all_neg0 = [], bool(members)
    for r, i in members:
        if r not in groups:
            groups[r] = _Group(rows[r], eps_int, eps_scale)
        grp, gv = groups[r], g[r, i]
        terms.append(grp.xhat_term(i, Fraction(float(gv))))
        all_neg0 = all_neg0 and (gv == 0 or grp.d[i] == 0) and (bool(np.signbit(gv)) != (grp.d[i] < 0))
    return round_surds(terms, Fraction(0), all_neg0)


# ---------------------------------------------------------------- layer_norm itself


def _checked(inputs):
    x, gamma, beta = f32_inputs(inputs, 3, OP)
    if x.ndim < 1 or gamma.shape != (x.shape[-1],) or beta.shape != (x.shape[-1],):
        raise ReferenceInputError(
            f"layer_norm needs x [..., d], gamma [d], beta [d]; got {x.shape}, {gamma.shape}, {beta.shape}")
    d = x.shape[-1]
    rows = x.reshape(math.prod(x.shape[:-1]), d)
    return x, gamma, beta, rows


def forward(inputs, *, eps=1e-5):
    x, gamma, beta, rows = _checked(inputs)
    gam = np.broadcast_to(gamma, rows.shape)
    bet = np.broadcast_to(beta, rows.shape)
    out = normalize_forward(rows, gam, bet, eps)
    value, exact, magnitude = out
    return Reference(value.reshape(x.shape), exact.reshape(x.shape), magnitude.reshape(x.shape),
                     x.shape[-1], "composite", out.slow)


def vjp(inputs, grad_out, *, eps=1e-5):
    x, gamma, beta, rows = _checked(inputs)
    g = f32_grad(grad_out, x.shape, OP).reshape(rows.shape)
    gam = np.broadcast_to(gamma, rows.shape)
    labels = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
    dx, dg, db = normalize_vjp(rows, gam, g, eps, labels, rows.shape[1])
    n_rows = rows.shape[0]
    return (Reference(dx[0].reshape(x.shape), dx[1].reshape(x.shape), dx[2].reshape(x.shape), x.shape[-1], "composite",
                      dx.slow),
            Reference(*dg, n_rows, "composite"), Reference(*db, n_rows, "composite"))
