"""Array-module helpers so one local VJP rule serves NumPy and CuPy arrays."""
from __future__ import annotations

import numpy as np


def xp_of(array):
    """numpy for host arrays, cupy for device arrays (imported only when one is seen)."""
    if type(array).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def f32(xp, value):
    return xp.asarray(value, dtype=xp.float32)


def contiguous(x):
    """A C-contiguous array with x's shape; unlike ascontiguousarray, rank 0 stays rank 0."""
    return x if x.flags.c_contiguous else x.copy()


def sum_to_shape(g, shape: tuple[int, ...]):
    """Sum a broadcast gradient back to `shape` (NumPy broadcasting rules)."""
    xp = xp_of(g)
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    out = xp.sum(g, axis=axes, keepdims=True, dtype=xp.float32) if axes else g
    return out.reshape(shape).astype(xp.float32, copy=False)
