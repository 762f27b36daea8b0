"""Error models of the accumulating 16-bit ops evaluated with every intermediate rounded to a
declared arithmetic format A (LowpKernel.accumulation: bfloat16, float16 or float64; float32 keeps
its own models, accumulate.py and the modules it dispatches to, which also allow float32
libraries' 4-ulp functions and Welford's variance), for inputs and outputs in a 16-bit storage
format S; A may differ from S (a float16 matmul accumulating in bfloat16). Here: the judge of such
declarations, the rules every model shares, and the models of sum, matmul, linear, softmax and
log_softmax; layer_norm and attention are in accumulate_rounded_norms.py.

The declaration (what the kernel is assumed to do): each input converted to A, rounded to nearest
(exact where A holds every value of S; a bfloat16 value past float16's range becomes an
infinity); each +, -, *, / and sqrt of values of A correctly rounded to A; exp, log and rsqrt
faithfully rounded, the DECLARED ASSUMPTION for the elementary functions: the result is one of
the two values of A around the exact one, so within 1 ulp of it, and exact where the exact result
is a value of A (exp(0) = 1, log(1) = 0); constants (n, 1/n, eps, 1/sqrt(d)) rounded to A; sums
in any order; the result rounded once to S at the end (nothing to round when A is S).

Rounding in A, u = 2^-p its unit roundoff, eta its least subnormal, N its least normal, OMEGA the
least magnitude that rounds to infinity: fl(x) = x (1 + delta) + e, |delta| <= u, |e| <= eta/2,
and e = 0 for a sum or difference of values of A (one that underflows is exact) and for results
of magnitude N or more. k roundings multiply a quantity by a factor in [(1 - u)^k, (1 + u)^k],
and in [(1 - u)^k, (1 - u)^-k] when divisions are among them: the bounds use these forms, valid
for every k, where Higham's gamma(k) = k u / (1 - k u) (Accuracy and Stability of Numerical
Algorithms, 2nd ed., sec. 3.1) needs k u < 1, which a bfloat16 accumulator fails from 256 terms.
Write g(k) = (1 + u)^k - 1 and h(k) = (1 - u)^-k - 1. A faithful function's result is within 2u
relative (an ulp at y is at most 2u |y|) plus eta absolute (an ulp in the subnormal range).

Judging. Each model gives an interval [lo, hi] that holds the value the evaluation in A produces,
before its rounding to S, for every order and form the model covers. Rounding to S is monotone, so
the kernel's result must lie in [fl_S(lo), fl_S(hi)] (an end past S's range: the infinity of its
sign is accepted; a finite result whose exact value rounds past S's range, while the interval
allows it, passes). Where an infinite input leaves the reference finite but the model's interval
undefined (a key whose score is -inf has weight 0 in attention), a finite result is held to the
op's overflow range (below). The models are evaluated in float64 from float64 values of the exact
quantities, then widened outward by 2^-30 relative (their own evaluation errors are below 2^-40
relative); where a model is centred on the float64 reference, that reference's own error bound
joins it (and again for the float64 statistics the model itself reads, whose errors are of the
same size: what a float64 declaration needs, its u being 2^-53).

Overflow. Where an intermediate may reach OMEGA (bounds on every intermediate's magnitude, per
element), the evaluation may give an infinity or NaN, and the bound holds only for runs in which
nothing overflowed. There NaN and either infinity are accepted (an infinity even where the float64
reference is NaN), and a finite result must lie in the op's overflow range (below, per op). An
input that converts to an infinity of A (a bfloat16 input of magnitude 65520 or more under
float16 accumulation) makes its row such a case.

Vacuous bounds. Where nothing overflows every bound below is finite. Where it exceeds the exact
result's magnitude (a relative bound above 1: a bfloat16 accumulator over a few hundred terms) a
result's sign is no longer checked, but its magnitude still is; softmax's interval keeps a
positive lower end ((1 - u)^(n - 1) > 0: a weight above the underflow threshold may not vanish)
and an upper end of (1 + u)^2 + eta/2, and log_softmax's upper end is 0.

- sum of n terms x_j: the converted terms x'_j are within c_j = |x'_j - x_j| of the inputs (0
  where A holds S's values); Higham's recursive-summation bound for any order, each term through
  at most n - 1 roundings: |s^ - sum x'| <= g(n - 1) sum |x'_j|. Error:
  sum c_j + g(n - 1) sum |x'_j|.
- matmul (k products a_t b_t per element) and linear (k products and a bias): a'b' - ab =
  (a' - a) b + a' (b' - b), so the conversions cost sum c_a |b| + |a'| c_b (+ c_bias); each
  product is rounded once and passes through at most k - 1 additions (k with a bias, first or
  last): g(k) sum |a'_t b'_t| (g(k + 1) (... + |bias'|) for linear), plus eta/2 per product
  (a product may underflow; the sums never add such an error, but carry the products' through
  their roundings: k eta/2 (1 + g(k))).
  Overflow range of these three: the bound itself (an infinity in a sum stays infinite or becomes
  NaN, so a finite result means nothing overflowed), except where an input converted to an
  infinity, whose result is never finite: no finite result passes there. NaN is accepted too
  where a product is an infinite input times a nonzero one that converted to 0 (a bfloat16 value
  below float16's least subnormal): the reference's infinity is A's inf * 0.
- softmax, over a row x of n values, m = max x, d_j = x_j - m, e_j = exp(d_j), S = sum e_j,
  y_i = e_i / S. The computed max is the max of the converted values, fl_A(m), within c_m of m.
  The difference fl(x'_j - m^) errs from d_j by at most Delta_j = c_j + c_m + u (|d_j| + c_j +
  c_m) (the conversions, then one rounding of a difference). exp of the rounded difference,
  faithful: e^_j in [L_j, U_j], L_j = max(0, exp(d_j - Delta_j)(1 - 2u) - eta),
  U_j = min(1, exp(d_j + Delta_j)(1 + 2u) + eta) (e^_j <= 1: the difference is <= 0), and an
  input of -inf gives 0 on both sides. The sum of the n non-negative terms in any order: in
  [(1 - u)^(n - 1) sum L, (1 + u)^(n - 1) sum U], and at least 1 (it holds exp(0) = 1 and never
  decreases as terms join). The quotient e^_i / s^, or e^_i times a rounded 1/s^ (two roundings):
  y^_i in [(1 - u)^2 L_i / s_hi - eta/2, (1 + u)^2 min(1, U_i / s_lo) + eta/2], and >= 0 (s^ holds
  e^_i, so e^_i / s^ <= 1). Overflow (the sum reaching OMEGA: n >= OMEGA, or a converted input):
  a finite result in [0, (1 + u)^2 + eta/2] (an infinite sum gives 0).
- log_softmax, y_i = d_i - L, L = log S. s^ as softmax's, in [s_lo, s_hi] with s_lo >= 1, so
  log s^ >= 0 and the faithful log L^ is in [(1 - 2u) log s_lo, (1 + 2u) log s_hi] (its result is
  0, or at least log(1 + 2u) > N: no subnormal). The output is the three terms x'_i, -m^, -L^
  summed in any order ((x_i - m) - L, or x_i - (m + L), or (x_i - L) - m): two roundings,
  g(2)(|x'_i| + |m^| + L^). Error: c_i + c_m + max(L_hi - L, L - L_lo) +
  g(2)(|x_i| + c_i + |m| + c_m + L_hi), and y^_i <= 0 (every order sums a value <= 0 with a
  monotone rounding), so the interval's upper end is min(0, y_i + error). Overflow (the row's sum,
  or a partial of the three terms, reaching OMEGA, or a converted input): a finite result <= 0
  (an overflowed partial gives -inf).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.lowp import accumulate_norms
from conformance.lowp.accumulate_terms import MARGIN
from conformance.lowp.formats import Format
from conformance.lowp.sweep import classify

WIDEN = 2.0 ** -30       # outward, relative: the float64 evaluation of a model


@dataclass(frozen=True)
class Bounds:
    """Where the evaluation in A lands, per output element, before its rounding to S."""
    lo: np.ndarray               # [lo, hi]: where nothing overflowed
    hi: np.ndarray
    may_overflow: np.ndarray     # an intermediate may reach A's overflow threshold
    lo_overflow: np.ndarray      # [lo_overflow, hi_overflow]: a finite result's range there
    hi_overflow: np.ndarray
    exact: np.ndarray            # the evaluation makes no error: a zero's sign is the contract's
    nan_ok: np.ndarray | None = None    # NaN accepted too (0 * inf: a term that may vanish in A)


class BoundUndefinedError(RuntimeError):
    """A model gave no bound where the reference is finite: a defect of this harness, not of
    the kernel (the bounds depend on the inputs alone, which the harness draws)."""


def grow(u: float, k) -> np.ndarray:
    """(1 + u)^k - 1: k roundings upwards, at most."""
    return np.expm1(np.asarray(k, dtype=np.float64) * np.log1p(u))


def shrink(u: float, k) -> np.ndarray:
    """(1 - u)^k: k roundings downwards, at least."""
    return np.exp(np.asarray(k, dtype=np.float64) * np.log1p(-u))


def grow_div(u: float, k) -> np.ndarray:
    """(1 - u)^-k - 1: k roundings, divisions among them, upwards at most."""
    return np.expm1(-np.asarray(k, dtype=np.float64) * np.log1p(-u))


def overflow_threshold(acc: Format) -> float:
    """The least magnitude that rounds to infinity in `acc` (float64's: infinity itself)."""
    with np.errstate(over="ignore"):
        return float(np.float64(acc.max_finite) + acc.ulp(acc.max_finite) / 2)


def converted(acc: Format, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the inputs rounded to acc, each one's conversion error: 0 where exact, infinite where a
    finite input overflows acc; infinities and NaN convert to themselves)."""
    with np.errstate(all="ignore"):
        xa = acc.round(x)
        return xa, np.where((xa == x) | ~np.isfinite(x), 0.0, np.abs(xa - x))


def finite_abs(a: np.ndarray) -> np.ndarray:
    """|a| with the infinities and NaN at 0: magnitudes of partial sums count finite terms (an
    infinite input's own infinity is the reference's business)."""
    return np.where(np.isfinite(a), np.abs(a), 0.0)


def widen(lo, hi) -> tuple[np.ndarray, np.ndarray]:
    return lo - np.abs(lo) * WIDEN, hi + np.abs(hi) * WIDEN


def inner_product_error(op: str, acc: Format, xs: list[np.ndarray]):
    """(error bound, absolute; a bound on every partial sum's magnitude; whether an input of the
    element converted to an infinity of acc; whether a product of the element is an infinity
    times a nonzero input converted to 0, NaN in acc) of sum, matmul or linear evaluated in
    acc."""
    u, tiny = acc.unit_roundoff, acc.min_subnormal
    with np.errstate(all="ignore"):
        if op == "sum":
            xa, c = converted(acc, xs[0])
            steps = max(xs[0].shape[-1] - 1, 0)
            err = np.sum(c, axis=-1) + grow(u, steps) * np.sum(np.abs(xa), axis=-1)
            partial = np.sum(finite_abs(xa), axis=-1) * (1 + grow(u, steps))
            return err, partial, np.any(np.isinf(c), axis=-1), np.zeros(err.shape, dtype=bool)
        (a, ca), (b, cb) = converted(acc, xs[0]), converted(acc, xs[1])
        k = xs[0].shape[1]
        if op == "matmul":
            conversion = ca @ finite_abs(xs[1]) + finite_abs(a) @ cb
            total, steps, partial = np.abs(a) @ np.abs(b), k, finite_abs(a) @ finite_abs(b)
            lost = (np.isinf(ca).astype(float) @ np.ones_like(b) +
                    np.ones_like(a) @ np.isinf(cb).astype(float)) > 0
            vanish = indicator(a, xs[0], True) @ indicator(b, xs[1], False) + \
                indicator(a, xs[0], False) @ indicator(b, xs[1], True) > 0
        else:
            bias, cbias = converted(acc, xs[2])
            conversion = ca @ finite_abs(xs[1]).T + finite_abs(a) @ cb.T + cbias
            total = np.abs(a) @ np.abs(b).T + np.abs(bias)
            steps, partial = k + 1, finite_abs(a) @ finite_abs(b).T + finite_abs(bias)
            lost = (np.isinf(ca).astype(float) @ np.ones_like(b).T +
                    np.ones_like(a) @ np.isinf(cb).astype(float).T + np.isinf(cbias)) > 0
            vanish = indicator(a, xs[0], True) @ indicator(b, xs[1], False).T + \
                indicator(a, xs[0], False) @ indicator(b, xs[1], True).T > 0
        # the products' underflow errors pass through the sums' roundings too
        err = conversion + grow(u, steps) * total + k * tiny / 2 * (1 + grow(u, steps))
        return err, partial * (1 + grow(u, steps)) + k * tiny, lost, vanish


def indicator(converted_x, x, zeroed: bool) -> np.ndarray:
    """1.0 where a nonzero input converted to 0 (zeroed), or where it is infinite (else)."""
    if zeroed:
        return ((converted_x == 0) & (x != 0)).astype(float)
    return np.isinf(x).astype(float)


def _inner_products(op: str, acc: Format, xs: list[np.ndarray], exact: np.ndarray) -> Bounds:
    err, partial, lost, vanish = inner_product_error(op, acc, xs)
    with np.errstate(all="ignore"):
        lo, hi = widen(exact - err - MARGIN * np.abs(exact), exact + err + MARGIN * np.abs(exact))
    # an input converted to an infinity leaves no finite result: an empty range there
    return Bounds(lo, hi, (partial >= overflow_threshold(acc)) | lost,
                  np.where(lost, np.inf, lo), np.where(lost, -np.inf, hi), err == 0, vanish)


def exp_terms(acc: Format, d: np.ndarray, delta: np.ndarray, gone: np.ndarray):
    """[L, U] of exp evaluated faithfully in acc at a rounded difference within delta of d (<= 0):
    exp(d -+ delta)(1 -+ 2u) -+ eta, inside [0, 1]; 0 on both sides where `gone` (exp(-inf))."""
    u, tiny = acc.unit_roundoff, acc.min_subnormal
    with np.errstate(all="ignore"):
        low = np.maximum(0.0, np.exp(d - delta) * (1 - 2 * u) - tiny)
        high = np.minimum(1.0, np.exp(d + delta) * (1 + 2 * u) + tiny)
    return np.where(gone, 0.0, low), np.where(gone, 0.0, high)


def positive_sum(acc: Format, low: np.ndarray, high: np.ndarray, axis: int = -1):
    """[s_lo, s_hi] of the sum, in any order in acc, of non-negative terms within [low, high],
    one of which is exactly 1 (a max-shifted exponential): s_lo >= 1."""
    u, n = acc.unit_roundoff, low.shape[axis]
    steps = max(n - 1, 0)
    s_lo = np.maximum(1.0, shrink(u, steps) * np.sum(low, axis=axis, keepdims=True))
    return s_lo, (1 + grow(u, steps)) * np.sum(high, axis=axis, keepdims=True)


def _softmax_terms(acc: Format, x: np.ndarray):
    """The max-shifted exponentials' pieces shared by softmax and log_softmax."""
    u = acc.unit_roundoff
    xa, c = converted(acc, x)
    m = np.max(x, axis=-1, keepdims=True)
    cm = converted(acc, m)[1]
    d = x - m
    delta = c + cm + u * (np.abs(d) + c + cm)
    gone = np.isneginf(x) & np.isfinite(m)
    e_lo, e_hi = exp_terms(acc, d, np.where(gone, 0.0, delta), gone)
    s_lo, s_hi = positive_sum(acc, e_lo, e_hi)
    lost = np.any(np.isinf(c), axis=-1, keepdims=True)
    return c, m, cm, e_lo, e_hi, s_lo, s_hi, lost


def _softmax(acc: Format, xs: list[np.ndarray], exact: np.ndarray) -> Bounds:
    u, tiny = acc.unit_roundoff, acc.min_subnormal
    x = xs[0]
    with np.errstate(all="ignore"):
        _, _, _, e_lo, e_hi, s_lo, s_hi, lost = _softmax_terms(acc, x)
        top = (1 + u) ** 2
        lo = np.maximum(0.0, shrink(u, 2) * e_lo / s_hi - tiny / 2)
        hi = top * np.minimum(1.0, e_hi / s_lo) + tiny / 2
        lo, hi = widen(lo, hi)
        overflow = np.broadcast_to(lost | (s_hi >= overflow_threshold(acc)), x.shape)
    return Bounds(lo, hi, overflow, np.zeros(x.shape), np.full(x.shape, top + tiny / 2),
                  np.zeros(x.shape, dtype=bool))


def _log_softmax(acc: Format, xs: list[np.ndarray], exact: np.ndarray) -> Bounds:
    u = acc.unit_roundoff
    x = xs[0]
    with np.errstate(all="ignore"):
        c, m, cm, e_lo, e_hi, s_lo, s_hi, lost = _softmax_terms(acc, x)
        y, err64 = accumulate_norms._log_softmax64(x)
        big_l = np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))
        l_lo, l_hi = (1 - 2 * u) * np.log(s_lo), (1 + 2 * u) * np.log(s_hi)
        # the three terms' magnitudes; an input of -inf gives -inf on both sides, no error
        gone = np.isneginf(x) & np.isfinite(m)
        reach = np.where(gone, 0.0, np.abs(x) + c + np.abs(m) + cm + l_hi)
        err = np.where(gone, 0.0, c + cm + np.maximum(l_hi - big_l, big_l - l_lo) +
                       grow(u, 2) * reach)
        lo, hi = widen(y - err - 2 * err64, y + err + 2 * err64)
        overflow = lost | (s_hi >= overflow_threshold(acc)) | \
            (reach * (1 + grow(u, 2)) >= overflow_threshold(acc))
    return Bounds(lo, np.minimum(hi, 0.0), np.broadcast_to(overflow, x.shape),
                  np.full(x.shape, -np.inf), np.zeros(x.shape), np.zeros(x.shape, dtype=bool))


