"""Parameter checks shared by the op wrappers: axes, permutations, shapes, indices."""
from __future__ import annotations

import numpy as np

from engine.errors import IndexOutOfRangeError, ShapeError, UInt32OverflowError
from engine.runtime.buffer import UINT32_MAX, check_uint32


def axis(op: str, ax, ndim: int) -> int:
    if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)):
        raise ShapeError(f"{op}: axis must be an int, got {ax!r}")
    if not -ndim <= ax < ndim:
        raise ShapeError(f"{op}: axis {ax} is out of range for rank {ndim}; "
                         f"use an axis in [{-ndim}, {ndim - 1}]")
    return int(ax) % ndim


def shape(op: str, shp) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shp)
    except TypeError:
        raise ShapeError(f"{op}: shape must be a sequence of ints, got {shp!r}") from None
    if any(s < 0 for s in out):
        raise ShapeError(f"{op}: shape {out} has a negative extent")
    check_uint32(out, op)
    return out


def indices(op: str, idx, extent: int) -> np.ndarray:
    arr = np.asarray(idx)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ShapeError(f"{op}: indices must be a 1-D sequence of ints, got dtype "
                         f"{arr.dtype} with shape {arr.shape}")
    arr = arr.astype(np.int64)
    if arr.size > UINT32_MAX:
        raise UInt32OverflowError(f"{op}: {arr.size} indices exceed the UInt32 limit")
    if arr.size and (arr.min() < 0 or arr.max() >= extent):
        bad = int(arr[(arr < 0) | (arr >= extent)][0])
        raise IndexOutOfRangeError(
            f"{op}: index {bad} is outside [0, {extent}) for the indexed axis; pass indices "
            f"in range")
    if arr.size and arr.max() > UINT32_MAX:
        raise UInt32OverflowError(f"{op}: index {int(arr.max())} does not fit UInt32")
    return arr
