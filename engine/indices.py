"""Index arrays already on the device and already range-checked: what gather and scatter_add take
inside a CUDA graph capture (engine/graphs.py), where checking them would read them back.

A CheckedIndices holds a 1-D int64 device array whose every entry was checked on the host, when
it was written, to lie in [0, upper): the ops then check `upper` against the indexed extent (a
host comparison), never the entries. engine.graphs writes a replay's host indices into the static
buffer only after that check."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import IndexOutOfRangeError, ShapeError


def check_host(arr, upper: int, what: str) -> np.ndarray:
    """arr as a 1-D int64 host array whose entries lie in [0, upper), else the named error."""
    a = np.asarray(arr)
    if a.size and a.dtype.kind not in "iu":
        raise ShapeError(f"{what}: indices must be integers, got dtype {a.dtype}")
    a = a.reshape(-1).astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= upper):
        bad = int(a[(a < 0) | (a >= upper)][0])
        raise IndexOutOfRangeError(f"{what}: index {bad} is outside [0, {upper}); pass indices "
                                   "in range")
    return a


@dataclass(frozen=True, eq=False)
class CheckedIndices:
    data: object        # 1-D int64 CuPy array
    upper: int          # every entry is < upper (and >= 0)

    @property
    def size(self) -> int:
        return int(self.data.size)

    @classmethod
    def upload(cls, host, upper: int, what: str = "indices") -> "CheckedIndices":
        import cupy
        return cls(cupy.asarray(check_host(host, upper, what)), upper)
