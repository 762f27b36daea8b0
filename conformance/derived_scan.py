"""Derived error bounds of selective_scan, forward and VJP (registered in derived.py's
FORWARD_RULES / VJP_RULES). u is the policy's unit roundoff (2^-24, doubled for non-nearest
rounding), gamma_k = k u / (1 - k u).

Forward. Exactly, h[t] = sum_{s=-1..t} c(s, t), with c(s, t) = (prod_{r=s+1..t} A_r) B_s X_s for
s >= 0 and c(-1, t) = (prod_{r=0..t} A_r) h0: t + 2 terms, the magnitudes C_t = sum_s |c(s, t)|
(C_{-1} = |h0|, C_t = |A_t| C_{t-1} + |B_t X_t|).

Sequential order (TorchLean's kernel and the reference provider): h^_t = fl(fl(A_t h^_{t-1}) +
fl(B_t X_t)). Without underflow each rounding is a factor (1 + d), |d| <= u, applied to everything
already in the partial result, so h^_t = sum_s c(s, t) theta(s, t) with theta a product of
k(s, t) such factors: k(s, t) = 2 (t - s) + 2 for s >= 0 (B_s X_s and the sum at step s, then one
product and one sum per later step) and 2 (t + 1) for h0. Hence |theta - 1| <= gamma_{k(s,t)} <=
k(s, t) u / (1 - k_max u), and |h^_t - h_t| <= u (K_t) / (1 - k_max u), K_t = sum_s k(s, t)
|c(s, t)|, which obeys K_t = |A_t| (K_{t-1} + 2 C_{t-1}) + 2 |B_t X_t| (K_{-1} = 0).

Parallel order (native_cuda, seq >= its PARALLEL_MIN_SEQ, chunks of L >= 1 steps): per chunk c
the product P^_c (L - 1 rounded products in time order; the first is 1 * A, exact) and Q^_c, the
recurrence from 0 (step one rounds only B X: A * 0 + fl(B X) is exact); the carries
Carry_{c+1} = fl(fl(P^_c Carry_c) + Q^_c), Carry_0 = h0; then the recurrence over chunk c from
Carry_c. Count the roundings on each term c(s, t), t in chunk c_t: a term of c_t's own chunk (or
h0 when c_t = 0) meets exactly the sequential recurrence: k(s, t). A term of an earlier chunk
c_s: inside Q^_{c_s} at most the sequential count up to the chunk's end e, 2 (e - s) + 2, then
one rounding for the carry's sum; each whole chunk it is carried through costs L + 1 (P^'s
L - 1, the product with the carry, the sum) instead of the sequential 2 L; the last chunk is the
sequential recurrence from the carry. So each term carries at most k(s, t) + 1 factors (h0 at most
k(-1, t)), and |h^_t - h_t| <= u (K_t + C_t) / (1 - (k_max + 1) u): the bound both orders meet.

Underflow (gradual): a product whose result is below 2^-126 adds an absolute error of at most
2^-150 (HALF_SUB; sums are exact there, Hauser 1996). Such an error is then multiplied by the
coefficients of later steps, at most Pi_t = max_r prod_{q=r+1..t} |A_q| (the empty product 1
included), and, when it sits in a chunk product P^, by the carry it multiplies, at most
(1 + gamma) max_{s<t} C_s plus its own error: each output passes through at most 3 (t + 1)
products (A h, B X and the product chains), so 3 (t + 1) HALF_SUB Pi_t (1 + 2 maxC_t) (1 + u)
bounds their sum (flushing policies: TINY for every product and sum, 5 (t + 1) of them).

Overflow. The evaluation can overflow an intermediate though h_t is finite: |A_t h^_{t-1}|,
|B_t X_t|, h^_t (at most maxC_t (1 + gamma)), and in the parallel order the chunk products and
their products with a carry, at most R_t (1 + maxC_t) (1 + gamma), R_t the largest product of
|A| over a range of steps up to t. Where any of these reaches the float32 overflow threshold the
bound is +inf (any result admissible, error_models.py's "overflow-admissible"), from that step on.

VJP. The engine's rule (engine/ops/scan.py, NumPy) and the native kernels evaluate it in float64
from the float32 inputs (h recomputed in the sequential or the chunked order, the adjoint
dh[t] = g[t] + A[t+1] dh[t+1] in reverse time, the constant sums over t in a fixed order) and
round each gradient once to float32. With magnitudes D_t = |g_t| + |A_{t+1}| D_{t+1} (D_seq = 0)
of dh and C_t of h, a gradient's float64 value carries at most k64 = 6 (seq + 2) roundings of
u64 = 2^-53 on each of its terms (h: 2 (t + 1) + 1 in either order, dh likewise, one product, and
at most 2 seq sums for the constant dA, dB over t, chunk partials included), so its float64 error
is at most gamma64_{k64} M + U64, M the gradient's sum of |terms| (|B_t| D_t for dX, |X_t| D_t and
C_{t-1} D_t for dB and dA, summed over t when constant, |A_0| D_0 for dh0), and U64 the float64
underflow, at most 2^-1074 per product times the same kind of amplification as above (bounded
generously by 8 (seq + 2)^2 max(1, R)^2 (1 + maxC) (1 + maxD) (1 + max|B| + max|X| + maxC)).
The final rounding adds u |exact| + u E64 + HALF_SUB. Where a float64 intermediate can reach
2^1000 the bound is +inf.
"""
from __future__ import annotations

import numpy as np

from conformance.error_terms import HALF_SUB, OVERFLOW, TINY, flush_allowed

U64 = 2.0 ** -53
SLACK = 1 + 2.0 ** -40          # the bound's own float64 evaluation rounds upward by less
F64_RISK = 2.0 ** 1000


