"""The native runtime probe: CPU parity stub, native build with no visible GPU, or native and available.

A CUDA session is created only in the last state; each refusal names the state and what to do.
"""
from __future__ import annotations

import enum
import functools

from engine.errors import NativeRuntimeUnavailable


class RuntimeState(enum.Enum):
    cpu_parity_stub = "cpu-parity-stub"
    native_no_gpu = "native-build-no-visible-gpu"
    native_available = "native-available"


@functools.lru_cache(maxsize=1)
def probe() -> tuple[RuntimeState, str]:
    """Which state this process is in, with the detail behind it (cached: it cannot change)."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
    except Exception as exc:  # ImportError, or CuPy failing to find its CUDA libraries
        return RuntimeState.cpu_parity_stub, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:
        return RuntimeState.native_no_gpu, f"CUDA reported {type(exc).__name__}: {exc}"
    if count < 1:
        return RuntimeState.native_no_gpu, "CUDA sees 0 devices"
    props = runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return RuntimeState.native_available, f"{count} device(s); device 0 is {name}"


def native_available() -> bool:
    return probe()[0] is RuntimeState.native_available


def require_native_runtime() -> None:
    """Raise NativeRuntimeUnavailable unless a CUDA session can really be created."""
    state, detail = probe()
    if state is RuntimeState.cpu_parity_stub:
        raise NativeRuntimeUnavailable(
            f"CUDA requested, but this is the CPU parity stub: {detail}. Install the CUDA build "
            "with `pip install -e .[cuda13]` (or `.[cuda12]` for CUDA 12) on a machine with an "
            "NVIDIA GPU, or run with `--device cpu`.")
    if state is RuntimeState.native_no_gpu:
        raise NativeRuntimeUnavailable(
            f"CUDA requested; the native build is present but no GPU is visible: {detail}. Check "
            "`nvidia-smi` and CUDA_VISIBLE_DEVICES, or run with `--device cpu`.")
