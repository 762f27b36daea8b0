"""Certified fast path for scaled_dot_product_attention on one batch entry with finite used data:
q [Lq, d], k [Lk, d], v [Lk, dv], participation mask [Lq, Lk], scale (float32), in double-double.

Scores s_ij = scale (q_i . k_j): float32 products are exact in float64 and each dot product is the
two-level TwoSum cascade of sums.py (exact when its second-level errors vanish, else within its
radius), times scale by DWTimesFP1. Per query row: m = the largest participating score's hi (any shift
gives the same probabilities, this one is exact), e_ij = exp(s_ij - m) = 2^n M kept scaled,
D_i = sum_j e_ij (positive terms), P_ij = 2^n (M / D_i); an unscaled P (bounded where it is below the dd
domain) enters the sums. Then, with radii carried through every operation:
- forward out_ik = sum_j P_ij v_jk; a column whose participating v are all zero gives a zero, -0 only
  when every one of them is -0 (the exact path's rule);
- VJP: dP_ij = g_i . v_j (cascade), c_i = sum_l P_il dP_il, dS_ij = P_ij (dP_ij - c_i) (scaled),
  dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij g_i. A query row whose
  g is zero or whose participating v rows are all equal has dP constant over its keys, hence dS = 0
  exactly there (the exact path's Lindemann criterion in its simplest cases); outputs whose every
  term vanishes that way are +0, and dv is a zero with the -0 rule where every attending g is zero.
Where dP_ij - c_i cancels (a probability near 1 leaves it tiny: |B| <= 2^64 rad) B_ij is recomputed as
sum_l P_il (dP_ij - dP_il), in which the l = j term vanishes and nothing else cancels. Sums over scaled
terms (dq, dk, dv) are scaled by their largest exponent; a score below e^-4096 keeps only a bound
(2^-5910), good for sums and single signs, never for weighing such terms against each other: an output
made only of them is left undecided. Every output a certificate cannot decide makes the whole batch
entry go to the exact path.
"""

from __future__ import annotations

import numpy as np

from conformance.references.fast import ddmath
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, pairwise_sum, two_sum, where
from conformance.references.fast.elementwise import scaled_finish
from conformance.references.fast.sums import _cascade, fsum_dd_rows

_TINY_EXP = -955
_FAR = -4096.0
_FAR_EXP = -5910  # an exponent bound for e^d, d < -4096


def _dots(a: np.ndarray, b: np.ndarray) -> DD:
    """DD dot products a_i . b_j for all pairs: a [P, c], b [Q, c] -> [P, Q] (cascade over c)."""
    p, c = a.shape
    q = b.shape[0]
    if c == 0:
        z = np.zeros((p, q))
        return DD(z, z.copy())
    prods = (a[:, None, :] * b[None, :, :]).reshape(p * q, c)  # exact float64 products
    if p * q <= c:   # few long rows: one fsum pair per row beats c vector steps of the cascade
        return DD(*(np.reshape(f, (p, q)) for f in fsum_dd_rows(prods)))
    s, cc, c2, err = _cascade(prods) if c > 1 else (prods[:, 0], np.zeros(p * q), np.zeros(p * q), np.zeros(p * q))
    hi, lo = two_sum(s, cc)
    out = DD(hi, lo) + DD(c2, np.zeros_like(c2), err) if np.any(c2) else DD(hi, lo)
    return DD(*(np.reshape(getattr(out, f), (p, q)) for f in ("hi", "lo", "rad", "bad")))


def _unscaled(q: DD, n: np.ndarray) -> DD:
    tiny = n < _TINY_EXP
    v = q.ldexp(np.where(tiny, 0, n))
    bound = np.maximum(np.ldexp(np.abs(q.hi) * 4, np.maximum(n, -1200).astype(np.int32)), 2.0 ** -1074)
    return DD(np.where(tiny, 0.0, v.hi), np.where(tiny, 0.0, v.lo), np.where(tiny, bound, v.rad),
              np.where(tiny, q.bad, v.bad))


def _masked(x: DD, part: np.ndarray) -> DD:
    z = np.zeros_like(x.hi)
    return DD(np.where(part, x.hi, z), np.where(part, x.lo, z), np.where(part, x.rad, z), x.bad & part)


def _sum_over(x: DD, axis: int) -> DD:
    return pairwise_sum(x, axis=axis)


