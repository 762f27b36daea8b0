"""The scan family (engine/ops/scan.py): selective_scan, the recurrence h[t] = A[t] h[t-1] +
B[t] X[t] from h0 (A and B constant (state,) or token-dependent (seq, state)).

Edge set (23 cases): SCAN_FORMS: seq across the 32-step chunk and the 256-step switch point up to
4097 steps, state across warp and block boundaries, state 2^18 + 1 (past 2^20 inputs), seq 0 and
state 0, both variants; values mixed below 256 steps, normal above; A's regime cycles
(scan_values).

Derived bounds, forward and VJP. u is the policy's unit roundoff (2^-24, doubled for non-nearest
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
2^1000 the bound is +inf."""
from __future__ import annotations

import numpy as np

from conformance import orders
from conformance.bad_inputs import filled, huge_matrix
from conformance.edges import MIXED, NORMAL, Edge
from conformance.error_terms import HALF_SUB, OVERFLOW, TINY, DerivedRule, flush_allowed
from conformance.families.spec import (COUNT, DIMS, RANK, AuditCase, OpSpec, normal, param,
                                       unary)
from conformance.samplers import EDGE_EXTENTS, F32
from engine import ops
from engine.errors import NonFiniteInputError, ShapeError, UInt32OverflowError
from engine.session import current_session
from engine.types import BackendOp as Op

GROUP = "linear algebra"


# --- layout and values ----------------------------------------------------------------------------

def scan_layout(rng, cls):
    """[A, B, X, h0] for X (seq, state): A and B (state,) or, half the time, (seq, state)."""
    seq, state = int(rng.integers(1, 25)), int(rng.integers(1, 7))
    if cls == "shapes":
        if rng.integers(0, 2):
            seq = int(rng.choice(EDGE_EXTENTS))
        else:
            seq, state = int(rng.integers(1, 4)), int(rng.choice(EDGE_EXTENTS))
    elif cls == "empty":
        seq, state = (0, state) if rng.integers(0, 2) else (seq, 0)
    coef = (seq, state) if rng.integers(0, 2) else (state,)
    return [coef, coef, (seq, state), (state,)], {}


# The A regimes the scan's values cycle through (by case index): as drawn, |A| just below 1, just
# above 1 (slow growth: (1 + 2^-8)^4097 < 2^24), negative near -1, a third exact zeros, decay
# (uniform in (-1, 1)), and fast growth (|A| in [1, 1.5]: overflow within a few hundred steps).
SCAN_A_REGIMES = ("drawn", "below-one", "above-one", "negative", "zeros", "decay", "growth")


def scan_values(arrays, cls, index, rng):
    """A finite (the op refuses any other) and shaped by the case's regime; the signed-zero and
    subnormal classes keep their A as drawn (finite already)."""
    a = np.asarray(arrays[0], np.float64)
    a = np.where(np.isfinite(a), a, rng.standard_normal(a.shape))
    regime = "drawn" if cls in ("signed-zero", "subnormal") else \
        SCAN_A_REGIMES[index % len(SCAN_A_REGIMES)]
    unit = rng.random(a.shape)
    sign = np.where(rng.random(a.shape) < 0.5, -1.0, 1.0)
    if regime == "below-one":
        a = 1 - unit * np.exp2(-rng.integers(6, 21, a.shape).astype(np.float64))
    elif regime == "above-one":
        a = 1 + unit * 2.0 ** -8
    elif regime == "negative":
        a = -(1 - unit * 2.0 ** -6)
    elif regime == "zeros":
        a = np.where(unit < 1 / 3, sign * 0.0, a)
    elif regime == "decay":
        a = 2 * unit - 1
    elif regime == "growth":
        a = sign * (1 + 0.5 * unit)
    arrays[0] = a.astype(F32)
    return _scan_in_range(arrays)


SCAN_ADJOINT_MAX = 2.0 ** 400     # largest sum of |A| products the adjoint may carry (float64)
SCAN_STATE_MAX = 2.0 ** 120       # largest sum of |terms| a state may reach (float32 holds 2^128)


