"""VJP reference and float32 error model of 16-bit `attention`, o = softmax(q k^T / sqrt(d)) v
(accumulate_attention.py's forward; accumulate_vjp.py dispatches here). docs/OPS.md's rule,
scale c = 1/sqrt(d), P the exact weights: dv = P^T g, dP = g v^T, D_i = sum_j P_ij dP_ij,
dS_ij = P_ij (dP_ij - D_i), dq = c dS k, dk = c dS^T q.

Reference: the exact gradients rounded to the format. float64 evaluation from the forward's
float64 weights (accumulate_attention.weights64: within e_P = 4 rel of P, relative), each
further step's error counted (gamma64(n) per sum of n products, 2^-53 per operation, 2^-1070
absolute for float64 subnormals; 1.1x for the second-order terms); where a midpoint of the format
lies within that, mpmath at 256 bits decides.

Error model (u = 2^-24, gamma(k) = k u / (1 - k u), TINY = 2^-149). The VJP recomputes the
weights in float32 as the max-shifted forward does (accumulate_attention.py), then divides each
exponential by their float32 sum (or multiplies by its rounded reciprocal): the forward's
rho_ij bounds the exact-arithmetic normalization's relative error, the sum and the division add
gamma(S + 1), and exponentials that underflow 4 TINY each (relative S 4 TINY through the sum):
|P^_ij - P_ij| <= eps_ij P_ij + tau, eps_ij = (1 + rho_ij)(1 + gamma(S + 1)) - 1 + 4 S TINY,
tau = 6 TINY; Pi_ij = P_ij (1 + eps_ij) + tau bounds |P^_ij|. Then, in float32:
- dv^ = P^T g, L rounded products in any order: E_dv = (eps P + tau)^T |g| + gamma(L) Pi^T |g|
  + L TINY / 2;
- dP^ = g v^T, exact products (2^-150 each below float32's normal range) in any order:
  E_dP = gamma(dv - 1) |g| |v|^T + the tiny ones;
- D^_i either sum_j P^_ij dP^_ij: sum_j ((|dP_ij| + E_dP_ij)(eps_ij P_ij + tau) + P_ij E_dP_ij)
  + gamma(S) sum_j (|dP_ij| + E_dP_ij) Pi_ij + S TINY / 2, or sum_c g_ic O^_ic with O^ the
  float32 forward output (within its bound E_O, accumulate_attention.float32_error):
  sum_c |g_ic| E_O_ic + gamma(dv) sum_c |g_ic| (|O_ic| + E_O_ic) + dv TINY / 2; E_D the larger;
- dS^_ij = P^_ij (dP^_ij - D^_i) in either of softmax's two forms (accumulate_vjp_softmax.py),
  with the cotangent dP^ now in error too: with c_ij = dP_ij - D_i,
  G_ij = |dP_ij| + E_dP_ij + |D_i| + E_D_i and E_c = E_dP + E_D + u G:
  B_ij = (eps_ij P_ij + tau)(|c_ij| + E_c) + P_ij (E_dP_ij + E_D_i) + 2.01 u Pi_ij G_ij + 2 TINY;
- dq^ = c^ dS^ k with the rounded scale (or sqrt(d) and a division) applied to dS, k or the
  result: S products, S - 1 sums and the scale's two roundings:
  E_dq = c (B |k| + gamma(S + 2)(|dS| + B) |k|) + (S + 1) TINY, and dk^ the same over L with q.
Not covered: weights rounded to the format before their products (FlashAttention's 16-bit P),
D from a 16-bit output, or an online (tiled) softmax's rescaling: two roundings, or roundings the
model does not count. The bounds are evaluated in float64 from the float64 reference's values,
raised by 2^-30 relative, and the reference's own error bounds are added.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np

from conformance.lowp.accumulate_attention import output_error32, weights32, weights64
from conformance.lowp.accumulate_terms import MARGIN, SLACK, TINY32, U32, gamma, tiny_products
from conformance.lowp.formats import Format
from conformance.lowp.refs import round_certified

F64_TINY = 2.0 ** -1070
TAU = 6 * TINY32


def _gamma64(k: int) -> float:
    return k * 2.0 ** -53 / (1 - k * 2.0 ** -53)


def gradients(op: str, fmt: Format, xs: list[np.ndarray], g: np.ndarray) -> list[tuple]:
    """[(correctly rounded gradient, float64 gradient, float32 error bound with the float64
    one's own)] for dq, dk and dv."""
    q, k, v = xs
    with np.errstate(all="ignore"):
        p, rel = weights64(q, k)
        values = _float64(q, k, v, g, p, rel)
        bounds = _error32(q, k, v, g, p, rel)
    exact = _exact(q, k, v, g)
    out = []
    for which, ((y, err64), err32) in enumerate(zip(values, bounds)):
        with mpmath.workprec(256):     # rounded at the precision the mpmath value was made at
            ref, _ = round_certified(fmt, y, err64 + MARGIN * np.abs(y),
                                     lambda idx, w=which: exact(w, idx))
        out.append((ref, y, err32 * SLACK + err64))
    return out


def _float64(q, k, v, g, p, rel):
    """[(dq, its error bound), (dk, ...), (dv, ...)] in float64, from weights64's p and rel."""
    n_q, d = q.shape
    n_k, dv = v.shape
    scale = 1 / math.sqrt(d)
    e_p = 4 * rel * p + F64_TINY                       # absolute, per weight
    ag = np.abs(g)
    d_v = p.T @ g
    err_v = 1.1 * (e_p.T @ ag + _gamma64(n_q) * (p.T @ ag))
    d_p = g @ v.T                                      # exact products
    e_dp = _gamma64(max(dv - 1, 0)) * (ag @ np.abs(v).T)
    big_d = np.sum(p * d_p, axis=-1, keepdims=True)
    e_d = 1.1 * np.sum(e_p * np.abs(d_p) + p * e_dp + _gamma64(n_k) * p * np.abs(d_p), axis=-1,
                       keepdims=True)
    c = d_p - big_d
    e_c = e_dp + e_d + 2.0 ** -53 * np.abs(c)
    d_s = p * c
    e_s = 1.1 * (e_p * (np.abs(c) + e_c) + p * e_c) + 2.0 ** -53 * np.abs(d_s)
    a_s = np.abs(d_s)
    d_q = scale * (d_s @ k)
    err_q = 1.1 * scale * (e_s @ np.abs(k) + _gamma64(n_k + 3) * (a_s @ np.abs(k))) + F64_TINY
    d_k = scale * (d_s.T @ q)
    err_k = 1.1 * scale * (e_s.T @ np.abs(q) + _gamma64(n_q + 3) * (a_s.T @ np.abs(q))) + \
        F64_TINY
    return [(d_q, err_q), (d_k, err_k), (d_v, err_v + F64_TINY)]


def _error32(q, k, v, g, p, rel):
    """The float32 bounds of dq, dk and dv (the docstring's E_dq, E_dk, E_dv), from weights64's
    p and rel."""
    n_q, d = q.shape
    n_k, dv = v.shape
    scale = 1 / math.sqrt(d)
    _, rho = weights32(q, k, p)
    live = p > 0
    eps = (1 + rho) * (1 + gamma(n_k + 1)) - 1 + 4 * n_k * TINY32
    ep = np.where(live, eps * p, 0.0) + TAU           # |P^ - P|
    big_pi = p + ep                                    # |P^|
    ag = np.abs(g)
    e_dv = ep.T @ ag + gamma(n_q) * (big_pi.T @ ag) + n_q * TINY32 / 2
    d_p = g @ v.T
    e_dp = gamma(max(dv - 1, 0)) * (ag @ np.abs(v).T) + tiny_products(g, v.T)
    a_dp = np.abs(d_p) * (1 + 2.0 ** -40) + e_dp     # |dP^|, float64's dP within 2^-40 of it
    e_d_weights = np.sum(a_dp * ep + p * e_dp + gamma(n_k) * a_dp * big_pi, axis=-1,
                         keepdims=True) + n_k * TINY32 / 2
    o = p @ v
    # the forward's bound on the float32 output, and its float64 reference's error (as the
    # forward's float32_error adds it)
    e_o = output_error32(p, rho, v) * SLACK + 4 * rel * (p @ np.abs(v)) + MARGIN * np.abs(o)
    e_d_output = np.sum(ag * e_o + gamma(dv) * ag * (np.abs(o) + e_o), axis=-1,
                        keepdims=True) + dv * TINY32 / 2
    e_d = np.maximum(e_d_weights, e_d_output)
    big_d = np.sum(p * d_p, axis=-1, keepdims=True)
    # |D| and c from float64 values: within 2^-40 of sum_j P |dP| of the exact ones
    off = 2.0 ** -40 * np.sum(p * np.abs(d_p), axis=-1, keepdims=True)
    big_g = a_dp + np.abs(big_d) + off + e_d
    e_c = e_dp + e_d + U32 * big_g
    c = np.abs(d_p - big_d) + off + 2.0 ** -40 * np.abs(d_p)
    b = ep * (c + e_c) + p * (e_dp + e_d) + 2.01 * U32 * big_pi * big_g + 2 * TINY32
    a_s = p * c
    e_dq = scale * (b @ np.abs(k) + gamma(n_k + 2) * ((a_s + b) @ np.abs(k))) + \
        (n_k + 1) * TINY32
    e_dk = scale * (b.T @ np.abs(q) + gamma(n_q + 2) * ((a_s + b).T @ np.abs(q))) + \
        (n_q + 1) * TINY32
    return [e_dq, e_dk, e_dv]


def _exact(q, k, v, g):
    """exact(which, index) -> dq, dk or dv (0, 1, 2) at index (at the caller's 256 bits), the
    weights and dS of each query row once."""
    mp = lambda a: [[mpmath.mpf(float(t)) for t in row] for row in a]   # noqa: E731
    cache: dict = {}

    def inputs():
        if "q" not in cache:
            cache.update(q=mp(q), k=mp(k), v=mp(v), g=mp(g), scale=1 / mpmath.sqrt(q.shape[1]))
        return cache

    def row(i):
        key = ("row", i)
        if key not in cache:
            c = inputs()
            s = [mpmath.fsum(a * b for a, b in zip(c["q"][i], kj)) * c["scale"] for kj in c["k"]]
            top = max(s)
            e = [mpmath.exp(t - top) for t in s]
            total = mpmath.fsum(e)
            p = [t / total for t in e]
            d_p = [mpmath.fsum(a * b for a, b in zip(c["g"][i], vj)) for vj in c["v"]]
            big_d = mpmath.fsum(a * b for a, b in zip(p, d_p))
            cache[key] = (p, [a * (b - big_d) for a, b in zip(p, d_p)])
        return cache[key]

    def exact(which, idx):
        a, b = int(idx[0]), int(idx[1])
        c = inputs()
        if which == 0:                     # dq_ab = scale sum_j dS_aj k_jb
            return c["scale"] * mpmath.fsum(s * kj[b] for s, kj in zip(row(a)[1], c["k"]))
        if which == 1:                     # dk_ab = scale sum_i dS_ia q_ib
            return c["scale"] * mpmath.fsum(row(i)[1][a] * c["q"][i][b]
                                            for i in range(q.shape[0]))
        return mpmath.fsum(row(i)[0][a] * c["g"][i][b] for i in range(q.shape[0]))   # dv_ab
    return exact
