"""Launchers of the tape kernels (engine/csrc/cuda/tape.cu): local VJP rules evaluated on CuPy
arrays with our compile flags, never through CuPy's ufuncs (compiled with -ftz=true, which flush
subnormal operands, results and comparisons). Each kernel computes its rule's NumPy formula
operation for operation; the rule in engine/ops/<family>.py keeps the formula beside the call.

CuPy is imported by the first call (through engine/providers/native_cuda/launch.py, which also
installs the device reuse cache), so importing engine.ops stays CPU-only.
"""
from __future__ import annotations

import numpy as np

TAPE_FILE = "tape.cu"


def on_device(array) -> bool:
    """True for a CuPy array: the rule then runs through its tape kernel."""
    return type(array).__module__.startswith("cupy")


def _launch():
    from engine.providers.native_cuda import launch
    return launch


def of_g(symbol: str, g, *params):
    """out = f(g) elementwise, params as float32 (tl_tape_neg, tl_tape_scale, ...)."""
    L = _launch()
    g = L.contiguous(g)
    out = L.empty(g.shape)
    if g.size:
        L.kernel(TAPE_FILE, symbol)(L.grid(g.size), (g, out, L.U32(g.size))
                                    + tuple(L.F32(p) for p in params))
    return out


def of_xg(symbol: str, x, g, *params):
    """out = f(x, g) elementwise; x is the rule's input or forward output (same shape as g)."""
    L = _launch()
    x, g = L.contiguous(x), L.contiguous(g)
    out = L.empty(x.shape)
    if x.size:
        L.kernel(TAPE_FILE, symbol)(L.grid(x.size), (x, g, out, L.U32(x.size))
                                    + tuple(L.F32(p) for p in params))
    return out


def of_abg(symbol: str, a, b, g):
    """(ga, gb) = f(a, b, g) elementwise (tl_tape_mul, tl_tape_max, tl_tape_min)."""
    L = _launch()
    a, b, g = L.contiguous(a), L.contiguous(b), L.contiguous(g)
    ga, gb = L.empty(a.shape), L.empty(a.shape)
    if a.size:
        L.kernel(TAPE_FILE, symbol)(L.grid(a.size), (a, b, g, ga, gb, L.U32(a.size)))
    return ga, gb


def mse(pred, target, g, count: int):
    """tl_tape_mse: d = f32((p64 - t64) * (2 g64 / count)), returns (d, -d)."""
    L = _launch()
    pred, target, g = L.contiguous(pred), L.contiguous(target), L.contiguous(g)
    dp, dt = L.empty(pred.shape), L.empty(pred.shape)
    if pred.size:
        L.kernel(TAPE_FILE, "tl_tape_mse")(
            L.grid(pred.size), (pred, target, g, dp, dt, L.U32(pred.size), L.F64(count)))
    return dp, dt


def scatter_add_ordered(shape: tuple[int, ...], g, axis: int, indices):
    """numpy.add.at(zeros(shape), (..., indices, ...), g) on the device: index.cu's
    tl_scatter_add_ordered adds g[o, j, k] into out[o, indices[j], k] for j = 0, 1, ... in order,
    one thread per (o, k) column, from +0 (cupy.zeros): the same left fold as numpy.add.at, with
    our flags (float atomicAdd would flush subnormals)."""
    L = _launch()
    cp = L.cupy()
    g = L.contiguous(g)
    if isinstance(indices, cp.ndarray) and indices.dtype == np.int64:
        idx = L.contiguous(indices)
    else:
        host = indices.get() if isinstance(indices, cp.ndarray) else indices
        idx = cp.asarray(np.asarray(host, dtype=np.int64))
    out = L.zeros(shape)
    outer, extent, inner = L.axis_view(shape, axis)
    m = int(idx.size)
    if g.size and outer * inner:
        L.kernel("index.cu", "tl_scatter_add_ordered")(
            L.grid(outer * inner), (out, g, idx, L.U32(outer), L.U32(extent), L.U32(m),
                                    L.U32(inner)))
    return out
