"""Strided copies (engine/csrc/cuda/shape.cu): the plumbing that broadcast, permute, slice and
concat share, and `broadcast_into`, which reduce.py (the VJP of a sum) and cublas.py (linear's
bias) need too. A module of its own so shape.py (whose broadcast VJP is a sum) and reduce.py do
not import each other."""
from __future__ import annotations

import numpy as np

from engine.errors import ShapeError
from engine.providers.native_cuda.launch import U32, cupy, empty, grid, kernel

MAX_RANK = 32            # TL_MAX_RANK in shape.cu

copy_kernel = kernel("shape.cu", "tl_strided_copy")
place_kernel = kernel("shape.cu", "tl_strided_place")
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


def strided(kern, src, out, dims, steps, base: int, n: int) -> None:
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
    strided(copy_kernel, a, out, tuple(shape), tuple(steps), 0, out.size)
    return out