def _inputs(ctx):
    A, B, X, h0 = (np.asarray(a, np.float64) for a in ctx.inputs)
    seq, state = X.shape
    rows = seq if A.ndim == 2 else 1     # explicit: reshape(-1, 0) cannot infer it for state 0
    a = np.abs(A).reshape(rows, state)
    b = np.abs(B).reshape(rows, state)
    rows = (lambda m: (lambda t: m[t])) if A.ndim == 2 else (lambda m: (lambda t: m[0]))
    return seq, state, rows(a), rows(b), np.abs(X), np.abs(h0)


def _inf_nan(x):
    """NaN (from an inf * 0 of non-finite inputs) counts as unbounded."""
    return np.where(np.isnan(x), np.inf, x)


def _log2(x):
    with np.errstate(divide="ignore"):
        return np.log2(x)


def forward_bound(ref, ctx, unit):
    seq, state, a_at, b_at, x, h0 = _inputs(ctx)
    out = np.zeros((seq, state))
    if not out.size:
        return out
    flush = flush_allowed(ctx.policy)
    floor, per_step = (TINY, 5) if flush else (HALF_SUB, 3)
    c = h0.copy()
    k = np.zeros(state)
    max_c = h0.copy()
    suffix = np.zeros(state)               # log2 of Pi_t
    best_end = np.full(state, -np.inf)     # log2 of the best range product ending at t
    best = np.full(state, -np.inf)         # log2 of R_t
    risky = np.zeros(state, bool)
    with np.errstate(all="ignore"):
        for t in range(seq):
            at = a_at(t)
            p = b_at(t) * x[t]
            k = _inf_nan(at * (k + 2 * c) + 2 * p)
            step_c = at * c
            c = _inf_nan(step_c + p)
            max_c = _inf_nan(np.maximum.reduce([max_c, c, step_c, p]))
            la = _log2(at)
            suffix = np.maximum(0.0, suffix + la)
            best_end = la + np.maximum(0.0, best_end)
            best = np.maximum(best, best_end)
            k_max = 2.0 * (t + 1) + 1
            gam = k_max * unit / (1 - k_max * unit)
            r = np.exp2(np.minimum(best, 1100.0))
            grow = (1 + 2 * gam) * (1 + 2 * unit)
            risky |= (max_c * grow >= OVERFLOW) | (r * (1 + max_c) * grow >= OVERFLOW)
            rel = unit * (k + c) / (1 - k_max * unit)
            under = floor * per_step * (t + 1) * np.exp2(np.minimum(suffix, 1100.0)) * \
                (1 + 2 * max_c) * (1 + unit)
            out[t] = np.where(risky, np.inf, (rel + under) * SLACK)
    return out


def _dh_magnitudes(seq, state, a_at, g):
    d = np.zeros((seq, state))
    nxt = np.zeros(state)
    with np.errstate(all="ignore"):
        for t in range(seq - 1, -1, -1):
            nxt = g[t] + (a_at(t + 1) * nxt if t + 1 < seq else 0.0)
            d[t] = nxt
    return _inf_nan(d)


def vjp_bound(ref, ctx, unit):
    seq, state, a_at, b_at, x, h0 = _inputs(ctx)
    shape = np.shape(ref.value)
    if seq == 0 or state == 0:
        return np.zeros(shape)
    g = np.abs(np.asarray(ctx.g, np.float64))
    token = np.ndim(ctx.inputs[0]) == 2
    with np.errstate(all="ignore"):
        c = np.zeros((seq + 1, state))   # c[t + 1] = C_t, c[0] = |h0|
        c[0] = h0
        best_end = np.full(state, -np.inf)
        best = np.full(state, -np.inf)
        for t in range(seq):
            c[t + 1] = a_at(t) * c[t] + b_at(t) * x[t]
            la = _log2(a_at(t))
            best_end = la + np.maximum(0.0, best_end)
            best = np.maximum(best, best_end)
        c = _inf_nan(c)
        d = _dh_magnitudes(seq, state, a_at, g)
        b_rows = np.stack([b_at(t) for t in range(seq)])
        i = ctx.input_index
        if i == 0:
            terms = c[:-1] * d
        elif i == 1:
            terms = x * d
        elif i == 2:
            terms = b_rows * d
        else:
            terms = (a_at(0) * d[0])[None, :]
        mag = _inf_nan(terms if (token or i >= 2) else terms.sum(axis=0))
        mag = mag.reshape(shape)
        max_c, max_d = c.max(axis=0), d.max(axis=0)
        r = np.exp2(np.minimum(np.maximum(best, 0.0), 1100.0))
        k64 = 6.0 * (seq + 2)
        gam64 = k64 * U64 / (1 - k64 * U64)
        under64 = 2.0 ** -1074 * 8 * (seq + 2) ** 2 * r * r * (1 + max_c) * (1 + max_d) * \
            (1 + b_rows.max(axis=0) + x.max(axis=0) + max_c)
        risky = np.maximum.reduce([max_c, max_d, r * (1 + max_c + max_d),
                                   np.broadcast_to(mag, (mag.size // state, state)).max(axis=0)
                                   if mag.size else np.zeros(state)]) >= F64_RISK
        e64 = gam64 * mag * SLACK + np.broadcast_to(under64, mag.shape)
        exact = np.abs(np.nan_to_num(np.asarray(ref.exact, np.float64), nan=0.0, posinf=0.0,
                                     neginf=0.0))
        b = (unit * exact + (1 + 2 * unit) * e64 + HALF_SUB) * SLACK
        return np.where(np.broadcast_to(risky, b.shape) | ~np.isfinite(b), np.inf, b)
