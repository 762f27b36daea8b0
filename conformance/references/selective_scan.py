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

Speed: the forward runs the same exact arithmetic on NumPy object arrays of Python ints, a whole
row of states per step (each value m * 2^e with an integer mantissa array and an int64 exponent
array: products multiply mantissas and add exponents, a sum shifts both mantissas to the smaller
exponent), and rounds each exact value once (rounding._round_dyadic, which does not depend on how
m * 2^e is written; where |m| <= 2^53 and the value is a normal float64, the float64 ldexp is that
exact value and NumPy's float64 -> float32 cast rounds it once, correctly). Special values take a
float64 track beside it: an element's h is finite until an infinite or NaN B[t], X[t] or h0 reaches
it, and from then on stays an infinity or NaN (A is finite: A h is NaN or infinite with h, B X is
with B or X, a finite addend changes neither); on that track every finite h is held as 0 (A 0 is
finite), so float64's IEEE rules (inf 0 = NaN, inf - inf = NaN, a finite B X of two float32 never
overflows float64) decide each special value as mpmath's do, and the finite track (non-finite
inputs read as 0) gives the rest. NaNs come out as the one quiet NaN mpmath's round to. Same bits
as the mpf path (_exact_h), some ten times faster on wide states. The VJP works on rows the same
way, every value carrying its special part beside it (see _extended); the mpf VJP stays as
_vjp_mpf, and tests/test_selective_scan_reference_fast.py compares both pairs bit for bit. Long
sequences gain little: there the exact values' own bits (some 24 more a step) cost the time.
"""

import math

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


def _dyadic(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A finite float32 array as exact m * 2^e: Python-int mantissas (object array) and int64
    exponents; frexp of the float64 (exact) gives |m| < 2^24, an integer for every float32."""
    frac, exp = np.frexp(a.astype(np.float64))
    return (frac * 2.0 ** 24).astype(np.int64).astype(object), exp.astype(np.int64) - 24


def _exact_sum(m1, e1, m2, e2):
    """m1 2^e1 + m2 2^e2, exact, elementwise; a zero term does not lower the exponent."""
    e = np.where(m1 == 0, e2, np.where(m2 == 0, e1, np.minimum(e1, e2)))
    e1 = np.maximum(e1 - e, 0).astype(object)
    e2 = np.maximum(e2 - e, 0).astype(object)
    return (m1 << e1) + (m2 << e2), e


def _round_dyadics(man: np.ndarray, exp: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """Each man * 2^exp rounded once to float32 and to float64 (an exact zero to +0)."""
    man, exp = man.reshape(-1), exp.reshape(-1)
    small = np.abs(man) <= 2 ** 53
    exact = np.zeros(man.shape, np.float64)
    with np.errstate(over="ignore", under="ignore"):   # out of range: left to _round_dyadic
        exact[small] = np.ldexp(man[small].astype(np.float64), exp[small])
        # the float64 ldexp is the exact value where it is a normal float64 (or zero)
        small &= (exact == 0) | ((np.abs(exact) >= 2.0 ** -1022) & np.isfinite(exact))
        small &= (exact != 0) | (man == 0)
        value = exact.astype(np.float32)   # rounds once; overflow to +-inf is that rounding
    slow = np.flatnonzero(~small)
    if slow.size:
        v32, v64 = _round_long(man[slow].tolist(), exp[slow].tolist())
        with np.errstate(over="ignore"):
            value[slow] = np.array(v32, np.float64).astype(np.float32)
        exact[slow] = v64
    return value.reshape(shape), exact.reshape(shape)


def _round_long(mans: list, exps: list) -> tuple[list, list]:
    """Each m * 2^e (m a nonzero int, often thousands of bits long) rounded once to float64, and
    as a float64 whose cast to float32 rounds m * 2^e once. Where the value lies well inside
    float64's normal range: float(int) rounds correctly (ties to even), and a mantissa cut to its
    top 64 (or 32) bits with the rest ORed into the last (a sticky bit, 11 or more bits below
    where float64 rounds and 8 or more below float32's, subnormal range and overflow included)
    rounds as the whole does; ldexp then scales exactly. Elsewhere rounding._round_dyadic, as
    before (the same value either way: tests/test_selective_scan_reference_fast.py)."""
    v32, v64 = [], []
    ldexp = math.ldexp
    for m, e in zip(mans, exps):
        a = -m if m < 0 else m
        bc = a.bit_length()
        if not -1000 <= e + bc - 1 <= 1000:
            v32.append(rounding._round_dyadic(m < 0, a, e, rounding.F32))
            v64.append(rounding._round_dyadic(m < 0, a, e, rounding.F64))
            continue
        if bc > 64:
            sh = bc - 64
            r = a >> sh
            if (r << sh) != a:
                r |= 1
            f = ldexp(float(r), e + sh)
            g = ldexp(float((r >> 32) | ((r & 0xFFFFFFFF) != 0)), e + sh + 32)
        else:
            f = ldexp(float(a), e)
            g = f if bc <= 32 else \
                ldexp(float((a >> (bc - 32)) | ((a & ((1 << (bc - 32)) - 1)) != 0)), e + bc - 32)
        v32.append(-g if m < 0 else g)
        v64.append(-f if m < 0 else f)
    return v32, v64


def _finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, np.float32(0))


