"""Inputs at a byte offset from an aligned allocation. The engine hands kernels views that start at
any 4-byte multiple (the halves of engine.autograd.split), while the harness's ordinary uploads are
fresh, aligned copies: a kernel that assumes its input starts on a 16-byte boundary (float4 loads
from the pointer rounded down) passes those. `upload(x, xp, offset_bytes)` returns a view with x's
bits, shape and dtype that starts `offset_bytes` past an ALIGNMENT-aligned address inside a larger
allocation (a NumPy buffer on the host, a CuPy allocation on the device); the bytes around the
view hold PAD_BITS, so a kernel that reads from the aligned base reads NaNs no input holds."""
from __future__ import annotations

import numpy as np

# CUDA allocations start at multiples of 256 bytes (cudaMalloc, CuPy's pools); the host buffer is
# aligned the same way, so a view's offset is its misalignment on both devices
ALIGNMENT = 256
# the offsets the harness's misaligned class uses: every 4-byte residue a float32 view can have
# modulo 16 (a float4 load's alignment) besides 0
OFFSETS = (4, 8, 12)
# what the allocation holds outside the view: a float32 signalling NaN that no generator draws
# (samplers.NAN_PAYLOADS) and that is not the allocator's poison (engine.runtime.poison), so a
# value read from outside the view shows as a NaN, not as an unwritten output
PAD_BITS = 0x7FBADBAD
_WORD = 4


class MisalignError(ValueError):
    """An upload asked for an offset a view of that array cannot start at."""


def _check(x, offset_bytes) -> int:
    """The offset as an int, once x and it make a valid view."""
    if not isinstance(x, np.ndarray):
        raise MisalignError(f"misalign.upload: got a {type(x).__name__}; expected a host NumPy "
                            "array (the case's own input) to copy to an offset view")
    step = max(x.dtype.itemsize, _WORD)
    if isinstance(offset_bytes, bool) or not isinstance(offset_bytes, (int, np.integer)) or \
            offset_bytes < 0 or offset_bytes % step:
        raise MisalignError(
            f"misalign.upload: got offset {offset_bytes!r} bytes for a {x.dtype} array; expected "
            f"a non-negative multiple of {step} bytes (an element boundary, as the engine's "
            f"views have); use one of {OFFSETS}")
    return int(offset_bytes)


def _image(x: np.ndarray, offset_bytes: int) -> np.ndarray:
    """The bytes of the padded allocation from its aligned base: PAD_BITS words, x's bytes at
    `offset_bytes`, and at least one aligned block of padding after them."""
    data = np.array(x, order="C").reshape(-1).view(np.uint8)
    total = -(-(offset_bytes + data.size) // ALIGNMENT) * ALIGNMENT + ALIGNMENT
    image = np.full(total // _WORD, PAD_BITS, dtype=np.uint32).view(np.uint8)
    image[offset_bytes: offset_bytes + data.size] = data
    return image


def upload(x: np.ndarray, xp, offset_bytes: int):
    """A view with x's bits, shape and dtype starting `offset_bytes` past an ALIGNMENT-aligned
    address of a larger allocation on xp's device (NumPy: the host; CuPy: the current GPU). A
    rank-0 array stays rank 0; an empty one is an empty view at that offset."""
    offset_bytes = _check(x, offset_bytes)
    image = _image(x, offset_bytes)
    if xp is np:
        buf = np.empty(image.size // _WORD + ALIGNMENT // _WORD, dtype=np.uint32).view(np.uint8)
        start = (-buf.ctypes.data) % ALIGNMENT          # a word multiple: the buffer is aligned
        buf[start: start + image.size] = image
        # np.ndarray over the buffer, not a slice of it: an empty slice may not keep its address
        return np.ndarray(x.shape, dtype=x.dtype, buffer=buf, offset=start + offset_bytes)
    import cupy
    mem = cupy.cuda.alloc(image.size + ALIGNMENT)
    start = (-mem.ptr) % ALIGNMENT
    base = mem + start
    base.copy_from_host(image.ctypes.data, image.size)
    return cupy.ndarray(x.shape, dtype=x.dtype, memptr=base + offset_bytes)


def offset_of(view) -> int:
    """The byte offset of a view's first element from the ALIGNMENT boundary below it (what a
    kernel sees), on either device."""
    ptr = view.data.ptr if hasattr(view, "data") and hasattr(view.data, "ptr") \
        else view.ctypes.data
    return int(ptr % ALIGNMENT)
