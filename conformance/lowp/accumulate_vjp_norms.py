"""VJP reference and float32 error model of 16-bit `layer_norm` without affine parameters (eps
1e-5, over the last axis; accumulate_vjp.py dispatches here). docs/OPS.md's rule with gamma = 1:
dx_i = rstd (g_i - a - xhat_i b), a = mean_j g_j, b = mean_j g_j xhat_j, xhat = (x - mu) rstd,
rstd = 1 / sqrt(var + eps) (mu, var: the exact mean and biased variance).

Reference: the exact gradient rounded to the format. float64 evaluation from the forward's
float64 xhat and rstd (accumulate_norms.layer_norm64_parts: xhat within e_y absolute, rstd within
rel_r relative), with the cotangent centred first: a64 = fsum(g) / n (2^-52 |a|; exact for a
constant row), gc_j = g_j - a64, b64 = sum_j gc_j xhat_j / n (= b: sum_j xhat_j = 0), so that a
constant cotangent gives the exact 0 it should; each operation's 2^-53 and the sums' gamma64
counted, 1.01x for the second-order terms. Where a midpoint of the format lies within that bound,
mpmath at 600 bits decides, from exact integers of the row: A = sum g, n g_j - A, the forward's
n (x_j - mean), B = sum_j (n g_j - A) n (x_j - mean), dx_i = rstd ((n g_i - A) / n -
n (x_i - mean) rstd^2 B / n^4).

Error model (u = 2^-24, gamma(k) = k u / (1 - k u), TINY = 2^-149). The VJP recomputes the
statistics in float32 from x as the forward does, in any of the forms accumulate_norms.py's model
covers (two passes, Welford, Chan's combination): its xhat^_j within D_j of xhat_j (that model's
bound on the forward's normalized value before its rounding) and its rstd^ within rho_r relative.
Then, in float32:
- a^ = sum_j g_j / n (a sum in any order, then a division or a product by the rounded 1/n):
  within E_a = gamma(n + 1) sum_j |g_j| / n + TINY;
- b^ = sum_j fl(g_j xhat^_j) / n: the products' inputs err by |g_j| D_j, then n + 2 roundings:
  E_b = (sum_j |g_j| D_j + gamma(n + 2) sum_j |g_j| (|xhat_j| + D_j)) / n + TINY;
- t^_i = g_i - a^ - xhat^_i b^ (the product rounded or fused; the two subtractions in any
  order), or rstd^ times each of the three terms: at most six roundings, each relative to at most
  H_i = |g_i| + |a| + E_a + (|xhat_i| + D_i)(|b| + E_b):
  E_t = E_a + D_i (|b| + E_b) + |xhat_i| E_b + gamma(6) H_i + TINY;
- dx^_i = fl(rstd^ t^_i): |rstd^ t^ - rstd t| + u |rstd^ t^| <=
  B_i = rstd ((1 + rho_r)(1 + u)(|t_i| + E_t) - |t_i|) + TINY.
Not covered: PyTorch's CPU form, rstd g_i + c1 x_i + c2 with c1, c2 from sums of g and g x (not
of the centred values): around a large mean its c1 x_i + c2 cancels what the centred form never
computes. The bound is evaluated in float64 from the float64 reference's values, raised by 2^-30
relative, and the reference's own error bound is added (the judge measures from it).
"""
from __future__ import annotations

import mpmath
import numpy as np

from conformance.lowp.accumulate_norms import (_layer_norm_error, _row_stats, layer_norm32_parts,
                                               layer_norm64_parts, layer_norm_row_mp)
from conformance.lowp.accumulate_terms import MARGIN, SLACK, TINY32, U32, gamma, row_fsum
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified


def gradients(op: str, fmt: Format, xs: list[np.ndarray], g: np.ndarray) -> list[tuple]:
    """[(correctly rounded dx, float64 dx, float32 error bound with the reference's own)]."""
    x = xs[0]
    with np.errstate(all="ignore"):
        dx, err64, xhat, b = _float64(x, g)
        err32 = _error32(x, g, xhat, b)
    with mpmath.workprec(600):     # rounded at the precision the mpmath value was made at
        ref, _ = round_certified(fmt, dx, err64 + MARGIN * np.abs(dx), _exact(x, g))
    return [(ref, dx, err32 * SLACK + err64)]


