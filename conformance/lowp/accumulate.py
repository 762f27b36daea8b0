"""References and error models of the accumulating 16-bit ops: `sum` (over the last axis),
`softmax` (over the last axis), `matmul` and `linear` here, `log_softmax` and `layer_norm` in
accumulate_norms.py, `attention` in accumulate_attention.py (this module is the one dispatch
point: `reference`, `float32_error`, `judge`), for kernels whose inputs and outputs are in a 16-bit
format and whose policy declares float32 arithmetic inside, rounded once to the format at the
output (what bfloat16/float16 kernels on GPUs do, and claim). A kernel that declares its
arithmetic in another format (bfloat16, float16, float64: every intermediate rounded to it) is
judged by accumulate_rounded.py's models instead.

References: the exact result rounded to the format. Products of two 16-bit values are exact in
float64 (and in float32: at most 22 significand bits), so a sum or dot product is math.fsum of
exact float64 terms, the float64 nearest the exact value; where that value lies within 2^-50 of a
midpoint of the format, mpmath sums exactly (600 bits cover every exponent of both formats) and
rounds from there, at those 600 bits (at float64's 53 a sum within 2^-53 of a midpoint would be
taken for it). softmax is evaluated in float64 with the max shift (relative error below
(n + 8) 2^-53) and the same way at 200 bits near a midpoint.

Error models (u = 2^-24, float32's unit roundoff; gamma(k) = k u / (1 - k u); Higham,
Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 4.2):
- sum of n terms in float32, any order: |s32 - s| <= gamma(n - 1) sum |x_i|;
- matmul, k products exact in float32, summed in any order: gamma(k - 1) sum_k |a_ik b_kj|;
- linear, fn(x, w, b) = x w^T + b (x (m, k), w (n, k), b (n,)): the k exact products and the bias
  are k + 1 terms summed in any order (the bias first, as a GEMM's beta term, or last):
  gamma(k) (sum_t |x_it w_jt| + |b_j|), plus 2^-150 per product that falls below float32's
  normal range (bfloat16 products can: exact no more);
- softmax in float32 with the max shift m: exp(x_j - m) carries (|x_j - m| + 2) u relative (the
  rounded difference, scaled by the exponential, and exp's own ulp); the sum adds gamma(n - 1), the
  division u; an element's relative error is at most e_i + max_j e_j + gamma(n - 1) + u, plus
  n 2^-149 absolute for float32 subnormal terms.
Then the one rounding to the format: half an ulp of the format at the float32 result, taken at
|exact| + the float32 error (the result may sit in the next binade). A result past the format's
largest finite is infinity only where |exact| + the float32 error reaches the overflow threshold.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from conformance.lowp import (accumulate_attention, accumulate_norms, accumulate_rounded,
                              accumulate_rounded_norms)
from conformance.lowp.accumulate_terms import MARGIN, SLACK, TINY32, U32, gamma
from conformance.lowp.formats import FLOAT32, Format, accumulation_format
from conformance.lowp.refs import round_certified
from conformance.lowp.sweep import classify

ARITY = {"sum": 1, "softmax": 1, "matmul": 2, "linear": 3, "log_softmax": 1, "layer_norm": 1,
         "attention": 3}
GROUPS = {"log_softmax": accumulate_norms, "layer_norm": accumulate_norms,
          "attention": accumulate_attention}     # the ops whose models live in another module


def _group(op: str):
    """The module holding `op`'s reference and error model, where not this one."""
    return GROUPS.get(op)


