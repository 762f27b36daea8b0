"""Reference for selective_scan: the exact recurrence h[t] = A[t] h[t-1] + B[t] X[t], h[-1] = h0,
evaluated in exact dyadic arithmetic (mpmath's raw mpf operations at prec 0 round nothing: every
float32 is a dyadic rational, and so are their sums and products) and rounded once per output:
kind 'composite' (conformance/families/scan.py bounds the float32 evaluation orders).

VJP, exact the same way: dh[t] = g[t] + A[t+1] dh[t+1] (dh[seq-1] = g[seq-1]), dX[t] = B[t] dh[t],
dB[t] = X[t] dh[t], dA[t] = h[t-1] dh[t] (h[-1] = h0), dh0 = A[0] dh[0]; constant A and B take the
sums over t of dA[t] and dB[t]. Each gradient is rounded once: kind 'composite'.

Special values follow mpmath's (IEEE-like) rules on the exact values: inf * 0 and inf - inf are
NaN, a NaN stays NaN; only input infinities make infinities (exact values never overflow, they
round to inf). The op requires A finite (engine/ops/scan.py): A with an inf or NaN is refused.
An exact zero rounds to +0 (derived bounds do not judge the sign of zero).
"""

import mpmath
import numpy as np
from mpmath.libmp import fzero, from_float, mpf_add, mpf_mul

from conformance import rounding
from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs

OP = "selective_scan"


def _rows(A) -> int:
    """Coefficient rows: seq for a token-dependent A, 1 for a constant one (reshape(-1, 0) cannot
    infer them when state is 0)."""
    return A.shape[0] if A.ndim == 2 else 1


def _checked(inputs):
    A, B, X, h0 = f32_inputs(inputs, 4, OP)
    if X.ndim != 2 or h0.shape != X.shape[1:] or A.shape != B.shape or \
            A.shape not in (X.shape[1:], X.shape):
        raise ReferenceInputError(f"{OP} needs X (seq, state), h0 (state,) and A, B both (state,) "
                                  f"or both (seq, state); got {A.shape}, {B.shape}, {X.shape}, "
                                  f"{h0.shape}")
    if not np.all(np.isfinite(A)):
        raise ReferenceInputError(f"{OP} requires A finite (the wrapper refuses it)")
    seq, state = X.shape
    return A.reshape(_rows(A), state), B.reshape(_rows(A), state), X, h0, A.ndim == 2


def _raw(a: np.ndarray) -> list:
    return [from_float(float(v)) for v in a.reshape(-1).tolist()]


def _mul(a, b):
    return mpf_mul(a, b, 0)


def _add(a, b):
    return mpf_add(a, b, 0)


def _exact_h(A, B, X, h0, token):
    """h[t][j] as exact raw mpfs, a list of rows."""
    seq, state = X.shape
    a_rows = [_raw(r) for r in A]
    b_rows = [_raw(r) for r in B]
    prev, rows = _raw(h0), []
    for t in range(seq):
        a, b, x = a_rows[t if token else 0], b_rows[t if token else 0], _raw(X[t])
        prev = [_add(_mul(a[j], prev[j]), _mul(b[j], x[j])) for j in range(state)]
        rows.append(prev)
    return rows


def _round(raws: list, shape) -> tuple[np.ndarray, np.ndarray]:
    value = np.array([rounding.round_mpf_to_f32(mpmath.mp.make_mpf(r)) for r in raws],
                     np.float32).reshape(shape)
    exact = np.array([rounding.round_mpf_to_f64(mpmath.mp.make_mpf(r)) for r in raws],
                     np.float64).reshape(shape)
    return value, exact


def forward(inputs):
    A, B, X, h0, token = _checked(inputs)
    rows = _exact_h(A, B, X, h0, token)
    value, exact = _round([r for row in rows for r in row], X.shape)
    return Reference(value, exact, kind="composite")


def vjp(inputs, grad_out):
    A, B, X, h0, token = _checked(inputs)
    seq, state = X.shape
    g = f32_grad(grad_out, X.shape, OP)
    h = _exact_h(A, B, X, h0, token)
    a_rows = [_raw(r) for r in A]
    b_rows = [_raw(r) for r in B]
    h0r = _raw(h0)
    n_coef = seq if token else 1
    da = [[fzero] * state for _ in range(n_coef)]
    db = [[fzero] * state for _ in range(n_coef)]
    dx = [[fzero] * state for _ in range(seq)]
    dh = [fzero] * state
    for t in range(seq - 1, -1, -1):
        gt = _raw(g[t])
        if t + 1 < seq:
            a_next = a_rows[t + 1 if token else 0]
            dh = [_add(gt[j], _mul(a_next[j], dh[j])) for j in range(state)]
        else:
            dh = gt
        hprev = h[t - 1] if t else h0r
        x = _raw(X[t])
        r = t if token else 0
        b = b_rows[r]
        for j in range(state):
            dx[t][j] = _mul(b[j], dh[j])
            da[r][j] = _add(da[r][j], _mul(hprev[j], dh[j]))
            db[r][j] = _add(db[r][j], _mul(x[j], dh[j]))
    dh0 = [_mul(a_rows[0][j], dh[j]) for j in range(state)] if seq else [fzero] * state
    coef_shape = (seq, state) if token else (state,)
    if not seq:   # no step: A, B and X take no part (their gradients are zero or empty)
        da = db = [[fzero] * state] if not token else []
    out = []
    for rows, shape in ((da, coef_shape), (db, coef_shape), (dx, X.shape), ([dh0], h0.shape)):
        value, exact = _round([r for row in rows for r in row], shape)
        out.append(Reference(value, exact, kind="composite"))
    return tuple(out)
