"""Error models of 16-bit layer_norm and attention evaluated with every intermediate rounded to a
declared arithmetic format A (accumulate_rounded.py: the declaration, the rounding rules, g(k) =
(1 + u)^k - 1, h(k) = (1 - u)^-k - 1, the faithful exp and rsqrt assumed, the judging by intervals
and the overflow rule). c_j is input j's conversion error to A (0 where A holds S's values), eta
A's least subnormal, N its least normal, OMEGA its overflow threshold.

- layer_norm over a row x of n values (no affine parameters, eps = 1e-5), in TWO PASSES: the mean,
  then the centred values and their squares (a kernel computing Welford's running moments in A is
  not covered: it is judged as the two-pass evaluation). mu, var = the exact mean and biased
  variance, d_j = x_j - mu, r = 1/sqrt(var + eps), y_i = d_i r.
  1. The mean: the converted values summed in any order (within g(n - 1) sum |x'_j|, magnitude at
     most (1 + g(n - 1)) sum |x'_j| =: T), then divided by n rounded to A, or multiplied by 1/n
     rounded (at most three roundings, one a division: h(3)), plus eta for the quotient's
     underflow and, where 1/n is below N (n > 2^14 in float16), eta/2 T for the subnormal 1/n:
     E_M = sum c_j / n + g(n - 1) sum |x'_j| / n + h(3) T / n + eta (+ eta/2 T).
  2. The centred values, fl(x'_j - mu^) (a difference: one rounding, relative):
     |d^_j - d_j| <= D_j = c_j + E_M + u (|d_j| + c_j + E_M).
  3. Their squares, rounded (or fused into the sum: fewer roundings), then summed in any order:
     q_j in [max(0, |d_j| - D_j)^2 (1 - u) - eta/2, (|d_j| + D_j)^2 (1 + u) + eta/2], the sum
     in [max((1 - u)^(n - 1) sum q_lo, max q_lo), (1 + u)^(n - 1) sum q_hi] (non-negative terms;
     a sum never falls below a term it holds), then divided by n as the mean: a factor in
     [(1 - u)^3, (1 - u)^-3], eta for underflow (and eta/2 of the sum for a subnormal 1/n);
     the variance v^ >= 0 always.
  4. eps rounded to A (subnormal in float16: eta/2 absolute), or held exactly, then w^ = fl(v^ +
     eps^): in [(v_lo + eps(1 - u) - eta/2)(1 - u), (v_hi + eps(1 + u) + eta/2)(1 + u)].
  5. The scale r^: rsqrt faithful (2u), or 1/sqrt(w^) or a division by sqrt(w^), each correctly
     rounded: r^ in [(1 - 2u) / sqrt(w_hi), (1 + u)/(1 - u) / sqrt(w_lo)] = [r_lo, r_hi], which
     holds the exact r too, so |r^ - r| <= r_hi - r_lo.
  6. The output, d^_i r^ (or d^_i / sqrt(w^)) rounded, or x'_i r^ - mu^ r^ (PyTorch's CPU form:
     the products rounded, or fused): its centred value errs by at most D'_i = c_i + E_M +
     u (|x_i| + c_i + |mu| + E_M) (>= D_i), each product's underflow adds eta/2, so the value
     before the last rounding is within Z_i = D'_i r_hi + eta + |d_i| (r_hi - r_lo) of y_i, and
     the rounding adds u |y_i| + u Z_i + eta/2.
  Error: Z_i (1 + u) + u |y_i| + eta/2. Finite wherever nothing overflows: where it exceeds |y_i|
  (a rounded mean's error beyond the spread: long bfloat16 rows) the sign is not checked.
  Overflow (the sum T, a centred value, a square, the sum of squares or w^ reaching OMEGA, the
  products x'_i r^ and mu^ r^ of the CPU form, or n itself): an infinite variance gives rstd 0,
  so a finite result must lie in the bound's interval widened to hold 0; a row with an input
  converted to an infinity gives NaN (its mean is infinite): only 0 is accepted as finite there.
- attention, per query row q (d values) and keys k_j (S of them), values v_j:
  s_j = q.k_j / sqrt(d), m = max s_j, p = softmax(s), o_c = sum_j p_j v_jc.
  1. Scores, in any of the forms (q k^T) scaled by 1/sqrt(d) rounded, divided by sqrt(d)
     rounded, or q and k each scaled by d^(-1/4) rounded (PyTorch's math path): each term passes
     through at most d + 4 roundings, divisions among them: |s^_j - s_j| <= a_j =
     (sum_t c_qt |k_jt| + |q'_t| c_kjt) / sqrt(d) + h(d + 4) sum_t |q'_t k'_jt| / sqrt(d) + Z_j,
     Z_j = (1 + g(d + 4)) (eta/2 (1 + u)^2 (sum |q'| + sum |k'_j|) + d (eta/2 + eta^2/4)) + eta/2
     (a scaled input, a product and the scaling may underflow).
  2. The computed max is within a* = max_j a_j of m; fl(s^_j - m^) is within Delta_j = a_j + a* +
     u (|s_j - m| + a_j + a*) of s_j - m; the exponentials, faithful, in [L_j, U_j] and their sum
     in [s_lo, s_hi], s_lo >= 1, as softmax's (accumulate_rounded.py).
  3. The weights e^_j / s^ (or times a rounded reciprocal) in [W_lo_j, W_hi_j] =
     [(1 - u)^2 L_j / s_hi - eta/2, (1 + u)^2 min(1, U_j / s_lo) + eta/2]; omega_j =
     max(W_hi_j - p_j, p_j - W_lo_j) >= |w^_j - p_j|.
  4. Normalized first, o^ = sum fl(w^_j v'_jc) in any order (S roundings each):
     |o^ - o| <= sum omega_j |v'_jc| + sum p_j c_vjc + g(S) sum W_hi_j |v'_jc| + E_u,
     E_u = S eta/2 (1 + g(S)) (each product's underflow, carried through the sum's roundings).
     Normalized after (sum e^_j v'_j, then divided by s^: FlashAttention's order, with the max
     known), the same terms (e^_j / s^ lies in [W_lo_j, W_hi_j]; s^ >= 1 so the numerator's
     error shrinks) plus the quotient's roundings: g(2)((1 + g(S)) sum W_hi_j |v'_jc| + E_u)
     + eta/2. Error: the sum of both. A tiled kernel's online softmax (a running max, partial
     sums rescaled) adds roundings this model does not count, as in float32.
  Overflow (a score's partial sums, the weights' sum, or the weighted sums reaching OMEGA, or an
  input converted to an infinity): a finite result within R_c = (1 + g(2))(1 + g(S))(W
  max_j |v'_jc| + S eta/2) + eta of 0, where W = (1 + u)^2 (1 - u)^-(S - 1) + S eta/2 bounds
  the computed weights' sum whatever the scores (they are non-negative, and e^_j / s^ sum to at
  most (1 - u)^-(S - 1)), and S eta/2 the products' underflow. A score of
  -inf (an infinite input) has weight 0 on both sides and no part in a* or the sum's bounds; an
  infinite value whose weight may vanish in A (W_lo_j = 0), or a score's product of an infinite
  input and a nonzero one converted to 0, makes NaN (0 * inf) acceptable.
"""
from __future__ import annotations

