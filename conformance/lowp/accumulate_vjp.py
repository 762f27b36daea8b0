"""References and float32 error models of the VJPs of the accumulating 16-bit ops (accumulate.py's
forward ops), the one dispatch point: `gradients` and `judge_vjp` here, with `sum`, `matmul` and
`linear`; softmax and log_softmax in accumulate_vjp_softmax.py, layer_norm in
accumulate_vjp_norms.py, attention in accumulate_vjp_attention.py.

A kernel's VJP is vjp(*inputs, g) -> one gradient per input (docs/OPS.md's rules), arrays of the
format, declared as the forward is: float32 arithmetic inside, one rounding to the format per
output element. Each gradient is judged as a forward output is (accumulate.classify_float32):
against the exact gradient rounded to the format, within half an ulp of the format plus the
float32 evaluation's derived error bound (u = 2^-24, gamma(k) = k u / (1 - k u); Higham,
Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 4.2):
- sum, fn(x) (m, n) -> (m,): dx = g broadcast over the row. Exact: no arithmetic, so error 0,
  and the result must be g's bits (a zero's sign included).
- matmul, fn(a, b) (m, k) @ (k, n): da = g b^T, an inner product of length n of exact products
  (two 16-bit values multiply exactly in float32: at most 22 significand bits), and db = a^T g, of
  length m: matmul's own model with that length, gamma(n - 1) sum_j |g_ij b_tj| and
  gamma(m - 1) sum_i |a_it g_ij|, plus 2^-150 for each product below float32's normal range
  (bfloat16 products can be: exact no more).
- linear, fn(x, w, b) = x w^T + b: dx = g w (length n), dw = g^T x (length m), as matmul's; and
  db = the column sums of g, a sum of m terms in any order: gamma(m - 1) sum_i |g_ij|.
The references: the exact products (exact in float64) summed by a float64 matrix product, within
gamma64(k - 1) sum |terms| (u = 2^-53), and mpmath at 600 bits where a midpoint of the format
lies within that (as the forward's, accumulate.py); that error joins the bound, as the judge
measures from the float64 value. The bounds are evaluated in float64 and raised by 2^-30
relative (that evaluation's error is below 2^-40).
"""
from __future__ import annotations

import mpmath
import numpy as np

from conformance.lowp import accumulate
from conformance.lowp.accumulate_terms import MARGIN, SLACK, gamma, tiny_products
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified

# Per op, the names of its gradients, in the order of its inputs (and of vjp's results).
GRADIENTS = {"sum": ("dx",), "softmax": ("dx",), "log_softmax": ("dx",), "layer_norm": ("dx",),
             "matmul": ("da", "db"), "linear": ("dx", "dw", "db"),
             "attention": ("dq", "dk", "dv")}


def _group(op: str):
    """The module holding `op`'s VJP reference and error model, where not this one."""
    if op in ("softmax", "log_softmax"):
        from conformance.lowp import accumulate_vjp_softmax
        return accumulate_vjp_softmax
    if op == "layer_norm":
        from conformance.lowp import accumulate_vjp_norms
        return accumulate_vjp_norms
    if op == "attention":
        from conformance.lowp import accumulate_vjp_attention
        return accumulate_vjp_attention
    return None


def cotangent_shape(op: str, xs: list[np.ndarray]) -> tuple:
    """The shape of the forward's output, which g has."""
    from conformance.lowp.shrink import output_shape
    return output_shape(op, xs)


def _gamma64(k: int) -> float:
    return k * 2.0 ** -53 / (1 - k * 2.0 ** -53)


def _matmul_reference(fmt: Format, a: np.ndarray, b: np.ndarray):
    """(a @ b correctly rounded to the format, float64 a @ b, its error bound). The products of
    two 16-bit values are exact in float64 and the float64 sum of k of them, in any order (the
    BLAS's), is within gamma64(k - 1) sum |a_it b_tj| (|a| @ |b| is itself within gamma64(k) of
    its exact value: 1.01x); mpmath at 600 bits decides the rounding near a midpoint, as for the
    forward. Operands with an infinity or NaN go the forward's way (accumulate.reference: IEEE
    per term, where a BLAS may skip a product by 0)."""
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        ref, exact = accumulate.reference("matmul", fmt, [a, b])
        return ref, exact, np.zeros(exact.shape)
    k = a.shape[1]
    y = a @ b
    err = _gamma64(max(k - 1, 0)) * (np.abs(a) @ np.abs(b)) * 1.01

    def exact(idx):
        i, j = int(idx[0]), int(idx[1])
        return mpmath.fsum(mpmath.mpf(float(s)) * mpmath.mpf(float(t))
                           for s, t in zip(a[i], b[:, j]))
    with mpmath.workprec(600):
        ref, _ = round_certified(fmt, y, err + MARGIN * np.abs(y), exact)
    return ref, y, err


