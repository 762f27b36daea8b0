"""The glue between an op's certified formula and its exact path: evaluate the formula chunk by chunk,
certify each element, and report which elements the exact path must still take.

A fast formula is a function of float64 input arrays (one chunk of the elements that are neither
special nor routed) returning a `Fast`: a DD for the result, plus elements it decides without the DD
(`decided`, with their float32 and float64 roundings: overflow to inf, underflow to a signed zero,
a saturated 1) and elements whose exact result is zero (`zero`: the caller gives them the sign its
IEEE formula has, the convention of the exact path). Chunks of 16384 elements keep every temporary in
cache: the same formula over a million elements at once runs several times slower on page faults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD

CHUNK = 16384


@dataclass
class Fast:
    dd: DD
    decided: np.ndarray | None = None
    v32: np.ndarray | None = None
    v64: np.ndarray | None = None
    zero: np.ndarray | None = None


def decided_values(shape, pairs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """(mask, v32, v64) from [(mask, float32 values, float64 values), ...]; later pairs win."""
    mask = np.zeros(shape, bool)
    v32 = np.zeros(shape, np.float32)
    v64 = np.zeros(shape)
    for m, a32, a64 in pairs:
        m = np.broadcast_to(m, shape)
        mask |= m
        v32 = np.where(m, np.asarray(a32, np.float32), v32)
        v64 = np.where(m, a64, v64)
    return mask, v32, v64


def evaluate(formula: Callable[..., Fast], arrays: Sequence[np.ndarray], idx: np.ndarray):
    """Run `formula` on the elements idx of the flat float64 `arrays`.

    Returns (v32, v64, done, zero) over idx: done where the certificate or the formula decided the
    element (v32, v64 hold its roundings), zero where its exact result is zero (sign still to give).
    """
    m = idx.size
    v32, v64 = np.zeros(m, np.float32), np.zeros(m)
    done, zero = np.zeros(m, bool), np.zeros(m, bool)
    with np.errstate(all="ignore"):
        for start in range(0, m, CHUNK):
            part = idx[start:start + CHUNK]
            sl = slice(start, start + part.size)
            out = formula(*[a[part] for a in arrays])
            c32, c64, ok = certify(out.dd)
            if out.decided is not None:
                c32 = np.where(out.decided, out.v32, c32)
                c64 = np.where(out.decided, out.v64, c64)
                ok = ok | out.decided
            if out.zero is not None:
                zero[sl] = out.zero
                ok = ok & ~out.zero
            v32[sl], v64[sl], done[sl] = c32, c64, ok
    return v32, v64, done, zero


def _grid_round(m: DD, n: np.ndarray, top: np.ndarray):
    """(v64, ok) for values 2^n m below 2^-1000 (2^(top-1) <= |2^n m_hi| < 2^top): the float64 rounding
    on that binade's grid, quantum Q = 2^max(top - 53, -1074) (the subnormal grid below 2^-1022).

    y = 2^n m / Q is an exact scaling of the dd (y < 2^53 stays normal); RN64(2^n m) = Q RN_int(y).
    With N the integer nearest y_hi + y_lo (rint(y_hi), moved by one where y_lo decides) and
    f = (y_hi - N) + y_lo (y_hi - N is exact), the true y lies within |f| + rad
    of N, so N is its nearest integer when (|f| + rad)(1 + 2^-50) < 1/2 (the factor covers f's one
    rounding). For a normal binade the true value must also stay in it: y_hi - rad > 2^52 (an N of 2^53
    is 2^top, which the next binade's coarser grid also rounds to). N Q is then exact."""
    q_exp = np.maximum(top - 53, -1074)
    y = m.ldexp(n - q_exp, check=False)
    big_n = np.rint(y.hi)
    big_n = big_n + np.rint((y.hi - big_n) + y.lo)  # y_hi may be a half-integer that lo decides
    f = (y.hi - big_n) + y.lo
    ay = np.abs(y.hi)
    in_binade = (q_exp == -1074) | (ay - y.rad > 2.0 ** 52)
    ok = ~m.bad & np.isfinite(y.hi) & ((np.abs(f) + y.rad) * (1 + 2.0 ** -50) < 0.5) & (ay <= 2.0 ** 53) & in_binade
    return np.ldexp(np.where(ok, big_n, 0.0), np.where(ok, q_exp, 0).astype(np.int32)), ok


def scaled_finish(m: DD, n: np.ndarray):
    """The value 2^n m as a final DD (for certify, no further arithmetic) where 2^n m_hi lies in
    [2^-1000, 2^1024), and the elements it decides outside: a true value of at least 2^1024 overflows
    both formats (+-inf); one below 2^-1000 is a signed zero in float32 (it is far under 2^-150) and is
    rounded on its float64 grid by _grid_round (0 below 2^-1076). Both need m's sign certain
    and rad < 2^-20 |m_hi|, so the true value is within a factor 1 +- 2^-20 of 2^n m_hi.

    Returns (dd, decided, v32, v64): elements neither inside nor decided stay undecided.
    """
    _, ex = np.frexp(m.hi)
    top = ex.astype(np.int64) + n  # 2^(top-1) <= |2^n m_hi| < 2^top
    sure = ~m.bad & np.isfinite(m.hi) & (np.abs(m.hi) * 2.0 ** -20 > m.rad) & (m.hi != 0)
    inside = sure & (top - 1 >= -1000) & (top <= 1024)
    over = sure & (top - 1 >= 1025)
    under = sure & (top <= -1076)
    low = sure & ~under & (top - 1 < -1000)
    neg = np.signbit(m.hi)
    sub64, sub_ok = _grid_round(m, np.where(low, n, 0), np.where(low, top, 0))
    sub64 = np.where(neg, -np.abs(sub64), np.abs(sub64))  # a zero keeps the value's sign
    dd = m.ldexp(np.where(inside, n, 0), check=False)
    dd.bad = dd.bad | ~inside
    inf = np.where(neg, -np.inf, np.inf)
    z = np.where(neg, -0.0, 0.0)
    decided, v32, v64 = decided_values(m.hi.shape, [(over, inf, inf), (under, z, z), (low & sub_ok, z, sub64)])
    return dd, decided, v32, v64
