"""VJP references and float32 error models of 16-bit `softmax` and `log_softmax` (over the last
axis; accumulate_vjp.py dispatches here). docs/OPS.md's rules, with p = softmax(x) exact:
softmax dx_i = p_i (g_i - sum_j g_j p_j); log_softmax dx_i = g_i - p_i sum_j g_j.

References: the exact gradient rounded to the format. float64 evaluation with an absolute error
bound of its own; where a midpoint of the format lies within it, mpmath at 320 bits decides
(differences of two bfloat16 values are exact there). softmax's inner factor is evaluated as
c_i = (g_i - g_0) - sum_j (g_j - g_0) p_j (= g_i - sum_j g_j p_j, since sum_j p_j = 1; g_0 the
row's first cotangent), in float64 and in mpmath, so that a constant cotangent gives the exact 0
it should, not 2^-53-sized noise.
float64's own errors: x_j - m within 2^-53 |x_j - m| (exact for every float16 pair), exp within
4 ulps, the sum (n - 1) 2^-53, the division 2^-53: p within
e64_i = (|x_i - m| + D + n + 16) 2^-50 relative, D the largest |x_j - m| whose exponential does
not underflow float64, plus 2^-1070 absolute (subnormal float64); each further float64 operation
adds its 2^-53, the sums gamma(n) (counted as (n + 2) 2^-52); the bound is raised 1.1x for the
second-order terms.

Error models, u = 2^-24, gamma(k) = k u / (1 - k u), T = 8u (float32 exp within 4 ulps, as
accumulate_norms.py says), TINY = 2^-149. The VJP recomputes the probabilities in float32 from x,
m = max_j x_j (exact), d_j = x_j - m:
- p^_j = fl(exp(fl(d_j))) / fl(sum_k ...), the division or a product with the rounded reciprocal.
  exp(fl(d_j)) = exp(d_j)(1 + expm1-term): each E^_j = E_j (1 + delta_j) + alpha_j with
  |delta_j| <= r_j = expm1(u |d_j|)(1 + T) + T (0 past |d_j| > 120, where E_j < 2^-173) and
  |alpha_j| <= 4 TINY (exp's 4 ulps among float32 subnormals). The sum of positive terms, any
  order, is T (1 + sigma) with |sigma| <= s = (1 + rho + 4 n TINY)(1 + gamma(n - 1)) - 1,
  rho = sum_j p_j r_j (the exact sum T >= 1: its max term is exp(0)). Two roundings at most
  follow: |p^_i - p_i| <= eps_i p_i + tau, eps_i = (1 + r_i)(1 + u)^2 / (1 - s) - 1,
  tau = 6 TINY (the absolute terms over T^ >= 1 - s, and a subnormal quotient's rounding).
- softmax: dot^ = the n products g_j p^_j, each rounded (or fused), summed in any order:
  |dot^ - dot| <= E_dot = sum_j |g_j| (eps_j p_j + tau) + gamma(n) sum_j |g_j| P_j + n TINY / 2,
  P_j = p_j (1 + eps_j) + tau >= |p^_j|. Then dx^_i = fl(p^_i fl(g_i - dot^)), or
  fl(fl(p^_i g_i) - fl(p^_i dot^)) (fused or not): with c_i = g_i - dot, G_i = |g_i| + |dot| +
  E_dot and E_c = E_dot + u G_i (the subtraction's rounding), both forms are within
  B_i = (eps_i p_i + tau)(|c_i| + E_c) + p_i E_dot + 2.01 u P_i G_i + 2 TINY
  (first form: |p^ - p| |c^| + p |c^ - c| + u |p^ c^| + TINY / 2, with |c_i| + E_c <= G_i (1 + u);
  second: |p^ - p| |g_i - dot^| + p E_dot, two products' roundings u P_i G_i, the difference's
  u (1 + u) P_i G_i, and TINY each).
- log_softmax: the probabilities either as above or as exp of the float32 log_softmax y^_i
  (within accumulate_norms's bound e_y of y_i): relative expm1(e_y)(1 + T) + T; eps_i is the
  larger of the two. G^ = fl(sum_j g_j), any order, within E_G = gamma(n - 1) sum_j |g_j|; then
  fl(g_i - fl(p^_i G^)) (or fused): |p^ G^ - p G| <= (eps_i p_i + tau)(|G| + E_G) + p_i E_G,
  the product's rounding u P_i (|G| + E_G) + TINY / 2, the difference's u (|g_i| + P_i (|G| +
  E_G)(1 + u)) + u TINY:
  B_i = (eps_i p_i + tau)(|G| + E_G) + p_i E_G + u (2 + u) P_i (|G| + E_G) + u |g_i| + TINY.
Not covered: probabilities from a log-sum-exp computed other than by the max shift, an online
(tiled) softmax, or p rounded to the format in between (as PyTorch does from the saved 16-bit
output: that is two roundings, and fails, as it should, against a float32 claim). The bounds are
evaluated in float64 from the float64 reference's values (within 2^-39 of the exact ones here),
raised by 2^-30 relative, and the reference's own error bound is added (the judge measures from
it).
"""
from __future__ import annotations

