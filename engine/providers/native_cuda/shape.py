"""Data movement (engine/csrc/cuda/shape.cu): broadcast, permute, slice, concat as strided copies,
all exact; reshape is a view. Broadcast's VJP is a sum (engine/providers/native_cuda/reduce.py)."""
from __future__ import annotations

import numpy as np

from engine.errors import ShapeError
from engine.providers.native_cuda.launch import (U32, contiguous, cupy, empty, grid, kernel,
                                                 norm_axis, zeros)
from engine.types import BackendOp as Op

MAX_RANK = 32            # TL_MAX_RANK in shape.cu

_copy_kernel = kernel("shape.cu", "tl_strided_copy")
_place_kernel = kernel("shape.cu", "tl_strided_place")
_meta_cache: dict[tuple, object] = {}


def strides(shape) -> list[int]:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return out[::-1]


def _canonical(dims, steps) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop unit axes and merge an axis into the one before it when the outer stride steps
    exactly over it; the visit order is unchanged."""
    out_d: list[int] = []
    out_s: list[int] = []
    for d, s in zip(dims, steps):
        if d == 1:
            continue
        if out_d and out_s[-1] == s * d:
            out_d[-1] *= d
            out_s[-1] = s
        else:
            out_d.append(d)
            out_s.append(s)
    return tuple(out_d), tuple(out_s)


def _meta(dims, steps):
    key = (dims, steps)
    meta = _meta_cache.get(key)
    if meta is None:
        if len(_meta_cache) > 4096:
            _meta_cache.clear()
        host = np.array(dims + steps if dims else (0,), dtype=np.uint32)
        meta = _meta_cache[key] = cupy().asarray(host)
    return meta


def _strided(kern, src, out, dims, steps, base: int, n: int) -> None:
    dims, steps = _canonical(dims, steps)
    if len(dims) > MAX_RANK:
        raise ShapeError(f"native_cuda: a strided copy of rank {len(dims)} after merging axes "
                         f"exceeds the supported rank {MAX_RANK}; reshape to fewer axes first")
    if n:
        kern(grid(n), (src, out, U32(n), _meta(dims, steps), U32(len(dims)), U32(base)))


def broadcast_into(a, shape):
    """a broadcast to `shape` as a new contiguous array (a bitwise copy of each element)."""
    lead = len(shape) - a.ndim
    src = strides(a.shape)
    steps = [0] * lead + [0 if a.shape[i] == 1 else src[i] for i in range(a.ndim)]
    out = empty(shape)
    _strided(_copy_kernel, a, out, tuple(shape), tuple(steps), 0, out.size)
    return out


def _broadcast(a, shape):
    return broadcast_into(a, tuple(shape))


def _broadcast_vjp(inputs, output, g, shape):
    from engine.providers.native_cuda.reduce import sum_axes
    (a,) = inputs
    lead = len(shape) - a.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(a.shape)
                                      if s == 1 and shape[lead + i] != 1)
    return (sum_axes(contiguous(g), axes).reshape(a.shape),)


def permute(a, perm):
    src = strides(a.shape)
    out = empty(tuple(a.shape[p] for p in perm))
    _strided(_copy_kernel, a, out, out.shape, tuple(src[p] for p in perm), 0, out.size)
    return out


def _permute_vjp(inputs, output, g, perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (permute(contiguous(g), tuple(inverse)),)


def _slice(a, axis, start, stop):
    axis = norm_axis(axis, a.ndim)
    src = strides(a.shape)
    shape = a.shape[:axis] + (stop - start,) + a.shape[axis + 1:]
    out = empty(shape)
    _strided(_copy_kernel, a, out, shape, tuple(src), start * src[axis], out.size)
    return out


def _slice_vjp(inputs, output, g, axis, start, stop):
    (a,) = inputs
    axis = norm_axis(axis, a.ndim)
    full = zeros(a.shape)
    dst = strides(a.shape)
    _strided(_place_kernel, contiguous(g), full, g.shape, tuple(dst), start * dst[axis], g.size)
    return (full,)


def _concat(*arrays, axis):
    axis = norm_axis(axis, arrays[0].ndim)
    shape = list(arrays[0].shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    out = empty(tuple(shape))
    dst = strides(shape)
    at = 0
    for x in arrays:
        _strided(_place_kernel, x, out, x.shape, tuple(dst), at * dst[axis], x.size)
        at += x.shape[axis]
    return out


def _concat_vjp(inputs, output, g, axis):
    axis = norm_axis(axis, g.ndim)
    g = contiguous(g)
    src = strides(g.shape)
    grads, at = [], 0
    for x in inputs:
        gx = empty(x.shape)
        _strided(_copy_kernel, g, gx, x.shape, tuple(src), at * src[axis], x.size)
        grads.append(gx)
        at += x.shape[axis]
    return tuple(grads)


def _reshape(a, shape):
    return a.reshape(shape)   # a view: no kernel runs


def _reshape_vjp(inputs, output, g, shape):
    return (g.reshape(inputs[0].shape),)


def handlers() -> dict[Op, tuple]:
    return {
        Op.broadcast: (_broadcast, _broadcast_vjp),
        Op.reshape: (_reshape, _reshape_vjp),
        Op.permute: (permute, _permute_vjp),
        Op.concat: (_concat, _concat_vjp),
        Op.slice: (_slice, _slice_vjp),
    }
