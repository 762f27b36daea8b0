"""Sums, means and the mean-squared-error loss, with their local VJP rules."""
from __future__ import annotations

from engine.errors import ShapeError
from engine.ops import _checks
from engine.ops import _tape_cuda as tape
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops._xp import contiguous, f32, xp_of
from engine.tape_saves import saves
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


def _reduced_axes(shape, axes) -> tuple[int, ...]:
    """The reduced axes as non-negative indices: a handler is called with the axes as given
    (negative, unsorted, or a bare int), not only as the wrapper normalises them."""
    if axes is None:
        return tuple(range(len(shape)))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({int(ax) % len(shape) for ax in axes})) if shape else ()


def _expand(g, shape, axes, keepdims):
    xp = xp_of(g)
    red = _reduced_axes(shape, axes)
    kept = tuple(1 if d in red else s for d, s in enumerate(shape))
    return xp.broadcast_to(g.reshape(kept), shape)


@local_vjp(Op.reduce_sum)
@saves()
def _reduce_sum_vjp(inputs, out, g, axes, keepdims):
    return (contiguous(_expand(g, inputs[0].shape, axes, keepdims)),)


@local_vjp(Op.reduce_mean, tape=("tl_tape_div_scalar",))
@saves()
def _reduce_mean_vjp(inputs, out, g, axes, keepdims):
    shape = inputs[0].shape
    red = _reduced_axes(shape, axes)
    n = 1
    for d in red:
        n *= shape[d]
    if on_device(g):   # the broadcast back is a copy; tl_tape_div_scalar divides by f32(n)
        return (tape.of_g("tl_tape_div_scalar", contiguous(_expand(g, shape, axes, keepdims)),
                          n),)
    xp = xp_of(g)
    return (contiguous(_expand(g, shape, axes, keepdims) / f32(xp, n)),)


@local_vjp(Op.mse_loss, tape=("tl_tape_mse",))
@saves(0, 1)
def _mse_vjp(inputs, out, g):
    pred, target = inputs
    if on_device(g):
        return tape.mse(pred, target, g, max(pred.size, 1))        # tl_tape_mse: d64, then (d, -d)
    xp = xp_of(g)
    # In float64: p - t of two float32 values near the range limit overflows float32.
    d64 = (pred.astype(xp.float64) - target.astype(xp.float64)) * (
        2.0 * g.astype(xp.float64) / max(pred.size, 1))
    d = d64.astype(xp.float32)
    return d, -d
