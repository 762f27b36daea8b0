"""softmax, log_softmax and hard-masked softmax along one axis, with their local VJP rules.

Hard masks: true = the key participates; false = exactly zero numerator (never a finite sentinel);
a row with no participant is all zeros.
"""
from __future__ import annotations

import numpy as np

from engine.errors import ShapeError
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def softmax(a: Tensor, axis: int = -1) -> Tensor:
    if a.ndim == 0:
        raise ShapeError("softmax: needs rank >= 1, got a rank-0 tensor")
    return apply(Op.softmax, (a,), a.shape, {"axis": _checks.axis("softmax", axis, a.ndim)})


def log_softmax(a: Tensor, axis: int = -1) -> Tensor:
    if a.ndim == 0:
        raise ShapeError("log_softmax: needs rank >= 1, got a rank-0 tensor")
    return apply(Op.log_softmax, (a,), a.shape,
                 {"axis": _checks.axis("log_softmax", axis, a.ndim)})


def hard_masked_softmax(a: Tensor, mask, axis: int = -1) -> Tensor:
    if a.ndim == 0:
        raise ShapeError("hard_masked_softmax: needs rank >= 1, got a rank-0 tensor")
    m = mask if type(mask).__module__.startswith("cupy") else np.asarray(mask)
    if m.dtype != bool:
        raise ShapeError(f"hard_masked_softmax: mask must be boolean, got dtype {m.dtype}")
    if tuple(m.shape) != a.shape:
        raise ShapeError(f"hard_masked_softmax: mask shape {tuple(m.shape)} differs from scores "
                         f"shape {a.shape}")
    if a.device.label == "cuda" and isinstance(m, np.ndarray):
        import cupy
        m = cupy.asarray(m)
    return apply(Op.hard_masked_softmax, (a,), a.shape,
                 {"mask": m, "axis": _checks.axis("hard_masked_softmax", axis, a.ndim)})


def _softmax_grad(s, g, axis):
    xp = xp_of(g)
    s64, g64 = s.astype(xp.float64), g.astype(xp.float64)
    dot = xp.sum(g64 * s64, axis=axis, keepdims=True)
    return (s64 * (g64 - dot)).astype(xp.float32)


@local_vjp(Op.softmax)
@saves(output=True)
def _softmax_vjp(inputs, out, g, axis):
    return (_softmax_grad(out, g, axis),)


@local_vjp(Op.hard_masked_softmax)
@saves(output=True)
def _hard_masked_softmax_vjp(inputs, out, g, mask, axis):
    # Blocked entries take no part: exactly zero gradient, even when a NaN in their row's
    # participating entries makes the row's inner product NaN.
    xp = xp_of(g)
    return (xp.where(mask, _softmax_grad(out, g, axis), xp.float32(0)),)


@local_vjp(Op.log_softmax)
@saves(output=True)
def _log_softmax_vjp(inputs, out, g, axis):
    xp = xp_of(g)
    g64 = g.astype(xp.float64)
    total = xp.sum(g64, axis=axis, keepdims=True)
    return ((g64 - xp.exp(out.astype(xp.float64)) * total).astype(xp.float32),)
