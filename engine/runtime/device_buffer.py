"""Host <-> device copies: `to_device`, the one upload of float32 data to CuPy memory (every bit
kept, -0.0 included), the counted `upload` and `download`, and the buffer-wrapper counters
(counted by AnyBuffer itself, engine/runtime/buffer.py)."""
from __future__ import annotations

import numpy as np

from engine.runtime.buffer import AnyBuffer, WrapperCounts, check_uint32, wrapper_counts
from engine.types import Device

__all__ = ["WrapperCounts", "download", "to_device", "upload", "wrapper_counts"]


def to_device(host, dtype=np.float32):
    """`host` as a new CuPy array of its shape with its exact bits: float32 unless `dtype` says
    otherwise (None keeps the array's own dtype: index and mask params).

    Through a flat copy: cupy.asarray of a rank-0 array fills the result by value
    (ndarray.fill), and a fill with any value == 0 memsets +0, so a -0.0 scalar would arrive as
    +0.0. A flat 1-element copy moves the bytes; the reshape back to rank 0 keeps them. The one
    host->device upload of engine/ and conformance/: every other copy goes through it."""
    import cupy
    host = np.asarray(host, dtype=dtype)
    return cupy.asarray(np.ascontiguousarray(host).reshape(-1)).reshape(host.shape)


def upload(host, device: Device | str = Device.cuda) -> AnyBuffer:
    """A counted flat float32 buffer holding `host`, on `device` (CuPy memory for cuda)."""
    device = Device.parse(device) if isinstance(device, str) else device
    flat = np.ascontiguousarray(host, dtype=np.float32).reshape(-1)
    check_uint32(flat.shape, "upload")
    if device is Device.cuda:
        from engine.runtime.allocator import install
        from engine.runtime.native import require_native_runtime
        require_native_runtime()
        install()
        return AnyBuffer(to_device(flat), device)
    return AnyBuffer(flat.copy(), device)


def download(buffer: AnyBuffer) -> np.ndarray:
    """The buffer's elements as a new flat host float32 array."""
    data = buffer.data
    if hasattr(data, "get"):
        return data.get().reshape(-1)
    return np.array(data, dtype=np.float32, copy=True).reshape(-1)
