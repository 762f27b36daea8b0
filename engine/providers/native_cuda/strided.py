"""Strided copies (engine/csrc/cuda/shape.cu): the plumbing that broadcast, permute, slice and
concat share, and `broadcast_into`, which reduce.py (the VJP of a sum) and cublas.py (linear's
bias) need too. A module of its own so shape.py (whose broadcast VJP is a sum) and reduce.py do
not import each other."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ShapeError
from engine.providers.native_cuda.launch import BLOCK, cupy, grid, kernel, new_array

MAX_RANK = 32            # TL_MAX_RANK in shape.cu

RUN_MIN = 16             # innermost extents from this long take the row fast paths
SEG_UNITS = 8            # TL_SEG_UNITS in tl_runs.cuh

# Prepared launches (launch.Kernel.launch): pointers as integers, the meta table's among them
copy_kernel = kernel("shape.cu", "tl_strided_copy", "ppupuu")
place_kernel = kernel("shape.cu", "tl_strided_place", "ppupuu")
_rows_copy = kernel("shape.cu", "tl_rows_copy", "ppuuuupuuui")
_rows_place = kernel("shape.cu", "tl_rows_place", "ppuuuupuui")
_transpose = kernel("shape.cu", "tl_transpose_tiles", "ppuuuuupuu")
TILE = 32                # TL_TILE in shape.cu
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


def _meta(dims, steps) -> int:
    """The device address of the (dims, strides) table the kernels read (cached per table: the
    array stays referenced here while launches may read it; a cleared table's block returns to
    the pool in stream order, after those launches)."""
    key = (dims, steps)
    meta = _meta_cache.get(key)
    if meta is None:
        if len(_meta_cache) > 4096:
            _meta_cache.clear()
        host = np.array(dims + steps if dims else (0,), dtype=np.uint32)
        meta = _meta_cache[key] = cupy().asarray(host)
    return meta.data.ptr


def segments(w: int) -> tuple[int, int]:
    """(log2 lanes per segment, segments per run) of tl_runs.cuh for runs of w floats: the fewest
    lanes (a power of two, at most a warp) that leave each at most SEG_UNITS four-float units,
    and longer runs cut in warp-sized segments so that they spread over the grid."""
    units = -(-w // 4)
    lanes = 1
    while lanes < 32 and lanes * SEG_UNITS < units:
        lanes *= 2
    return lanes.bit_length() - 1, -(-units // (lanes * SEG_UNITS))


def _rows(kern, src, out, dims, steps, base: int, n: int) -> bool:
    """The row fast paths of shape.cu when the innermost axis is a run (stride 1) or a
    broadcast column (stride 0, copies only) of at least RUN_MIN elements; False otherwise."""
    w, step = dims[-1], steps[-1]
    if w < RUN_MIN or step > 1 or (step == 0 and kern is not copy_kernel):
        return False
    rows = n // w
    lg, chunks = segments(w)
    if step:     # both runs move in 16-byte pieces: every run start must be aligned
        vec = (w % 4 == 0 and base % 4 == 0 and all(s % 4 == 0 for s in steps[:-1])
               and src.data.ptr % 16 == 0 and out.data.ptr % 16 == 0)
    else:        # a broadcast column reads one float per run: only the dense side counts
        vec = w % 4 == 0 and out.data.ptr % 16 == 0
    meta = _meta(dims[:-1], steps[:-1])
    blocks = -(-(rows * chunks << lg) // BLOCK)
    if kern is copy_kernel:
        _rows_copy.launch(blocks, src.data.ptr, out.data.ptr, rows, w, chunks, lg, meta,
                          len(dims) - 1, base, step, int(vec))
    else:
        _rows_place.launch(blocks, src.data.ptr, out.data.ptr, rows, w, chunks, lg, meta,
                           len(dims) - 1, base, int(vec))
    return True


def _transposed(kern, src, out, dims, steps, base: int, n: int) -> bool:
    """The tiled transpose of shape.cu when the two innermost visit axes (each at least 8 long)
    have strides (1, S): a copy whose reads run along the second-last axis; False otherwise."""
    if (kern is not copy_kernel or len(dims) < 2 or steps[-2] != 1 or steps[-1] == 0
            or min(dims[-2:]) < 8):
        return False
    a, c = dims[-2:]
    tiles_a, tiles_c = -(-a // TILE), -(-c // TILE)
    batch = n // (a * c)
    _transpose.launch(batch * tiles_a * tiles_c, src.data.ptr, out.data.ptr, a, c, steps[-1],
                      tiles_a, tiles_c, _meta(dims[:-2], steps[:-2]), len(dims) - 2, base)
    return True


def strided(kern, src, out, dims, steps, base: int, n: int) -> None:
    dims, steps = _canonical(dims, steps)
    if len(dims) > MAX_RANK:
        raise ShapeError(f"native_cuda: a strided copy of rank {len(dims)} after merging axes "
                         f"exceeds the supported rank {MAX_RANK}; reshape to fewer axes first")
    if n and not (dims and (_rows(kern, src, out, dims, steps, base, n)
                            or _transposed(kern, src, out, dims, steps, base, n))):
        kern.launch(grid(n)[0], src.data.ptr, out.data.ptr, n, _meta(dims, steps), len(dims),
                    base)


def broadcast_into(a, shape):
    """a broadcast to `shape` as a new contiguous array (a bitwise copy of each element)."""
    shape = tuple(shape)
    lead = len(shape) - a.ndim
    src = strides(a.shape)
    steps = [0] * lead + [0 if a.shape[i] == 1 else src[i] for i in range(a.ndim)]
    out = new_array(shape, math.prod(shape))
    strided(copy_kernel, a, out, shape, tuple(steps), 0, out.size)
    return out
