"""Parameter checks shared by the op wrappers: numbers, seeds, axes, permutations, shapes,
indices. A parameter of the wrong type raises ParameterTypeError (a TypeError), one of the right
type but outside what the op accepts ParameterValueError (a ValueError)."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import (IndexOutOfRangeError, ParameterTypeError, ParameterValueError,
                           ShapeError, UInt32OverflowError)
from engine.float32 import FLT_MAX
from engine.runtime.buffer import UINT32_MAX, check_uint32


def number(op: str, name: str, value) -> float:
    """A real number (int, float or a NumPy real scalar; never a bool), as a Python float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise ParameterTypeError(f"{op}: {name} must be a real number, got "
                                 f"{type(value).__name__} {value!r}")
    return float(value)


def finite_f32(op: str, name: str, value) -> float:
    """A number that is finite and stays finite rounded to float32 (docs/OPS.md rounds float
    parameters to float32 before use)."""
    x = number(op, name, value)
    if not math.isfinite(x) or abs(x) > FLT_MAX:
        raise ParameterValueError(f"{op}: {name} must be a finite number that float32 can hold "
                                  f"(|x| <= {FLT_MAX:.7g}), got {value!r}")
    return x


def seed(op: str, value) -> int:
    """The one rule for seeds everywhere (ops and the CLIs): a whole number in [0, 2^64)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ParameterTypeError(f"{op}: seed must be a whole number in [0, 2^64), got "
                                 f"{type(value).__name__} {value!r}")
    if not 0 <= int(value) < 2 ** 64:
        raise ParameterValueError(f"{op}: seed must be a whole number in [0, 2^64), got {value!r}")
    return int(value)


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


def indices(op: str, idx, extent: int):
    """idx as int64 indices into an axis of `extent`: checked entry by entry on the host, or, for
    engine.indices.CheckedIndices (on the device, checked when written), by their bound."""
    from engine.indices import CheckedIndices
    if isinstance(idx, CheckedIndices):
        if idx.upper > extent:
            raise IndexOutOfRangeError(
                f"{op}: checked indices may reach {idx.upper - 1}, outside [0, {extent}) for the "
                "indexed axis; pass indices checked against this extent")
        return idx.data
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
