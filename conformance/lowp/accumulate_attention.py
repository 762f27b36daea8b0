"""Reference and float32 error model of 16-bit scaled dot-product attention, `attention`:
fn(q, k, v) with q (L, d), k (S, d), v (S, dv) -> (L, dv), softmax(q k^T / sqrt(d)) v, no mask, no
dropout (torch.nn.functional.scaled_dot_product_attention's default scale). accumulate.py
dispatches here; the rest of the audit (cases, judging) is shared.

Reference: the exact result rounded to the format. float64 evaluation (exact products, the max
shift) with an absolute error bound of its own; where a midpoint of the format lies within it,
mpmath at 256 bits decides.

Error model, for float32 arithmetic inside and one rounding at the output (u = 2^-24,
gamma(k) = k u / (1 - k u), T = 8u: float32 exp within 4 ulps, as accumulate_norms.py says).
Let s_j = q.k_j / sqrt(d) (one query row), m = max_j s_j, p = softmax(s):
- scores: d exact products summed in any order, times the scale rounded to float32 (1/sqrt(d),
  or sqrt(d) and a division), rounded: |s^_j - s_j| <= a_j = gamma(d + 2) sum_t |q_t k_jt| / sqrt(d);
- the computed max is within max_k a_k of m, so |s^_j - m^| <= |s_j - m| + a_j + max_k a_k =: D_j,
  and exp(fl(s^_j - m^)) is exp(s_j - m^) exp(b'_j)(1 + eta_j), |b'_j| <= a_j + u D_j, |eta_j| <= T:
  per term a log-perturbation b_j = a_j + u D_j - log(1 - T). The shift is common and cancels;
  the normalized weights then satisfy |w_j / p_j - 1| <= rho_j = expm1(b_j + bbar),
  bbar = sum_k p_k expm1(b_k) (above: Jensen's inequality; below: sum_k p_k e^(b_k) <= 1 + bbar);
- the normalization, before the weighted sum (p_j = e_j / sum) or after it (o = sum e_j v_j /
  sum e_j, as FlashAttention does): the sum of positive terms gamma(S - 1), the division u,
  within gamma(S) relative: rho'_j = (1 + rho_j)(1 + gamma(S)) - 1;
- the weighted sum of v, S products summed in any order: gamma(S) sum_j w_j |v_j|.
Error: sum_j p_j rho'_j |v_jc| + gamma(S) sum_j p_j (1 + rho'_j) |v_jc|, plus 4 2^-149 per
underflowing exponential (sum_j |v_jc| + S sum_j p_j |v_jc|). A tiled kernel's online softmax
(a running max, partial sums rescaled by exp(m_old - m_new)) adds roundings per rescale that
this model does not count: such a kernel is judged as the max-shifted evaluation. The bound is
evaluated in float64 and raised by 2^-30 relative, and the float64 reference's own error bound
(the judge measures from it) is added.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from conformance.lowp.accumulate_terms import MARGIN, SLACK, T32, TINY32, U32, gamma
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified

OPS = ("attention",)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def reference(op: str, fmt: Format, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(correctly rounded result in the format, float64 approximation of the exact result)."""
    o, err = _float64(*xs)
    with mpmath.workprec(256):    # the mpmath value is rounded at the precision it was made at
        rounded, _ = round_certified(fmt, o, err, _exact(*xs))
    return rounded, o


def _float64(q, k, v) -> tuple[np.ndarray, np.ndarray]:
    """float64 attention and its error bound."""
    with np.errstate(all="ignore"):
        p, rel = weights64(q, k)
        o = p @ v
        err = 4 * rel * (p @ np.abs(v)) + MARGIN * np.abs(o)
    return o, err


def weights64(q, k) -> tuple[np.ndarray, np.ndarray]:
    """(the float64 attention weights, a relative error bound per query row; 4x it bounds the
    weights' and, the weighted sum's (S + 1) 2^-53 included, the output's error)."""
    d = q.shape[1]
    s = (q @ k.T) / math.sqrt(d)
    p = _softmax_rows(s)
    # float64's own error: each score within (d + 4) 2^-53 of sum |q k| / sqrt(d) (the dot,
    # the scale, the product), so each weight within twice the largest of those plus
    # 2^-53 |s_j - m| (the shift) and (S + 4) 2^-53 (exp, the sum, the division); the
    # weighted sum (S + 1) 2^-53 more; 4x for the second-order terms
    e_s = (d + 4) * 2.0 ** -53 * (np.abs(q) @ np.abs(k).T) / math.sqrt(d)
    spread = np.max(s, axis=-1, keepdims=True) - np.min(s, axis=-1, keepdims=True)
    rel = 2 * np.max(e_s, axis=-1, keepdims=True) + 2.0 ** -53 * spread + \
        (2 * k.shape[0] + 8) * 2.0 ** -53
    return p, rel


def _exact(q, k, v):
    """exact(index) -> the element (at the caller's 256 bits), each query row's weights once."""
    rows: dict = {}

    def exact(idx):
        i, c = int(idx[0]), int(idx[1])
        if i not in rows:
            root = mpmath.sqrt(q.shape[1])
            qi = [mpmath.mpf(float(t)) for t in q[i]]
            s = [mpmath.fsum(a * mpmath.mpf(float(b)) for a, b in zip(qi, kj)) / root
                 for kj in k]
            top = max(s)
            e = [mpmath.exp(t - top) for t in s]
            total = mpmath.fsum(e)
            rows[i] = [t / total for t in e]
        return mpmath.fsum(w * mpmath.mpf(float(vj)) for w, vj in zip(rows[i], v[:, c]))
    return exact


def float32_error(op: str, xs: list[np.ndarray], exact: np.ndarray) -> np.ndarray:
    """The float32 evaluation's error bound (absolute) at each output element."""
    q, k, v = xs
    with np.errstate(all="ignore"):
        p, rho = weights32(q, k)
        err = output_error32(p, rho, v)
    # the judge measures from the float64 reference: its own error bound joins
    return err * SLACK + _float64(q, k, v)[1]


def output_error32(p: np.ndarray, rho: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The docstring's error bound of the float32 output, from weights32's p and rho."""
    n_keys = v.shape[0]
    live = p > 0                        # a weight float64 underflows: its term is the tiny one
    g = gamma(n_keys)
    rho2 = (1 + rho) * (1 + g) - 1
    av = np.abs(v)
    err = np.where(live, p * rho2, 0.0) @ av + g * (np.where(live, p * (1 + rho2), 0.0) @ av)
    return err + 4 * TINY32 * (np.sum(av, axis=0) + n_keys * (p @ av))


def weights32(q, k, p: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the exact weights p, float64; rho: the relative error bound of float32 weights
    exp(fl(s^_j - m^)) / sum_k of them, the sum and division exact, the docstring's). `p`:
    those weights where the caller has them (weights64's)."""
    d = q.shape[1]
    s = (q @ k.T) / math.sqrt(d)
    p = _softmax_rows(s) if p is None else p
    a = gamma(d + 2) * (np.abs(q) @ np.abs(k).T) / math.sqrt(d)
    m = np.max(s, axis=-1, keepdims=True)
    reach = np.abs(s - m) + a + np.max(a, axis=-1, keepdims=True)
    b = a + U32 * reach - math.log1p(-T32)
    live = p > 0                        # a weight float64 underflows: its term is the tiny one
    bbar = np.sum(np.where(live, p * np.expm1(b), 0.0), axis=-1, keepdims=True)
    return p, np.expm1(b + bbar)