def _inner(fmt: Format, a: np.ndarray, b: np.ndarray):
    """(reference, float64 value, float32 error with the float64 value's own) of a @ b as a VJP
    computes it: exact products summed in any order in float32, rounded once."""
    ref, exact, err64 = _matmul_reference(fmt, a, b)
    k = a.shape[1]
    with np.errstate(all="ignore"):
        err = (gamma(max(k - 1, 0)) * (np.abs(a) @ np.abs(b)) + tiny_products(a, b)) * SLACK
    return ref, exact, err + err64


def gradients(op: str, fmt: Format, xs: list[np.ndarray], g: np.ndarray) -> list[tuple]:
    """Per gradient of `op`'s VJP at inputs `xs` and cotangent `g` (float64 values of the
    format): (correctly rounded reference, float64 approximation of the exact gradient, the
    float32 evaluation's error bound, absolute, that approximation's own error included)."""
    group = _group(op)
    if group is not None:
        return group.gradients(op, fmt, xs, g)
    with np.errstate(all="ignore"):
        if op == "sum":
            dx = np.broadcast_to(g[..., None], xs[0].shape).astype(np.float64)
            return [(dx, dx, np.zeros(dx.shape))]
        if op == "matmul":
            a, b = xs
            return [_inner(fmt, g, b.T), _inner(fmt, a.T, g)]
        x, w, _ = xs                                                        # linear
        # db: the column sums of g, as products by 1 (exact) summed: gamma(m - 1) sum_i |g_ij|
        db = tuple(t.reshape(-1) for t in _inner(fmt, np.ones((1, g.shape[0])), g))
        return [_inner(fmt, g, w), _inner(fmt, g.T, x), db]


def judge_vjp(op: str, fmt: Format, xs: list[np.ndarray], g: np.ndarray,
              got: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per gradient: (reason per element, '' where it passed; the reference; ulps), as the
    forward's elements are judged (accumulate.classify_float32); where the bound is 0 (no
    arithmetic) the result must be the reference's bits."""
    out = []
    for (ref, exact, err), mine in zip(gradients(op, fmt, xs, g), got):
        reason, ulps = accumulate.classify_float32(fmt, mine, ref, exact, err,
                                                   exact_where_errorless=True)
        out.append((reason, ref, ulps))
    return out


def restrict(op: str, xs: list[np.ndarray], g: np.ndarray, gradient: int, element: tuple
             ) -> tuple[list[np.ndarray], np.ndarray, tuple] | None:
    """Only what gradient `gradient`'s `element` reads (inputs, cotangent, the element's index
    there), or None where nothing smaller is known (attention's dk and dv)."""
    if op in ("sum", "softmax", "log_softmax", "layer_norm"):
        i = element[0]
        return [xs[0][i:i + 1]], g[i:i + 1], (0,) + tuple(element[1:])
    i, t = element[0], element[1] if len(element) > 1 else 0
    if op == "matmul":
        a, b = xs
        if gradient == 0:          # da_it reads a's row i (for the call), g's row i, all of b
            return [a[i:i + 1], b], g[i:i + 1], (0, t)
        # db_it = sum_r a_ri g_rt: a's column i, g's column t (b's one element for the call)
        return [a[:, i:i + 1], b[i:i + 1, t:t + 1]], g[:, t:t + 1], (0, 0)
    if op == "linear":
        x, w, b = xs
        if gradient == 0:          # dx_it = sum_j g_ij w_jt
            return [x[i:i + 1], w, b], g[i:i + 1], (0, t)
        if gradient == 1:          # dw_it = sum_r g_ri x_rt
            return [x[:, t:t + 1], w[i:i + 1, t:t + 1], b[i:i + 1]], g[:, i:i + 1], (0, 0)
        return [x[:, :1], w[i:i + 1, :1], b[i:i + 1]], g[:, i:i + 1], (0,)     # db_i
    if op == "attention" and gradient == 0:     # dq's row i reads q_i, g_i, all of k and v
        q, k, v = xs
        return [q[i:i + 1], k, v], g[i:i + 1], (0, t)
    return None