def _certify_grid(x: DD, n: np.ndarray | None = None):
    shape = x.hi.shape
    flat = DD(*(np.reshape(getattr(x, f), -1) for f in ("hi", "lo", "rad", "bad")))
    if n is None:
        v32, v64, ok = certify(flat)
    else:
        dd, dec, d32, d64 = scaled_finish(flat, np.reshape(n, -1))
        v32, v64, ok = certify(dd)
        v32, v64, ok = np.where(dec, d32, v32), np.where(dec, d64, v64), ok | dec
    return v32.reshape(shape), v64.reshape(shape), ok.reshape(shape)


class Probs:
    """Scores, the per-row sums and the probabilities of one batch entry (module docstring)."""

    def __init__(self, q, k, part, sc: float):
        self.part = part
        s = _dots(q, k).mul_fp(float(sc))
        with np.errstate(all="ignore"):
            m = np.max(np.where(part, s.hi, -np.inf), axis=1)
            m = np.where(np.isfinite(m), m, 0.0)
            d = s - m[:, None]
            far = d.hi < _FAR
            n, mm = ddmath.exp_parts(DD(np.where(far, _FAR, d.hi), np.where(far, 0.0, d.lo), d.rad, d.bad))
            # beyond e^-4096 = 2^-5909.4 only a bound is kept: 2^-5910 (m = 1) is at least the value
            n = np.where(far, _FAR_EXP, n)
            mm = where(far, DD(np.ones_like(d.hi)), mm)
            self.far = far & part
            e = _masked(_unscaled(mm, n), part)
            self.d_sum = _sum_over(e, 1)
            self.p_q = mm / self.d_sum[:, None]
            self.p_n = n
            self.p = _masked(_unscaled(self.p_q, n), part)


def forward(q, k, v, part, sc, pr: Probs | None = None):
    """(value32, exact64, done) of out [Lq, dv] for finite, already-masked data."""
    pr = Probs(q, k, part, sc) if pr is None else pr
    lq, dv = part.shape[0], v.shape[1]
    with np.errstate(all="ignore"):
        shape = (lq, part.shape[1], dv)
        terms = DD(*(np.broadcast_to(getattr(pr.p, f)[:, :, None], shape) for f in ("hi", "lo", "rad", "bad")))
        prod = terms.mul_fp(np.broadcast_to(v[None, :, :], terms.hi.shape))
        out = _sum_over(prod, 1)
        v32, v64, ok = _certify_grid(out)
        used = part[:, :, None]
        zero_col = np.all(~used | (v[None, :, :] == 0), axis=1)
        neg0 = np.all(~used | ((v[None, :, :] == 0) & np.signbit(v[None, :, :])), axis=1)
        rows_used = part.any(axis=1)[:, None]
        zero = zero_col & rows_used
        v32 = np.where(zero, np.where(neg0, np.float32(-0.0), np.float32(0.0)), v32)
        v64 = np.where(zero, np.where(neg0, -0.0, 0.0), v64)
        blocked = ~rows_used  # fully blocked rows: +0
        v32 = np.where(blocked, np.float32(0.0), v32)
        v64 = np.where(blocked, 0.0, v64)
    return v32, v64, ok | zero | blocked


def _scaled_contract(mant: DD, expo: np.ndarray, live: np.ndarray, far: np.ndarray, data: np.ndarray,
                     axis: int):
    """sum over `axis` of 2^expo mant * data (mant, expo, live [Lq, Lk]; data [Lk, c] for axis 1,
    [Lq, c] for axis 0), as (DD [out, c], exponent [out, c]): each output is scaled by the largest
    exponent among its live terms, the others shifted down exactly (or bounded below the domain)."""
    e = np.max(np.where(live, expo, -(1 << 30)), axis=axis)
    e = np.where(e < -(1 << 29), 0, e)
    shift = expo - (e[:, None] if axis == 1 else e[None, :])
    w = _masked(_unscaled(mant, np.where(live, shift, 0)), live)
    c = data.shape[1]
    lq, lk = live.shape
    wb = DD(*(np.broadcast_to(getattr(w, f)[:, :, None], (lq, lk, c)) for f in ("hi", "lo", "rad", "bad")))
    db = np.broadcast_to(data[None, :, :] if axis == 1 else data[:, None, :], wb.hi.shape)
    out = _sum_over(wb.mul_fp(db), axis)
    # terms only bounded (beyond e^-4096) cannot be weighed against each other: an output with no other
    # live term is left undecided
    only_far = ~np.any(live & ~far, axis=axis) & np.any(live, axis=axis)
    out.bad = out.bad | only_far[:, None]
    return out, np.broadcast_to(e[:, None], out.hi.shape)