def _special_track(A, B, X, h0, token) -> np.ndarray:
    """Each h[t][j] where it is an infinity or NaN, 0 where it is finite (module docstring)."""
    a, b, x = A.astype(np.float64), B.astype(np.float64), X.astype(np.float64)
    h = np.where(np.isfinite(h0), 0.0, h0.astype(np.float64))
    out = np.empty(X.shape, np.float64)
    with np.errstate(all="ignore"):
        for t in range(X.shape[0]):
            r = t if token else 0
            h = a[r] * h + b[r] * x[t]
            h[np.isfinite(h)] = 0.0
            out[t] = h
    return out


def _forward_dyadic(A, B, X, h0, token):
    """forward's value and exact arrays by _dyadic arithmetic (module docstring)."""
    seq, state = X.shape
    am, ae = _dyadic(A)
    bm, be = _dyadic(_finite(B))
    xm, xe = _dyadic(_finite(X))
    hm, he = _dyadic(_finite(h0))
    out_m = np.empty((seq, state), object)
    out_e = np.empty((seq, state), np.int64)
    for t in range(seq):
        r = t if token else 0
        hm, he = _exact_sum(am[r] * hm, ae[r] + he, bm[r] * xm[t], be[r] + xe[t])
        out_m[t], out_e[t] = hm, he
    value, exact = _round_dyadics(out_m, out_e, X.shape)
    if not (np.all(np.isfinite(B)) and np.all(np.isfinite(X)) and np.all(np.isfinite(h0))):
        special = _special_track(A, B, X, h0, token)
        infinite = np.isinf(special)
        value[infinite], exact[infinite] = special[infinite], special[infinite]
        nan = np.isnan(special)
        value[nan], exact[nan] = np.float32(np.nan), np.nan
    return value, exact


def forward(inputs):
    A, B, X, h0, token = _checked(inputs)
    value, exact = _forward_dyadic(A, B, X, h0, token)
    return Reference(value, exact, kind="composite")


def _vjp_mpf(inputs, grad_out):
    """vjp by one mpf operation per element: what vjp's arrays are compared with in tests."""
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


# --- the VJP on whole rows: exact values with their special values beside them ------------------
# An extended value is (m, e, s): m * 2^e exact where s == 0, else s is its infinity or NaN. The
# special part of a product or sum is float64's IEEE result on stand-ins, each finite operand
# replaced by its sign (-1, 0 or 1, exact from m): inf * 0 = NaN, inf * -1 = -inf, inf - inf =
# NaN, inf + finite = inf, NaN stays NaN, and finite with finite stays finite: mpmath's rules on
# exact values. Where s != 0 the m part is left as it falls and never read.


