"""cuBLAS entry points through ctypes, on a handle of our own with a workspace of our own.

CuPy's cuBLAS wrappers refuse every call while a stream captures ("calling cuBLAS API during
stream capture is currently unsupported"), so a CUDA graph of a training step (engine/graphs.py)
could hold no product. cuBLAS itself captures: its kernels go into the graph like ours, provided
it allocates nothing then, which a workspace set with cublasSetWorkspace guarantees. So the
cublas provider calls the library CuPy loaded (found in the process's memory map), through
ctypes, on its own handle: the stream is set when the caller's changes (cublasSetStream resets
the workspace, so the workspace is set again after it), the math mode (CUBLAS_DEFAULT_MATH: never
TF32) and host pointer mode once. The method names and argument orders are CuPy's, so
engine/providers/cublas.py reads the same either way.
"""
from __future__ import annotations

import ctypes
import threading

from engine.errors import TorchLeanError

WORKSPACE_BYTES = 32 * 1024 * 1024   # NVIDIA's recommendation for Hopper (cuBLAS docs, 2.4.7)
_VP, _INT, _LL = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


class CublasCallError(TorchLeanError):
    """A cuBLAS call returned an error status."""


def library_path(maps: str) -> str | None:
    """The libcublas file a process mapped, from /proc/self/maps' text (None if none is)."""
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        name = path.rsplit("/", 1)[-1]
        if name.startswith("libcublas.so"):
            return path
    return None


def _load() -> ctypes.CDLL:
    from cupy_backends.cuda.libs import cublas  # noqa: F401  (CuPy loads libcublas here)
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            path = library_path(fh.read())
    except OSError:
        path = None
    names = [path] if path else ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise CublasCallError("cuBLAS: could not load libcublas through ctypes (tried "
                              f"{', '.join(names)}); install CuPy's CUDA build with its cuBLAS")
    for fn, args in (("cublasCreate_v2", [ctypes.POINTER(_VP)]),
                     ("cublasSetStream_v2", [_VP, _VP]),
                     ("cublasSetWorkspace_v2", [_VP, _VP, ctypes.c_size_t]),
                     ("cublasSetMathMode", [_VP, _INT]),
                     ("cublasSetPointerMode_v2", [_VP, _INT]),
                     ("cublasSgemm_v2", [_VP, _INT, _INT, _INT, _INT, _INT, _VP, _VP, _INT, _VP,
                                         _INT, _VP, _VP, _INT]),
                     ("cublasSgemmStridedBatched", [_VP, _INT, _INT, _INT, _INT, _INT, _VP, _VP,
                                                    _INT, _LL, _VP, _INT, _LL, _VP, _VP, _INT,
                                                    _LL, _INT]),
                     ("cublasSgemv_v2", [_VP, _INT, _INT, _INT, _VP, _VP, _INT, _VP, _INT, _VP,
                                         _VP, _INT])):
        getattr(lib, fn).argtypes = args
        getattr(lib, fn).restype = _INT
    return lib


def _check(status: int, what: str) -> None:
    if status:
        raise CublasCallError(f"cuBLAS: {what} returned status {status} (see cublasStatus_t); "
                              "the product was not computed")


class _Library:
    """CuPy's names for the calls engine/providers/cublas.py makes."""

    def __init__(self) -> None:
        self._lib = _load()
        self._lock = threading.Lock()
        self._handles: dict[int, list] = {}   # device -> [handle, stream set, workspace]

    def handle(self, device: int, stream: int, workspace) -> int:
        """Our handle of `device`, bound to `stream` (with the workspace re-set after a change)."""
        with self._lock:
            entry = self._handles.get(device)
            if entry is None:
                h = _VP()
                _check(self._lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
                _check(self._lib.cublasSetMathMode(h, 0), "cublasSetMathMode")   # DEFAULT_MATH
                _check(self._lib.cublasSetPointerMode_v2(h, 0), "cublasSetPointerMode")  # HOST
                entry = self._handles[device] = [h.value, None, workspace()]
            if entry[1] != stream:
                _check(self._lib.cublasSetStream_v2(entry[0], stream), "cublasSetStream")
                ws = entry[2]
                _check(self._lib.cublasSetWorkspace_v2(entry[0], ws.data.ptr, ws.nbytes),
                       "cublasSetWorkspace")
                entry[1] = stream
            return entry[0]

    def sgemm(self, *args) -> None:
        _check(self._lib.cublasSgemm_v2(*args), "cublasSgemm")

    def sgemmStridedBatched(self, *args) -> None:   # noqa: N802 (CuPy's and cuBLAS's name)
        _check(self._lib.cublasSgemmStridedBatched(*args), "cublasSgemmStridedBatched")

    def sgemv(self, *args) -> None:
        _check(self._lib.cublasSgemv_v2(*args), "cublasSgemv")


_library: _Library | None = None


def library() -> _Library:
    global _library
    if _library is None:
        _library = _Library()
    return _library
