"""References and float32 error models of the normalizing 16-bit ops, over the last axis:
`log_softmax` (fn(x), (m, n) -> (m, n)) and `layer_norm` without affine parameters (the same
shapes; eps = 1e-5, torch.nn.functional.layer_norm's default, the decimal 10^-5: a float32 kernel
holds it rounded, and the model counts that rounding). accumulate.py dispatches here; the rest of
the audit (cases, judging) is shared.

References: the exact result rounded to the format. float64 evaluation (log_softmax with the max
shift; layer_norm in two passes around fsum's mean) with an absolute error bound of its own; where
a midpoint of the format lies within that bound, mpmath decides (log_softmax at 320 bits, where
x_i - m of two bfloat16 values is exact; layer_norm at 600 bits, where the row's sum is exact and
x_i - mean is (n x_i - sum)/n).

Error models (u = 2^-24; gamma(k) = k u / (1 - k u); Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., sec. 3.1, 4.2; T = 8u: float32 exp, log and rsqrt within 4 float32 ulps, the
largest any float32 library we know documents: NumPy's AVX-512 exp 2.52 and log 3.83 ulps, CUDA's
expf and rsqrtf 2, SLEEF's u10 functions 1; a k-ulp result is within 2ku relative):
- log_softmax, m = max_j x_j, L = log sum_j exp(x_j - m) (>= 0: the max term is 1). Each
  exp(fl(x_j - m)) is exp(x_j - m)(1 + r_j), r_j = expm1(u |x_j - m|)(1 + T) + T (the rounded
  difference, scaled by the exponential, then exp's own error), or an absolute 4 2^-149 where
  float32 underflows (|x_j - m| > 120: r_j = 0 and only that term). The float32 sum adds
  gamma(n - 1) of the (positive) terms, so the computed sum is S (1 + e) with
  |e| <= rel_S = rho + gamma(n - 1)(1 + rho) + 4 n 2^-149, rho = sum_j p_j r_j (p: the softmax;
  S >= 1 makes the absolute terms relative). log then errs by eL = -log(1 - rel_S) + T (L + that).
  The output is the three terms x_i, -m, -L summed in float32 in any order ((x_i - m) - L, as
  PyTorch's CPU kernel, or x_i - (m + L), as its CUDA kernel): gamma(2)(|x_i| + |m| + L + eL) more.
  Error: eL + gamma(2)(|x_i| + |m| + L + eL).
- layer_norm, X = max_j |x_j|, R = max_j x_j - min_j x_j, mu and var the exact mean and biased
  variance, g = ceil(log2 n). Any mean the kernel computes is within E_M = gamma(n + 7g + 5) X of
  the exact one: two passes (a sum in any order, then a division) within gamma(n + 1) X;
  Welford's update M_k = M_(k-1) + (x_k - M_(k-1))/k, whose errors e_k obey
  k e_k = (k - 1) e_(k-1) + k xi_k with |xi_k| <= 2u R / k + u |M_k|, within u X (k/2 + 4.6);
  Chan's combination of two partial means (PyTorch's CPU and CUDA kernels combine per-lane or
  per-thread Welford moments so) adds at most 3u R + u X <= 7u X per level. The variance: two
  passes give gamma(n + 1) of the squares of the centred values, whose errors enter squared (the
  cross term of a common shift sums to 0) or as u |x_j - mean| (the subtraction's); Welford's n
  non-negative terms (x_k - M_(k-1))(x_k - M_k) carry the running means' errors times at most R:
  R sum_k (|e_(k-1)| + |e_k|) / n <= u R X (n/2 + 10); a combination level adds
  2 |M_b - M_a| (|e_a| + |e_b|) n_a n_b / n_node / n per node, at most R times its children's
  mean error, summed over the levels u R X (n/2 + 3.5 g^2 + 1.1 g). Bound:
  E_V = gamma(n + 6g + 3) var + gamma(n + 4g^2 + 2g + 11) R X + 2 E_M^2.
  w = var + eps as computed: E_W = (E_V + u eps)(1 + u) + u w (eps rounded to float32, then the
  addition); rstd = 1/sqrt(w) within rho_r = (1 + T)/sqrt(1 - E_W/w) - 1 relative (infinite when
  E_W >= w: no claim). The output, (x_i - mean) rstd or x_i rstd - mean rstd (PyTorch's CPU
  form), both rounded: its centred value errs by D_i = E_M + u (1 + u)(|x_i| + |mu| + E_M).
  Error: rstd (1 + rho_r)(1 + u) D_i + |y_i| ((1 + rho_r)(1 + u) - 1).
Each bound is evaluated in float64 from float64 statistics and raised by 2^-30 relative (that
evaluation's own error is below 2^-45); the judge measures errors from the float64 reference, so
that reference's own error bound is added.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from conformance.lowp.accumulate_terms import MARGIN, SLACK, T32, TINY32, U32, gamma
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified

EPS = 1e-5               # layer_norm's eps (torch.nn.functional.layer_norm's default)
UNDERFLOW = 120.0        # exp(-120) < 2^-150: float32 gives 0 or its least subnormals there


def reference(op: str, fmt: Format, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(correctly rounded result in the format, float64 approximation of the exact result)."""
    x = xs[0]
    y, err = (_log_softmax64 if op == "log_softmax" else _layer_norm64)(x)
    exact = _log_softmax_mp(x) if op == "log_softmax" else _layer_norm_mp(x)
    # the mpmath value is rounded to the format at the precision it was computed at
    with mpmath.workprec(320 if op == "log_softmax" else 600):
        rounded, _ = round_certified(fmt, y, err + MARGIN * np.abs(y), exact)
    return rounded, y