def _scan_in_range(arrays):
    """Keep every exact state below 2^120 and the adjoint's coefficient sums below 2^400, so that
    only intermediates can overflow (the derived bound admits any result there), never an exact
    value or a float64 VJP step: a channel whose |A| products grow past that gets |A| clipped to 1,
    and one whose states still grow past 2^120 gets X and h0 scaled by a power of two. Non-finite
    B, X and h0 entries are left alone (they count as 0 here)."""
    a, b, x, h0 = (np.asarray(v, np.float64) for v in arrays)
    seq, state = x.shape
    if x.size == 0:
        return arrays
    rows = a.reshape(seq if a.ndim == 2 else 1, state)
    at = (lambda t: np.abs(rows[t])) if a.ndim == 2 else (lambda t: np.abs(rows[0]))
    with np.errstate(all="ignore"):
        sums, worst = np.ones(state), np.ones(state)
        for t in range(seq - 2, -1, -1):          # S_t = 1 + |A_{t+1}| S_{t+1}
            sums = 1 + at(t + 1) * sums
            worst = np.maximum(worst, sums)
        clip = ~(worst <= SCAN_ADJOINT_MAX)
        rows = np.where(clip, np.clip(rows, -1.0, 1.0), rows)
        fin = lambda v: np.where(np.isfinite(v), np.abs(v), 0.0)
        brows = fin(b).reshape(rows.shape)
        c, top = fin(h0), fin(h0)
        for t in range(seq):
            r = t if a.ndim == 2 else 0
            c = np.abs(rows[r]) * c + brows[r] * fin(x[t])
            top = np.maximum(top, c)
        k = np.where(top >= SCAN_STATE_MAX, np.ceil(np.log2(np.maximum(top, 1.0))) - 119, 0)
    scale = np.exp2(-k)
    return [rows.reshape(a.shape).astype(F32), arrays[1], (x * scale).astype(F32),
            (h0 * scale).astype(F32)]


# --- the fixed edge set ---------------------------------------------------------------------------
# (seq, state, token-dependent): seq across the chunk (32) and switch-point (256) boundaries up to a
# few thousand steps with one or two channels, state across the warp and block boundaries with few
# steps, seq 1, state 1, one case past 2^20 input elements (state 2^18 + 1: four inputs), and the
# empty forms (seq 0, state 0) of both variants.
SCAN_FORMS = (
    (1, 1, False), (1, 3, True), (7, 1, True), (31, 2, False), (32, 1, True), (33, 2, True),
    (255, 1, False), (256, 2, True), (257, 1, True), (1000, 1, False), (1023, 2, True),
    (4095, 1, True), (4096, 1, False), (4097, 1, True), (3, 31, True), (2, 1025, False),
    (1, 4099, True), (2, 65537, False), (1, 2 ** 18 + 1, False), (0, 3, False), (0, 3, True), (4, 0, False), (4, 0, True),
)


def _edges() -> list[Edge]:
    """Values: mixed below 256 steps, normal from there (the exact reference's cost grows with the
    spread of exponents over the sequence); A's regime cycles (layouts.scan_values)."""
    edges = []
    for seq, state, token in SCAN_FORMS:
        coef = (seq, state) if token else (state,)
        edges.append(Edge((coef, coef, (seq, state), (state,)), (),
                          MIXED if seq < 256 else NORMAL))
    return edges


# --- derived bounds -------------------------------------------------------------------------------

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