import math

import numpy as np

from conformance.lowp import accumulate_attention, accumulate_norms
from conformance.lowp.accumulate_rounded import (Bounds, converted, exp_terms, finite_abs, grow,
                                                 grow_div, indicator, overflow_threshold,
                                                 positive_sum, shrink, widen)
from conformance.lowp.formats import Format

EPS = accumulate_norms.EPS


def _layer_norm(acc: Format, x: np.ndarray) -> Bounds:
    u, tiny, n = acc.unit_roundoff, acc.min_subnormal, x.shape[-1]
    if n == 0:
        empty = np.zeros(x.shape)
        return Bounds(empty, empty, empty.astype(bool), empty, empty, empty.astype(bool))
    top = overflow_threshold(acc)
    subnormal_inverse = 1.0 / n < acc.min_normal
    with np.errstate(all="ignore"):
        xa, c = converted(acc, x)
        mu, var, d = accumulate_norms._row_stats(x)
        y, err64 = accumulate_norms._layer_norm64(x)
        g1 = grow(u, n - 1)
        total = (1 + g1) * np.sum(np.abs(xa), axis=-1, keepdims=True)
        e_m = (np.sum(c, axis=-1, keepdims=True) / n + g1 * np.sum(np.abs(xa), axis=-1,
               keepdims=True) / n + grow_div(u, 3) * total / n + tiny +
               (tiny / 2 * total if subnormal_inverse else 0.0))
        a = np.abs(d)
        centred = c + e_m + u * (a + c + e_m)
        q_lo = np.maximum(0.0, np.maximum(0.0, a - centred) ** 2 * (1 - u) - tiny / 2)
        q_hi = (a + centred) ** 2 * (1 + u) + tiny / 2
        sq_lo = np.maximum(shrink(u, n - 1) * np.sum(q_lo, axis=-1, keepdims=True),
                           np.max(q_lo, axis=-1, keepdims=True))
        sq_hi = (1 + grow(u, n - 1)) * np.sum(q_hi, axis=-1, keepdims=True)
        inverse_loss = tiny / 2 * sq_hi if subnormal_inverse else 0.0
        v_lo = np.maximum(0.0, sq_lo / n * shrink(u, 3) - tiny - inverse_loss)
        v_hi = sq_hi / n * (1 + grow_div(u, 3)) + tiny + inverse_loss
        w_lo = (v_lo + EPS * (1 - u) - tiny / 2) * (1 - u)
        w_hi = (v_hi + EPS * (1 + u) + tiny / 2) * (1 + u)
        r_lo, r_hi = (1 - 2 * u) / np.sqrt(w_hi), (1 + u) / (1 - u) / np.sqrt(w_lo)
        shifted = c + e_m + u * (np.abs(x) + c + np.abs(mu) + e_m)
        z = shifted * r_hi + tiny + a * (r_hi - r_lo)
        err = z * (1 + u) + u * np.abs(y) + tiny / 2
        lo, hi = widen(y - err - 2 * err64, y + err + 2 * err64)
        lost = np.any(np.isinf(c), axis=-1, keepdims=True)
        overflow = lost | (n >= top) | (total >= top) | (w_hi >= top) | \
            (np.max((a + centred) ** 2 * (1 + u), axis=-1, keepdims=True) >= top) | \
            (sq_hi >= top) | ((np.abs(x) + c) * r_hi * (1 + u) >= top) | \
            ((np.abs(mu) + e_m) * r_hi * (1 + u) >= top)
        lo_o = np.where(lost, 0.0, np.minimum(lo, 0.0))
        hi_o = np.where(lost, 0.0, np.maximum(hi, 0.0))
    return Bounds(lo, hi, np.broadcast_to(overflow, x.shape), lo_o, hi_o,
                  np.zeros(x.shape, dtype=bool))


