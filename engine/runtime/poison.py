"""Poisoned allocations: while `poisoned()` is active, every block handed out, on the host (NumPy)
and on the device (the exact-size cache), fresh or reused, is first filled with POISON_BITS, so
an output element a kernel never writes reads as poison instead of whatever the memory held.

Host: a NumPy data-memory handler (NEP 49) whose malloc is NumPy's default malloc followed by the
fill; calloc, realloc and free are NumPy's default C functions themselves (zeros are asked for
by calloc, so they stay zeros). NumPy keeps the current handler in a ContextVar: poisoning is
local to the context (thread) that entered it, and every exit restores the handler found on
entry. The handler, its C callback and its capsule are never freed (arrays allocated through it
may outlive everything, interpreter shutdown included): they are pinned in _PINNED, whose
reference count is raised once and never lowered.

Device: the exact-size cache of engine/runtime/allocator.py queues engine/csrc/cuda/poison.cu's
tl_poison_fill on the current stream for every block it hands out. Device poisoning is process
wide (CuPy's allocator is): on while any context is inside poisoned().
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import sys
import threading

import numpy as np

from engine.errors import DTypeError, TorchLeanError
from engine.runtime.kernel_source import NativeSource

POISON_BITS = 0x7FA00001   # a float32 signalling NaN with a payload no computation produces
POISON_F32 = np.uint32(POISON_BITS).view(np.float32)

HANDLER_NAME = "torchlean_poison"
_SET_HANDLER_SLOT, _GET_HANDLER_SLOT, _DEFAULT_HANDLER_SLOT = 304, 305, 306   # _ARRAY_API
_PATTERN_BYTES = 1 << 16


class PoisonUnavailableError(TorchLeanError, RuntimeError):
    """Poisoning cannot be installed: NumPy's allocator ABI or CuPy's allocator is not the one
    this module was written for."""


def poison_mask(array) -> np.ndarray:
    """A host bool array of the array's shape: True where the element's 32 bits are POISON_BITS.
    Takes a NumPy or CuPy array of 4-byte elements (float32, as every buffer of the runtime)."""
    host = array.get() if type(array).__module__.startswith("cupy") else np.asarray(array)
    if host.dtype.itemsize != 4:
        raise DTypeError(f"poison_mask: got an array of dtype {host.dtype} ({host.dtype.itemsize}"
                         "-byte elements); expected 4-byte elements (float32): poison is a "
                         "32-bit word, so view or cast the buffer as float32 first")
    return host.view(np.uint32) == np.uint32(POISON_BITS)


# --- the host side: a NumPy data-memory handler (NEP 49) -----------------------------------------

class _Allocator(ctypes.Structure):
    # PyDataMemAllocator: ctx, then malloc, calloc, realloc, free (each taking ctx first).
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


class _Handler(ctypes.Structure):
    # PyDataMem_Handler (numpy/ndarraytypes.h).
    _fields_ = [("name", ctypes.c_char * 127), ("version", ctypes.c_uint8),
                ("allocator", _Allocator)]


_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
# Private prototypes of the C API calls (ctypes.pythonapi's shared ones are left untouched).
_API = ctypes.pythonapi
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _API))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _API))
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _API))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _API))

_PINNED: list = []   # never cleared; its reference count is raised once (see _pin)


def _pin(*objects) -> None:
    if not _PINNED:
        _incref(_PINNED)
    _PINNED.extend(objects)


def _poisoning_malloc(default_malloc, pattern):
    """malloc(ctx, size): NumPy's default malloc, then the block filled with the pattern (its
    4-byte words, and a byte tail of the pattern's first bytes). Everything it calls is bound
    here, not looked up in module globals, so it works while the interpreter shuts down."""
    memmove, chunk = ctypes.memmove, len(pattern)

    def malloc(ctx, size):
        ptr = default_malloc(ctx, size)
        if ptr and size:
            first = size if size < chunk else chunk
            memmove(ptr, pattern, first)
            done = first
            while done < size:   # double the filled prefix: it starts on a word boundary
                n = done if done < size - done else size - done
                memmove(ptr + done, ptr, n)
                done += n
        return ptr

    return _MALLOC(malloc)


def _multiarray():
    try:
        from numpy._core import _multiarray_umath, multiarray
    except ImportError:   # NumPy 1.x
        from numpy.core import _multiarray_umath, multiarray
    return _multiarray_umath, multiarray


class _HostPoison:
    """NumPy's handler API resolved once, checked against what NumPy itself reports, and the
    poisoning handler built from NumPy's default one."""

    def __init__(self) -> None:
        umath, self._multiarray = _multiarray()
        if not hasattr(self._multiarray, "get_handler_name"):
            raise PoisonUnavailableError(
                f"NumPy {np.__version__} has no data-memory handlers (NEP 49, NumPy >= 1.22); "
                "host poisoning needs them: upgrade NumPy")
        table = self._api_table(umath)
        self._set = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(
            table[_SET_HANDLER_SLOT])
        self._get = ctypes.PYFUNCTYPE(ctypes.py_object)(table[_GET_HANDLER_SLOT])
        # In a fresh context the ContextVar holds its default: NumPy's default handler.
        default = contextvars.Context().run(self._get)
        self._check_default(default, table)
        struct = self._handler_struct(default)
        malloc = _poisoning_malloc(
            _MALLOC(struct.allocator.malloc),
            ctypes.create_string_buffer(POISON_BITS.to_bytes(4, sys.byteorder)
                                        * (_PATTERN_BYTES // 4), _PATTERN_BYTES))
        ours = _Handler(HANDLER_NAME.encode(), 1, _Allocator(
            struct.allocator.ctx, ctypes.cast(malloc, ctypes.c_void_p).value,
            struct.allocator.calloc, struct.allocator.realloc, struct.allocator.free))
        name = ctypes.create_string_buffer(b"mem_handler")
        self.capsule = _capsule_new(ctypes.addressof(ours), ctypes.addressof(name), None)
        _pin(malloc, ours, name, self.capsule, default)
        self._self_test()

    @staticmethod
    def _api_table(umath):
        try:
            address = _capsule_pointer(umath._ARRAY_API, None)
        except (AttributeError, ValueError) as exc:
            raise PoisonUnavailableError(
                f"NumPy {np.__version__}: the C-API table capsule _ARRAY_API is not readable "
                f"({type(exc).__name__}: {exc}); host poisoning cannot be installed") from None
        return ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))

    def _check_default(self, default, table) -> None:
        """Slot 305 must have returned NumPy's default handler: a capsule named mem_handler,
        whose struct carries the name NumPy reports, and the object slot 306 points to."""
        reported = contextvars.Context().run(self._multiarray.get_handler_name)
        named = bool(_capsule_is_valid(default, b"mem_handler")) and \
            self._handler_struct(default).name.decode(errors="replace") == reported
        slot_306 = ctypes.c_void_p.from_address(table[_DEFAULT_HANDLER_SLOT]).value
        if not named or slot_306 != id(default):
            raise PoisonUnavailableError(
                f"NumPy {np.__version__}: C-API slots {_GET_HANDLER_SLOT}/"
                f"{_DEFAULT_HANDLER_SLOT} are not PyDataMem_GetHandler/PyDataMem_DefaultHandler "
                f"as expected (default handler reported as {reported!r}); host poisoning cannot "
                "be installed on this NumPy: use one whose C API matches NumPy 2.x")

    @staticmethod
    def _handler_struct(capsule) -> _Handler:
        return _Handler.from_address(_capsule_pointer(capsule, b"mem_handler"))

    def _self_test(self) -> None:
        def probe():
            before = self._multiarray.get_handler_name()
            previous = self.enter()
            try:
                block = np.empty(7, np.uint8)
                ok = block.tobytes() == (POISON_BITS.to_bytes(4, sys.byteorder) * 2)[:7] \
                    and self._multiarray.get_handler_name(block) == HANDLER_NAME
                ok = ok and np.zeros(3, np.uint32).tolist() == [0, 0, 0]
            finally:
                self.exit(previous)
            return ok and self._multiarray.get_handler_name() == before
        if not contextvars.Context().run(probe):
            raise PoisonUnavailableError(
                f"NumPy {np.__version__}: a block allocated under the poisoning handler did not "
                "hold the poison, or the previous handler did not come back; host poisoning is "
                "not trustworthy on this NumPy")

    def enter(self):
        """Make ours the current handler of this context; returns the one to restore."""
        previous = self._set(self.capsule)
        name = self._multiarray.get_handler_name()
        if name != HANDLER_NAME:
            self._set(previous)
            raise PoisonUnavailableError(
                f"NumPy reports handler {name!r} after installing {HANDLER_NAME!r}: "
                f"PyDataMem_SetHandler is not C-API slot {_SET_HANDLER_SLOT} on NumPy "
                f"{np.__version__}; host poisoning cannot be installed")
        return previous

    def exit(self, previous) -> None:
        self._set(previous)


_host: _HostPoison | None = None
_host_lock = threading.Lock()


def _host_poison() -> _HostPoison:
    global _host
    if _host is None:
        with _host_lock:
            if _host is None:
                _host = _HostPoison()
    return _host


# --- the device side: the exact-size cache fills what it hands out --------------------------------

_device_lock = threading.Lock()
_device_depth = 0
# The fill of every device block handed out while poisoning is on (listed in the source map).
POISON_FILL = NativeSource("poison.cu", ("tl_poison_fill",))
_fill_kernel = None
_FILL_THREADS, _FILL_MAX_BLOCKS = 256, 4096


def _fill_device(ptr: int, size: int) -> None:
    """Queue tl_poison_fill over [ptr, ptr + size) on the current stream (size in bytes)."""
    blocks = min(max(1, ((size >> 2) + _FILL_THREADS - 1) // _FILL_THREADS), _FILL_MAX_BLOCKS)
    _fill_kernel((blocks,), (_FILL_THREADS,),
                 (np.uint64(ptr), np.uint64(size), np.uint32(POISON_BITS)))


def _device_enter() -> None:
    global _device_depth, _fill_kernel
    from engine.runtime import allocator, loader
    cache = allocator.install()
    if not allocator.cupy_uses_cache():
        import cupy
        raise PoisonUnavailableError(
            f"CuPy's allocator is {cupy.cuda.get_allocator()!r}, not the exact-size cache of "
            "engine/runtime/allocator.py, so device blocks would bypass poisoning; do not call "
            "cupy.cuda.set_allocator (or leave cupy.cuda.using_allocator) before poisoned()")
    with _device_lock:
        if _fill_kernel is None:   # compiled here, never inside the allocator
            _fill_kernel = loader.kernel(POISON_FILL.file, POISON_FILL.forward[0])
        _device_depth += 1
        cache.set_poison_filler(_fill_device)


def _device_exit() -> None:
    global _device_depth
    from engine.runtime import allocator
    with _device_lock:
        _device_depth -= 1
        if _device_depth == 0:
            allocator.installed().set_poison_filler(None)


@contextlib.contextmanager
def poisoned(device: bool | None = None):
    """Poison every allocation while active: host arrays of this context always, device blocks
    when `device` is true, or (None) whenever a native CUDA runtime is available. Nests, and may
    be entered from several threads at once."""
    from engine.runtime.native import native_available, require_native_runtime
    if device:
        require_native_runtime()
    on_device = native_available() if device is None else device
    host = _host_poison()
    previous = host.enter()
    try:
        if on_device:
            _device_enter()
    except BaseException:
        host.exit(previous)
        raise
    try:
        yield
    finally:
        try:
            if on_device:
                _device_exit()
        finally:
            host.exit(previous)
