"""Data movement (engine/csrc/cuda/shape.cu): broadcast, permute, slice, concat as strided copies,
all exact; reshape is a view. Broadcast's VJP is a sum (engine/providers/native_cuda/reduce.py);
the strided-copy plumbing is engine/providers/native_cuda/strided.py."""
from __future__ import annotations

import math

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import contiguous, norm_axis, new_array, zeros
from engine.providers.native_cuda.reduce import sum_axes
from engine.providers.native_cuda.strided import (broadcast_into, copy_kernel, place_kernel,
                                                  strided, strides)
from engine.tape_saves import saves
from engine.types import BackendOp as Op, Reduction


def _broadcast(a, shape):
    return broadcast_into(a, tuple(shape))


@saves()
def _broadcast_vjp(inputs, output, g, shape):
    (a,) = inputs
    lead = len(shape) - a.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(a.shape)
                                      if s == 1 and shape[lead + i] != 1)
    return (sum_axes(contiguous(g), axes, tuple(a.shape)),)


def permute(a, perm):
    src = strides(a.shape)
    out = new_array(tuple(a.shape[p] for p in perm), a.size)
    strided(copy_kernel, a, out, out.shape, tuple(src[p] for p in perm), 0, out.size)
    return out


@saves()
def _permute_vjp(inputs, output, g, perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (permute(contiguous(g), tuple(inverse)),)


def _slice(a, axis, start, stop):
    axis = norm_axis(axis, a.ndim)
    src = strides(a.shape)
    shape = a.shape[:axis] + (stop - start,) + a.shape[axis + 1:]
    out = new_array(shape, math.prod(shape))
    strided(copy_kernel, a, out, shape, tuple(src), start * src[axis], out.size)
    return out


@saves()
def _slice_vjp(inputs, output, g, axis, start, stop):
    (a,) = inputs
    axis = norm_axis(axis, a.ndim)
    full = zeros(a.shape)
    dst = strides(a.shape)
    strided(place_kernel, contiguous(g), full, g.shape, tuple(dst), start * dst[axis], g.size)
    return (full,)


def _concat(*arrays, axis):
    axis = norm_axis(axis, arrays[0].ndim)
    shape = list(arrays[0].shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    shape = tuple(shape)
    out = new_array(shape, math.prod(shape))
    dst = strides(shape)
    at = 0
    for x in arrays:
        strided(place_kernel, x, out, x.shape, tuple(dst), at * dst[axis], x.size)
        at += x.shape[axis]
    return out


@saves()
def _concat_vjp(inputs, output, g, axis):
    axis = norm_axis(axis, g.ndim)
    g = contiguous(g)
    if math.prod(g.shape[:axis]) == 1:
        # every input's gradient is one contiguous run of g (concatenation along the outermost
        # axis that is not 1): views of g, no kernel, as reshape's VJP (the bits are g's)
        flat, inner, at, grads = g.reshape(-1), math.prod(g.shape[axis + 1:]), 0, []
        for x in inputs:
            grads.append(flat[at * inner:(at + x.shape[axis]) * inner].reshape(x.shape))
            at += x.shape[axis]
        return tuple(grads)
    src = strides(g.shape)
    grads, at = [], 0
    for x in inputs:
        gx = new_array(x.shape, x.size)
        strided(copy_kernel, g, gx, x.shape, tuple(src), at * src[axis], x.size)
        grads.append(gx)
        at += x.shape[axis]
    return tuple(grads)


def _reshape(a, shape):
    return a.reshape(shape)   # a view: no kernel runs


@saves()
def _reshape_vjp(inputs, output, g, shape):
    return (g.reshape(inputs[0].shape),)


# the generic strided kernels and their row fast paths (strided.py picks one per call)
_COPY = ("tl_strided_copy", "tl_rows_copy")
_PLACE = ("tl_strided_place", "tl_rows_place")
_PERMUTE = _COPY + ("tl_transpose_tiles",)

DECLS = (
    # The forward copies bits; the VJP sums with reduce.cu, atomically in default mode.
    KernelDecl(Op.broadcast, "shape.cu", _COPY,
               ("reduce.cu:tl_reduce_rows_group", "reduce.cu:tl_reduce_rows",
                "reduce.cu:tl_reduce_cols", "reduce.cu:tl_neg_zeros"),
               _broadcast, _broadcast_vjp, reduction=Reduction.implementation_defined,
               atomics=True),
    KernelDecl(Op.reshape, "", (), forward=_reshape, vjp=_reshape_vjp, exact=True,
               summary="a view of the same buffer: no kernel runs"),
    KernelDecl(Op.permute, "shape.cu", _PERMUTE, _PERMUTE, permute, _permute_vjp, exact=True),
    KernelDecl(Op.concat, "shape.cu", _PLACE, _COPY, _concat, _concat_vjp, exact=True),
    KernelDecl(Op.slice, "shape.cu", _COPY, _PLACE, _slice, _slice_vjp, exact=True),
)
