"""Opaque contiguous float32 buffers and the checks every shape-erased value passes."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.errors import DTypeError, LengthMismatchError, UInt32OverflowError
from engine.types import Device

UINT32_MAX = 2**32 - 1


def element_count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def check_uint32(shape: tuple[int, ...], what: str) -> None:
    """Every axis and the element count must fit the UInt32 kernel ABI."""
    for axis, extent in enumerate(shape):
        if extent > UINT32_MAX:
            raise UInt32OverflowError(
                f"{what}: axis {axis} has extent {extent}, over the UInt32 limit {UINT32_MAX}; "
                "split the tensor")
    count = element_count(shape)
    if count > UINT32_MAX:
        raise UInt32OverflowError(
            f"{what}: shape {tuple(shape)} holds {count} elements, over the UInt32 limit "
            f"{UINT32_MAX}; split the tensor")


class _Counters:
    """Every AnyBuffer counted from creation to collection (allocator_stats' wrapper fields).
    Plain integer updates under the GIL on one instance (a weakref per buffer would double the
    per-op cost, and assigning class attributes would invalidate CPython's type caches)."""
    __slots__ = ("live", "peak", "alloc", "finalize", "live_bytes", "peak_bytes")

    def __init__(self) -> None:
        self.live = self.peak = self.alloc = self.finalize = 0
        self.live_bytes = self.peak_bytes = 0


WrapperCounters = _Counters()


@dataclass(frozen=True)
class WrapperCounts:
    live: int
    peak: int
    alloc: int
    finalize: int
    live_bytes: int
    peak_bytes: int


def wrapper_counts() -> WrapperCounts:
    """A snapshot of WrapperCounters (the allocator's telemetry reads it)."""
    c = WrapperCounters
    return WrapperCounts(c.live, c.peak, c.alloc, c.finalize, c.live_bytes, c.peak_bytes)


class AnyBuffer:
    """A flat float32 array (NumPy on the CPU, CuPy on CUDA) whose logical shape lives elsewhere."""
    __slots__ = ("data", "device", "nbytes", "__weakref__")

    def __init__(self, data, device: Device, nbytes: int | None = None,
                 _c=WrapperCounters) -> None:
        """`nbytes`: data.nbytes, when the caller knows it (the dispatch path: 4 per element of
        a checked float32 output), saving the array's property read."""
        self.data = data
        self.device = device
        if nbytes is None:
            nbytes = data.nbytes
        self.nbytes = nbytes
        _c.alloc += 1
        live = _c.live = _c.live + 1
        if live > _c.peak:
            _c.peak = live
        live_bytes = _c.live_bytes = _c.live_bytes + nbytes
        if live_bytes > _c.peak_bytes:
            _c.peak_bytes = live_bytes

    def __del__(self, _counters=WrapperCounters) -> None:
        # The class is bound as a default: at interpreter exit module globals may be gone.
        _counters.live -= 1
        _counters.finalize += 1
        _counters.live_bytes -= self.nbytes

    @property
    def count(self) -> int:
        return int(self.data.size)

    @staticmethod
    def validate(data, shape: tuple[int, ...], what: str):
        """Check a shape-erased value against the logical shape it is about to take.

        Returns the data as a flat float32 array of the right length, or raises
        LengthMismatchError naming both counts.
        """
        expected = element_count(shape)
        got = int(getattr(data, "size", -1))
        if got != expected:
            raise LengthMismatchError(
                f"{what}: got {got} elements, expected {expected} for shape {tuple(shape)}; "
                "pass a value with exactly one element per position of that shape")
        if getattr(data, "dtype", None) != np.float32:
            raise DTypeError(
                f"{what}: got dtype {getattr(data, 'dtype', type(data).__name__)}, expected "
                "float32; convert it first")
        return data.reshape(-1)
