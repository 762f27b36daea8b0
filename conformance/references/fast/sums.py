"""Exact and certified sums of float64 terms (float32 values, or exact float64 products of two float32):
row sums for the reductions and dot products for the matrix products, chosen by shape.

Long rows: math.fsum returns the float64 nearest the exact sum S (Shewchuk's expansions, correctly
rounded, ties to even), so it is `exact`. Rounding hi = fsum(terms) again to float32 is the correct
rounding of S unless hi is itself a float32 rounding boundary: every boundary is a float64 and
rounding is monotone, so S and hi lie on the same side of each boundary, and only a tie needs the side
S lies on; then lo = fsum(terms + [-hi]) is the float64 nearest S - hi, which has its sign (and is
zero exactly when S = hi). With a divisor n (means), S / n is enclosed by (hi + lo) / n: S - hi - lo is
at most half an ulp of lo, and the DD division is charged as in dd.py; the certificate decides it.

Many short rows: a vectorised cascade of error-free transformations, term by term (the idea of
Ogita, Rump and Oishi's SumK, "Accurate sum and dot product", SIAM J. Sci. Comput. 26(6), 2005):
s, e = TwoSum(s, x_k) and c, f = TwoSum(c, e), so S = s + c + sum f_k exactly; the f_k are summed in
float64 into c2, off by at most gamma_n sum |f_k| (gamma_k = k u / (1 - k u)). When every f_k is zero
S = s + c exactly, and (s + c) renormalised by TwoSum is rounded directly; otherwise s + c + c2 is
certified with that radius.

An element a fast path cannot decide is left to the caller's exact integer path (ok = False).
Exact zero sums are reported as zero (the caller gives the IEEE sign: -0 only when every term is -0).
"""

from __future__ import annotations

import math

import numpy as np

from conformance import rounding
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, U, two_prod, two_sum

_SHORT = 64  # rows shorter than this (and numerous) take the vectorised compensated sum


def _fsum_rows(x: np.ndarray, divisor: int):
    """(v32, v64, ok, zero) of each row's sum / divisor by math.fsum (the module docstring's
    long-row argument); the per-element roundings and the DD certificate run once over all rows
    (they are elementwise: the same bits as row by row, without a NumPy call per row)."""
    rows = x.tolist()
    hi = np.array([math.fsum(row) for row in rows], np.float64).reshape(len(rows))
    zero = hi == 0
    lo = np.zeros_like(hi)
    if divisor == 1:
        # only a tie needs the residual's sign: lo = 0 elsewhere rounds hi alone
        for i in np.flatnonzero(rounding.is_f32_tie(hi) & ~zero).tolist():
            lo[i] = math.fsum(rows[i] + [-hi[i]])
        v32, v64 = rounding.round_f64_pair_to_f32(hi, lo), hi.copy()
        ok = np.ones(hi.shape, bool)
    else:
        rad = np.zeros_like(hi)
        for i in np.flatnonzero(~zero).tolist():
            lo[i] = low = math.fsum(rows[i] + [-hi[i]])
            # half an ulp of lo bounds S - hi - lo
            rad[i] = math.ldexp(1.0, math.frexp(low)[1] - 53) if low else 0.0
        q = DD(hi, lo, rad) / DD(np.full(hi.shape, float(divisor)))
        v32, v64, ok = certify(q)
    v32, v64 = np.where(zero, np.float32(0), v32), np.where(zero, 0.0, v64)
    return v32.astype(np.float32), v64, ok | zero, zero


def fsum_dd_rows(x: np.ndarray):
    """(hi, lo, rad) per row of x [R, n] (finite float64 terms): hi = fsum(row), the float64
    nearest its exact sum S, lo = fsum(row + [-hi]), the float64 nearest S - hi, and rad half an
    ulp of lo, so |S - (hi + lo)| <= rad (the module docstring's long-row argument); rad is 0
    where S = hi + lo exactly (a third fsum says so), as the cascade reports exact sums."""
    r = x.shape[0]
    hi, lo, rad = np.zeros(r), np.zeros(r), np.zeros(r)
    for i, row in enumerate(x.tolist()):
        hi[i] = h = math.fsum(row)
        lo[i] = low = math.fsum(row + [-h])
        if low and math.fsum(row + [-h, -low]):
            rad[i] = math.ldexp(1.0, math.frexp(low)[1] - 53)
    return hi, lo, rad


