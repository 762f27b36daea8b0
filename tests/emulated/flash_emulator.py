"""engine/providers/native_cuda/flash_attention.py's host code on NumPy arrays with
flash_attention.cu's kernels run by the host emulation flash_host.cpp (built with g++ here):
`install(monkeypatch, lib)` swaps the module's kernels and array helpers for the test's duration."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from .host_build import HostArray, build as build_host


def build(out_dir: Path) -> ctypes.CDLL | str:
    """The emulation library, or why it cannot be built here."""
    return build_host(out_dir, "flash_attention.cu", "flash_host.cpp", ("-w",))


def _arg(v):
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        return ctypes.c_void_p(v.ctypes.data)
    if isinstance(v, np.float32):
        return ctypes.c_float(float(v))
    return ctypes.c_uint(int(v))


class EmulatedKernel:
    """One kernel symbol: (grid, args, shared_mem) as launch.Kernel takes them."""

    def __init__(self, lib, symbol: str, calls: dict) -> None:
        self.lib, self.symbol, self.calls = lib, symbol, calls

    def __call__(self, grid, args, shared_mem=0):
        self.calls[self.symbol] = self.calls.get(self.symbol, 0) + 1
        from engine.providers.native_cuda import flash_attention as flash
        if shared_mem:
            assert shared_mem <= 232448, (self.symbol, shared_mem)
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous, self.symbol
        kind, _, width = self.symbol.removeprefix("tl_flash_").partition("_")
        if kind in ("tiles", "rowdot"):
            getattr(self.lib, f"emu_{kind}")(ctypes.c_uint(grid[0]), *[_arg(a) for a in args])
            return
        w = int(width)
        assert shared_mem == flash.shared_bytes(kind, w), (self.symbol, shared_mem)
        getattr(self.lib, f"emu_{kind}")(ctypes.c_uint(w), ctypes.c_uint(grid[0]),
                                         *[_arg(a) for a in args])


class _Module:
    """The slice of the cupy module the handlers (and the GPU tests' helpers) use."""
    @staticmethod
    def asarray(a):
        return np.ascontiguousarray(a).view(HostArray)

    @staticmethod
    def empty(shape, dtype):
        fill = 0x5A if np.dtype(dtype).kind == "u" else np.nan   # unwritten shows up
        return np.full(shape, fill, dtype).view(HostArray)


def install(monkeypatch, lib) -> dict:
    """Route the flash handlers through the emulation; returns the launch counts by symbol."""
    from engine.providers.native_cuda import flash_attention as flash
    calls: dict = {}
    monkeypatch.setattr(flash, "_tiles", EmulatedKernel(lib, flash._TILES, calls))
    monkeypatch.setattr(flash, "_rowdot", EmulatedKernel(lib, flash._ROWDOT, calls))
    for table, symbols in ((flash._fwd, flash._FWD), (flash._dkdv, flash._DKDV),
                           (flash._dq, flash._DQ), (flash._dqs, flash._DQS)):
        for w, symbol in symbols.items():
            monkeypatch.setitem(table, w, EmulatedKernel(lib, symbol, calls))
    # NaN fill: an output element no kernel wrote shows up in every comparison
    monkeypatch.setattr(flash, "empty", lambda shape: np.full(shape, np.float32(np.nan),
                                                              np.float32).view(HostArray))
    monkeypatch.setattr(flash, "zeros", lambda shape: np.zeros(shape, np.float32).view(HostArray))
    monkeypatch.setattr(flash, "contiguous", np.ascontiguousarray)
    monkeypatch.setattr(flash, "cupy", lambda: _Module)
    monkeypatch.setattr(flash, "mask_bytes", lambda m: None if m is None else
                        np.ascontiguousarray(m, dtype=bool).view(np.uint8))
    return calls