OPS = ("sum", "matmul", "linear", "softmax", "log_softmax")   # layer_norm, attention: _norms


def bounds(op: str, acc: Format, xs: list[np.ndarray], exact: np.ndarray) -> Bounds:
    """The model of an op of OPS evaluated in `acc` at inputs `xs` (float64 values of the
    storage format); `exact` is the float64 reference."""
    if op in ("sum", "matmul", "linear"):
        return _inner_products(op, acc, xs, exact)
    if op == "softmax":
        return _softmax(acc, xs, exact)
    if op == "log_softmax":
        return _log_softmax(acc, xs, exact)
    raise ValueError(f"no model of {op!r} here (accumulate_rounded_norms.py has layer_norm's "
                     "and attention's)")


def judge(op: str, fmt: Format, acc: Format, xs: list[np.ndarray], got: np.ndarray,
          ref: np.ndarray, exact: np.ndarray, b: Bounds) -> tuple[np.ndarray, np.ndarray]:
    """(reason per output element, '' where it passed; |got - exact| in ulps) of results `got`
    in the storage format `fmt` of a kernel declaring its arithmetic in `acc`, whose model gave
    the bounds `b` (bounds() here, or accumulate_rounded_norms.bounds: accumulate.judge
    chooses)."""
    with np.errstate(all="ignore"):
        # an infinite input may leave the reference finite (a key whose score is -inf: weight 0)
        # and the bound undefined: a finite result is then held to the op's overflow range
        unbounded = np.isfinite(ref) & ~(np.isfinite(b.lo) & np.isfinite(b.hi))
        ranged = b.may_overflow | unbounded
        lo = fmt.round(np.where(ranged, b.lo_overflow, b.lo))
        hi = fmt.round(np.where(ranged, b.hi_overflow, b.hi))
        undefined = np.isfinite(ref) & (np.isnan(lo) | np.isnan(hi))
        if undefined.any():
            at = tuple(int(i) for i in np.argwhere(undefined)[0])
            raise BoundUndefinedError(f"the {acc.name} model of {op} has no bound at element "
                                      f"{list(at)}, where the reference is {ref[at]!r}")
        tolerance = np.maximum(hi - exact, exact - lo)
        overflow_ok = np.isinf(got) & (b.may_overflow | (got == hi) | (got == lo))
    reason, ulps = classify(fmt, got, ref, exact, tolerance, "exceeds-bound",
                            zero_sign_matters=np.broadcast_to(b.exact, got.shape),
                            overflow_ok=overflow_ok)
    # an overflowed intermediate may give NaN (inf - inf, inf * 0) where the reference has none
    nan_ok = b.may_overflow if b.nan_ok is None else b.may_overflow | b.nan_ok
    reason[np.isnan(got) & nan_ok & (reason == "nan-mismatch")] = ""
    # ...and an overflowed evaluation's infinity stands where the float64 reference's NaN is
    # its own 0 * inf (a weight that underflowed in float64, times an infinite value)
    reason[np.isinf(got) & b.may_overflow & (reason == "nan-mismatch")] = ""
    with np.errstate(invalid="ignore"):
        # a finite exact result past the storage format's range has an infinite reference, but
        # the evaluation's error may leave it inside: a finite result within the bound passes
        inside = np.isfinite(got) & np.isfinite(exact) & (got >= lo) & (got <= hi)
        reason[(reason == "inf-mismatch") & inside] = ""
        outside = (reason == "") & np.isfinite(got) & ((got < lo) | (got > hi))
        flushed = outside & (got == 0) & (np.abs(exact) > 0) & (np.abs(exact) < fmt.min_normal)
    reason[outside] = "exceeds-bound"
    reason[flushed] = "flushed-subnormal"
    return reason, ulps
