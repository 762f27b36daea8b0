"""Double-double (dd) arithmetic on NumPy float64 arrays, each value carrying a rigorous error radius.

A `DD` holds `hi`, `lo` (float64 arrays with hi = fl(hi + lo), so |lo| <= ulp(hi)/2), `rad` and `bad`:
the exact value the computation stands for lies in [hi + lo - rad, hi + lo + rad] wherever `bad` is
False. `bad` marks elements that left the domain the bounds are proved on (below).

Primitives (u = 2^-53), exact when no overflow or underflow occurs:
- two_sum (Knuth) and fast_two_sum (Dekker, needs |a| >= |b| or a = 0): s + e = a + b exactly.
- two_prod (Dekker, Veltkamp splitting by 2^27 + 1; no FMA in NumPy): p + e = a * b exactly when
  |a|, |b| < 2^996 and the product's exponent stays above -969.
Double-word operations, with the relative error bounds of Joldes, Muller and Popescu, "Tight and
rigorous error bounds for basic building blocks of double-word arithmetic", ACM TOMS 44(2), 2017:
DWPlusFP 2u^2, AccurateDWPlusDW 3u^2 + 13u^3, DWTimesFP1 1.5u^2 + 4u^3, DWTimesDW1 7u^2, DWDivDW2
15u^2 + 56u^3; and SQRTDWtoDW 25/8 u^2 (Lefevre, Louvet, Muller, Picot, Rideau, 2023). Every one of
them is below OP_ERR = 2^-100 = 64 u^2, the bound charged here for each operation (a factor 4 of slack).

Domain. The relative bounds hold when every nonzero hi of an operand and a result lies in
[2^-960, 2^960] (DOMAIN_LO, DOMAIN_HI): no operation overflows, Veltkamp's split stays exact
(|a| < 2^996), and any underflow inside an operation (a lo part or an error term below 2^-1022) costs
at most a few 2^-1075 absolutely, below 2^-113 relatively: inside OP_ERR's slack. Below 2^-960 the
relative bound may fail, but the absolute error of an operation stays a few units of 2^-1075, which
the RAD_FLOOR = 2^-1060 every operation that may underflow adds covers; so only results above DOMAIN_HI (or not finite)
are marked `bad`, and certify refuses final values below 2^-1000. Inputs here are float32 values,
products of a few of them or exponentials of bounded arguments, which the callers keep below the top.

Radius propagation (x, y exact values, x^, y^ the dd values, z^ the computed result):
- add:  |(x + y) - z^| <= rx + ry + min(OP_ERR |x^ + y^|, the roundings actually made; see _tight)
- mul:  |xy - z^| <= |x^| ry + |y^| rx + rx ry + min(OP_ERR |x^ y^|, likewise)
- div:  |x/y - z^| <= (rx + |x^/y^| ry) / (|y^| - ry) + min(OP_ERR |x^/y^|, the roundings made)
        (bad unless |y^| > ry)
- sqrt: |sqrt(x) - z^| <= rx / (sqrt(x^) + sqrt(x^ - rx)) + OP_ERR sqrt(x^) (bad unless x^ > rx)
Magnitudes |x^| are taken as |hi| * MAG (MAG = 1 + 2^-50 covers |lo| <= 2^-53 |hi|). The radius itself
is computed in float64 from nonnegative terms in a few operations, each rounding by at most u, so
multiplying by SLACK = 1 + 2^-40 and adding RAD_FLOOR = 2^-1060 (the worst absolute rounding of a
subnormal radius term) keeps it an upper bound. Operations that provably rounded nothing (additions,
whose underflow is exact; products of exact parts) add no floor, so exact values keep radius 0.
"""

from __future__ import annotations

import numpy as np

U = 2.0 ** -53
OP_ERR = 2.0 ** -100
MAG = 1.0 + 2.0 ** -50
SLACK = 1.0 + 2.0 ** -40
RAD_FLOOR = 2.0 ** -1060
DOMAIN_LO = 2.0 ** -960
DOMAIN_HI = 2.0 ** 960
_SPLITTER = 134217729.0  # 2^27 + 1


# ---------------------------------------------------------------- error-free transformations


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth; no condition on |a|, |b|)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    """(s, e) with s + e = a + b exactly, for |a| >= |b| or a = 0 (Dekker)."""
    s = a + b
    return s, b - (s - a)