def _chains(a, p, la, h0):
    """The sequential parts of forward_bound, [seq, state] each: K_t and C_t after step t, the
    step's A_t C_{t-1} and the log2 running sums (suffix: Pi_t, best_end: the best range product
    ending at t). Few channels run in Python floats, a channel at a time (the same IEEE double
    operations, a microsecond a step where NumPy's per-step calls cost tens); many run a step at
    a time in NumPy. Either way each element sees the same operations in the same order: the
    log2 values come precomputed, NaN becomes inf where _inf_nan makes it so, and max(0, NaN) is
    NaN as np.maximum gives it (the sign of a zero maximum is never seen: each feeds a sum with
    a nonzero log2 or exp2)."""
    seq, state = p.shape
    shape = (seq, state)
    if state > 8:
        k, c = np.zeros(state), h0.copy()
        suffix, best_end = np.zeros(state), np.full(state, -np.inf)
        out = [np.empty(shape) for _ in range(5)]
        with np.errstate(all="ignore"):
            for t in range(seq):
                at, pt, lt = a[t], p[t], la[t]
                k = _inf_nan(at * (k + 2 * c) + 2 * pt)
                step_c = at * c
                c = _inf_nan(step_c + pt)
                suffix = np.maximum(0.0, suffix + lt)
                best_end = lt + np.maximum(0.0, best_end)
                for o, v in zip(out, (k, c, step_c, suffix, best_end)):
                    o[t] = v
        return out
    inf = np.inf
    cols = [[[0.0] * seq for _ in range(state)] for _ in range(5)]
    for j in range(state):
        ks, cs, ss, sufs, bes = (col[j] for col in cols)
        k, c, suffix, best_end = 0.0, float(h0[j]), 0.0, -inf
        for t, (at, pt, lt) in enumerate(zip(a[:, j].tolist(), p[:, j].tolist(),
                                             la[:, j].tolist())):
            v = at * (k + 2.0 * c) + 2.0 * pt
            k = v if v == v else inf
            step_c = at * c
            v = step_c + pt
            c = v if v == v else inf
            v = suffix + lt
            suffix = v if (v > 0.0 or v != v) else 0.0
            best_end = lt + (best_end if (best_end > 0.0 or best_end != best_end) else 0.0)
            ks[t], cs[t], ss[t], sufs[t], bes[t] = k, c, step_c, suffix, best_end
    return [np.array(col, dtype=np.float64).T.reshape(shape) for col in cols]


def forward_bound(ref, ctx, unit):
    """The recurrences K_t, C_t and the log2 range products step by step (_chains), the rest at
    once over [seq, state]: the same elementwise operations as a step-by-step evaluation, the
    running maxima and the overflow flag as accumulations (maximum and or are exact; a NaN
    maximum stays NaN and becomes inf, as at each step)."""
    seq, state, a_at, b_at, x, h0 = _inputs(ctx)
    out = np.zeros((seq, state))
    if not out.size:
        return out
    flush = flush_allowed(ctx.policy)
    floor, per_step = (TINY, 5) if flush else (HALF_SUB, 3)
    rows = (lambda at: at(slice(None))) if np.ndim(ctx.inputs[0]) == 2 else \
        (lambda at: at(0)[None, :])
    with np.errstate(all="ignore"):
        a = rows(a_at)
        la = _log2(a)              # the rows as stored (contiguous), as a step's log2 sees them
        a, la = (np.broadcast_to(v, (seq, state)) for v in (a, la))
        p = rows(b_at) * x
        k, c, step_c, suffix, best_end = _chains(a, p, la, h0)
        top = np.maximum(np.maximum(c, step_c), p)
        max_c = _inf_nan(np.maximum.accumulate(np.concatenate([h0[None, :], top]), axis=0)[1:])
        best = np.maximum.accumulate(np.concatenate([np.full((1, state), -np.inf), best_end]),
                                     axis=0)[1:]
        steps = np.arange(1, seq + 1, dtype=np.float64)[:, None]   # t + 1
        k_max = 2.0 * steps + 1
        gam = k_max * unit / (1 - k_max * unit)
        r = np.exp2(np.minimum(best, 1100.0))
        grow = (1 + 2 * gam) * (1 + 2 * unit)
        risky = np.logical_or.accumulate((max_c * grow >= OVERFLOW) |
                                         (r * (1 + max_c) * grow >= OVERFLOW), axis=0)
        rel = unit * (k + c) / (1 - k_max * unit)
        under = floor * per_step * steps * np.exp2(np.minimum(suffix, 1100.0)) * \
            (1 + 2 * max_c) * (1 + unit)
        out[:] = np.where(risky, np.inf, (rel + under) * SLACK)
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


SCAN_FORWARD = DerivedRule(
    "derived: u (K_t + C_t) / (1 - (2t + 3) u) + underflow; +inf where an intermediate may "
    "overflow",
    "float32 recurrence h = A h + B X: each term of h_t carries at most 2(t - s) + 3 roundings in "
    "the sequential and the chunked parallel order (K_t: the terms' magnitudes weighted by their "
    "counts, C_t: their sum)", forward_bound)
SCAN_VJP = DerivedRule(
    "derived: u |exact| + gamma64_{6(seq+2)} M + underflow; +inf where float64 can overflow",
    "the adjoint's reverse-time recurrence evaluated in float64 and rounded once per gradient",
    vjp_bound)


