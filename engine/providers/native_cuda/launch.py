"""Launch plumbing shared by the native-cuda families: CuPy on first use, kernels compiled by
engine/runtime/loader.py and looked up by (file, symbol), grids, and new float32 arrays.

Handlers receive C-contiguous float32 CuPy arrays of their logical shapes (engine/ops/_dispatch.py
has checked shapes, lengths and UInt32 extents) and return new arrays.

Two ways to launch, chosen per call site: `Kernel.__call__` (CuPy's Function: any argument list)
and `Kernel.launch` (engine/runtime/driver_launch.py: the kernel's declared signature, parameters
prepared once, for the per-op hot path of the elementwise handlers). `new_array` is the hot path's
allocation: a block of the exact-size cache wrapped as an ndarray without cupy.empty's generic path.
"""
from __future__ import annotations

import numpy as np

from engine.runtime import driver_launch, loader
from engine.runtime.allocator import CacheBlock

BLOCK = 256              # threads per block of every launch (TL_BLOCK in the .cu files)
SMEM_LIMIT = 48 * 1024   # dynamic shared memory a block may take without an opt-in
U32, F32, F64, I32 = np.uint32, np.float32, np.float64, np.int32

_cp = None               # cupy, imported by the first handler call
_max_blocks = 0
# Bound by cupy(): the current-stream lookup, the exact-size cache's malloc and free (bound once:
# a bound method made per call costs as much as the lookup) and CuPy's wrappers `new_array` builds an
# array from.
_current_stream = _malloc = _free = _get_device = _Unowned = _MemoryPointer = _ndarray = None
_base_new = None         # cupy.ndarray's Cython base __new__, when base_constructor accepts it


def cupy():
    global _cp, _max_blocks, _current_stream, _malloc, _free, _get_device, _Unowned, \
        _MemoryPointer, _ndarray, _base_new
    if _cp is None:
        import cupy as cp
        from engine.runtime.allocator import install
        cache = install()
        _malloc, _free = cache.malloc, cache.free
        _max_blocks = cp.cuda.Device().attributes["MultiProcessorCount"] * 8
        _current_stream = cp.cuda.get_current_stream
        _get_device = cp.cuda.runtime.getDevice
        _Unowned = cp.cuda.memory.UnownedMemory
        _MemoryPointer = cp.cuda.memory.MemoryPointer
        _ndarray = cp.ndarray
        _base_new = base_constructor(cp)
        _cp = cp
    return _cp


def base_constructor(cp):
    """The __new__ of cupy.ndarray's Cython base type, when this CuPy builds an array in the two
    steps new_array() can take without the Python wrapper around them; else None (new_array() then
    calls cupy.ndarray).

    CuPy 13 and later make cupy.ndarray a Python subclass of the Cython type _ndarray_base: its
    Python __new__ calls the base's __new__ and then `_init(shape, dtype, memptr)`, and its
    __init__ does nothing. new_array() makes the two calls itself, without the two Python frames,
    the super() object and the repacked arguments around them (host time on every op). A probe
    compares the result with cupy.ndarray's on the same memory: anything missing, raising or
    different and the answer is None."""
    try:
        base, nd = cp._core.core._ndarray_base, cp.ndarray
        if not (isinstance(nd, type) and issubclass(nd, base) and callable(base._init)):
            return None
        new = base.__new__
        block = cp.empty(6, F32)
        ours = new(nd)
        ours._init((2, 3), F32, block.data)
        theirs = nd((2, 3), F32, block.data)
        same = (type(ours) is nd and ours.shape == theirs.shape
                and ours.strides == theirs.strides and ours.dtype == theirs.dtype
                and ours.data.ptr == theirs.data.ptr and ours.flags.c_contiguous
                and ours.size == theirs.size)
        return new if same else None
    except Exception:   # another CuPy's internals: the public constructor serves
        return None


def sm_count() -> int:
    cupy()
    return _max_blocks // 8


class Kernel:
    """A kernel of one .cu file, compiled on first launch, launched with BLOCK threads. A launch
    asking for more than SMEM_LIMIT bytes of dynamic shared memory opts the kernel in first
    (cuFuncSetAttribute; up to the device's per-block maximum, 227 KiB on sm_90).

    `signature` (one letter per parameter: p pointer, u uint32, f float32) enables `launch`, the
    prepared-parameter path; a kernel without one launches through CuPy only."""
    __slots__ = ("file", "symbol", "fn", "signature", "prepared", "smem_opt_in")

    def __init__(self, file: str, symbol: str, signature: str | None = None) -> None:
        self.file, self.symbol, self.fn = file, symbol, None
        self.signature, self.prepared, self.smem_opt_in = signature, None, SMEM_LIMIT

    def function(self):
        fn = self.fn
        if fn is None:
            cupy()
            fn = self.fn = loader.kernel(self.file, self.symbol)
        return fn

    def __call__(self, grid: tuple, args: tuple, shared_mem: int = 0) -> None:
        fn = self.fn or self.function()
        if shared_mem > self.smem_opt_in:
            _opt_in(fn, shared_mem)
            self.smem_opt_in = shared_mem
        if shared_mem:
            fn(grid, (BLOCK,), args, shared_mem=shared_mem)
        else:   # the common launch: no keyword to pass through Cython (host time per op)
            fn(grid, (BLOCK,), args)

    def launch(self, blocks: int, *values) -> None:
        """Launch on `blocks` blocks through the driver with the prepared parameters, on CuPy's
        current stream; values: ints for "p" (device pointers, e.g. array.data.ptr) and "u",
        floats for "f".

        The per-op hot path: PreparedLaunch.__call__'s common case (every value packs, the
        driver accepts) is written out here, saving a call; anything else (a value only ctypes
        converts, a driver error, a thread without a current context) goes to PreparedLaunch's
        own call, which starts over from the packing (a refused launch ran nothing)."""
        p = self.prepared or self.prepare()
        stream = _current_stream().ptr
        lock = p.lock
        lock.acquire()
        try:
            p.pack(p.args, 0, *values)
            p.raw(p.function, blocks, 1, 1, p.block, 1, 1, 0, stream, p.params_ptr, 0)
            return
        except Exception:   # the general path below says what went wrong
            pass
        finally:
            lock.release()
        p(blocks, stream, values)

    def prepare(self) -> driver_launch.PreparedLaunch:
        if self.signature is None:
            from engine.errors import KernelLaunchError
            raise KernelLaunchError(
                f"{self.file}:{self.symbol} has no declared launch signature, so it cannot take "
                "the prepared-parameter path; declare one in kernel(file, symbol, signature) or "
                "launch it through CuPy (kernel(grid, args))")
        self.prepared = driver_launch.PreparedLaunch(
            self.symbol, self.signature, self.function().ptr, BLOCK, driver_launch.driver())
        return self.prepared


# CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (cuda.h's CUfunction_attribute)
_MAX_DYNAMIC_SHARED = 8


def _opt_in(fn, shared_mem: int) -> None:
    """Let `fn` take `shared_mem` bytes of dynamic shared memory (over the 48 KiB default)."""
    from cupy.cuda import driver
    driver.funcSetAttribute(fn.ptr, _MAX_DYNAMIC_SHARED, int(shared_mem))


KERNELS: dict[str, Kernel] = {}


def kernel(file: str, symbol: str, signature: str | None = None) -> Kernel:
    """The process's handle of one kernel; `signature` declares its parameters for `launch`
    (every call site that passes one must pass the same)."""
    key = f"{file}:{symbol}"
    k = KERNELS.get(key)
    if k is None:
        k = KERNELS[key] = Kernel(file, symbol, signature)
    elif signature is not None and k.signature != signature:
        if k.signature is not None:
            from engine.errors import KernelLaunchError
            raise KernelLaunchError(
                f"{key}: declared with launch signature {signature!r} here and {k.signature!r} "
                "before; a kernel has one parameter list: correct the declaration that differs")
        k.signature = signature
    return k


def grid(work: int) -> tuple:
    """Blocks for a grid-stride loop over `work` items (work >= 1)."""
    cap = _max_blocks
    if not cap:
        cupy()
        cap = _max_blocks
    blocks = (work + BLOCK - 1) // BLOCK
    return (blocks if blocks < cap else cap,)


def row_grid(rows: int) -> tuple:
    """One block per row for row kernels (grid-stride beyond 2^20 rows)."""
    return (min(rows, 1 << 20),)


def empty(shape):
    return (_cp or cupy()).empty(shape, F32)


def new_array(shape: tuple, n: int):
    """A new C-contiguous float32 array of shape `shape` (n elements), its block taken from the
    exact-size cache's malloc directly: the same block, accounting, poisoning and graph-pool rules
    as cupy.empty through the installed allocator, without cupy.empty's Python wrapper, allocator
    lookup and bound-method call. An empty array takes cupy.empty (no block to take)."""
    if not n:
        return empty(shape)
    if _cp is None:
        cupy()
    size, device = n * 4, _get_device()
    ptr = _malloc(size, device)
    # the block's owner returns it to the cache when CuPy drops the memory object, even from
    # cyclic garbage (allocator.CacheBlock says why not CuPy's PythonFunctionAllocatorMemory)
    memptr = _MemoryPointer(_Unowned(ptr, size, CacheBlock((ptr, device, _free)), device), 0)
    if _base_new is None:
        return _ndarray(shape, F32, memptr)
    out = _base_new(_ndarray)   # cupy.ndarray(shape, F32, memptr)'s own steps (base_constructor)
    out._init(shape, F32, memptr)
    return out


def zeros(shape):
    return (_cp or cupy()).zeros(shape, F32)


def negative_zeros(shape):
    """Float32 -0.0 everywhere: the identity of IEEE addition, so an atomic sum of -0 terms stays
    -0. (cupy.full(shape, -0.0) would memset +0: ndarray.fill treats any value == 0 as 0.)"""
    out = empty(shape)
    if out.size:
        out.view(np.uint32).fill(0x80000000)
    return out


def contiguous(x):
    return x if x.flags.c_contiguous else cupy().ascontiguousarray(x)


def copy(x):
    """A new contiguous array with x's bits (one device-to-device copy)."""
    out = empty(x.shape)
    if x.size:
        out.data.copy_from_device_async(contiguous(x).data, x.nbytes)
    return out


def mask_bytes(mask):
    """A boolean CuPy mask as contiguous bytes for the kernels (None stays None: no mask)."""
    if mask is None:
        return None
    cp = cupy()
    m = mask if isinstance(mask, cp.ndarray) else cp.asarray(np.asarray(mask, dtype=bool))
    return contiguous(m).view(np.uint8)


def norm_axis(axis: int, ndim: int) -> int:
    """A possibly negative axis (docs/OPS.md allows [-rank, rank)) as an index into the shape:
    handlers are called with the axis as given, so each normalises it before building shapes."""
    return int(axis) % ndim if ndim else int(axis)


def axis_view(shape, axis: int) -> tuple[int, int, int]:
    """(outer, extent, inner) of `shape` around `axis` (negative allowed)."""
    axis = norm_axis(axis, len(shape))
    outer = inner = 1
    for s in shape[:axis]:
        outer *= s
    for s in shape[axis + 1:]:
        inner *= s
    return outer, shape[axis], inner