def split(a):
    """Veltkamp: a = hi + lo with hi, lo of at most 26 significant bits (|a| < 2^996)."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """(p, e) with p = fl(a b) and p + e = a b exactly (Dekker, no underflow or overflow)."""
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


# ---------------------------------------------------------------- the DD record


def _out_of_domain(hi):
    # only overflow is fatal: below 2^-960 the relative bounds fail, but every operation's absolute
    # error there is a few units of 2^-1075, which RAD_FLOOR (added by every operation that may round) covers, and the
    # radius carries it through later operations like any other error
    return ~(np.isfinite(hi) & (np.abs(hi) <= DOMAIN_HI))


class DD:
    """A double-double array with an error radius; see the module docstring for the invariants."""

    __slots__ = ("hi", "lo", "rad", "bad")

    def __init__(self, hi, lo=None, rad=None, bad=None):
        self.hi = np.asarray(hi, dtype=np.float64)
        self.lo = np.zeros_like(self.hi) if lo is None else np.asarray(lo, dtype=np.float64)
        self.rad = np.zeros_like(self.hi) if rad is None else np.asarray(rad, dtype=np.float64)
        self.bad = _out_of_domain(self.hi) if bad is None else np.asarray(bad, dtype=bool)

    @classmethod
    def exact(cls, x) -> "DD":
        """A float64 array taken exactly (lo = rad = 0)."""
        return cls(x)

    def __getitem__(self, idx) -> "DD":
        return DD(self.hi[idx], self.lo[idx], self.rad[idx], self.bad[idx])

    def mag(self):
        """An upper bound on |hi + lo|."""
        return np.abs(self.hi) * MAG

    def _finish(self, zh, zl, rad, bad, check=True, floor=RAD_FLOOR) -> "DD":
        # additions skip the domain test: a sum that underflows is exact (IEEE), and one that overflows
        # leaves an inf or nan that every later test (and certify) sees
        return DD(zh, zl, rad * SLACK + floor, (bad | _out_of_domain(zh)) if check else bad)

    # -- negation, exact scaling, absolute value

    def __neg__(self) -> "DD":
        return DD(-self.hi, -self.lo, self.rad, self.bad)

    def ldexp(self, n, check=True) -> "DD":
        """2^n times self (n an int array). Exact while hi stays a normal float64: a lo part pushed
        below 2^-1022 loses at most 2^-1075, covered by RAD_FLOOR. check=False keeps the domain flags
        as they are (a final result, no further dd arithmetic, may lie anywhere in the normal range)."""
        n = np.asarray(n).astype(np.int32)
        hi, lo = np.ldexp(self.hi, n), np.ldexp(self.lo, n)
        lost = ((lo != 0) & (np.abs(lo) < 2.0 ** -1022)) | ((hi != 0) & (np.abs(hi) < 2.0 ** -1022))
        rad = np.ldexp(self.rad, n) + np.where(lost, RAD_FLOOR, 0.0)  # exact unless a part went subnormal
        return DD(hi, lo, rad, (self.bad | _out_of_domain(hi)) if check else self.bad)

    def abs(self) -> "DD":
        neg = np.signbit(self.hi)
        return DD(np.where(neg, -self.hi, self.hi), np.where(neg, -self.lo, self.lo), self.rad, self.bad)

    # -- additions

    def add_fp(self, b) -> "DD":
        """self + b, b an exact float64 array (DWPlusFP, last step by TwoSum: see _tight)."""
        b = np.asarray(b, dtype=np.float64)
        sh, sl = two_sum(self.hi, b)
        v = self.lo + sl
        zh, zl = two_sum(sh, v)
        return self._finish(zh, zl, self.rad + _tight(zh, _rounded(v, self.lo, sl)), self.bad, check=False,
                            floor=0.0)

    def __add__(self, other) -> "DD":
        if not isinstance(other, DD):
            return self.add_fp(other)
        sh, sl = two_sum(self.hi, other.hi)
        th, tl = two_sum(self.lo, other.lo)
        c = sl + th
        vh, vl = fast_two_sum(sh, c)
        w = tl + vl
        zh, zl = two_sum(vh, w)
        rounded = _rounded(c, sl, th) + _rounded(w, tl, vl)
        return self._finish(zh, zl, self.rad + other.rad + _tight(zh, rounded), self.bad | other.bad, check=False,
                            floor=0.0)

    def __sub__(self, other) -> "DD":
        return self + (-other if isinstance(other, DD) else -np.asarray(other, dtype=np.float64))

    # -- products and quotients

    def mul_fp(self, b) -> "DD":
        """self * b, b an exact float64 array (DWTimesFP1, last step by TwoSum: see _tight)."""
        b = np.asarray(b, dtype=np.float64)
        ch, cl1 = two_prod(self.hi, b)
        cl2 = self.lo * b
        th, tl1 = fast_two_sum(ch, cl2)
        tl2 = tl1 + cl1
        zh, zl = two_sum(th, tl2)
        rounded = np.abs(cl2) + _rounded(tl2, tl1, cl1)
        rad = np.abs(b) * self.rad + _tight(zh, rounded)
        return self._finish(zh, zl, rad, self.bad | _out_of_domain(b), floor=_floor(zh, rounded))

    def __mul__(self, other) -> "DD":
        if not isinstance(other, DD):
            return self.mul_fp(other)
        ch, cl1 = two_prod(self.hi, other.hi)
        t1, t2 = self.hi * other.lo, self.lo * other.hi
        cl2 = t1 + t2
        cl3 = cl1 + cl2
        zh, zl = two_sum(ch, cl3)
        rounding = (np.abs(t1) + np.abs(t2) + _rounded(cl2, t1, t2) + _rounded(cl3, cl1, cl2)
                    + 2.0 ** 52 * np.abs(self.lo * other.lo))
        rad = self.mag() * other.rad + other.mag() * self.rad + self.rad * other.rad + _tight(zh, rounding)
        return self._finish(zh, zl, rad, self.bad | other.bad, floor=_floor(zh, rounding))

    def __truediv__(self, other) -> "DD":
        if not isinstance(other, DD):
            other = DD(other)
        th = self.hi / other.hi
        # r = y th by DWTimesFP1, inline to keep its rounding bound e_r
        ch, cl1 = two_prod(other.hi, th)
        cl2 = other.lo * th
        rh, rl1 = fast_two_sum(ch, cl2)
        rl2 = rl1 + cl1
        rh, rl = two_sum(rh, rl2)
        e_r = np.minimum(OP_ERR * np.abs(rh) * MAG, 2.0 ** -52 * (np.abs(cl2) + _rounded(rl2, rl1, cl1)))
        dl = self.lo - rl
        dh = self.hi - rh  # exact (Sterbenz: rh ~ self.hi)
        d = dh + dl
        tl = d / other.hi
        zh, zl = two_sum(th, tl)
        ylow = np.abs(other.hi) * (1 - 2.0 ** -50) - other.rad
        q = np.abs(zh) * MAG
        # the algorithm's own error, two ways: DWDivDW2's bound, or the roundings actually made
        # (r's, the two in d, tl's, and dividing by y_h instead of y: |d| |y_l| / (|y| |y_h|))
        made = ((e_r + 2.0 ** -52 * (_rounded(dl, self.lo, rl) + _rounded(d, dh, dl))) / ylow
                + np.abs(d) * np.abs(other.lo) / (ylow * np.abs(other.hi)) + 2.0 ** -52 * np.abs(tl)) * 1.01
        rad = (self.rad + q * other.rad) / ylow + np.minimum(OP_ERR * q, made)
        bad = self.bad | other.bad | ~(ylow > 0) | (other.hi == 0)
        return self._finish(zh, zl, np.where(bad, np.inf, rad), bad)

    def rdiv_fp(self, a) -> "DD":
        """a / self, a an exact float64 array."""
        return DD(a) / self

    def sqrt(self) -> "DD":
        """sqrt(self) for self > rad (SQRTDWtoDW; the square-root remainder xh - sh^2 is exact)."""
        sh = np.sqrt(self.hi)
        p, e = two_prod(sh, sh)
        rho = ((self.hi - p) - e) + self.lo
        zh, zl = fast_two_sum(sh, rho / (2 * sh))
        low = self.hi * (1 - 2.0 ** -50) - self.rad
        bad = self.bad | ~(low > 0)
        root = np.abs(zh) * MAG
        rad = self.rad / (np.sqrt(np.where(bad, 1.0, low)) * (1 - 2.0 ** -50)) + OP_ERR * root
        return self._finish(zh, zl, np.where(bad, np.inf, rad), bad)

    def square(self) -> "DD":
        return self * self


def _floor(zh, rounded):
    """RAD_FLOOR unless the product was exact: nothing rounded (an exact operand's lo = 0) and the
    two_prod error term representable (|z| >= 2^-960 or z = 0). Keeping exact results at radius 0 lets
    the certificate take an exact float32 tie as decided (ties to even)."""
    exact = (rounded == 0) & ((np.abs(zh) >= DOMAIN_LO) | (zh == 0))
    return np.where(exact, 0.0, RAD_FLOOR)


def _rounded(result, a, b):
    """|result| where result = fl(a + b) may have rounded: 0 when a or b is zero (then it is exact)."""
    return np.where((a == 0) | (b == 0), 0.0, np.abs(result))


def _tight(zh, rounded):
    """The rounding charge of an addition or product: the smaller of two valid bounds.

    OP_ERR |z| is the published bound of the algorithm (module docstring). With the last
    renormalisation done by TwoSum (exact whatever the magnitudes; it returns the same pair as the
    algorithm's Fast2Sum whenever that one is exact, which the published proofs establish), the only
    errors left are the few float64 roundings of the low-order terms, each at most u times its
    result: 2^-52 times `rounded` (their magnitudes; a dropped product lo * lo enters times 2^52)
    bounds them all. That is the sharper one when the low parts are small, e.g. an exact value plus
    a tiny one, whose side of a rounding boundary only this bound can tell.
    """
    return np.minimum(OP_ERR * np.abs(zh) * MAG, 2.0 ** -52 * rounded)


def const(make, shape=()) -> DD:
    """A constant as a DD. `make` is a function of the mpmath module returning the constant (it runs at
    300 bits, so the constant is right to far more than 106 bits: pass lambda mp: mp.log(2), never an
    mpf computed at the ambient precision). hi = its nearest float64, lo = the float64 nearest the
    rest: |value - hi - lo| <= 2^-53 |lo| <= 2^-106 |value|; rad says 2^-105 |value|."""
    hi, lo = _const_pair(make)
    return DD(np.full(shape, hi), np.full(shape, lo), np.full(shape, abs(hi) * 2.0 ** -105))


_CONSTS: dict = {}


def _const_pair(make) -> tuple[float, float]:
    key = make.__code__.co_code, make.__code__.co_consts, make.__code__.co_names
    if key not in _CONSTS:
        import mpmath

        with mpmath.workprec(300):
            v = mpmath.mpf(make(mpmath))
            hi = float(v)
            _CONSTS[key] = (hi, float(v - hi))
    return _CONSTS[key]


def where(mask, a: DD, b: DD) -> DD:
    """Elementwise choice between two DDs (radius and domain flags follow the chosen side)."""
    return DD(np.where(mask, a.hi, b.hi), np.where(mask, a.lo, b.lo), np.where(mask, a.rad, b.rad),
              np.where(mask, a.bad, b.bad))


def pairwise_sum(x: DD, axis: int = -1) -> DD:
    """The sum of x along `axis` by a pairwise tree of AccurateDWPlusDW additions.

    Each addition charges OP_ERR times its own result, so the radius follows the tree's partial sums:
    at most rad_terms + ceil(log2 n) OP_ERR sum |terms| (MAG and SLACK aside). An empty axis sums to 0.
    """
    hi, lo, rad, bad = (np.moveaxis(a, axis, -1) for a in (x.hi, x.lo, x.rad, x.bad))
    acc = DD(hi, lo, rad, bad)
    if acc.hi.shape[-1] == 0:
        z = np.zeros(acc.hi.shape[:-1])
        return DD(z, z.copy(), z.copy(), np.zeros(z.shape, bool))
    while acc.hi.shape[-1] > 1:
        n = acc.hi.shape[-1]
        if n % 2:
            tail = acc[..., n - 1:]
            acc = acc[..., : n - 1]
            half = acc[..., 0::2] + acc[..., 1::2]
            acc = DD(np.concatenate([half.hi, tail.hi], -1), np.concatenate([half.lo, tail.lo], -1),
                     np.concatenate([half.rad, tail.rad], -1), np.concatenate([half.bad, tail.bad], -1))
        else:
            acc = acc[..., 0::2] + acc[..., 1::2]
    return acc[..., 0]


def scattered_sum(terms: DD, idx: np.ndarray, shape: tuple[int, int], axis: int) -> DD:
    """pairwise_sum along `axis` of an (r, n) grid that holds `terms` at the flat positions `idx`
    (the live entries) and exact zeros everywhere else."""
    r, n = shape
    full = [np.zeros(r * n) for _ in range(3)]
    bad = np.zeros(r * n, bool)
    for a, v in zip(full, (terms.hi, terms.lo, terms.rad)):
        a[idx] = v
    bad[idx] = terms.bad
    return pairwise_sum(DD(*(a.reshape(r, n) for a in full), bad.reshape(r, n)), axis=axis)