def _attention(acc: Format, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> Bounds:
    u, tiny = acc.unit_roundoff, acc.min_subnormal
    d, n_keys = q.shape[1], k.shape[0]
    top = overflow_threshold(acc)
    root = math.sqrt(d)
    with np.errstate(all="ignore"):
        (qa, cq), (ka, ck), (va, cv) = (converted(acc, t) for t in (q, k, v))
        s = (q @ k.T) / root
        dots = np.abs(qa) @ np.abs(ka).T                            # (L, S)
        under = (1 + grow(u, d + 4)) * (tiny / 2 * (1 + u) ** 2 * (
            np.sum(np.abs(qa), axis=1)[:, None] + np.sum(np.abs(ka), axis=1)[None, :]) +
            d * (tiny / 2 + tiny * tiny / 4)) + tiny / 2
        m = np.max(s, axis=1, keepdims=True)
        gone = np.isneginf(s) & np.isfinite(m)      # exp(-inf) = 0 on both sides
        a = np.where(gone, 0.0, (cq @ finite_abs(k).T + finite_abs(qa) @ ck.T) / root +
                     grow_div(u, d + 4) * dots / root + under)
        a_star = np.max(a, axis=1, keepdims=True)
        delta = a + a_star + u * (np.abs(s - m) + a + a_star)
        e_lo, e_hi = exp_terms(acc, s - m, np.where(gone, 0.0, delta), gone)
        s_lo, s_hi = positive_sum(acc, e_lo, e_hi)
        w_lo = np.maximum(0.0, shrink(u, 2) * e_lo / s_hi - tiny / 2)
        w_hi = (1 + u) ** 2 * np.minimum(1.0, e_hi / s_lo) + tiny / 2
        p = np.exp(s - m)
        p = p / np.sum(p, axis=1, keepdims=True)
        omega = np.maximum(w_hi - p, p - w_lo)
        mag = np.abs(va)                                            # (S, dv)
        g_s, g_2 = grow(u, n_keys), grow(u, 2)
        weighted = w_hi @ mag
        underflows = n_keys * tiny / 2 * (1 + g_s)     # the products', through the sum
        err = (omega @ mag + p @ cv + g_s * weighted + underflows +
               g_2 * ((1 + g_s) * weighted + underflows) + tiny / 2)
        o, err64 = accumulate_attention._float64(q, k, v)
        lo, hi = widen(o - err - 2 * err64, o + err + 2 * err64)
        lost = np.any(np.isinf(cq), axis=1)[:, None] | np.any(np.isinf(ck)) | \
            np.any(np.isinf(cv), axis=0)[None, :]
        scores_overflow = np.max(dots * (1 + grow_div(u, d + 4)) + under, axis=1,
                                 keepdims=True) >= top
        sums_overflow = (1 + g_s) * np.maximum(e_hi @ finite_abs(va), w_hi @ finite_abs(va)) \
            >= top
        overflow = lost | scores_overflow | sums_overflow | (n_keys >= top)
        total_weight = (1 + u) ** 2 / shrink(u, max(n_keys - 1, 0)) + n_keys * tiny / 2
        reach = (1 + g_2) * (1 + g_s) * (total_weight * np.max(
            finite_abs(va), axis=0, initial=0.0)[None, :] + n_keys * tiny / 2) + tiny
        reach = np.broadcast_to(reach, o.shape)
        # an infinite value whose weight may vanish in A gives 0 * inf: NaN, and so does a
        # score's product of an infinite input and a nonzero one converted to 0
        vanish = ((w_lo == 0).astype(float) @ np.isinf(va).astype(float) > 0) | np.any(
            indicator(qa, q, True) @ indicator(ka, k, False).T +
            indicator(qa, q, False) @ indicator(ka, k, True).T > 0, axis=1, keepdims=True)
    return Bounds(lo, hi, np.broadcast_to(overflow, o.shape), -reach, reach,
                  np.zeros(o.shape, dtype=bool), vanish)


def bounds(op: str, acc: Format, xs: list[np.ndarray], exact: np.ndarray) -> Bounds:
    """layer_norm's or attention's model evaluated in `acc` (accumulate_rounded.bounds)."""
    if op == "layer_norm":
        return _layer_norm(acc, xs[0])
    return _attention(acc, *xs)