def _exact_sums(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fsum of each row's terms, which rows need mpmath: none yet) for finite rows; rows with a
    NaN or both infinities are NaN, with one infinity that infinity."""
    out = np.empty(terms.shape[:-1])
    for idx in np.ndindex(out.shape):
        row = terms[idx]
        out[idx] = math.fsum(row) if np.all(np.isfinite(row)) else float(np.sum(row))
    return out


def reference(op: str, fmt: Format, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(correctly rounded result in the format, float64 approximation of the exact result)."""
    with np.errstate(all="ignore"):   # inf * 0, inf - inf: the NaNs IEEE gives, on purpose
        group = _group(op)
        return group.reference(op, fmt, xs) if group else _reference(op, fmt, xs)


def _terms(op: str, xs: list[np.ndarray]) -> np.ndarray:
    """The exact float64 terms whose sum each output element is, on the last axis."""
    if op == "sum":
        return xs[0]
    if op == "matmul":
        return np.moveaxis(xs[0][:, :, None] * xs[1][None, :, :], 1, -1)   # (m, n, k)
    x, w, b = xs                                                            # linear
    products = x[:, None, :] * w[None, :, :]                                # (m, n, k)
    return np.concatenate([products, np.broadcast_to(b[None, :, None], products.shape[:2] + (1,))],
                          axis=-1)


def _reference(op: str, fmt: Format, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if op in ("sum", "matmul", "linear"):
        terms = _terms(op, xs)
        with np.errstate(invalid="ignore"):
            y = _exact_sums(terms)

        def exact(idx):
            return mpmath.fsum(mpmath.mpf(float(t)) for t in terms[idx])
        # the rounding of an mpmath value runs at the working precision: at 53 bits a sum
        # within 2^-53 of a midpoint would be rounded to it and the tie decided by evenness
        with mpmath.workprec(600):
            return round_certified(fmt, y, MARGIN * np.abs(y), exact)[0], y
    x = xs[0]
    n = x.shape[-1]
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - m)
        y = e / np.sum(e, axis=-1, keepdims=True)

    def exact_sm(idx):
        row = [mpmath.mpf(float(v)) for v in x[idx[:-1]]]
        top = max(row)
        return mpmath.exp(row[idx[-1]] - top) / mpmath.fsum(mpmath.exp(v - top) for v in row)
    with mpmath.workprec(200):
        return round_certified(fmt, y, ((n + 8) * 2.0 ** -53 + MARGIN) * np.abs(y),
                               exact_sm)[0], y


def float32_error(op: str, xs: list[np.ndarray], exact: np.ndarray) -> np.ndarray:
    """The float32 evaluation's error bound (absolute) at each output element."""
    group = _group(op)
    if group:
        return group.float32_error(op, xs, exact)
    with np.errstate(all="ignore"):
        if op == "sum":
            x = xs[0]
            return gamma(max(x.shape[-1] - 1, 0)) * np.sum(np.abs(x), axis=-1)
        if op == "matmul":
            a, b = xs
            return gamma(max(a.shape[1] - 1, 0)) * (np.abs(a) @ np.abs(b))
        if op == "linear":
            x, w, b = xs
            products = np.abs(x[:, None, :] * w[None, :, :])                # (m, n, k)
            tiny = np.sum((products > 0) & (products < 2.0 ** -126), axis=-1) * TINY32 / 2
            return (gamma(x.shape[1]) * (np.sum(products, axis=-1) + np.abs(b)) + tiny) * SLACK
        x = xs[0]
        n = x.shape[-1]
        m = np.max(x, axis=-1, keepdims=True)
        e = (np.abs(x - m) + 2) * U32
        rel = e + np.max(e, axis=-1, keepdims=True) + gamma(max(n - 1, 0)) + U32
        return rel * np.abs(exact) * 1.01 + n * TINY32


def in_format_error(op: str, acc: Format, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the error bound, absolute, of sum, matmul or linear evaluated in `acc` at inputs that are
    values of acc; a bound on every partial sum's magnitude): accumulate_rounded's model."""
    err, partial, _, _ = accumulate_rounded.inner_product_error(op, acc, xs)
    return err, partial


def judge(op: str, fmt: Format, xs: list[np.ndarray], got: np.ndarray,
          accumulation: str = "float32") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reason per output element, '' where it passed; the reference; |got - exact| in ulps).
    `accumulation`: the format the kernel declares its arithmetic in, float32 (the models above)
    or bfloat16, float16 or float64 (accumulate_rounded.py); UnknownAccumulationError else."""
    acc = accumulation_format(accumulation)
    ref, exact = reference(op, fmt, xs)
    if acc is not FLOAT32:
        model = accumulate_rounded if op in accumulate_rounded.OPS else accumulate_rounded_norms
        b = model.bounds(op, acc, xs, exact)
        reason, ulps = accumulate_rounded.judge(op, fmt, acc, xs, got, ref, exact, b)
        return reason, ref, ulps
    reason, ulps = classify_float32(fmt, got, ref, exact, float32_error(op, xs, exact))
    return reason, ref, ulps


def classify_float32(fmt: Format, got: np.ndarray, ref: np.ndarray, exact: np.ndarray,
                     err: np.ndarray, exact_where_errorless: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(reason per element, ulps) of results `got` of a float32 evaluation within `err`
    (absolute) of the exact values, rounded once to the format: within half an ulp of the format
    at |exact| + err, plus err; infinity only where that reach passes the format's range, with
    the exact value's sign; a zero's sign judged only where err is 0. `exact_where_errorless`:
    where err is 0 the result is the reference's bits (the tolerance's half ulp would let the
    neighbour below a power of two pass, half an ulp of the binade above away)."""
    with np.errstate(all="ignore"):
        reach = np.abs(exact) + err                       # the computed result's magnitude, at most
        top = fmt.max_finite + fmt.ulp(fmt.max_finite) / 2
        overflow_ok = np.isinf(got) & ~np.isinf(ref) & (reach >= top) & \
            (np.sign(got) == np.sign(exact))
        tolerance = 0.5 * fmt.ulp(reach) + err + MARGIN * np.abs(exact)
        if exact_where_errorless:
            tolerance = np.where(err == 0, 0.0, tolerance)
    return classify(fmt, got, ref, exact, tolerance, "exceeds-bound",
                    zero_sign_matters=np.broadcast_to(err == 0, got.shape),
                    overflow_ok=overflow_ok)