import mpmath
import numpy as np

from conformance.lowp.accumulate_norms import UNDERFLOW, _log_softmax_error
from conformance.lowp.accumulate_terms import MARGIN, SLACK, T32, TINY32, U32, gamma, row_fsum
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified

F64_TINY = 2.0 ** -1070     # float64 subnormal results' absolute error, with room
F64_UNDERFLOW = 746.0       # exp(-746) is 0 in float64


def _softmax64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float64 softmax, its relative error bound e64: the docstring's)."""
    n = x.shape[-1]
    m = np.max(x, axis=-1, keepdims=True)
    d = x - m
    e = np.exp(d)
    p = e / np.sum(e, axis=-1, keepdims=True)
    ad = np.abs(d)
    live = ad <= F64_UNDERFLOW      # the others are 0, within F64_TINY of their exact value
    big_d = np.max(np.where(live, ad, 0.0), axis=-1, keepdims=True)
    return p, np.where(live, ad + big_d + n + 16, 0.0) * 2.0 ** -50


def _probabilities32(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """eps_i of the docstring: the relative error bound of float32 probabilities p^ (their
    absolute bound is 6 TINY)."""
    n = x.shape[-1]
    a = np.abs(x - np.max(x, axis=-1, keepdims=True))
    r = np.where(a <= UNDERFLOW, np.expm1(U32 * a) * (1 + T32) + T32, 0.0)
    rho = np.sum(np.where(p > 0, p * r, 0.0), axis=-1, keepdims=True)
    s = (1 + rho + 4 * n * TINY32) * (1 + gamma(max(n - 1, 0))) - 1
    return np.where(s < 1, (1 + r) * (1 + U32) ** 2 / np.where(s < 1, 1 - s, 1.0) - 1, np.inf)


TAU = 6 * TINY32


def _times(eps: np.ndarray, p: np.ndarray) -> np.ndarray:
    """eps p, 0 where p is: an exp(-inf) is 0 in float32 too, whatever eps says there."""
    return np.where(p > 0, eps * p, 0.0)


def gradients(op: str, fmt: Format, xs: list[np.ndarray], g: np.ndarray) -> list[tuple]:
    """[(correctly rounded dx, float64 dx, float32 error bound with the reference's own)]."""
    x = xs[0]
    with np.errstate(all="ignore"):
        p, e64 = _softmax64(x)
        if op == "softmax":
            dx, err64, decided = _softmax_vjp64(p, e64, g)
            err32 = _softmax_vjp_error(x, p, e64, g)
            exact = _softmax_vjp_mp(x, g)
        else:
            dx, err64 = _log_softmax_vjp64(p, e64, g)
            decided = np.zeros(dx.shape, dtype=bool)
            err32 = _log_softmax_vjp_error(x, p, g)
            exact = _log_softmax_vjp_mp(x, g)
        unsure = np.where(decided, 0.0, err64 + MARGIN * np.abs(dx))
    with mpmath.workprec(320):     # rounded at the precision the mpmath value was made at
        ref, _ = round_certified(fmt, dx, unsure, exact)
    return [(ref, dx, err32 * SLACK + err64)]


# --- softmax ----------------------------------------------------------------------------------

def _softmax_vjp64(p: np.ndarray, e64: np.ndarray, g: np.ndarray):
    """(float64 dx = p_i c_i, c_i = h_i - sum_j h_j p_j with h = g - g_0, g_0 the row's first
    cotangent (= g_i - sum_j g_j p_j, as sum_j p_j = 1); its absolute error bound; where the
    rounding to the format is decided without mpmath)."""
    n = p.shape[-1]
    h = g - g[..., :1]                   # exact for float16; 2^-53 relative for bfloat16
    s = np.sum(h * p, axis=-1, keepdims=True)
    c = h - s
    # h's rounding, the products', the sum's (gamma64(n)), and p's own error e64
    e_s = 1.01 * np.sum(np.abs(h) * (p * (e64 + (n + 3) * 2.0 ** -52) + F64_TINY), axis=-1,
                        keepdims=True)
    e_c = e_s + 2.0 ** -52 * (np.abs(h) + np.abs(s) + e_s)
    dx = p * c
    err = 1.1 * ((e64 * p + F64_TINY) * (np.abs(c) + e_c) + p * e_c) + 2.0 ** -52 * np.abs(dx)
    # where float64's p underflowed (p < 2^-1074), |dx| < 2^-1074 (|c| + e_c): a zero of the
    # format, of c's sign where c's is sure; mpmath need not say so
    decided = (p == 0) & (np.abs(c) > e_c)
    dx = np.where(decided, np.copysign(0.0, c), dx)
    return dx, err + 2.0 ** -1074 * ((dx != 0) | (e_c > 0)), decided


def _softmax_vjp_error(x: np.ndarray, p: np.ndarray, e64: np.ndarray, g: np.ndarray
                       ) -> np.ndarray:
    n = x.shape[-1]
    eps = _probabilities32(x, p)
    ag = np.abs(g)
    big_p = p + _times(eps, p) + TAU
    dot = np.sum(g * p, axis=-1, keepdims=True)
    # dot and c from the float64 reference's p: within that p's error (e64, below 2^-37
    # relative here) and the sum's of the exact ones
    off = (np.max(e64, axis=-1, keepdims=True) + (n + 1) * 2.0 ** -52) * \
        np.sum(ag * p, axis=-1, keepdims=True)
    adot = np.abs(dot) + off
    e_dot = np.sum(ag * (_times(eps, p) + TAU), axis=-1, keepdims=True) + \
        gamma(n) * np.sum(ag * big_p, axis=-1, keepdims=True) + n * TINY32 / 2
    big_g = ag + adot + e_dot
    e_c = e_dot + U32 * big_g
    c = np.abs(g - dot) + off + 2.0 ** -52 * (ag + adot)
    return (_times(eps, p) + TAU) * (c + e_c) + p * e_dot + 2.01 * U32 * big_p * big_g + \
        2 * TINY32


def _softmax_vjp_mp(x: np.ndarray, g: np.ndarray):
    """exact(index) -> dx there (at the caller's 320 bits), each row's exponentials once."""
    rows, cotangents = _mp_rows(x), _mp_rows(g, shift=False)
    shifted: dict = {}

    def exact(idx):
        e, total = rows(idx)
        gs, _ = cotangents(idx)
        key = tuple(int(i) for i in idx[:-1])
        if key not in shifted:
            # g_j - g_0 is exact at 320 bits: two bfloat16 values span at most 2^128 / 2^-133;
            # a constant row gives 0 exactly
            shifted[key] = mpmath.fsum((gj - gs[0]) * ej for gj, ej in zip(gs, e))
        i = int(idx[-1])
        return e[i] / total * ((gs[i] - gs[0]) * total - shifted[key]) / total
    return exact


def _mp_rows(x: np.ndarray, shift: bool = True):
    """rows(index) -> (exp(x_j - m) of the index's row, their sum), each row once; without
    `shift`, (the row's values, their sum)."""
    cache: dict = {}

    def rows(idx):
        key = tuple(int(i) for i in idx[:-1])
        if key not in cache:
            vals = [mpmath.mpf(float(v)) for v in x[key]]
            top = max(vals)
            e = [mpmath.exp(v - top) for v in vals] if shift else vals
            cache[key] = (e, mpmath.fsum(e))
        return cache[key]
    return rows


# --- log_softmax ------------------------------------------------------------------------------

def _log_softmax_vjp64(p: np.ndarray, e64: np.ndarray, g: np.ndarray):
    """(float64 dx = g_i - p_i G, G = fsum(g) correctly rounded; its absolute error bound)."""
    big_g = row_fsum(g)
    dx = g - p * big_g
    err = 1.1 * ((e64 * p + F64_TINY + 2 * 2.0 ** -53 * p) * np.abs(big_g)) + \
        2.0 ** -52 * np.abs(dx) + 2.0 ** -1074 * (big_g != 0)
    return dx, err


def _log_softmax_vjp_error(x: np.ndarray, p: np.ndarray, g: np.ndarray) -> np.ndarray:
    n = x.shape[-1]
    eps_a = _probabilities32(x, p)
    e_y = _log_softmax_error(x)
    eps_b = np.expm1(e_y) * (1 + T32) + T32
    eps = np.maximum(eps_a, eps_b)
    ag = np.abs(g)
    total = np.sum(ag, axis=-1, keepdims=True)
    # |G| from fsum: correctly rounded, within 2^-53 |G| <= 2^-53 sum |g|
    abs_g = np.abs(row_fsum(g)) + 2.0 ** -52 * total
    e_g = gamma(max(n - 1, 0)) * total
    big_p = p + _times(eps, p) + TAU
    return (_times(eps, p) + TAU) * (abs_g + e_g) + p * e_g + \
        U32 * (2 + U32) * big_p * (abs_g + e_g) + U32 * ag + TINY32


def _log_softmax_vjp_mp(x: np.ndarray, g: np.ndarray):
    """exact(index) -> dx there (at the caller's 320 bits)."""
    rows, cotangents = _mp_rows(x), _mp_rows(g, shift=False)

    def exact(idx):
        e, total = rows(idx)
        gs, big_g = cotangents(idx)
        i = int(idx[-1])
        return gs[i] - e[i] / total * big_g
    return exact