def _extended(a: np.ndarray) -> tuple:
    finite = np.isfinite(a)
    m, e = _dyadic(np.where(finite, a, np.float32(0)))
    return m, e, np.where(finite, 0.0, a.astype(np.float64))


def _stand_in(x: tuple) -> np.ndarray:
    m, _, s = x
    return np.where(s == 0, (m > 0).astype(np.float64) - (m < 0).astype(np.float64), s)


def _special(v: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(v), 0.0, v)


def _ext_mul(x: tuple, y: tuple) -> tuple:
    with np.errstate(invalid="ignore"):
        return x[0] * y[0], x[1] + y[1], _special(_stand_in(x) * _stand_in(y))


def _ext_add(x: tuple, y: tuple) -> tuple:
    with np.errstate(invalid="ignore"):
        return (*_exact_sum(x[0], x[1], y[0], y[1]), _special(_stand_in(x) + _stand_in(y)))


def _ext_zero(state: int) -> tuple:
    return np.zeros(state, object), np.zeros(state, np.int64), np.zeros(state)


def _ext_round(rows: list, shape) -> Reference:
    """The rows of extended values rounded once each to one composite Reference of `shape`."""
    n = len(rows)
    m = np.concatenate([r[0] for r in rows]) if n else np.zeros(0, object)
    e = np.concatenate([r[1] for r in rows]) if n else np.zeros(0, np.int64)
    s = np.concatenate([r[2] for r in rows]) if n else np.zeros(0)
    value, exact = _round_dyadics(m, e, shape)
    value, exact = value.reshape(-1), exact.reshape(-1)
    infinite, nan = np.isinf(s), np.isnan(s)
    value[infinite], exact[infinite] = s[infinite], s[infinite]
    value[nan], exact[nan] = np.float32(np.nan), np.nan
    return Reference(value.reshape(shape), exact.reshape(shape), kind="composite")


def vjp(inputs, grad_out):
    """The module docstring's VJP, exact, on rows of extended values (the same values as
    _vjp_mpf: tests/test_selective_scan_reference_fast.py compares them)."""
    A, B, X, h0, token = _checked(inputs)
    seq, state = X.shape
    g = f32_grad(grad_out, X.shape, OP)
    a_rows = [_extended(r) for r in A]
    b_rows = [_extended(r) for r in B]
    x_rows = [_extended(r) for r in X]
    h0e = _extended(h0)
    h, prev = [], h0e
    for t in range(seq):
        r = t if token else 0
        prev = _ext_add(_ext_mul(a_rows[r], prev), _ext_mul(b_rows[r], x_rows[t]))
        h.append(prev)
    n_coef = seq if token else 1
    da = [_ext_zero(state) for _ in range(n_coef)]
    db = [_ext_zero(state) for _ in range(n_coef)]
    dx = [None] * seq
    dh = _ext_zero(state)
    for t in range(seq - 1, -1, -1):
        gt = _extended(g[t])
        dh = _ext_add(gt, _ext_mul(a_rows[t + 1 if token else 0], dh)) if t + 1 < seq else gt
        r = t if token else 0
        dx[t] = _ext_mul(b_rows[r], dh)
        da[r] = _ext_add(da[r], _ext_mul(h[t - 1] if t else h0e, dh))
        db[r] = _ext_add(db[r], _ext_mul(x_rows[t], dh))
    dh0 = _ext_mul(a_rows[0], dh) if seq else _ext_zero(state)
    coef_shape = (seq, state) if token else (state,)
    return (_ext_round(da, coef_shape), _ext_round(db, coef_shape), _ext_round(dx, X.shape),
            _ext_round([dh0], h0.shape))
