"""Sums, means and the mean-squared-error loss, with their local VJP rules."""
from __future__ import annotations

from engine.errors import ShapeError
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import contiguous, f32, xp_of
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _norm_axes(op: str, a: Tensor, axes) -> tuple[int, ...] | None:
    if axes is None:
        return None
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(sorted(_checks.axis(op, ax, a.ndim) for ax in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: axes {tuple(axes)} repeat an axis")
    return out


def _out_shape(a: Tensor, axes, keepdims) -> tuple[int, ...]:
    red = range(a.ndim) if axes is None else axes
    if keepdims:
        return tuple(1 if d in red else s for d, s in enumerate(a.shape))
    return tuple(s for d, s in enumerate(a.shape) if d not in red)


def reduce_sum(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:
    ax = _norm_axes("reduce_sum", a, axes)
    return apply(Op.reduce_sum, (a,), _out_shape(a, ax, keepdims),
                 {"axes": ax, "keepdims": bool(keepdims)})


def reduce_mean(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:
    ax = _norm_axes("reduce_mean", a, axes)
    return apply(Op.reduce_mean, (a,), _out_shape(a, ax, keepdims),
                 {"axes": ax, "keepdims": bool(keepdims)})


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    if pred.shape != target.shape:
        raise ShapeError(f"mse_loss: pred shape {pred.shape} differs from target shape "
                         f"{target.shape}; pass equal shapes")
    return apply(Op.mse_loss, (pred, target), ())


def _expand(g, shape, axes, keepdims):
    xp = xp_of(g)
    red = range(len(shape)) if axes is None else axes
    kept = tuple(1 if d in red else s for d, s in enumerate(shape))
    return xp.broadcast_to(g.reshape(kept), shape)


@local_vjp(Op.reduce_sum)
def _reduce_sum_vjp(inputs, out, g, axes, keepdims):
    return (contiguous(_expand(g, inputs[0].shape, axes, keepdims)),)


@local_vjp(Op.reduce_mean)
def _reduce_mean_vjp(inputs, out, g, axes, keepdims):
    shape = inputs[0].shape
    red = range(len(shape)) if axes is None else axes
    n = 1
    for d in red:
        n *= shape[d]
    xp = xp_of(g)
    return (contiguous(_expand(g, shape, axes, keepdims) / f32(xp, n)),)


@local_vjp(Op.mse_loss)
def _mse_vjp(inputs, out, g):
    pred, target = inputs
    xp = xp_of(g)
    # In float64: p - t of two float32 values near the range limit overflows float32.
    d64 = (pred.astype(xp.float64) - target.astype(xp.float64)) * (
        2.0 * g.astype(xp.float64) / max(pred.size, 1))
    d = d64.astype(xp.float32)
    return d, -d
