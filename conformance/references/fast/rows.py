"""Certified fast paths for the softmax family over rows [M, n] (softmax, hard_masked_softmax,
log_softmax), forward and VJP, in double-double with running error radii.

Per row, with live entries the finite participants and m their maximum: d_j = x_j - m exactly (TwoSum),
e_j = exp(d_j) (ddmath.exp_parts; below 2^-1000 an entry keeps only an upper bound 2^(n+1) as its
radius), R = the sum of e_j over live entries except the first maximum (whose e is exactly 1), D = 1 + R
(pairwise dd sums of positive terms: the radius stays relative), s_j = e_j / D. Each output is
certified (certify.py); an e_j whose bound is below 2^-1076 gives s_j = +0 outright (D >= 1).

Derived quantities:
- log_softmax: y_j = d_j - log1p(R): d_j <= 0 <= log1p(R), so the terms never cancel except for the
  maximum entries (d = 0), where y = -log1p(R) keeps R's relative accuracy. A single live entry gives
  y = +0 exactly (the exact path's sign); with R > 0 below 2^-1076 the maximum's y is -0.
- softmax VJP: s_j (g_j - c), c = sum_l g_l s_l (a dd sum). Exact zeros (Lindemann-Weierstrass: the
  exponentials of distinct dyadic d are linearly independent over the rationals, so
  D (g_j - c) = sum over score groups G of e^(d_G) sum_{l in G} (g_j - g_l) vanishes only when every
  group's mean of g is g_j) are found where that is cheap to see: g constant over the live entries
  (every element is zero) and all live entries equal (zero iff n g_j = sum g). An element still
  undecided is recomputed in the cancellation-free form sum_l s_l (g_j - g_l), O(n) for that element.
- log_softmax VJP: g_j - s_j G (G = sum of g) and, for the maximum, -(G - g_k) + (R/D) G. Exact zeros
  by the same argument: with two or more distinct live values only where g_j = 0 and G = 0; with one,
  where n g_j = G.
Zero results take the sign of the exact path's IEEE formula; special rows (NaN, inf, blocked, a
non-finite cotangent) are left to the callers, which treat them as the exact path does. What a
certificate leaves goes, in order: for the VJPs, to the per-group form (_Groups); for the forwards, to a
per-element Ziv loop that encloses the row's D or R by its dd interval (softmax_element,
log_softmax_element: about a millisecond each); only what is still undecided then sends its whole row to
the exact path.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mpmath import iv
from mpmath.libmp import MPZ_ONE, from_float, fzero, mpf_add, mpf_sub

from conformance import rounding
from conformance.references._common import iv_add_exact, iv_exp, iv_log1p
from conformance.references.fast import ddmath
from conformance.references.fast import sums as fast_sums
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, pairwise_sum, scattered_sum, two_sum, where
from conformance.references.fast.elementwise import scaled_finish

CHUNK = 16384
_TINY_EXP = -955  # e = 2^n m (m in [1, 2)) with n below this is outside the dd domain: kept as a bound
_FAR = -4096.0    # d below this: e < 2^-5909, far below every float64
_FAR_EXP = -5910  # the exponent bound kept for such e


def _concat(parts: list[DD]) -> DD:
    return DD(np.concatenate([p.hi for p in parts]), np.concatenate([p.lo for p in parts]),
              np.concatenate([p.rad for p in parts]), np.concatenate([p.bad for p in parts]))


def _chunked(fn, n: int) -> DD:
    if n == 0 or fn is None:
        z = np.zeros(0)
        return DD(z, z.copy(), z.copy(), np.zeros(0, bool))
    return _concat([fn(slice(s, min(s + CHUNK, n))) for s in range(0, n, CHUNK)])


def _unscaled(q: DD, n: np.ndarray) -> DD:
    """2^n q as a DD for sums: exact scaling inside the domain; below it 0 with radius 2^(n+2) |q|
    (at least 2^-1074), an upper bound on the dropped value."""
    tiny = n < _TINY_EXP
    v = q.ldexp(np.where(tiny, 0, n))
    bound = np.maximum(np.ldexp(np.abs(q.hi) * 4, np.maximum(n, -1200).astype(np.int32)), 2.0 ** -1074)
    return DD(np.where(tiny, 0.0, v.hi), np.where(tiny, 0.0, v.lo), np.where(tiny, bound, v.rad),
              np.where(tiny, q.bad, v.bad))


class Rows:
    """The dd state of a softmax over rows [M, n] with participation mask `part` (module docstring).

    On the live entries (flat positions idx, rows row): d = x - max exactly (dh, dl); s = 2^s_n s_q
    (s_q = m / D with e = 2^s_n m), kept scaled so that probabilities far below the dd domain still
    round correctly (elementwise.scaled_finish); e and s also come unscaled (bounded where tiny) for
    the row sums. r_sum = R, d_sum = D = 1 + R per row.
    """

    def __init__(self, rows: np.ndarray, part: np.ndarray):
        self.shape = rows.shape
        m_rows, n = rows.shape
        with np.errstate(all="ignore"):
            anyp = part.any(axis=1)
            live = part & np.isfinite(rows)
            # the exact path's NaN rows: a NaN or +inf participant, or only -inf ones
            nan_row = anyp & (np.any(part & (np.isnan(rows) | np.isposinf(rows)), axis=1) | ~live.any(axis=1))
            self.nan_row = nan_row
            self.live = live & ~nan_row[:, None]
            mx = np.max(np.where(self.live, rows, -np.inf), axis=1) if n else np.zeros(m_rows)
            self.idx = np.flatnonzero(self.live)
            self.row = self.idx // max(n, 1)
            x = rows.reshape(-1)[self.idx]
            self.dh, self.dl = two_sum(x, -mx[self.row])
            self.n_live = self.live.sum(axis=1)
            # the first maximum of each row (the exact path's k), as a flat index
            first = np.argmax(np.where(self.live, rows, -np.inf), axis=1) if n else np.zeros(m_rows, int)
            self.kflat = np.arange(m_rows) * n + first
            self.is_k = self.idx == self.kflat[self.row]
            parts = [self._exp(slice(s, min(s + CHUNK, self.idx.size))) for s in range(0, self.idx.size, CHUNK)]
            self.e_n = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
            self.e_m = _concat([p[1] for p in parts]) if parts else _chunked(None, 0)
            self.e = _chunked(lambda sl: _unscaled(self.e_m[sl], self.e_n[sl]), self.idx.size)
            k = self.is_k
            r_terms = DD(np.where(k, 0.0, self.e.hi), np.where(k, 0.0, self.e.lo), np.where(k, 0.0, self.e.rad),
                         self.e.bad & ~k)
            self.r_sum = self._row_sum(r_terms)
            # rows whose R has only terms below the dd domain: R > 0 (two live entries or more) and
            # R < 2^r_log2_bound, from the largest exponent among them (e < 2^(n+1)) and their count
            in_domain = ~k & (self.e_n >= _TINY_EXP)
            some_big = np.zeros(m_rows, bool)
            some_big[self.row[in_domain]] = True
            top_n = np.full(m_rows, -20000, np.int64)
            np.maximum.at(top_n, self.row[~k], self.e_n[~k])
            self.r_tiny_only = (self.n_live >= 2) & ~some_big
            self.r_log2_bound = top_n + 1 + np.ceil(np.log2(np.maximum(self.n_live, 1))).astype(np.int64)
            self.d_sum = self.r_sum.add_fp(1.0)
            self.s_q = _chunked(lambda sl: self.e_m[sl] / self.d_sum[self.row[sl]], self.idx.size)
            self.s_n = self.e_n
            self.s = _chunked(lambda sl: _unscaled(self.s_q[sl], self.s_n[sl]), self.idx.size)

    def _exp(self, sl) -> tuple[np.ndarray, DD]:
        """(n, m) with e = 2^n m on a slice of the live entries; d < -4096 gets the bound n = -5910,
        m = 1 (e^-4096 = 2^-5909.4): good for sums and for the sign of a single scaled value, never
        for weighing such terms against each other (the scaled sums refuse that)."""
        dh, dl = self.dh[sl], self.dl[sl]
        far = dh < _FAR
        n, m = ddmath.exp_parts(DD(np.where(far, _FAR, dh), np.where(far, 0.0, dl)))
        one = DD(np.ones_like(dh))
        return np.where(far, _FAR_EXP, n), where(far, one, m)

    def _row_sum(self, terms: DD) -> DD:
        """Per-row dd sums of values given on the live entries."""
        return scattered_sum(terms, self.idx, self.shape, axis=1)

    def certify_live(self, x: DD, n: np.ndarray | None = None):
        """(value32, exact64, done) of 2^n x on the live entries (n = 0 when None)."""
        v32, v64, ok = [], [], []
        for s in range(0, x.hi.size, CHUNK):
            part = x[s:s + CHUNK]
            if n is None:
                a, b, c = certify(part)
            else:
                dd, dec, d32, d64 = scaled_finish(part, n[s:s + CHUNK])
                a, b, c = certify(dd)
                a, b, c = np.where(dec, d32, a), np.where(dec, d64, b), c | dec
            v32.append(a), v64.append(b), ok.append(c)
        if not v32:
            return np.zeros(0, np.float32), np.zeros(0), np.zeros(0, bool)
        return np.concatenate(v32), np.concatenate(v64), np.concatenate(ok)

    def scatter(self, values, fill, dtype) -> np.ndarray:
        out = np.full(self.shape[0] * self.shape[1], fill, dtype=dtype)
        out[self.idx] = values
        return out.reshape(self.shape)


def softmax(rows: np.ndarray, part: np.ndarray):
    """(value32, exact64, pending, state) over rows [M, n]: NaN rows and blocked entries as the exact
    path gives them; pending lists the live entries (positions in state's arrays) still undecided."""
    st = Rows(rows, part)
    with np.errstate(all="ignore"):
        v32, v64, done = st.certify_live(st.s_q, st.s_n)
    value = st.scatter(v32, 0, np.float32)
    exact = st.scatter(v64, 0.0, np.float64)
    value[st.nan_row[:, None] & part] = np.nan
    exact[st.nan_row[:, None] & part] = np.nan
    return value, exact, np.flatnonzero(~done), st


def _scaled_sum(q: DD, n: np.ndarray, live: np.ndarray) -> tuple[DD, int]:
    """(B, e) with sum_l 2^(n_l) q_l in 2^e [B - rad, B + rad]: terms are scaled by 2^(n_l - e),
    e = the largest n_l among the `live` terms (the others are exactly zero and set no scale), exactly
    while inside the domain (a term below it is dropped into the radius by _unscaled, which bounds it)."""
    if not live.any():
        return DD(np.zeros(1))[0], 0
    e = int(np.max(n[live]))
    zero = DD(np.zeros_like(q.hi))
    out = pairwise_sum(_unscaled(where(live, q, zero), np.where(live, n - e, 0)))
    if e <= _FAR_EXP:  # only bounded terms (module docstring of Rows._exp): no weighing them
        out.bad = np.ones_like(out.bad)
    return out, e


def _groups(rows: np.ndarray, live: np.ndarray):
    """(all distinct, all equal) per row over the live entries."""
    m_rows, n = rows.shape
    if n == 0:
        return np.zeros(m_rows, bool), np.zeros(m_rows, bool)
    srt = np.sort(np.where(live, rows, np.inf), axis=1)
    n_live = live.sum(axis=1)
    valid = np.arange(n - 1)[None, :] < (n_live - 1)[:, None]
    same = (srt[:, 1:] == srt[:, :-1]) & valid
    return ~same.any(axis=1), same.sum(axis=1) == np.maximum(n_live - 1, 0)


def _exact_sums(g_rows: np.ndarray, mask: np.ndarray) -> DD:
    """Per-row sums of g over mask as DDs (exact when rad = 0; sums.row_sums_dd)."""
    return fast_sums.row_sums_dd(np.where(mask, g_rows, 0.0))


class _Groups:
    """One row's live entries grouped by equal x (equal d, equal e), with exact group sums of g, for
    the cancellation-free forms of the VJPs: D (g_j - sum g s) = sum_G e_G (|G| g_j - S_G) and
    D (g_j - s_j G) = sum_G e_G (|G| g_j - [j in G] G), G the row's sum of g. A coefficient is a
    difference of two exact values (|G| g_j is exact: |G| < 2^29), rounded once into a DD, and the
    e_G are positive: nothing cancels but the groups themselves (module docstring for exact zeros)."""

    def __init__(self, st: Rows, r: int, g_live: np.ndarray):
        self.mine = np.flatnonzero(st.row == r)
        self.st = st
        d = st.dh[self.mine] + st.dl[self.mine]  # only compared for equality: dh, dl are exact
        key = np.stack([st.dh[self.mine], st.dl[self.mine]], axis=1)
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        self.gid = inv.reshape(-1)
        self.first = self.mine[first]  # one member of each group: its e
        self.size = np.bincount(self.gid).astype(np.float64)
        g = g_live[self.mine]
        self.sums = [Fraction(0)] * len(first)
        for gi, v in zip(self.gid.tolist(), g.tolist()):
            self.sums[gi] += Fraction(v)
        self.g = g
        del d

    def zeros(self) -> np.ndarray:
        """Where g_j - sum g s is exactly zero: g_j equals every group's mean of g."""
        means = {sm / int(n) for sm, n in zip(self.sums, self.size)}
        if len(means) > 1:
            return np.zeros(self.mine.shape, bool)
        (mu,) = means
        return np.array([Fraction(v) == mu for v in self.g.tolist()])

    def combination(self, coef: list[Fraction]) -> tuple[DD, int]:
        """(B, e): sum_G e_G coef_G in 2^e [B - rad, B + rad] (a scaled dd sum)."""
        c = np.array([float(x) for x in coef])
        c_lo = np.array([float(x - Fraction(float(x))) for x in coef])
        c_rad = np.abs(c_lo) * 2.0 ** -52  # coef - c - c_lo is below half an ulp of c_lo
        terms = self.st.e_m[np.searchsorted(self.st.idx, self.st.idx[self.first])] * DD(c, c_lo, c_rad)
        return _scaled_sum(terms, self.st.e_n[np.searchsorted(self.st.idx, self.st.idx[self.first])], c != 0)


def _finish_element(q: DD, n: int):
    """(value32, exact64, done) of the one value 2^n q."""
    q = DD(*(np.reshape(a, 1) for a in (q.hi, q.lo, q.rad, q.bad)))
    dd, dec, d32, d64 = scaled_finish(q, np.array([n]))
    a32, a64, ok = certify(dd)
    return np.where(dec, d32, a32)[0], np.where(dec, d64, a64)[0], bool((ok | dec)[0])


def softmax_vjp(st: Rows, rows: np.ndarray, g_rows: np.ndarray, part: np.ndarray, normal_rows: np.ndarray):
    """(value32, exact64, done over live entries, zero over live entries) of s (g - sum g s) on the
    live entries of `normal_rows` (finite cotangents, not NaN rows)."""
    with np.errstate(all="ignore"):  # rows outside normal_rows may hold inf or NaN: computed, not used
        return _softmax_vjp(st, rows, g_rows, part, normal_rows)


def _softmax_vjp(st, rows, g_rows, part, normal_rows):
    g = g_rows.reshape(-1)[st.idx]
    keep = normal_rows[st.row]
    gs = _chunked(lambda sl: st.s[sl].mul_fp(np.where(keep[sl], g[sl], 0.0)), st.idx.size)
    c = st._row_sum(gs)
    out = _chunked(lambda sl: (DD(g[sl]) - c[st.row[sl]]) * st.s_q[sl], st.idx.size)
    v32, v64, done = st.certify_live(out, st.s_n)
    # exact zeros (module docstring): g constant over the live entries zeroes the whole row; in any
    # other row with an undecided element the groups of equal x decide which elements are zero
    with np.errstate(all="ignore"):
        g_max = np.max(np.where(st.live, g_rows, -np.inf), axis=1)
        const_g = g_max == np.min(np.where(st.live, g_rows, np.inf), axis=1)
    zero = (normal_rows & const_g)[st.row]
    for r in np.unique(st.row[keep & ~done & ~zero]):
        grp = _Groups(st, r, g)
        zero[grp.mine] = grp.zeros()
        for local in np.flatnonzero(~done[grp.mine] & ~zero[grp.mine]):
            j = grp.mine[local]  # s_j (sum_G e_G (|G| g_j - S_G)) / D
            gj = Fraction(float(g[j]))
            b, b_n = grp.combination([int(n) * gj - sm for n, sm in zip(grp.size, grp.sums)])
            v32[j], v64[j], done[j] = _finish_element(st.s_q[j] * (b / st.d_sum[r]), st.s_n[j] + b_n)
    return v32, v64, done & ~zero, zero


def log_softmax(st: Rows):
    """(value32, exact64, done) of y = d - log1p(R) on the live entries."""
    with np.errstate(all="ignore"):
        return _log_softmax(st)


def _log_softmax(st):
    lsum = ddmath.log1p(st.r_sum)
    single = st.n_live == 1
    y = _chunked(lambda sl: DD(st.dh[sl], st.dl[sl]) - lsum[st.row[sl]], st.idx.size)
    v32, v64, done = st.certify_live(y)
    r = st.row
    zero_k = (st.dh == 0) & (st.dl == 0)
    plus0 = zero_k & single[r]  # R = 0 exactly: y = +0
    # R > 0 with only terms below the dd domain (0 < log1p(R) < R < 2^bound): a maximum's y is a
    # negative number that rounds to -0 when bound <= -1076; any other y = d - delta with d <= -660 a
    # float64 (dl = 0) and 0 < delta far below half its ulp: float64 d, float32 d rounded with a
    # negative residual (which only matters when d is a float32 midpoint)
    tiny_r = st.r_tiny_only[r]
    minus0 = zero_k & tiny_r & (st.r_log2_bound[r] <= -1076)
    below = tiny_r & ~zero_k
    # t = dh + dl - delta: float32 as the pair (dh, dl) rounds (a float32 tie can only sit at dh itself,
    # decided by dl's sign, or by -delta when dl = 0); float64 dh, unless dh + dl is a float64 tie
    # (|dl| half the spacing toward dl), which -delta breaks downwards
    resid = np.where(st.dl == 0, -np.ones_like(st.dh), st.dl)
    v32 = np.where(below, rounding.round_f64_pair_to_f32(st.dh, resid), v32)
    toward = np.nextafter(st.dh, np.where(st.dl > 0, np.inf, -np.inf))
    tie64 = (st.dl != 0) & (toward - st.dh == 2 * st.dl)
    v64 = np.where(below, np.where(tie64, np.minimum(st.dh, toward), st.dh), v64)
    v32 = np.where(plus0, np.float32(0), np.where(minus0, np.float32(-0.0), v32))
    v64 = np.where(plus0, 0.0, np.where(minus0, -0.0, v64))
    return v32, v64, done | plus0 | minus0 | below


def log_softmax_vjp(st: Rows, rows: np.ndarray, g_rows: np.ndarray, normal_rows: np.ndarray):
    """(value32, exact64, done, zero) on the live entries of `normal_rows` of g_j - s_j G, and
    -(G - g_k) + (R/D) G for the first maximum (G = the row's sum of g, every entry)."""
    with np.errstate(all="ignore"):
        return _log_softmax_vjp(st, rows, g_rows, normal_rows)


def _log_softmax_vjp(st, rows, g_rows, normal_rows):
    m_rows, n = rows.shape
    g = g_rows.reshape(-1)[st.idx]
    r = st.row
    every = np.ones(rows.shape, bool) & normal_rows[:, None]
    big_g = _exact_sums(g_rows, every)
    not_k = every & (np.arange(n)[None, :] != (st.kflat % max(n, 1))[:, None])
    rest = _exact_sums(g_rows, not_k)  # G - g_k
    ratio = (st.r_sum / st.d_sum) * big_g

    def piece(sl):
        rr = r[sl]
        # g_j = 0: the value is -s_j G, kept scaled (s_j may lie far below the dd domain)
        g0 = g[sl] == 0
        plain = where(g0, -(st.s_q[sl] * big_g[rr]), DD(g[sl]) - st.s[sl] * big_g[rr])
        top = ratio[rr] - rest[rr]
        return where(st.is_k[sl], top, plain)

    out = _chunked(piece, st.idx.size)
    v32, v64, done = st.certify_live(out, np.where((g == 0) & ~st.is_k, st.s_n, 0))
    distinct, equal = _groups(rows, st.live)
    several = ~equal  # two or more distinct live values
    exact_g = (big_g.rad == 0) & (big_g.lo == 0)
    zero = normal_rows[r] & exact_g[r] & ((several[r] & (g == 0) & (big_g.hi[r] == 0))
                                          | (equal[r] & (st.n_live[r] * g == big_g.hi[r])))
    keep = normal_rows[r]
    for row in np.unique(r[keep & ~done & ~zero]):
        grp = _Groups(st, row, g)
        total = sum((Fraction(v) for v in g_rows[row].tolist()), Fraction(0))
        for local in np.flatnonzero(~done[grp.mine] & ~zero[grp.mine]):
            j = grp.mine[local]  # (sum_G e_G (|G| g_j - [j in G] G)) / D
            gj, mine_g = Fraction(float(g[j])), grp.gid[local]
            coef = [int(n) * gj - (total if i == mine_g else 0) for i, n in enumerate(grp.size)]
            b, b_n = grp.combination(coef)
            v32[j], v64[j], done[j] = _finish_element(b / st.d_sum[row], b_n)
    return v32, v64, done & ~zero, zero


# ---------------------------------------------------------------- one element, with row enclosures


def _point(hi: float, lo: float):
    return mpf_add(from_float(float(hi)), from_float(float(lo)), 0)


def enclosure(ctx, x: DD, i: int):
    """The interval [hi + lo - rad, hi + lo + rad] of element i of x, endpoints exact."""
    v = _point(x.hi[i], x.lo[i])
    r = from_float(float(x.rad[i]))
    return ctx.make_mpf((mpf_sub(v, r, 0), mpf_add(v, r, 0)))


def _ziv_element(fn, negative_zero: bool = False):
    """Decide fn(ctx) (an interval) at 80, 160 and 320 bits; None if still undecided (the row-level
    enclosures inside fn are only dd-accurate, so more bits would not help)."""
    for prec in (80, 160, 320):
        with rounding.iv_precision(prec):
            got = rounding.decide_interval(fn(iv), negative_zero)
        if got is not None:
            return got
    return None


def softmax_element(st: Rows, j: int):
    """s_j = exp(d_j) / D by intervals, D enclosed by the row's dd sum."""
    d = _point(st.dh[j], st.dl[j])
    r = st.row[j]
    return _ziv_element(lambda ctx: iv_exp(ctx, ctx.make_mpf((d, d))) / enclosure(ctx, st.d_sum, r))


def log_softmax_element(st: Rows, j: int):
    """y_j = d_j - log1p(R) by intervals, R enclosed by the row's dd sum (at least 0)."""
    d = _point(st.dh[j], st.dl[j])
    r = st.row[j]

    others = (st.row == r) & ~st.is_k
    floor = fzero
    if others.any():  # R >= e^d for its largest other term d (< 0): 2^(floor(d log2 e) - 2) bounds it below
        d_other = float(np.max(st.dh[others]))
        # MPZ_ONE: a raw mpf's mantissa is an mpz under mpmath's gmpy2 backend
        floor_exp = int(math.floor(d_other * 1.4426950408889634 * (1 + 2.0 ** -40))) - 2
        floor = (0, MPZ_ONE, floor_exp, 1)

    def fn(ctx):
        big_r = enclosure(ctx, st.r_sum, r)
        lo, hi = big_r._mpi_
        if lo[0] == 1 or lo[1] == 0:  # a lower end <= 0: R is at least the floor (0 for one entry)
            big_r = ctx.make_mpf((floor, hi))
        return iv_add_exact(ctx, d, -iv_log1p(ctx, big_r))

    return _ziv_element(fn)