# --- the determinism case and the guards ----------------------------------------------------------

def _scan_of_a(a):
    """selective_scan with `a` as A (input 0) and good companions on the session's device (small
    ones when a's extent is past what a test should allocate: the wrapper refuses a first)."""
    s = current_session()
    state = a.shape[-1] if a.shape and a.shape[-1] <= 4096 else 3
    seq = a.shape[0] if a.ndim == 2 and a.shape[0] <= 4096 else 2
    coef = a.shape if a.shape and a.shape[-1] <= 4096 else (state,)
    return ops.selective_scan(a, filled(s, coef), filled(s, (seq, state)), filled(s, (state,)))


def _scan(s, a_shape=(3,), b_shape=None, x_shape=(2, 3), h_shape=(3,), bad=None):
    """selective_scan on filled tensors; bad = (index, value) writes one value of A."""
    a = filled(s, a_shape, 0.5)
    if bad is not None:
        a.buffer.data[bad[0]] = bad[1]
    return ops.selective_scan(a, filled(s, b_shape or a_shape), filled(s, x_shape),
                              filled(s, h_shape))


def _scan_audit(rng, idx):
    # the parallel path (seq 512 >= PARALLEL_MIN_SEQ: 16 chunks of 32 steps), token-dependent,
    # |A| just below 1; 2^17 outputs, each checked against the exact recurrence (mpmath: the
    # audit's cost on the CPU grows with the count)
    seq, state = 512, 256
    a = (1 - 2.0 ** -6 * rng.random((seq, state))).astype(np.float32)
    return (a, normal(rng, seq, state), normal(rng, seq, state), normal(rng, state)), {}, (seq, state)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.selective_scan, scan_layout, _edges, catalogue=46,
        near_overflow=2.0 ** 60, cancellation=None, wide_max_exp=60,
        determinism=AuditCase(15, _scan_audit), values=scan_values, fixed_order=orders.SCAN,
        error_inputs=(
            *unary(27, Op.selective_scan, _scan_of_a),
            param(130, "selective_scan: X rank 1", RANK,
                  lambda s: _scan(s, x_shape=(3,)), ShapeError,
                  r"X must be \(seq, state\), got shape \(3,\)"),
            param(131, "selective_scan: h0 shape", DIMS,
                  lambda s: _scan(s, h_shape=(2,)), ShapeError,
                  r"h0 must be \(state,\) = \(3,\) to match X \(2, 3\), got \(2,\)"),
            param(132, "selective_scan: A and B shapes differ", DIMS,
                  lambda s: _scan(s, b_shape=(2, 3)), ShapeError,
                  r"A and B must have one shape, got A \(3,\) and B \(2, 3\)"),
            param(133, "selective_scan: A state", DIMS, lambda s: _scan(s, a_shape=(4,)),
                  ShapeError, r"must be \(state,\) = \(3,\) \(constant\) or "
                               r"\(seq, state\) = \(2, 3\) \(token-dependent\) to match "
                               r"X \(2, 3\), got \(4,\)"),
            param(134, "selective_scan: token A seq", DIMS,
                  lambda s: _scan(s, a_shape=(3, 3)), ShapeError,
                  r"\(token-dependent\) to match X \(2, 3\), got \(3, 3\)"),
            param(135, "selective_scan: seq * state 2^32", COUNT,
                  lambda s: ops.selective_scan(filled(s, (65536,)), filled(s, (65536,)),
                                               huge_matrix(s, 65536, 65536),
                                               filled(s, (65536,))),
                  UInt32OverflowError, r"input 2: shape \(65536, 65536\) holds 4294967296 "
                                        r"elements, over the UInt32 limit 4294967295"),
            param(136, "selective_scan: infinite A", DIMS,
                  lambda s: _scan(s, bad=(1, np.inf)), NonFiniteInputError,
                  r"A must be finite, got inf at index \(1,\) of A \(3,\)"),
            param(137, "selective_scan: NaN in a token A", DIMS,
                  lambda s: _scan(s, a_shape=(2, 3), bad=(3, np.nan)), NonFiniteInputError,
                  r"A must be finite, got nan at index \(1, 0\) of A \(2, 3\)")),
        summary_group=GROUP, forward_rule=SCAN_FORWARD, vjp_rule=SCAN_VJP),
)