def vjp(q, k, v, g, part, sc, pr: Probs | None = None):
    """[(value32, exact64, done) of dq, dk, dv] for finite, already-masked data."""
    pr = Probs(q, k, part, sc) if pr is None else pr
    lq, lk = part.shape
    d = q.shape[1]
    with np.errstate(all="ignore"):
        dp = _dots(g, v)  # [Lq, Lk]
        c = _sum_over(_masked(pr.p * dp, part), 1)
        b = dp - c[:, None]
        ds_q = pr.p_q * b  # dS = 2^ds_n ds_q
        ds_n = pr.p_n.copy()
        # rows where dS vanishes exactly: g_i = 0, or every participating v row equal
        g_zero = np.all(g == 0, axis=1)
        first = np.argmax(part, axis=1)
        v_same = np.array([bool(np.all(v[part[i]] == v[first[i]])) if part[i].any() else True for i in range(lq)])
        flat_row = g_zero | v_same
        live_ds = part & ~flat_row[:, None]
        # where dP_ij - c_i cancels (a probability near 1 leaves it tiny), recompute B_ij in the form
        # sum_l P_il (dP_ij - dP_il): the l = j term vanishes and nothing else cancels; O(Lk) each
        weak = live_ds & ~(np.abs(b.hi) > 2.0 ** 64 * b.rad)  # B known to 2^-64 relative, or recomputed
        for i, j in zip(*np.nonzero(weak)):
            ls = np.flatnonzero(part[i])
            diff = DD(np.full(ls.size, dp.hi[i, j]), np.full(ls.size, dp.lo[i, j]), np.full(ls.size, dp.rad[i, j])) \
                - DD(dp.hi[i, ls], dp.lo[i, ls], dp.rad[i, ls])
            exact_zero = (ls == j) | ((dp.hi[i, ls] == dp.hi[i, j]) & (dp.lo[i, ls] == dp.lo[i, j])
                                      & (dp.rad[i, ls] == 0) & (dp.rad[i, j] == 0))
            terms = DD(pr.p_q.hi[i, ls], pr.p_q.lo[i, ls], pr.p_q.rad[i, ls], pr.p_q.bad[i, ls]) * diff
            e = int(np.max(np.where(~exact_zero, pr.p_n[i, ls], -(1 << 30))))
            if e < -(1 << 29):
                continue  # every difference is exactly zero: B = 0 (the zero tests above miss it)
            if not np.any(~exact_zero & ~pr.far[i, ls]):
                continue  # only bounded terms: B stays as it was (undecided unless certified)
            bsum = pairwise_sum(_masked(_unscaled(terms, np.where(~exact_zero, pr.p_n[i, ls] - e, 0)), ~exact_zero))
            prod = DD(pr.p_q.hi[i, j], pr.p_q.lo[i, j], pr.p_q.rad[i, j], pr.p_q.bad[i, j]) * bsum
            for f in ("hi", "lo", "rad", "bad"):
                getattr(ds_q, f)[i, j] = getattr(prod, f)
            ds_n[i, j] = pr.p_n[i, j] + e
        dq, dq_e = _scaled_contract(ds_q, ds_n, live_ds, pr.far, k, 1)
        dk, dk_e = _scaled_contract(ds_q, ds_n, live_ds, pr.far, q, 0)
        dvv, dv_e = _scaled_contract(pr.p_q, pr.p_n, part, pr.far, g, 0)
        dq, dk = dq.mul_fp(float(sc)), dk.mul_fp(float(sc))
        out = []
        for arr, e, zero in ((dq, dq_e, np.broadcast_to(flat_row[:, None], (lq, d))),
                             (dk, dk_e, np.broadcast_to(np.all(~part | flat_row[:, None], axis=0)[:, None], (lk, d)))):
            a32, a64, ok = _certify_grid(arr, e)
            a32 = np.where(zero, np.float32(0.0), a32)
            a64 = np.where(zero, 0.0, a64)
            out.append((a32, a64, ok | zero))
        a32, a64, ok = _certify_grid(dvv, dv_e)
        attended = part.any(axis=0)
        g_zero_col = np.all(~part[:, :, None] | (g[:, None, :] == 0), axis=0)  # [Lk, dv]
        g_neg0 = np.all(~part[:, :, None] | ((g[:, None, :] == 0) & np.signbit(g[:, None, :])), axis=0)
        zero = g_zero_col | ~attended[:, None]
        neg0 = g_neg0 & attended[:, None]
        a32 = np.where(zero, np.where(neg0, np.float32(-0.0), np.float32(0.0)), a32)
        a64 = np.where(zero, np.where(neg0, -0.0, 0.0), a64)
        out.append((a32, a64, ok | zero))
    return out
