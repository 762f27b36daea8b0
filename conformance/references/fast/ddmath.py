"""Elementary functions in double-double with rigorous error radii: exp (as 2^n times a DD, so callers
can scale products before leaving the dd domain), expm1, log, log1p and sin/cos of float32 arguments.

Every function takes DDs (or float32 values as float64) and returns DDs whose radius adds three
parts: the input's radius carried through the function's derivative, the truncation and float64
evaluation error of the polynomial (a constant derived in each docstring, charged relative to the
result or to the reduced argument), and the dd operations' own charges (dd.py). Tables are computed
once with mpmath at 200 bits and stored as (hi, lo) pairs: |value - hi - lo| <= 2^-106 |value|.
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np

from conformance.references.fast.dd import DD, RAD_FLOOR, const, fast_two_sum, two_prod, two_sum, where

_EXP_BITS = 10                      # exp table: 2^(j/1024)
_EXP_N = 1 << _EXP_BITS
_LOG_N = 4096                       # log table: c_j ~ 4096 / j for f in [1/sqrt2, sqrt2)
_TRIG_N = 256                       # sin/cos table at j / 256, |j| <= 202
_CHUNKS = 11                        # 24-bit chunks of 2/pi: 264 bits, enough for every float32
TABLE_ERR = 2.0 ** -105             # relative radius charged for a table entry
EXP_ARG_MAX = 4096.0                # |x| beyond this: exp_parts marks the element bad


def _pair(v) -> tuple[float, float]:
    hi = float(v)
    return hi, float(v - hi)


@functools.lru_cache(maxsize=None)
def _tables() -> dict:
    with mpmath.workprec(200):
        exp_t = np.array([_pair(mpmath.power(2, mpmath.mpf(j) / _EXP_N)) for j in range(_EXP_N)])
        ln2n = mpmath.log(2) / _EXP_N
        l1 = float(mpmath.ldexp(mpmath.floor(mpmath.ldexp(ln2n, 40)), -40))  # 30 significant bits
        l2 = float(ln2n - l1)
        l3 = float(ln2n - l1 - l2)
        js = np.arange(2896, 5794)
        c = np.array([float(mpmath.mpf(_LOG_N) / int(j)) for j in js])
        nlc = np.array([_pair(-mpmath.log(mpmath.mpf(float(v)))) for v in c])
        trig = np.array([_pair(mpmath.sin(mpmath.mpf(j) / _TRIG_N)) + _pair(mpmath.cos(mpmath.mpf(j) / _TRIG_N))
                         for j in range(203)])
    with mpmath.workprec(24 * _CHUNKS + 64):  # every chunk bit of 2/pi must be right
        two_over_pi = 2 / mpmath.pi
        chunks = np.array([float(int(mpmath.floor(mpmath.ldexp(two_over_pi, 24 * (i + 1)))) % (1 << 24))
                           for i in range(_CHUNKS)])
    return {"exp": exp_t, "l": (l1, l2, l3), "inv": _EXP_N / float(mpmath.log(2)), "log_j0": 2896,
            "log_c": c, "log_nlc": nlc, "trig": trig, "chunks": chunks}


def _table_dd(pairs: np.ndarray, idx: np.ndarray, exact_at=None) -> DD:
    hi, lo = pairs[idx, 0], pairs[idx, 1]
    rad = np.abs(hi) * TABLE_ERR
    if exact_at is not None:
        rad = np.where(exact_at, 0.0, rad)
    return DD(hi, lo, rad, np.zeros(hi.shape, bool))


# ---------------------------------------------------------------- exp


def _reduce_exp(x: DD):
    """(k, r) with x = k ln2/1024 + r: r a DD, |r| <= 2^-11.5 (k = rint(1024 x / ln2)).

    ln2/1024 = L1 + L2 + L3 with L1 of 30 bits, so k L1 is exact (|k| < 2^23); x_h - k L1 is exact
    (Sterbenz when k != 0); k L2 is exact by two_prod. The remaining float64 operations on small terms
    (k L3, x_l - k L3, e1 - e and their sum; |e1| <= 2^-64.5, |e|, |k L3| <= 2^-71, |x_l| <= u |x_h|)
    err by at most u (2 |k L3| + |x_l| + |e1| + |e| + |tail|) <= 2^-105 |x_h| + 2^-116, and
    |ln2/1024 - L1 - L2 - L3| < 2^-146, times |k| < 2^22.5: the radius adds 2^-105 |x_h| + 2^-115.
    For k = 0 every step is exact (r = x).
    """
    t = _tables()
    l1, l2, l3 = t["l"]
    bad = x.bad | ~(np.abs(x.hi) <= EXP_ARG_MAX) | ~(x.rad <= 2.0 ** -20)
    xh = np.where(bad, 0.0, x.hi)
    xl = np.where(bad, 0.0, x.lo)
    k = np.rint(xh * t["inv"])
    tt = xh - k * l1
    p, e = two_prod(k, l2)
    s1, e1 = two_sum(tt, -p)
    tail = (e1 - e) + (xl - k * l3)
    rh, rl = two_sum(s1, tail)
    # k = 0: r = x exactly (every step above is exact then)
    rad = np.where(bad, np.inf, x.rad) + np.where(k == 0, 0.0, 2.0 ** -105 * np.abs(xh) + 2.0 ** -115)
    return k.astype(np.int64), DD(rh, rl, rad, bad)


def _expm1_core(r: DD) -> DD:
    """expm1(r) for |r| <= 2^-11.5 as r + r^2/2 + r^3 P(r), P = 1/6 + r/24 + ... + r^4/5040.

    r^2 = rh^2 (two_prod, exact) + 2 rh rl (+ rl^2 < 2^-128 |r|); truncation after r^7/5040:
    below r^8/40320 <= 2^-95 |r|. P in float64 Horner errs by < 3u P, r^3 by < 2u: together
    < u r^3 / 2 <= 2^-77 |r|; the float64 sum of the small terms (|c3| <= 2^-36, the rest smaller) errs
    by < 4u (|c3| + 2^-64 |r|) <= 2^-76 |r|. Charged: 2^-75 |rh| plus the carried radius r.rad (1.02
    times: e^r (e^rad - 1) <= 1.0004 * 1.01 rad for |r| <= 2^-11.5 and rad <= 2^-20).
    """
    rh, rl = r.hi, r.lo
    ph, pl = two_prod(rh, rh)
    poly = 1 / 6 + rh * (1 / 24 + rh * (1 / 120 + rh * (1 / 720 + rh * (1 / 5040))))
    c3 = (rh * (rh * rh)) * poly
    bh, be = two_sum(rh, 0.5 * ph)
    small = be + (rl + ((0.5 * pl + rh * rl) + c3))
    zh, zl = fast_two_sum(bh, small)
    rad = r.rad * 1.02 + 2.0 ** -75 * np.abs(rh) + RAD_FLOOR
    return DD(zh, zl, rad, r.bad)


def exp_parts(x: DD) -> tuple[np.ndarray, DD]:
    """(n, m) with exp(x) in 2^n [m - rad, m + rad], m = 2^(j/1024) (1 + expm1(r)) in [1, 2).

    x = (1024 n + j) ln2/1024 + r. Relative charges: the table's 2^-105, expm1's (above, relative to
    1 + expm1(r) >= 0.9996) and the input's radius times e^rad - 1 <= 1.01 rad. Bad where |x| > 4096 or
    the input radius exceeds 2^-20.
    """
    k, r = _reduce_exp(x)
    j = k & (_EXP_N - 1)
    n = k >> _EXP_BITS
    e1 = _expm1_core(r)
    w = e1.add_fp(1.0)
    tj = _table_dd(_tables()["exp"], j, exact_at=j == 0)
    return n, tj * w


def exp(x: DD) -> DD:
    """exp(x) as one DD (bad where it leaves the dd domain)."""
    n, m = exp_parts(x)
    return m.ldexp(n)


def expm1(x: DD) -> DD:
    """expm1(x) = (2^n T_j - 1) + 2^n T_j expm1(r), for |x| <= 700.

    2^n T_j - 1 is a DWPlusFP of an exact scaling; for k = 0 it is exactly 0 and the result is
    expm1(r) itself (relative accuracy near 0). Otherwise |x| >= ln2/2048 and the two terms do not
    cancel by more than a factor 3 (|2^n T_j - 1| >= 2 |2^n T_j expm1(r)| there), so the dd charges
    stay relative to the result. The input radius enters 2^n T_j expm1(r) through expm1_core.
    """
    k, r = _reduce_exp(x)
    j = k & (_EXP_N - 1)
    n = k >> _EXP_BITS
    tj = _table_dd(_tables()["exp"], j, exact_at=j == 0).ldexp(n)
    e1 = _expm1_core(r)
    return tj.add_fp(-1.0) + tj * e1


# ---------------------------------------------------------------- log


def _log1p_small(z: DD) -> DD:
    """log1p(z) for |z| <= 2^-12.4 as z - z^2/2 + z^3 Q(z), Q = 1/3 - z/4 + ... - z^5/8 (series to z^8).

    Truncation: < |z|^9/9 <= 2^-114 |z|. z^2 = zh^2 + 2 zh zl as a dd (two_prod; zl^2 dropped, <
    2^-130 |z|). Q in float64 errs by < 3u Q, zh^3 by < 2u, so z^3 Q errs by < u |z|^3 <= 2^-78 |z|;
    the last additions (DWPlusFP, AccurateDWPlusDW) are charged by dd.py. Charged here: 2^-77 |zh| and
    the carried radius times 1 / (1 - |z| - rad) <= 1.01.
    """
    zh, zl = z.hi, z.lo
    qh, ql = two_prod(zh, zh)
    ql = ql + 2 * zh * zl
    sq = DD(0.5 * qh, 0.5 * ql, np.zeros_like(qh), z.bad)
    poly = 1 / 3 + zh * (-1 / 4 + zh * (1 / 5 + zh * (-1 / 6 + zh * (1 / 7 + zh * (-1 / 8)))))
    c3 = (zh * (zh * zh)) * poly
    core = DD(zh, zl, np.zeros_like(zh), z.bad) - sq
    out = core.add_fp(c3)
    out.rad = out.rad + z.rad * 1.01 + 2.0 ** -77 * np.abs(zh)
    return out


def log(w: DD) -> DD:
    """log(w) for w > rad, w inside the dd domain: e ln2 - log(c_j) + log1p(z).

    w_h = f 2^e with f in [1/sqrt2, sqrt2); j = rint(4096 f), c_j = fl(4096/j), z = w c_j 2^-e - 1
    (two_prod: exact up to w_l c_j, a DWPlusFP), |z| <= 2^-12.4. The three parts add without
    cancelling by more than a factor 2 (e = 0, j = 4096 gives c_j = 1, log c_j = 0 exactly, and the
    result is log1p(z) alone). The input radius enters as rad / (w - rad), absolutely.
    """
    t = _tables()
    bad = w.bad | ~(w.hi > w.rad * (1 + 2.0 ** -40))
    wh = np.where(bad, 1.0, w.hi)
    wl = np.where(bad, 0.0, w.lo)
    f, e = np.frexp(wh)
    low = f < 0.7071067811865476
    f = np.where(low, 2 * f, f)
    e = np.where(low, e - 1, e)
    fl = np.ldexp(wl, -e)
    j = np.rint(f * _LOG_N).astype(np.int64)
    idx = j - t["log_j0"]
    c = t["log_c"][idx]
    ph, pl = two_prod(f, c)
    z0 = ph - 1.0  # exact: ph in [0.9998, 1.0002]
    zh, zl = two_sum(z0, pl + fl * c)
    z = DD(zh, zl, (np.abs(fl * c) + np.abs(pl)) * 2.0 ** -52, bad)  # the rounding of pl + fl c
    lp = _log1p_small(z)
    nlc = _table_dd(t["log_nlc"], idx, exact_at=j == _LOG_N)
    out = nlc + lp
    e_ln2 = const(lambda mp: mp.log(2), np.shape(e)).mul_fp(e.astype(np.float64))
    out = e_ln2 + out
    w_low = np.where(bad, 1.0, wh * (1 - 2.0 ** -50) - w.rad)
    out.rad = out.rad + np.where(bad, np.inf, w.rad / w_low)
    out.bad = out.bad | bad
    return out


def log1p(x: DD) -> DD:
    """log1p(x) for x >= 0 (x > rad): the series below 2^-12.5, else log(1 + x) (then log1p >= 2^-12.6,
    so log's absolute charges stay relative)."""
    small = np.abs(x.hi) <= 2.0 ** -12.5
    xs = where(small, x, DD(np.zeros_like(x.hi)))
    xb = where(small, DD(np.ones_like(x.hi)), x)
    return where(small, _log1p_small(xs), log(xb.add_fp(1.0)))


# ---------------------------------------------------------------- sin and cos of float32 arguments


def _reduce_trig(ax: np.ndarray):
    """(q, f) with |x| = (4 N + q + f) pi/2 for some integer N: q in 0..3, f a DD, |f| <= 0.5 + 2^-30.

    Payne-Hanek with 2/pi in 24-bit chunks C_i (value C_i 2^-24(i+1)): |x| = M 2^E (M < 2^24), so every
    term M C_i 2^(E - 24(i+1)) is exact in float64 and those with exponent >= 2 are multiples of 4
    (dropped). Seven terms from the first kept one (scale s0 = 2^(E - 24(i0+1)) <= 2) follow; the rest sum
    below 2^48 s0 2^-168 (1 + 2^-23) < 2^-119 s0.
    The first two kept terms are reduced mod 4 exactly and summed exactly (two_sum); q comes from the
    nearest integer to that sum plus the next two terms, subtracted exactly; the remaining five terms
    are DWPlusFP additions (charged by dd.py against partial sums within 2^-21 of f).
    """
    chunks = _tables()["chunks"]
    fr, ex = np.frexp(ax)
    m = np.ldexp(fr, 24)  # an integer below 2^24 (float32 significand)
    e = ex.astype(np.int64) - 24
    i0 = np.maximum(0, (e - 26) // 24 + 1)
    scale = np.ldexp(1.0, (e - 24 * (i0 + 1)).astype(np.int32))  # >= 2^-197: every term stays normal
    terms = [(m * chunks[i0 + s]) * (scale * 2.0 ** (-24 * s)) for s in range(7)]
    t0 = terms[0] - 4 * np.floor(terms[0] / 4)
    t1 = terms[1] - 4 * np.floor(terms[1] / 4)
    sh, sl = two_sum(t0, t1)
    sh = sh - 4 * np.floor(sh / 4)  # exact: the result is representable with sh's quantum
    nq = np.rint(sh + (terms[2] + terms[3]))
    fh, fl = two_sum(sh - nq, sl)
    f = DD(fh, fl, 2.0 ** -119 * scale, np.zeros(fh.shape, bool))  # the dropped tail
    for term in terms[2:]:
        f = f.add_fp(term)
    q = nq.astype(np.int64) & 3
    return q, f


def _sincos_small(t: DD) -> tuple[DD, DD]:
    """(sin t, cos t) for |t| <= 2^-9 (plus a hair).

    sin t = t - t^3 S(t^2), S = 1/6 - t^2/120 + t^4/5040 - t^6/362880: truncation < t^11/11! <
    2^-120 |t|; float64 S and th^3 err by < 3u, 2u: < u t^3/2 <= 2^-72 |t|, charged 2^-71 |th|.
    cos t = 1 - t^2/2 - t^2 C(t^2), C = -t^2/24 + t^4/720 - t^6/40320 + t^8/3628800: t^2 a dd
    (two_prod + 2 th tl), t^2 C in float64 (|t^2 C| <= 2^-40.5, error < 2^-91), truncation < 2^-100:
    charged 2^-90. Both carry t's radius (|sin'|, |cos'| <= 1).
    """
    th, tl = t.hi, t.lo
    t2 = th * th
    s_poly = 1 / 6 + t2 * (-1 / 120 + t2 * (1 / 5040 + t2 * (-1 / 362880)))
    sin_t = DD(th, tl, np.zeros_like(th), t.bad).add_fp(-(th * t2) * s_poly)
    sin_t.rad = sin_t.rad + t.rad + 2.0 ** -71 * np.abs(th)
    qh, ql = two_prod(th, th)
    ql = ql + 2 * th * tl
    c_poly = t2 * (-1 / 24 + t2 * (1 / 720 + t2 * (-1 / 40320 + t2 * (1 / 3628800))))
    half = DD(-0.5 * qh, -0.5 * ql, np.zeros_like(qh), t.bad).add_fp(1.0)
    cos_t = half.add_fp(-t2 * c_poly)
    cos_t.rad = cos_t.rad + t.rad + 2.0 ** -90
    return sin_t, cos_t


def _sincos_tiny(x: np.ndarray) -> tuple[DD, DD]:
    """(sin x, cos x) for |x| < 2^-30 by their series with exact leading terms: sin x = x - x^3/6 + r,
    |r| < |x|^5/119, with x^3 = two_prod(x^2, x) exact (x^2 of a float32 is); cos x = 1 - x^2/2 + r',
    |r'| < x^4/23. They keep, e.g., g sin x distinct from g x when that is a float32 midpoint."""
    x2 = x * x
    c3h, c3l = two_prod(x2, x)
    sixth = DD(c3h, c3l) * const(lambda mp: -mp.mpf(1) / 6, x.shape)
    sin_x = sixth.add_fp(x)
    sin_x.rad = sin_x.rad + np.abs(x) ** 5 / 119
    cos_x = DD(-0.5 * x2).add_fp(np.ones_like(x))
    cos_x.rad = cos_x.rad + x2 * x2 / 23
    return sin_x, cos_x


def sincos_f32(x: np.ndarray) -> tuple[DD, DD]:
    """(sin x, cos x) for finite float32 values x (given as float64)."""
    x = np.asarray(x, dtype=np.float64)
    tiny = np.abs(x) < 2.0 ** -30
    if tiny.any():
        s_big, c_big = _sincos_reduced(np.where(tiny, 1.0, x))
        s_small, c_small = _sincos_tiny(np.where(tiny, x, 0.0))
        return where(tiny, s_small, s_big), where(tiny, c_small, c_big)
    return _sincos_reduced(x)


def _sincos_reduced(x: np.ndarray) -> tuple[DD, DD]:
    """sincos_f32 through Payne-Hanek reduction and the table."""
    ax = np.abs(x)
    q, f = _reduce_trig(ax)
    r = f * const(lambda mp: mp.pi / 2, f.hi.shape)
    j = np.rint(r.hi * _TRIG_N).astype(np.int64)
    aj = np.abs(j)
    tr = _tables()["trig"]
    sgn = np.where(j < 0, -1.0, 1.0)
    s_j = _table_dd(tr[:, 0:2], aj, exact_at=aj == 0)
    s_j = DD(s_j.hi * sgn, s_j.lo * sgn, s_j.rad, s_j.bad)
    c_j = _table_dd(tr[:, 2:4], aj, exact_at=aj == 0)
    th, tl = two_sum(r.hi - j / _TRIG_N, r.lo)  # r.hi - j/256 is exact (Sterbenz, or j = 0)
    sin_t, cos_t = _sincos_small(DD(th, tl, r.rad, r.bad))
    sr = s_j * cos_t + c_j * sin_t
    cr = c_j * cos_t - s_j * sin_t
    # sin(q pi/2 + r) = (sin r, cos r, -sin r, -cos r)[q], cos(q pi/2 + r) = (cos r, -sin r, -cos r, sin r)[q];
    # sin is odd in x. Sign flips are exact.
    odd = (q & 1) == 1
    sin_x, cos_x = where(odd, cr, sr), where(odd, sr, cr)
    s_sign = np.where((q >= 2) != np.signbit(x), -1.0, 1.0)
    c_sign = np.where((q == 1) | (q == 2), -1.0, 1.0)
    return (DD(sin_x.hi * s_sign, sin_x.lo * s_sign, sin_x.rad, sin_x.bad),
            DD(cos_x.hi * c_sign, cos_x.lo * c_sign, cos_x.rad, cos_x.bad))
