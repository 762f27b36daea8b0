"""engine/csrc/cuda/pool.cu compiled as host C++ (one "thread" walking each grid-stride loop, atomicAdd
as a plain add) and called through ctypes, so the kernels' window arithmetic, tie rules and folds
run on a machine without a GPU. Only the schedule differs from CUDA: every value a kernel computes
is the same expression (the host build keeps float and double separate and uses no contraction;
glibc's exp and log stand in for libdevice's, both within a float64 ulp or two)."""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.pool_windows import out_spatial
from engine.runtime import loader

CXX = shutil.which("g++")

_SHIM = r"""
#include <cmath>
#include <cstring>
struct tl_dim3 { unsigned x, y, z; };
static const tl_dim3 blockIdx{0, 0, 0}, threadIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
static inline float __int_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
static inline void __syncthreads() {}
using std::exp; using std::log;
"""


@lru_cache(maxsize=1)
def library(build_dir: str) -> ctypes.CDLL:
    src = Path(build_dir) / "pool_host.cpp"
    src.write_text(_SHIM + loader.source_text("pool.cu"))
    lib = Path(build_dir) / "pool_host.so"
    subprocess.run([CXX, "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared",
                    "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True,
                   text=True)
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


class HostPool:
    """The pool.cu entry points for one geometry, 2-D or N-D form."""

    def __init__(self, lib, x_shape, k, s, p, d, form: str) -> None:
        r = len(k)
        self.lib, self.form = lib, form
        spatial = tuple(x_shape[len(x_shape) - r:])
        self.out = out_spatial(spatial, k, s, p, d)
        self.planes = math.prod(x_shape[:len(x_shape) - r])
        self.in_size, self.out_size = math.prod(spatial), math.prod(self.out)
        self.win = math.prod(k)
        self.x_shape, self.y_shape = tuple(x_shape), tuple(x_shape[:len(x_shape) - r]) + self.out
        if form == "2d":
            assert r == 2
            self.geo = [ctypes.c_uint(v) for v in (*spatial, *self.out, *k, *s, *p, *d)]
        else:
            self._geo = np.zeros(48, np.int64)
            for i, vals in enumerate((spatial, self.out, k, s, p, d)):
                self._geo[8 * i:8 * i + r] = vals
            self.geo = [ctypes.c_int(r), _ptr(self._geo)]

    def _call(self, stem: str, *args):
        fn = getattr(self.lib, f"{stem}_{self.form}")
        fn(*args, *self.geo)

    def forward(self, op: str, x: np.ndarray, beta: float | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        y = np.full(self.y_shape, np.nan, np.float32)
        pl = ctypes.c_uint(self.planes)
        if y.size == 0:
            return y
        if op == "max_pool":
            self._call("tl_max_pool", _ptr(x), _ptr(y), pl)
        elif op == "avg_pool":
            self._call("tl_avg_pool", _ptr(x), _ptr(y), pl, ctypes.c_uint(self.win))
        else:
            self._call("tl_smooth_max_pool", _ptr(x), _ptr(y), pl, ctypes.c_double(beta))
        return y

    def backward(self, op: str, x: np.ndarray, g: np.ndarray, mode: str,
                 beta: float | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        g = np.ascontiguousarray(g, np.float32)
        dx = np.zeros(self.x_shape, np.float32)
        pl = ctypes.c_uint(self.planes)
        if self.planes * self.out_size == 0 or self.in_size == 0:
            return dx
        n_out = self.planes * self.out_size
        if op == "max_pool" and mode == "atomic":
            self._call("tl_max_pool_bwd_atomic", _ptr(x), _ptr(g), _ptr(dx), pl)
        elif op == "max_pool":
            arg = np.zeros(n_out, np.uint32)
            self._call("tl_max_pool_argmax", _ptr(x), _ptr(arg), pl)
            self._call("tl_max_pool_bwd_gather", _ptr(arg), _ptr(g), _ptr(dx), pl)
        elif op == "avg_pool":
            stem = "tl_avg_pool_bwd_atomic" if mode == "atomic" else "tl_avg_pool_bwd_gather"
            self._call(stem, _ptr(g), _ptr(dx), pl, ctypes.c_uint(self.win))
        elif mode == "atomic":
            self._call("tl_smooth_max_pool_bwd_atomic", _ptr(x), _ptr(g), _ptr(dx), pl,
                       ctypes.c_double(beta))
        else:
            pivot, total = np.zeros(n_out), np.zeros(n_out)
            b = ctypes.c_double(beta)
            self._call("tl_smooth_max_pool_stats", _ptr(x), _ptr(pivot), _ptr(total), pl, b)
            self._call("tl_smooth_max_pool_bwd_gather", _ptr(x), _ptr(pivot), _ptr(total),
                       _ptr(g), _ptr(dx), pl, b)
        return dx
