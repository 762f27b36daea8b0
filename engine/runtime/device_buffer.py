"""Device upload/download and the TorchLean buffer-wrapper counters (counted by AnyBuffer itself:
alive, peak, created, finalized, and the payload bytes for the CPU parity stub's telemetry)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.runtime.buffer import AnyBuffer, WrapperCounters, check_uint32
from engine.types import Device


@dataclass(frozen=True)
class WrapperCounts:
    live: int
    peak: int
    alloc: int
    finalize: int
    live_bytes: int
    peak_bytes: int


def track(buffer: AnyBuffer) -> AnyBuffer:
    """Every AnyBuffer is counted from its creation (engine/runtime/buffer.py); kept so callers
    that wrap foreign buffers read the same."""
    return buffer


def wrapper_counts() -> WrapperCounts:
    c = WrapperCounters
    return WrapperCounts(c.live, c.peak, c.alloc, c.finalize, c.live_bytes, c.peak_bytes)


def upload(host, device: Device | str = Device.cuda) -> AnyBuffer:
    """A tracked flat float32 buffer holding `host`, on `device` (CuPy memory for cuda)."""
    device = Device.parse(device) if isinstance(device, str) else device
    flat = np.ascontiguousarray(host, dtype=np.float32).reshape(-1)
    check_uint32(flat.shape, "upload")
    if device is Device.cuda:
        from engine.runtime.allocator import install
        from engine.runtime.native import require_native_runtime
        require_native_runtime()
        install()
        import cupy
        return track(AnyBuffer(cupy.asarray(flat), device))
    return track(AnyBuffer(flat.copy(), device))


def download(buffer: AnyBuffer) -> np.ndarray:
    """The buffer's elements as a new flat host float32 array."""
    data = buffer.data
    if hasattr(data, "get"):
        return data.get().reshape(-1)
    return np.array(data, dtype=np.float32, copy=True).reshape(-1)
