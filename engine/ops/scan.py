"""selective_scan: the diagonal linear recurrence h[t] = A[t] h[t-1] + B[t] X[t], h[-1] = h0, every
h returned; A and B constant (state,) or token-dependent (seq, state). One tape op, with a local VJP
rule (reverse-time accumulation of the adjoint) that TorchLean itself does not register."""
from __future__ import annotations

import numpy as np

from engine.errors import NonFiniteInputError, ShapeError
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops._xp import xp_of
from engine.registry import device_rule
from engine.runtime.buffer import check_uint32
from engine.tensor import Tensor
from engine.types import BackendOp as Op

_OP = "selective_scan"


def _shapes_problem(A: Tensor, B: Tensor, X: Tensor, h0: Tensor) -> str | None:
    if X.ndim != 2:
        return f"X must be (seq, state), got shape {X.shape}"
    seq, state = X.shape
    if h0.shape != (state,):
        return f"h0 must be (state,) = ({state},) to match X {X.shape}, got {h0.shape}"
    if A.shape != B.shape:
        return f"A and B must have one shape, got A {A.shape} and B {B.shape}"
    if A.shape not in ((state,), (seq, state)):
        return (f"A and B must be (state,) = ({state},) (constant) or (seq, state) = "
                f"{(seq, state)} (token-dependent) to match X {X.shape}, got {A.shape}")
    return None


def _check_finite_a(A: Tensor) -> None:
    """A multiplies the state: an infinite A turns a zero state into NaN (0 * inf) at points that
    depend on the evaluation order (sequential vs the parallel scan), so the op requires it finite.
    B, X and h0 may hold infinities and NaNs: they propagate by IEEE rules in every order."""
    data = A.buffer.data
    if data.size == 0:
        return
    xp = xp_of(data)
    finite = xp.isfinite(data)
    if not bool(finite.all()):
        bad = int(xp.argmin(finite.view(xp.uint8)))   # the first non-finite (bytes: CuPy-safe)
        value = float(data[bad])
        where = np.unravel_index(bad, A.shape) if A.shape else ()
        raise NonFiniteInputError(
            f"selective_scan: A must be finite, got {value} at index {tuple(int(i) for i in where)}"
            f" of A {A.shape}; replace or clip non-finite coefficients before the scan")


def selective_scan(A: Tensor, B: Tensor, X: Tensor, h0: Tensor) -> Tensor:
    """h (seq, state) with h[t, j] = A[t, j] h[t-1, j] + B[t, j] X[t, j] (A[j], B[j] when constant),
    h[-1] = h0. An empty seq (or state) gives an empty output; docs/OPS.md states the contract."""
    for i, t in enumerate((A, B, X, h0)):
        check_uint32(t.shape, f"{_OP} input {i}")
    problem = _shapes_problem(A, B, X, h0)
    if problem:
        raise ShapeError(f"{_OP}: {problem}; pass X (seq, state), h0 (state,) and A, B both "
                         "(state,) or both (seq, state)")
    # seq * state past UInt32 is X's element count: check_uint32 above has refused it
    seq, state = X.shape
    _check_finite_a(A)
    return apply(Op.selective_scan, (A, B, X, h0), (seq, state))


# --- the VJP: float64 evaluation, one rounding per gradient ----------------------------------

def scan_vjp_f64(A, B, X, h0, g):
    """(dA, dB, dX, dh0) in NumPy float64, rounded once to float32.

    h is recomputed in float64 from the inputs (time order), then the adjoint runs in reverse time:
    dh[t] = g[t] + A[t+1] dh[t+1] (dh[seq-1] = g[seq-1]), dX[t] = B[t] dh[t], dB[t] = X[t] dh[t],
    dA[t] = h[t-1] dh[t] (h[-1] = h0), dh0 = A[0] dh[0]. For constant A and B, dA and dB are the
    sums over t of those terms, accumulated from t = seq-1 down to 0 (a fixed order, no atomics)."""
    f64, f32 = np.float64, np.float32
    seq, state = X.shape
    token = A.ndim == 2
    rows = seq if token else 1     # explicit: reshape(-1, 0) cannot infer it for state 0
    a = A.astype(f64).reshape(rows, state)
    b = B.astype(f64).reshape(rows, state)
    x, gg = X.astype(f64), g.astype(f64)
    at = (lambda t: a[t]) if token else (lambda t: a[0])
    bt = (lambda t: b[t]) if token else (lambda t: b[0])
    with np.errstate(all="ignore"):
        h = np.empty((seq, state), f64)
        prev = h0.astype(f64)
        for t in range(seq):
            prev = at(t) * prev + bt(t) * x[t]
            h[t] = prev
        dx = np.empty((seq, state), f64)
        da = np.empty((seq, state), f64) if token else np.zeros(state, f64)
        db = np.empty((seq, state), f64) if token else np.zeros(state, f64)
        dh = np.zeros(state, f64)
        for t in range(seq - 1, -1, -1):
            dh = gg[t] + at(t + 1) * dh if t + 1 < seq else gg[t].copy()
            hprev = h[t - 1] if t else h0.astype(f64)
            dx[t] = bt(t) * dh
            if token:
                da[t], db[t] = hprev * dh, x[t] * dh
            else:
                da, db = da + hprev * dh, db + x[t] * dh
        dh0 = at(0) * dh if seq else np.zeros(state, f64)
        return (da.astype(f32).reshape(A.shape), db.astype(f32).reshape(B.shape),
                dx.astype(f32), dh0.astype(f32))


@local_vjp(Op.selective_scan, tape=("scan.cu:tl_scan_fwd_chunk_apply_f64",
                                    "scan.cu:tl_scan_bwd_chunk_reduce",
                                    "scan.cu:tl_scan_bwd_carry", "scan.cu:tl_scan_bwd_chunk_apply",
                                    "scan.cu:tl_scan_bwd_finish",
                                    "scan.cu:tl_scan_fwd_chunk_reduce_f64",
                                    "scan.cu:tl_scan_fwd_carry_f64"))
def _selective_scan_vjp(inputs, out, g, **_):
    A, B, X, h0 = inputs
    if on_device(g):
        # our kernels (scan_fwd_chunk_reduce_f64, scan_fwd_carry_f64, scan_fwd_chunk_apply_f64,
        # scan_bwd_chunk_reduce, scan_bwd_carry, scan_bwd_chunk_apply, scan_bwd_finish), lent
        # by the native-cuda provider through the registry (ops never import a provider)
        return device_rule(Op.selective_scan)(inputs, out, g)
    return scan_vjp_f64(A, B, X, h0, np.ascontiguousarray(g))
