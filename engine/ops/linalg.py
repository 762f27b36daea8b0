"""Matrix products (plain and batched, with transpose flags) and the fused linear op."""
from __future__ import annotations

import numpy as np

from engine.errors import ShapeError
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import contiguous, xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _logical(shape, trans):
    return shape[:-2] + (shape[-1], shape[-2]) if trans else shape


def matmul(a: Tensor, b: Tensor, trans_a: bool = False, trans_b: bool = False) -> Tensor:
    if a.ndim not in (2, 3) or b.ndim != a.ndim:
        raise ShapeError(f"matmul: takes two rank-2 or two rank-3 tensors, got shapes {a.shape} "
                         f"and {b.shape}; reshape first")
    sa, sb = _logical(a.shape, trans_a), _logical(b.shape, trans_b)
    if a.ndim == 3 and sa[0] != sb[0]:
        raise ShapeError(f"matmul: batch extents {sa[0]} and {sb[0]} differ")
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: inner extents differ: {sa} @ {sb} (after transpose flags "
                         f"trans_a={trans_a}, trans_b={trans_b})")
    return apply(Op.matmul, (a, b), sa[:-1] + (sb[-1],),
                 {"trans_a": bool(trans_a), "trans_b": bool(trans_b)})


def linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    if w.ndim != 2 or b.ndim != 1 or x.ndim < 1:
        raise ShapeError(f"linear: wants x [..., in], w [out, in], b [out]; got {x.shape}, "
                         f"{w.shape}, {b.shape}")
    if x.shape[-1] != w.shape[1] or b.shape[0] != w.shape[0]:
        raise ShapeError(f"linear: x {x.shape}, w {w.shape} and b {b.shape} disagree; need "
                         "x[-1] == w[1] and b[0] == w[0]")
    return apply(Op.linear, (x, w, b), x.shape[:-1] + (w.shape[0],))


def _mm(a, b, ta=False, tb=False):
    xp = xp_of(a)
    a = xp.swapaxes(a, -1, -2) if ta else a
    b = xp.swapaxes(b, -1, -2) if tb else b
    return xp.matmul(a, b)


@local_vjp(Op.matmul)
@saves(0, 1)
def _matmul_vjp(inputs, out, g, trans_a, trans_b):
    a, b = inputs
    # C = op(A) op(B). dop(A) = G op(B)^T, dop(B) = op(A)^T G; map back through each flag.
    da = _mm(b, g, trans_b, True) if trans_a else _mm(g, b, False, not trans_b)
    db = _mm(g, a, True, trans_a) if trans_b else _mm(a, g, not trans_a, False)
    xp = xp_of(g)
    return contiguous(da), contiguous(db)


@local_vjp(Op.linear)
@saves(0, 1)
def _linear_vjp(inputs, out, g, **_):
    x, w, b = inputs
    xp = xp_of(g)
    # explicit row counts: reshape(-1, 0) cannot infer the rows when in or out is 0
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    g2 = g.reshape(rows, w.shape[0])
    x2 = x.reshape(rows, w.shape[1])
    dx = (g2 @ w).reshape(x.shape)
    dw = g2.T @ x2
    db = xp.sum(g2, axis=0, dtype=xp.float32)
    return dx, contiguous(dw), db
