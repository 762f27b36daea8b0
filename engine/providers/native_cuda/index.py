"""gather and scatter_add along one axis (engine/csrc/cuda/index.cu). Accumulation uses float
atomicAdd in default mode (PTX flushes subnormals there) and a left fold in index order per column
in deterministic mode (bitwise equal to numpy.add.at, subnormals kept)."""
from __future__ import annotations

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, I32, U32, axis_view, contiguous, copy,
                                                 cupy, empty, grid, kernel, norm_axis, zeros)
from engine.providers.native_cuda.strided import RUN_MIN, segments
from engine.runtime.deterministic import get_deterministic_reductions
from engine.tape_saves import saves
from engine.types import BackendOp as Op, Reduction

_gather_kernel = kernel("index.cu", "tl_gather")
_scatter_atomic = kernel("index.cu", "tl_scatter_add_atomic")
_scatter_ordered = kernel("index.cu", "tl_scatter_add_ordered")
_gather_rows = kernel("index.cu", "tl_gather_rows")
_scatter_atomic_rows = kernel("index.cu", "tl_scatter_add_atomic_rows")


def _row_geometry(rows: int, inner: int, *arrays) -> tuple[tuple, tuple]:
    """(grid, trailing arguments chunks, tpr_log2, vec) of the row fast paths of index.cu for
    rows of inner >= RUN_MIN floats; vec needs inner % 4 == 0 and every array 16-byte aligned."""
    lg, chunks = segments(inner)
    vec = int(inner % 4 == 0 and all(x.data.ptr % 16 == 0 for x in arrays))
    return (-(-(rows * chunks << lg) // BLOCK),), (U32(chunks), U32(lg), I32(vec))


def _device_indices(indices):
    cp = cupy()
    if isinstance(indices, cp.ndarray) and indices.dtype == np.int64:
        return contiguous(indices)
    return cp.asarray(np.asarray(indices if not isinstance(indices, cp.ndarray)
                                 else indices.get(), dtype=np.int64))


def _gather(a, axis, indices):
    axis = norm_axis(axis, a.ndim)
    idx = _device_indices(indices)
    outer, extent, inner = axis_view(a.shape, axis)
    m = int(idx.size)
    out = empty(a.shape[:axis] + (m,) + a.shape[axis + 1:])
    if out.size and inner >= RUN_MIN:
        blocks, tail = _row_geometry(outer * m, inner, a, out)
        _gather_rows(blocks, (a, idx, out, U32(outer), U32(extent), U32(m), U32(inner)) + tail)
    elif out.size:
        _gather_kernel(grid(out.size), (a, idx, out, U32(outer), U32(extent), U32(m),
                                        U32(inner)))
    return out


def _scatter_into(out, src, axis, idx):
    """Add src into out (in place) at positions idx along axis."""
    outer, extent, inner = axis_view(out.shape, axis)
    m = int(idx.size)
    if src.size == 0:
        return out
    if get_deterministic_reductions():
        _scatter_ordered(grid(outer * inner), (out, src, idx, U32(outer), U32(extent), U32(m),
                                               U32(inner)))
    elif inner >= RUN_MIN:
        blocks, tail = _row_geometry(outer * m, inner, out, src)
        _scatter_atomic_rows(blocks, (out, src, idx, U32(outer), U32(extent), U32(m),
                                      U32(inner)) + tail)
    else:
        _scatter_atomic(grid(src.size), (out, src, idx, U32(outer), U32(extent), U32(m),
                                         U32(inner)))
    return out


@saves()
def _gather_vjp(inputs, output, g, axis, indices):
    (a,) = inputs
    return (_scatter_into(zeros(a.shape), contiguous(g), axis, _device_indices(indices)),)


def _scatter_add(base, src, axis, indices):
    return _scatter_into(copy(base), src, axis, _device_indices(indices))


@saves()
def _scatter_add_vjp(inputs, output, g, axis, indices):
    g = contiguous(g)
    return g, _gather(g, axis, indices)


_ATOMIC = dict(reduction=Reduction.implementation_defined, atomics=True)

DECLS = (
    # gather moves bits; its VJP scatters g back, atomically in default mode.
    KernelDecl(Op.gather, "index.cu", ("tl_gather", "tl_gather_rows"),
               ("tl_scatter_add_atomic", "tl_scatter_add_atomic_rows", "tl_scatter_add_ordered"),
               _gather, _gather_vjp, **_ATOMIC),
    KernelDecl(Op.scatter_add, "index.cu",
               ("tl_scatter_add_atomic", "tl_scatter_add_atomic_rows", "tl_scatter_add_ordered"),
               ("tl_gather", "tl_gather_rows"), _scatter_add, _scatter_add_vjp, **_ATOMIC,
               summary="float32 adds into a copy of base: atomicAdd for duplicates in default "
                       "mode (subnormals flushed by PTX), a left fold in index order per column "
                       "in deterministic mode (bitwise equal to numpy.add.at)"),
)