def float32_error(op: str, xs: list[np.ndarray], exact: np.ndarray) -> np.ndarray:
    """The float32 evaluation's error bound (absolute) at each output element."""
    with np.errstate(all="ignore"):
        if op == "log_softmax":
            # the judge measures from the float64 reference: its own error bound joins
            return _log_softmax_error(xs[0]) * SLACK + _log_softmax64(xs[0])[1]
        return _layer_norm_error(xs[0], exact) * SLACK + _layer_norm64(xs[0])[1]


# --- log_softmax ------------------------------------------------------------------------------

def _log_softmax64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 log_softmax and its error bound: x_i - m (2^-53 relative), each exp(x_j - m)
    (its argument's rounding, scaled by the exponential: sum_j p_j |x_j - m| <= n / e, and its own
    ulp), the sum (n 2^-53), log (2^-52 L) and the last subtraction (2^-53 |y|); 4x for the
    second-order terms."""
    n = x.shape[-1]
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        d = x - m
        big_l = np.log(np.sum(np.exp(d), axis=-1, keepdims=True))
        y = d - big_l
        err = 2.0 ** -50 * (np.abs(d) + np.abs(y) + big_l + n + 4)
    return y, err


def _log_softmax_mp(x: np.ndarray):
    """exact(index) -> the element (at the caller's 320 bits), each row's log-sum once (a row is
    asked again for each of its elements near a midpoint)."""
    rows: dict = {}

    def exact(idx):
        key = tuple(int(i) for i in idx[:-1])
        if key not in rows:
            vals = [mpmath.mpf(float(v)) for v in x[key]]
            k = max(range(len(vals)), key=lambda i: vals[i])
            top = vals[k]
            # log1p of the other terms: exact where they are far below 1
            rest = mpmath.fsum(mpmath.exp(v - top) for i, v in enumerate(vals) if i != k)
            rows[key] = (vals, top, mpmath.log1p(rest))
        vals, top, big_l = rows[key]
        d = vals[int(idx[-1])] - top          # exact: 320 bits span both formats' values
        y = d - big_l
        if big_l != 0 and d != 0 and y == d:
            # L is below 320 bits of d: d - L rounds to the format as d nudged by less than a
            # 16-bit ulp's 2^-280, which crosses no midpoint d is not on
            y = d - abs(d) * mpmath.ldexp(1, -300)
        return y
    return exact


def _log_softmax_error(x: np.ndarray) -> np.ndarray:
    n = x.shape[-1]
    m = np.max(x, axis=-1, keepdims=True)
    a = np.abs(x - m)
    e = np.exp(x - m)
    s = np.sum(e, axis=-1, keepdims=True)
    p = e / s
    r = np.where(a <= UNDERFLOW, np.expm1(U32 * a) * (1 + T32) + T32, 0.0)
    rho = np.sum(np.where(p > 0, p * r, 0.0), axis=-1, keepdims=True)
    g = gamma(max(n - 1, 0))
    rel_s = rho + g * (1 + rho) + 4 * n * TINY32 * (1 + g)
    big_l = np.log(s)
    ell = np.where(rel_s < 1, -np.log1p(-rel_s), np.inf)
    e_l = ell + T32 * (big_l + ell)
    return e_l + gamma(2) * (np.abs(x) + np.abs(m) + big_l + e_l)


# --- layer_norm -------------------------------------------------------------------------------

def _row_stats(x: np.ndarray):
    """(mean, biased variance, centred values), float64: the mean from fsum, two passes."""
    n = x.shape[-1]
    mu = np.empty(x.shape[:-1] + (1,))
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        mu[idx] = math.fsum(row) / n if np.all(np.isfinite(row)) else float(np.sum(row)) / n
    d = x - mu
    var = np.sum(d * d, axis=-1, keepdims=True) / n
    return mu, var, d


def _layer_norm64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 layer_norm and its error bound: the mean within 2^-52 |mu| (fsum, then /n), each
    centred value within that plus 2^-53 of itself; the variance within (n + 4) 2^-53 of itself
    plus the mean's error squared (two passes: the common shift's cross term sums to 0) and
    2^-52 of eps and the addition; sqrt and the division 3 2^-53; 4x for the second-order terms."""
    y, err, _ = layer_norm64_parts(x)
    return y, err


def layer_norm64_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float64 layer_norm, its absolute error bound, the relative error bound of the float64
    1/sqrt(var + eps) it divides by, 4x as the rest), as _layer_norm64 derives them."""
    n = x.shape[-1]
    with np.errstate(all="ignore"):
        mu, var, d = _row_stats(x)
        w = var + EPS
        y = d / np.sqrt(w)
        e_mu = 2.0 ** -52 * np.abs(mu)
        e_w = (n + 4) * 2.0 ** -53 * var + 2 * e_mu * e_mu + 2.0 ** -52 * w
        rel_rstd = 4 * (e_w / (2 * w) + 3 * 2.0 ** -53)
        err = 4 * (e_mu + 2.0 ** -53 * np.abs(d)) / np.sqrt(w) + np.abs(y) * rel_rstd
    return y, err, rel_rstd


def layer_norm_row_mp(row: np.ndarray) -> tuple[list, object]:
    """(n (x_j - mean) for each j, exact; 1 / sqrt(var + eps)) of one row in mpmath, at the
    caller's precision (600 bits: the row's sums are exact there)."""
    n = row.shape[-1]
    vals = [mpmath.mpf(float(v)) for v in row]
    total = mpmath.fsum(vals)
    nums = [n * v - total for v in vals]
    var = mpmath.fsum(t * t for t in nums) / n ** 3
    return nums, 1 / mpmath.sqrt(var + mpmath.mpf(1) / 100000)


def _layer_norm_mp(x: np.ndarray):
    """exact(index) -> the element (at the caller's 600 bits: the row's sum is exact there)."""
    n = x.shape[-1]
    rows: dict = {}

    def exact(idx):
        key = tuple(int(i) for i in idx[:-1])
        if key not in rows:
            rows[key] = layer_norm_row_mp(x[key])
        nums, rstd = rows[key]
        return nums[int(idx[-1])] / n * rstd
    return exact


def _layer_norm_error(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.shape[-1] == 0:
        return np.zeros(x.shape)
    rho_r, w, d_i = layer_norm32_parts(x)
    grow = (1 + rho_r) * (1 + U32)
    return grow * d_i / np.sqrt(w) + np.abs(y) * (grow - 1)


def layer_norm32_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rho_r: the relative error bound of a float32 rstd; w = var + eps, exact (float64);
    D_i: the error bound of the centred value x_i - mean as computed), the docstring's terms;
    rows of at least one element."""
    n = x.shape[-1]
    mu, var, _ = _row_stats(x)
    big_x = np.max(np.abs(x), axis=-1, keepdims=True)
    spread = np.max(x, axis=-1, keepdims=True) - np.min(x, axis=-1, keepdims=True)
    g = math.ceil(math.log2(n)) if n > 1 else 0
    e_m = gamma(n + 7 * g + 5) * big_x
    e_v = gamma(n + 6 * g + 3) * var + gamma(n + 4 * g * g + 2 * g + 11) * spread * big_x + \
        2 * e_m * e_m
    w = var + EPS
    e_w = (e_v + U32 * EPS) * (1 + U32) + U32 * w
    t = e_w / w
    rho_r = np.where(t < 1, (1 + T32) / np.sqrt(np.where(t < 1, 1 - t, 1.0)) - 1, np.inf)
    d_i = e_m + U32 * (1 + U32) * (np.abs(x) + np.abs(mu) + e_m)
    return rho_r, w, d_i
