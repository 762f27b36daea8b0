"""Certified fast paths for the normalisation core shared by layer_norm and batch_norm (statistics
along the last axis of rows [R, n]), forward and VJP, in double-double with running error radii.

Per group of n finite float32 values: S = sum x (sums.row_sums_dd, exact when its radius is 0),
D_i = n x_i - S (n x_i is exact in float64 for n < 2^29; TwoSum and one DWPlusFP: the only rounding is
S's low part's), W = n^2 (var + eps) = sum D_i^2 / n + n^2 eps (positive terms), xhat_i = D_i / sqrt(W),
rstd = n / sqrt(W) (the exact path's notation). Then
- forward y_i = xhat_i gamma_i + beta_i; where D_i = 0 or gamma_i = 0 the result is beta_i exactly
  (a zero takes the exact path's sign: -0 only when xhat gamma is a negative zero and beta is -0);
- dx_i = (n h_i - P - D_i T / W) / sqrt(W) with h = g gamma (exact products; n h_i by two_prod),
  P = sum h, T = sum h_i D_i. It is +0 exactly when h is constant over the group (n h_i = P and
  T = P/n sum D = 0), or when n h_i = P and D_i = 0 exactly;
- dgamma = sum of g xhat over each parameter's elements, dbeta = sum of g (exact sums).
Every element a certificate leaves is returned undecided: the caller evaluates it exactly.
"""

from __future__ import annotations

import numpy as np

from conformance.references.fast import sums as fast_sums
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, scattered_sum, two_prod

CHUNK = 16384


def _concat(parts: list[DD]) -> DD:
    return DD(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("hi", "lo", "rad", "bad")))


def _map(fn, count: int) -> DD:
    if count == 0:
        z = np.zeros(0)
        return DD(z, z.copy(), z.copy(), np.zeros(0, bool))
    return _concat([fn(slice(s, min(s + CHUNK, count))) for s in range(0, count, CHUNK)])


def _certify_all(x: DD):
    out = [certify(x[s:s + CHUNK]) for s in range(0, x.hi.size, CHUNK)]
    if not out:
        return np.zeros(0, np.float32), np.zeros(0), np.zeros(0, bool)
    return tuple(np.concatenate([o[i] for o in out]) for i in range(3))


def _grid(flat: DD, shape) -> DD:
    return DD(*(np.reshape(getattr(flat, f), shape) for f in ("hi", "lo", "rad", "bad")))


class Stats:
    """The dd statistics of the finite groups of rows [R, n] (module docstring); flat per-element
    arrays over the elements of finite rows (positions `idx`, rows `row`)."""

    def __init__(self, rows: np.ndarray, eps32: float):
        rows = np.asarray(rows, dtype=np.float64)  # float32 arithmetic would creep in otherwise (NEP 50)
        r, n = rows.shape
        self.shape = rows.shape
        self.finite = np.all(np.isfinite(rows), axis=1)
        self.n = n
        with np.errstate(all="ignore"):
            x = np.where(self.finite[:, None], rows, 0.0)
            self.s = fast_sums.row_sums_dd(x)
            self.idx = np.flatnonzero(np.broadcast_to(self.finite[:, None], rows.shape))
            self.row = self.idx // n
            xf = x.reshape(-1)[self.idx]
            nx = float(n) * xf
            self.d = _map(lambda sl: DD(nx[sl]) - self.s[self.row[sl]], self.idx.size)
            s_exact = (self.s.rad == 0)[self.row]
            self.d_zero = s_exact & (nx == self.s.hi[self.row]) & (self.s.lo[self.row] == 0)  # D_i = 0 exactly
            sq = _map(lambda sl: self.d[sl].square(), self.idx.size)
            q = self._row_sum(sq)
            self.w = (q / DD(np.full(r, float(n)))).add_fp(np.full(r, float(n) * float(n) * eps32))
            self.root = self.w.sqrt()
            self.xhat = _map(lambda sl: self.d[sl] / self.root[self.row[sl]], self.idx.size)

    def _row_sum(self, terms: DD) -> DD:
        return scattered_sum(terms, self.idx, self.shape, axis=1)


def forward(st: Stats, gam: np.ndarray, bet: np.ndarray):
    """(value32, exact64, done, xhat64) on the elements of finite rows with finite gamma and beta."""
    gm = gam.reshape(-1)[st.idx].astype(np.float64)
    bt = bet.reshape(-1)[st.idx].astype(np.float64)
    with np.errstate(all="ignore"):
        y = _map(lambda sl: (st.xhat[sl].mul_fp(gm[sl])).add_fp(bt[sl]), st.idx.size)
        v32, v64, done = _certify_all(y)
        plain = st.d_zero | (gm == 0)  # y = beta exactly
        t_neg = (st.d.hi < 0) != np.signbit(gm)
        neg0 = t_neg & np.signbit(bt)
        beta_v = np.where(bt == 0, np.where(neg0, -0.0, 0.0), bt)
        v32 = np.where(plain, beta_v.astype(np.float32), v32)
        v64 = np.where(plain, beta_v, v64)
        done = (done | plain) & np.isfinite(gm) & np.isfinite(bt)
    return v32, v64, done, st.xhat.hi


def vjp_dx(st: Stats, gam: np.ndarray, g: np.ndarray):
    """(value32, exact64, done, zero) of dx on the elements of finite rows with finite g and gamma."""
    r, n = st.shape
    gm = gam.reshape(-1)[st.idx].astype(np.float64)
    gv = g.reshape(-1)[st.idx].astype(np.float64)
    with np.errstate(all="ignore"):
        h = gv * gm  # exact: two float32
        hgrid = np.zeros(r * n)
        hgrid[st.idx] = h
        hgrid = hgrid.reshape(r, n)
        p = fast_sums.row_sums_dd(hgrid)
        t = st._row_sum(_map(lambda sl: st.d[sl].mul_fp(h[sl]), st.idx.size))
        t_over_w = t / st.w
        # n h_i by two_prod (h has 48 bits: n h is not a float64 in general)
        num = _map(lambda sl: (DD(h[sl]).mul_fp(float(n)) - p[st.row[sl]]) - st.d[sl] * t_over_w[st.row[sl]],
                   st.idx.size)
        dx = _map(lambda sl: num[sl] / st.root[st.row[sl]], st.idx.size)
        v32, v64, done = _certify_all(dx)
        hmax = np.max(np.where(st.finite[:, None], hgrid, -np.inf), axis=1)
        hmin = np.min(np.where(st.finite[:, None], hgrid, np.inf), axis=1)
        p_exact = (p.rad == 0)[st.row]
        nh_hi, nh_lo = two_prod(h, float(n))
        a_zero = p_exact & (nh_hi == p.hi[st.row]) & (nh_lo == p.lo[st.row])  # n h_i = P exactly
        zero = (hmax == hmin)[st.row] | (a_zero & st.d_zero)
        ok = np.isfinite(gv) & np.isfinite(gm)
    return v32, v64, done & ok & ~zero, zero & ok


def dgamma_terms(st: Stats, g: np.ndarray) -> DD:
    """g xhat per element of the finite rows (exact g times the xhat dd)."""
    gv = g.reshape(-1)[st.idx].astype(np.float64)
    return _map(lambda sl: st.xhat[sl].mul_fp(gv[sl]), st.idx.size)


def label_sums(terms: DD, st: Stats, by_row: bool) -> DD:
    """Sums of per-element terms (on the finite rows) by parameter: by row (batch_norm's channels)
    or by column (layer_norm's features)."""
    return scattered_sum(terms, st.idx, st.shape, axis=1 if by_row else 0)

