"""Kernel launches through the CUDA driver's cuLaunchKernel with each kernel's parameter buffer
prepared once (issue 19: the eager path's per-call host work).

CuPy's Function.__call__ builds, on every launch, one CPointer object per argument (a numpy scalar
becomes a CInt32 holding its bits, an ndarray its data pointer), a vector of their addresses, and
looks the current stream up. Here a kernel declares its signature once ("p" a pointer, "u" an
unsigned 32-bit int, "i" a signed one, "f" a float32, "d" a float64): one 8-byte slot per
parameter and the void* array cuLaunchKernel reads them through are made when the kernel is
bound. A launch writes every slot with one struct.pack_into (the signature's format, compiled
once: no Python object per value) and hands the driver the integers it was prepared with, on the
stream the caller names (CuPy's current stream, so a CUDA graph capture on a side stream records
the launch like CuPy's own).
A value pack_into refuses (a float beyond float32's range, an int out of range, a wrong count)
takes the slot-by-slot path through ctypes instead, whose conversions are the reference: a float
rounds to nearest even and overflows to infinity, as numpy.float32(x) does.

The driver is called through CuPy's Cython binding of cuLaunchKernel (cupy.cuda.driver.
launchKernel) directly, with no Python frame between: on the H200 it measured 3.85 us per call
against 5.85 us for the same call through ctypes (bench_runtime, one run). It releases the GIL
during the call, and the slots are shared by every caller of one kernel, so a launch holds the
kernel's lock from the slot write to the driver's return (the driver copies the values at the
call).
"""
from __future__ import annotations

import ctypes
import struct
import threading

from engine.errors import KernelLaunchError, NativeRuntimeUnavailable

SLOT_TYPES = {"p": ctypes.c_void_p, "u": ctypes.c_uint32, "i": ctypes.c_int32,
              "f": ctypes.c_float, "d": ctypes.c_double}
# Each parameter's 8-byte slot as struct writes it (little-endian, as on every CUDA host: x86-64
# and aarch64): the value in its first bytes, the rest padding the kernel never reads.
SLOT_FORMATS = {"p": "Q", "u": "I4x", "i": "i4x", "f": "f4x", "d": "d"}
SLOT_BYTES = 8
CUDA_ERROR_INVALID_CONTEXT = 201   # the calling thread has no current context yet


class Driver:
    """The driver entry points the launches use (a fake in the CPU tests).

    launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra): cuLaunchKernel with plain
    integers (the function handle, the stream, the address of the void* parameter array, 0 for no
    extra), returning None or raising `error` with the CUresult in its `status`."""

    def __init__(self, launch, error, error_name, make_context_current) -> None:
        self.launch = launch                              # cuLaunchKernel
        self.error = error                                # the exception type launch raises
        self.error_name = error_name                      # status -> "CUDA_ERROR_..."
        self.make_context_current = make_context_current  # called once on INVALID_CONTEXT


def load_driver() -> Driver:
    """cuLaunchKernel through CuPy's binding, which already takes and raises what Driver names."""
    try:
        from cupy.cuda import driver as cu
    except ImportError as exc:
        raise NativeRuntimeUnavailable(
            f"the native launch path needs CuPy's CUDA driver binding ({exc}); install "
            "cupy-cuda12x or cupy-cuda13x, or run on the CPU session") from exc
    driver_error = cu.CUDADriverError

    def error_name(status: int) -> str:
        try:   # CUDADriverError's text reads "CUDA_ERROR_NAME: description"
            return str(driver_error(status)).split(":")[0]
        except Exception:   # naming an error must not hide it
            return "an unknown CUresult"

    def make_context_current() -> None:
        from cupy.cuda import runtime
        runtime.free(0)   # the runtime makes the device's primary context current on this thread
    return Driver(cu.launchKernel, driver_error, error_name, make_context_current)


_driver: Driver | None = None
_driver_lock = threading.Lock()


def driver() -> Driver:
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = load_driver()
    return _driver


def check_signature(signature: str, symbol: str) -> str:
    bad = sorted(set(signature) - set(SLOT_TYPES))
    if not signature or bad:
        what = f"unknown letters {bad}" if bad else "no parameter"
        raise KernelLaunchError(
            f"{symbol}: launch signature {signature!r} has {what}; expected one letter per "
            "kernel parameter: p (pointer), u (uint32), i (int32), f (float32), d (float64)")
    return signature


class PreparedLaunch:
    """One kernel's function handle, parameter slots and parameter buffer, launched with `block`
    threads per block on a one-dimensional grid."""
    __slots__ = ("symbol", "signature", "block", "function", "args", "slots", "params",
                 "params_ptr", "pack", "lock", "driver", "raw", "raw_error")

    def __init__(self, symbol: str, signature: str, function_ptr: int, block: int,
                 drv: Driver) -> None:
        self.symbol = symbol
        self.signature = check_signature(signature, symbol)
        self.block = block
        self.function = function_ptr
        n = len(signature)
        # The slots: 8 bytes each, 8-aligned (ctypes aligns a uint64 array), written by `pack`.
        self.args = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.args)
        # The same bytes as ctypes objects, for values pack_into refuses (module docstring).
        self.slots = tuple(SLOT_TYPES[c].from_buffer(self.args, SLOT_BYTES * i)
                           for i, c in enumerate(signature))
        # kernelParams: void*[n], entry i the address of slot i (fixed for the kernel's life)
        self.params = (ctypes.c_void_p * n)(*(base + SLOT_BYTES * i for i in range(n)))
        self.params_ptr = ctypes.addressof(self.params)
        self.pack = struct.Struct("<" + "".join(SLOT_FORMATS[c] for c in signature)).pack_into
        self.lock = threading.Lock()
        self.driver = drv
        self.raw, self.raw_error = drv.launch, drv.error

    def __call__(self, blocks: int, stream: int, values: tuple) -> None:
        # acquire/release rather than `with`: half the host time of the context protocol
        lock = self.lock
        lock.acquire()
        try:
            try:
                self.pack(self.args, 0, *values)
            except (struct.error, OverflowError):
                self.write_slots(values)
            try:
                self.raw(self.function, blocks, 1, 1, self.block, 1, 1, 0, stream,
                         self.params_ptr, 0)
                return
            except self.raw_error as exc:
                status = exc.status
            if status == CUDA_ERROR_INVALID_CONTEXT:   # first launch on a new thread
                self.driver.make_context_current()
                try:
                    self.raw(self.function, blocks, 1, 1, self.block, 1, 1, 0, stream,
                             self.params_ptr, 0)
                    return
                except self.raw_error as exc:
                    status = exc.status
        finally:
            lock.release()
        raise self.error(status, blocks, stream)

    def write_slots(self, values: tuple) -> None:
        """Each value through its ctypes slot (called with the lock held)."""
        slots = self.slots
        if len(values) != len(slots):
            raise KernelLaunchError(
                f"{self.symbol}: launched with {len(values)} arguments, its signature "
                f"{self.signature!r} takes {len(slots)}; the handler is wrong")
        for slot, value in zip(slots, values):
            slot.value = value

    def error(self, status: int, blocks: int, stream: int) -> KernelLaunchError:
        name = self.driver.error_name(status)
        return KernelLaunchError(
            f"{self.symbol}: cuLaunchKernel returned {name} ({status}) for {blocks} blocks of "
            f"{self.block} threads on stream {stream:#x}; the kernel did not run. An earlier "
            "asynchronous error is reported by the next launch: rerun with "
            "CUDA_LAUNCH_BLOCKING=1 to find the op that failed first")
