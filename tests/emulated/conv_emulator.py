"""engine/providers/native_cuda/conv.py's host code on NumPy arrays with conv.cu's kernels run by
the host emulation conv_host.cpp (built with g++ here): `install(monkeypatch, lib)` swaps the
module's kernels and array helpers for the test's duration."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from .host_build import HostArray, build as build_host
_SIMPLE = {"tl_conv_fwd_nd": "emu_fwd_nd", "tl_conv_dx_nd": "emu_dx_nd",
           "tl_conv_dw_chunks": "emu_dw_chunks", "tl_conv_db_chunks": "emu_db_chunks",
           "tl_conv_sum_chunks": "emu_sum_chunks", "tl_conv_neg_zeros": "emu_neg_zeros"}
GRID_STRIDE_BLOCKS = 2      # grid-stride kernels get at most this many blocks: the loops wrap


def build(out_dir: Path) -> ctypes.CDLL | str:
    """The emulation library, or why it cannot be built here."""
    return build_host(out_dir, "conv.cu", "conv_host.cpp")


def _arg(v):
    if v is None or isinstance(v, np.ndarray):
        return None if v is None else ctypes.c_void_p(v.ctypes.data)
    kind = {np.uint32: ctypes.c_uint, np.uint64: ctypes.c_ulonglong, np.int32: ctypes.c_int}
    return kind[type(v)](int(v))


class EmulatedKernel:
    def __init__(self, lib, symbol: str, calls: dict) -> None:
        self.lib, self.symbol, self.calls = lib, symbol, calls

    def __call__(self, grid, args, shared_mem=0):
        self.calls[self.symbol] = self.calls.get(self.symbol, 0) + 1
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous and a.dtype in (np.float32, np.int64), self.symbol
        if self.symbol in _SIMPLE:
            getattr(self.lib, _SIMPLE[self.symbol])(ctypes.c_uint(grid[0]),
                                                    *[_arg(a) for a in args])
        elif self.symbol in ("tl_conv2d_fwd_tiled", "tl_conv2d_fwd_tiled_n64"):
            dims = np.array([int(v) for v in args[4:]], np.uint32)
            entry = self.lib.emu_fwd_2d if self.symbol == "tl_conv2d_fwd_tiled" else \
                self.lib.emu_fwd_2d_n64
            entry(*(ctypes.c_uint(g) for g in grid), *[_arg(a) for a in args[:4]], _arg(dims))
        elif self.symbol == "tl_conv2d_dw_tiled":
            dims = np.array([int(v) for v in args[3:20]], np.uint32)
            self.lib.emu_dw_2d(*(ctypes.c_uint(g) for g in grid), *[_arg(a) for a in args[:3]],
                               _arg(dims), _arg(args[20]), _arg(args[21]))
        else:
            raise KeyError(f"no emulation for {self.symbol}")


class _Module:
    """The slice of the cupy module the handlers use."""
    @staticmethod
    def asarray(a):
        return np.ascontiguousarray(a).view(HostArray)


def install(monkeypatch, lib) -> dict:
    """Route the conv handlers through the emulation; returns the launch counts by symbol."""
    from engine.providers.native_cuda import conv as N
    calls: dict = {}
    for name in ("_fwd_nd", "_dx_nd", "_dw_chunks", "_db_chunks", "_sum_chunks", "_fwd_2d",
                 "_neg_zeros", "_dw_2d",
                 "_fwd_2d_n64"):
        monkeypatch.setattr(N, name, EmulatedKernel(lib, getattr(N, name).symbol, calls))
    # NaN fill: an output element no kernel wrote shows up in every comparison
    monkeypatch.setattr(N, "empty", lambda shape: np.full(shape, np.float32(np.nan),
                                                          np.float32).view(HostArray))
    monkeypatch.setattr(N, "negative_zeros",
                        lambda shape: np.full(shape, -0.0, np.float32).view(HostArray))
    monkeypatch.setattr(N, "contiguous", np.ascontiguousarray)
    monkeypatch.setattr(N, "cupy", lambda: _Module)
    monkeypatch.setattr(N, "grid", lambda work: (max(1, min(GRID_STRIDE_BLOCKS,
                                                            -(-work // 256))),))
    monkeypatch.setattr(N, "_geo_cache", {})
    return calls
