"""gather and scatter_add along one axis with integer index parameters, and their VJP rules."""
from __future__ import annotations

from engine.errors import ShapeError
from engine.ops import _checks
from engine.ops import _tape_cuda as tape
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops._xp import contiguous, xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _device_indices(a: Tensor, idx):
    if a.device.label == "cuda":
        import cupy
        return cupy.asarray(idx)
    return idx


def gather(a: Tensor, axis: int, indices) -> Tensor:
    if a.ndim == 0:
        raise ShapeError("gather: needs rank >= 1, got a rank-0 tensor")
    ax = _checks.axis("gather", axis, a.ndim)
    idx = _checks.indices("gather", indices, a.shape[ax])
    out = list(a.shape)
    out[ax] = idx.size
    return apply(Op.gather, (a,), tuple(out), {"axis": ax, "indices": _device_indices(a, idx)})


def scatter_add(base: Tensor, src: Tensor, axis: int, indices) -> Tensor:
    if base.ndim == 0:
        raise ShapeError("scatter_add: needs rank >= 1, got a rank-0 base")
    ax = _checks.axis("scatter_add", axis, base.ndim)
    idx = _checks.indices("scatter_add", indices, base.shape[ax])
    want = list(base.shape)
    want[ax] = idx.size
    if src.shape != tuple(want):
        raise ShapeError(f"scatter_add: src shape {src.shape} should be {tuple(want)} (the base "
                         f"shape {base.shape} with axis {ax} of extent len(indices)={idx.size})")
    return apply(Op.scatter_add, (base, src), base.shape,
                 {"axis": ax, "indices": _device_indices(base, idx)})


@local_vjp(Op.gather, tape=("index.cu:tl_scatter_add_ordered",))
@saves()
def _gather_vjp(inputs, out, g, axis, indices):
    if on_device(g):   # index.cu's tl_scatter_add_ordered: numpy.add.at's left fold, our flags
        return (tape.scatter_add_ordered(inputs[0].shape, g, axis, indices),)
    xp = xp_of(g)
    full = xp.zeros(inputs[0].shape, dtype=xp.float32)
    idx = [slice(None)] * g.ndim
    idx[axis] = indices
    xp.add.at(full, tuple(idx), g)
    return (full,)


@local_vjp(Op.scatter_add)
@saves()
def _scatter_add_vjp(inputs, out, g, axis, indices):
    xp = xp_of(g)
    return g, contiguous(xp.take(g, indices, axis=axis))
