"""Data movement: reshape, permute, broadcast, concat, slice, with their local VJP rules."""
from __future__ import annotations

import math

from engine.errors import ParameterTypeError, ShapeError
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import contiguous, sum_to_shape, xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def reshape(a: Tensor, shape) -> Tensor:
    shp = _checks.shape("reshape", shape)
    if math.prod(shp) != a.size:
        raise ShapeError(f"reshape: cannot view {a.size} elements of shape {a.shape} as {shp} "
                         f"({math.prod(shp)} elements); keep the element count")
    return apply(Op.reshape, (a,), shp, {"shape": shp})


def permute(a: Tensor, perm) -> Tensor:
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(a.ndim)):
        raise ShapeError(f"permute: {perm} is not a permutation of range({a.ndim}) for shape "
                         f"{a.shape}")
    return apply(Op.permute, (a,), tuple(a.shape[p] for p in perm), {"perm": perm})


def broadcast_shape_ok(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s == d or s == 1 for s, d in zip(src[::-1], dst[::-1]))


def broadcast(a: Tensor, shape) -> Tensor:
    shp = _checks.shape("broadcast", shape)
    if not broadcast_shape_ok(a.shape, shp):
        raise ShapeError(f"broadcast: shape {a.shape} does not broadcast to {shp}; each axis "
                         "must match or be 1, and the rank cannot shrink")
    return apply(Op.broadcast, (a,), shp, {"shape": shp})


def concat(tensors, axis: int = 0) -> Tensor:
    if isinstance(tensors, Tensor):   # iterable (its rows), but one tensor is not a list of them
        raise ParameterTypeError(f"concat: `tensors` is one Tensor of shape {tensors.shape}; "
                                 "pass a list or tuple of tensors, e.g. ops.concat([a, b], axis)")
    tensors = tuple(tensors)
    if not tensors:
        raise ShapeError("concat: needs at least one tensor, got none")
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError("concat: rank-0 tensors cannot be concatenated; reshape them to (1,)")
    ax = _checks.axis("concat", axis, first.ndim)
    for i, t in enumerate(tensors[1:], 1):
        if t.ndim != first.ndim or any(s != f for d, (s, f) in enumerate(zip(t.shape, first.shape))
                                       if d != ax):
            raise ShapeError(f"concat: tensor {i} has shape {t.shape}, incompatible with "
                             f"{first.shape} along axis {ax}; all other axes must match")
    out = list(first.shape)
    out[ax] = sum(t.shape[ax] for t in tensors)
    return apply(Op.concat, tensors, tuple(out), {"axis": ax})


def slice_(a: Tensor, axis: int, start: int, stop: int) -> Tensor:
    if a.ndim == 0:
        raise ShapeError("slice: needs rank >= 1, got a rank-0 tensor")
    ax = _checks.axis("slice", axis, a.ndim)
    n = a.shape[ax]
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop <= n):
        raise ShapeError(f"slice: [{start}, {stop}) is not a range within [0, {n}] on axis {ax}; "
                         "pass 0 <= start <= stop <= extent")
    out = list(a.shape)
    out[ax] = stop - start
    return apply(Op.slice, (a,), tuple(out), {"axis": ax, "start": start, "stop": stop})


@local_vjp(Op.reshape)
@saves()
def _reshape_vjp(inputs, out, g, shape):
    return (g.reshape(inputs[0].shape),)


@local_vjp(Op.permute)
@saves()
def _permute_vjp(inputs, out, g, perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (contiguous(g.transpose(inverse)),)


@local_vjp(Op.broadcast)
@saves()
def _broadcast_vjp(inputs, out, g, shape):
    return (sum_to_shape(g, inputs[0].shape),)


@local_vjp(Op.concat)
@saves()
def _concat_vjp(inputs, out, g, axis):
    xp = xp_of(g)
    grads, at = [], 0
    for a in inputs:
        idx = [slice(None)] * g.ndim
        idx[axis] = slice(at, at + a.shape[axis])
        grads.append(contiguous(g[tuple(idx)]))
        at += a.shape[axis]
    return tuple(grads)


@local_vjp(Op.slice)
@saves()
def _slice_vjp(inputs, out, g, axis, start, stop):
    xp = xp_of(g)
    full = xp.zeros(inputs[0].shape, dtype=xp.float32)
    idx = [slice(None)] * g.ndim
    idx[axis] = slice(start, stop)
    full[tuple(idx)] = g
    return (full,)