def _float64(x: np.ndarray, g: np.ndarray):
    """(float64 dx, its absolute error bound, float64 xhat, float64 b with its error bound
    added to its magnitude)."""
    n = x.shape[-1]
    xhat, e_y, rel_r = layer_norm64_parts(x)
    _, var, _ = _row_stats(x)
    sqrt_w = np.sqrt(var + 1e-5)
    a = row_fsum(g) / n
    constant = np.all(g == g[..., :1], axis=-1, keepdims=True)   # then a is g's value, exactly
    e_a = np.where(constant, 0.0, 2.0 ** -52 * np.abs(a))
    gc = g - a
    e_gc = e_a + 2.0 ** -53 * np.abs(gc)
    b = np.sum(gc * xhat, axis=-1, keepdims=True) / n
    e_b = 1.01 * np.sum(e_gc * np.abs(xhat) + (np.abs(gc) + e_gc) * e_y +
                        (n + 2) * 2.0 ** -52 * np.abs(gc * xhat), axis=-1, keepdims=True) / n
    t = gc - xhat * b
    e_t = 1.01 * (e_gc + e_y * (np.abs(b) + e_b) + np.abs(xhat) * e_b +
                  2.0 ** -52 * (np.abs(gc) + np.abs(xhat * b)))
    dx = t / sqrt_w
    err = 1.01 * (rel_r * (np.abs(t) + e_t) + e_t) / sqrt_w + 2.0 ** -52 * np.abs(dx)
    err = err + 2.0 ** -1074 * ((dx != 0) | (e_t > 0))
    return dx, err, xhat, np.abs(b) + e_b


def _error32(x: np.ndarray, g: np.ndarray, xhat: np.ndarray, abs_b: np.ndarray) -> np.ndarray:
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape)
    rho_r, w, _ = layer_norm32_parts(x)
    d_hat = _layer_norm_error(x, xhat)            # the float32 xhat's error, before rounding
    rstd = 1 / np.sqrt(w)
    ag = np.abs(g)
    a = np.abs(row_fsum(g)) / n * (1 + 2.0 ** -50)
    e_a = gamma(n + 1) * np.sum(ag, axis=-1, keepdims=True) / n + TINY32
    e_b = (np.sum(ag * d_hat, axis=-1, keepdims=True) +
           gamma(n + 2) * np.sum(ag * (np.abs(xhat) + d_hat), axis=-1, keepdims=True)) / n + \
        TINY32
    big_h = ag + a + e_a + (np.abs(xhat) + d_hat) * (abs_b + e_b)
    e_t = e_a + d_hat * (abs_b + e_b) + np.abs(xhat) * e_b + gamma(6) * big_h + TINY32
    # |t| from the float64 values: within 2^-40 H of the exact one
    t = np.abs(g - row_fsum(g) / n - xhat * np.sum(g * xhat, axis=-1, keepdims=True) / n) + \
        2.0 ** -40 * big_h
    return rstd * ((1 + rho_r) * (1 + U32) * (t + e_t) - t) + TINY32


def _exact(x: np.ndarray, g: np.ndarray):
    """exact(index) -> dx there (at the caller's 600 bits: the row's integers are exact)."""
    n = x.shape[-1]
    rows: dict = {}

    def exact(idx):
        key = tuple(int(i) for i in idx[:-1])
        if key not in rows:
            nums, rstd = layer_norm_row_mp(x[key])          # n (x_j - mean), exact
            gs = [mpmath.mpf(float(v)) for v in g[key]]
            big_a = mpmath.fsum(gs)
            centred = [n * v - big_a for v in gs]           # n (g_j - a), exact
            big_b = mpmath.fsum(c * t for c, t in zip(centred, nums))
            rows[key] = (nums, rstd, centred, big_b)
        nums, rstd, centred, big_b = rows[key]
        i = int(idx[-1])
        return rstd * (centred[i] / n - nums[i] * rstd * rstd * big_b / n ** 4)
    return exact
