"""Kernel launches through the CUDA driver's cuLaunchKernel with each kernel's parameter buffer
prepared once (issue 19: the eager path's per-call host work).

CuPy's Function.__call__ builds, on every launch, one CPointer object per argument (a numpy scalar
becomes a CInt32 holding its bits, an ndarray its data pointer), a vector of their addresses, and
looks the current stream up. Here a kernel declares its signature once ("p" a pointer, "u" an
unsigned 32-bit int, "f" a float32): one ctypes slot per parameter and the void* array
cuLaunchKernel reads them through are made when the kernel is bound, and a launch only writes the
slots' values and calls the driver on the stream the caller names (CuPy's current stream, so a
CUDA graph capture on a side stream records the launch like CuPy's own).

The driver is called through CuPy's Cython binding of cuLaunchKernel (cupy.cuda.driver.
launchKernel), handed the prepared buffer's address: on the H200 it measured 3.85 us per call
against 5.85 us for the same call through ctypes (bench_runtime, one run). It releases the GIL
during the call, and the slots are shared by every caller of one kernel, so a launch holds the
kernel's lock from the first slot write to the driver's return (the driver copies the values at
the call).
"""
from __future__ import annotations

import ctypes
import threading

from engine.errors import KernelLaunchError, NativeRuntimeUnavailable

SLOT_TYPES = {"p": ctypes.c_void_p, "u": ctypes.c_uint32, "f": ctypes.c_float}
CUDA_ERROR_INVALID_CONTEXT = 201   # the calling thread has no current context yet


class Driver:
    """The two driver entry points the launches use (a fake in the CPU tests)."""

    def __init__(self, launch, error_name, make_context_current) -> None:
        self.launch = launch                              # cuLaunchKernel
        self.error_name = error_name                      # status -> "CUDA_ERROR_..."
        self.make_context_current = make_context_current  # called once on INVALID_CONTEXT


def load_driver() -> Driver:
    """cuLaunchKernel through CuPy's binding, adapted to the Driver interface (status codes)."""
    try:
        from cupy.cuda import driver as cu
    except ImportError as exc:
        raise NativeRuntimeUnavailable(
            f"the native launch path needs CuPy's CUDA driver binding ({exc}); install "
            "cupy-cuda12x or cupy-cuda13x, or run on the CPU session") from exc
    launch_kernel, driver_error = cu.launchKernel, cu.CUDADriverError
    addressof = ctypes.addressof

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) -> int:
        try:
            launch_kernel(f.value, gx, gy, gz, bx, by, bz, smem, stream.value or 0,
                          addressof(params), 0)
        except driver_error as exc:
            return exc.status
        return 0

    def error_name(status: int) -> str:
        try:   # CUDADriverError's text reads "CUDA_ERROR_NAME: description"
            return str(driver_error(status)).split(":")[0]
        except Exception:   # naming an error must not hide it
            return "an unknown CUresult"

    def make_context_current() -> None:
        from cupy.cuda import runtime
        runtime.free(0)   # the runtime makes the device's primary context current on this thread
    return Driver(launch, error_name, make_context_current)


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
            "kernel parameter: p (pointer), u (uint32), f (float32)")
    return signature


class PreparedLaunch:
    """One kernel's function handle, parameter slots and parameter buffer, launched with `block`
    threads per block on a one-dimensional grid."""
    __slots__ = ("symbol", "signature", "block", "handle", "slots", "params", "stream", "lock",
                 "driver")

    def __init__(self, symbol: str, signature: str, function_ptr: int, block: int,
                 drv: Driver) -> None:
        self.symbol = symbol
        self.signature = check_signature(signature, symbol)
        self.block = block
        self.handle = ctypes.c_void_p(function_ptr)
        self.slots = tuple(SLOT_TYPES[c]() for c in signature)
        # kernelParams: void*[n], entry i the address of slot i (fixed for the kernel's life)
        self.params = (ctypes.c_void_p * len(self.slots))(
            *(ctypes.addressof(s) for s in self.slots))
        self.stream = ctypes.c_void_p()
        self.lock = threading.Lock()
        self.driver = drv

    def __call__(self, blocks: int, stream: int, values: tuple) -> None:
        slots = self.slots
        if len(values) != len(slots):
            raise KernelLaunchError(
                f"{self.symbol}: launched with {len(values)} arguments, its signature "
                f"{self.signature!r} takes {len(slots)}; the handler is wrong")
        with self.lock:
            for slot, value in zip(slots, values):
                slot.value = value
            self.stream.value = stream
            status = self.driver.launch(self.handle, blocks, 1, 1, self.block, 1, 1, 0,
                                        self.stream, self.params, None)
            if status == CUDA_ERROR_INVALID_CONTEXT:   # first launch on a new thread
                self.driver.make_context_current()
                status = self.driver.launch(self.handle, blocks, 1, 1, self.block, 1, 1, 0,
                                            self.stream, self.params, None)
        if status:
            raise self.error(status, blocks, stream)

    def error(self, status: int, blocks: int, stream: int) -> KernelLaunchError:
        name = self.driver.error_name(status)
        return KernelLaunchError(
            f"{self.symbol}: cuLaunchKernel returned {name} ({status}) for {blocks} blocks of "
            f"{self.block} threads on stream {stream:#x}; the kernel did not run. An earlier "
            "asynchronous error is reported by the next launch: rerun with "
            "CUDA_LAUNCH_BLOCKING=1 to find the op that failed first")