def _cascade(x: np.ndarray):
    """The two-level TwoSum cascade over the last axis of x [R, n]: (s, c, c2, err) with
    |S - (s + c + c2)| <= err, err = 0 when every second-level error vanished (module docstring)."""
    s = x[:, 0].copy()
    c = np.zeros_like(s)
    c2 = np.zeros_like(s)
    f_abs = np.zeros_like(s)
    for k in range(1, x.shape[1]):
        s, e = two_sum(s, x[:, k])
        c, f = two_sum(c, e)
        c2 += f
        f_abs += np.abs(f)
    n = x.shape[1]
    gamma = n * U / (1 - n * U) * (1 + 2.0 ** -40)
    return s, c, c2, gamma * f_abs * (1 + n * 2.0 ** -52)


def sum_rows(x: np.ndarray, divisor: int = 1):
    """Row sums of x [R, n] (finite float64 terms) divided by `divisor`.

    Returns (v32, v64, ok, zero): the correct roundings where ok; zero marks exact zero sums.
    """
    r, n = x.shape
    v32, v64 = np.zeros(r, np.float32), np.zeros(r)
    ok, zero = np.zeros(r, bool), np.zeros(r, bool)
    if n == 0:
        return v32, v64, np.ones(r, bool), np.ones(r, bool)
    if n < _SHORT and r > 16:
        with np.errstate(all="ignore"):
            s, c, c2, err = _cascade(x)
            exact = c2 == 0
            hi, lo = two_sum(s, c)
            dd = DD(hi, lo) + DD(c2, np.zeros_like(c2), err)  # adds nothing where c2 = 0 (exact)
            if divisor != 1:
                dd = dd / DD(np.full(r, float(divisor)))
            v32, v64, ok = certify(dd)
            zero = exact & (hi == 0)
            if divisor == 1:  # an exact S = hi + lo rounds directly, ties included
                v32 = np.where(exact, rounding.round_f64_pair_to_f32(hi, lo), v32)
                v64 = np.where(exact, hi, v64)
                ok = ok | exact
        return v32, v64, ok | zero, zero
    return _fsum_rows(x, divisor)


def dot_rows(a: np.ndarray, b: np.ndarray):
    """Dot products of the rows of a [P, K] with the rows of b [P, K] (float64 holding float32 values:
    every product is exact in float64). Returns (v32, v64, ok, zero, all_neg0) per row; all_neg0
    marks rows whose products are all -0 (the sign of an exact zero result)."""
    p, k = a.shape
    with np.errstate(all="ignore"):
        prods = a * b
    all_neg0 = np.all((prods == 0) & np.signbit(prods), axis=1) & (k > 0)
    v32, v64, ok, zero = sum_rows(prods, 1)
    return v32, v64, ok, zero, all_neg0


def squared_difference_terms(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Float64 terms whose exact sum is sum_i (p_i - t_i)^2 (p, t float32 values as float64, finite).

    p - t = dh + dl exactly (TwoSum), (dh + dl)^2 = dh^2 + 2 dh dl + dl^2, and each square or product
    is split exactly by two_prod (every factor is at least 2^-149 in magnitude or zero, so no product
    underflows). Zero terms are dropped."""
    dh, dl = two_sum(p, -t)
    parts = [*two_prod(dh, dh)]
    if np.any(dl != 0):
        parts += [*two_prod(2 * dh, dl), *two_prod(dl, dl)]
    terms = np.concatenate(parts)
    return terms[terms != 0]


def mean_of_terms(terms: np.ndarray, n: int):
    """(v32, v64, ok) of sum(terms) / n, the sum by fsum (see the module docstring)."""
    v32, v64, ok, zero = _fsum_rows(terms.reshape(1, -1), n if n > 1 else 1)
    return (np.float32(0), 0.0, True) if zero[0] else (v32[0], v64[0], bool(ok[0]))


def row_sums_dd(x: np.ndarray) -> DD:
    """Row sums of x [R, n] (finite float64 terms) as DDs: exact (rad = 0) whenever the cascade's
    second-level errors vanish or fsum's residual is exactly representable (lo = fsum of the residual,
    rad = 0 when that residual's own residual is 0, else half an ulp of lo)."""
    r, n = x.shape
    if n == 0:
        z = np.zeros(r)
        return DD(z, z.copy(), z.copy(), np.zeros(r, bool))
    if n < _SHORT and r > 16:
        with np.errstate(all="ignore"):
            s, c, c2, err = _cascade(x)
            hi, lo = two_sum(s, c)
            return DD(hi, lo) + DD(c2, np.zeros_like(c2), err) if np.any(c2) else DD(hi, lo)
    hi, lo, rad = np.zeros(r), np.zeros(r), np.zeros(r)
    for i in range(r):
        terms = x[i].tolist()
        hi[i] = math.fsum(terms)
        lo[i] = math.fsum(terms + [-hi[i]])
        if lo[i] and math.fsum(terms + [-hi[i], -lo[i]]):
            rad[i] = math.ldexp(1.0, math.frexp(lo[i])[1] - 53)
    return DD(hi, lo, rad)
