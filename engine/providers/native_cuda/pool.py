"""max_pool, avg_pool and smooth_max_pool (engine/csrc/cuda/pool.cu): one thread per output for
the forward, a 2-D fast path (scalar geometry) beside the generic N-D kernels (rank 1..8, the
geometry in a 48-entry int64 device array). Backward: default mode scatters from each output
window with float atomicAdd; deterministic mode gathers per input element, in ascending output
order, from the argmax (max) or the window statistics (smooth max) a first pass stores.

Max pool's backward recomputes the argmax: in the scatter thread (default mode) or in the first
pass of the deterministic mode (an index buffer of the output's size); nothing is kept from the
forward."""
from __future__ import annotations

import math

import numpy as np

from engine.pool_windows import out_spatial
from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import F64, I32, U32, cupy, empty, grid, kernel, zeros
from engine.runtime.deterministic import get_deterministic_reductions
from engine.types import BackendOp as Op, DeclaredBound, Reduction

_GEO_CACHE: dict[tuple, object] = {}   # geometry -> its device array (uploaded once)


def _k(symbol: str, rank: int):
    return kernel("pool.cu", f"{symbol}_{'2d' if rank == 2 else 'nd'}")


def _view(x, kernel_size, stride, padding, dilation):
    """(planes, in_size, out_size, output shape, geometry args after `planes`)."""
    r = len(kernel_size)
    spatial = tuple(x.shape[x.ndim - r:])
    out = out_spatial(spatial, kernel_size, stride, padding, dilation)
    planes = math.prod(x.shape[:x.ndim - r])
    if r == 2:
        args = tuple(U32(v) for v in (*spatial, *out, *kernel_size, *stride, *padding, *dilation))
    else:
        key = (spatial, out, tuple(kernel_size), tuple(stride), tuple(padding), tuple(dilation))
        geo = _GEO_CACHE.get(key)
        if geo is None:
            host = np.zeros(48, dtype=np.int64)
            for i, vals in enumerate(key):
                host[8 * i:8 * i + r] = vals
            geo = _GEO_CACHE.setdefault(key, cupy().asarray(host))
        args = (I32(r), geo)
    return planes, math.prod(spatial), math.prod(out), x.shape[:x.ndim - r] + out, args


def _beta(beta) -> F64:
    """beta as the kernels take it: rounded to float32 first (docs/OPS.md), passed as double."""
    return F64(np.float32(beta))


def _win(kernel_size) -> U32:
    return U32(math.prod(kernel_size))


def _max_pool(x, kernel_size, stride, padding, dilation):
    planes, _, n_out, shape, geo = _view(x, kernel_size, stride, padding, dilation)
    y = empty(shape)
    if y.size:
        _k("tl_max_pool", len(kernel_size))(grid(y.size), (x, y, U32(planes)) + geo)
    return y


def _avg_pool(x, kernel_size, stride, padding, dilation):
    planes, _, _, shape, geo = _view(x, kernel_size, stride, padding, dilation)
    y = empty(shape)
    if y.size:
        _k("tl_avg_pool", len(kernel_size))(grid(y.size),
                                            (x, y, U32(planes), _win(kernel_size)) + geo)
    return y


def _smooth_max_pool(x, kernel_size, stride, padding, dilation, beta):
    planes, _, _, shape, geo = _view(x, kernel_size, stride, padding, dilation)
    y = empty(shape)
    if y.size:
        _k("tl_smooth_max_pool", len(kernel_size))(grid(y.size),
                                                   (x, y, U32(planes), _beta(beta)) + geo)
    return y


def max_pool_vjp(inputs, output, g, kernel_size, stride, padding, dilation):
    (x,) = inputs
    planes, n_in, n_out, _, geo = _view(x, kernel_size, stride, padding, dilation)
    g = cupy().ascontiguousarray(g)
    r = len(kernel_size)
    dx = zeros(x.shape)
    if planes * n_out == 0 or n_in == 0:
        return (dx,)
    if get_deterministic_reductions():
        arg = cupy().empty(planes * n_out, dtype=np.uint32)
        _k("tl_max_pool_argmax", r)(grid(arg.size), (x, arg, U32(planes)) + geo)
        _k("tl_max_pool_bwd_gather", r)(grid(dx.size), (arg, g, dx, U32(planes)) + geo)
    else:
        _k("tl_max_pool_bwd_atomic", r)(grid(planes * n_out), (x, g, dx, U32(planes)) + geo)
    return (dx,)


def avg_pool_vjp(inputs, output, g, kernel_size, stride, padding, dilation):
    (x,) = inputs
    planes, n_in, n_out, _, geo = _view(x, kernel_size, stride, padding, dilation)
    g = cupy().ascontiguousarray(g)
    r = len(kernel_size)
    dx = zeros(x.shape)
    if planes * n_out == 0 or n_in == 0:
        return (dx,)
    win = _win(kernel_size)
    if get_deterministic_reductions():
        _k("tl_avg_pool_bwd_gather", r)(grid(dx.size), (g, dx, U32(planes), win) + geo)
    else:
        _k("tl_avg_pool_bwd_atomic", r)(grid(planes * n_out), (g, dx, U32(planes), win) + geo)
    return (dx,)


def smooth_max_pool_vjp(inputs, output, g, kernel_size, stride, padding, dilation, beta):
    (x,) = inputs
    planes, n_in, n_out, _, geo = _view(x, kernel_size, stride, padding, dilation)
    cp = cupy()
    g = cp.ascontiguousarray(g)
    r = len(kernel_size)
    dx = zeros(x.shape)
    if planes * n_out == 0 or n_in == 0:
        return (dx,)
    b = _beta(beta)
    if get_deterministic_reductions():
        pivot = cp.empty(planes * n_out, dtype=np.float64)
        total = cp.empty(planes * n_out, dtype=np.float64)
        _k("tl_smooth_max_pool_stats", r)(grid(pivot.size),
                                          (x, pivot, total, U32(planes), b) + geo)
        _k("tl_smooth_max_pool_bwd_gather", r)(grid(dx.size),
                                               (x, pivot, total, g, dx, U32(planes), b) + geo)
    else:
        _k("tl_smooth_max_pool_bwd_atomic", r)(grid(planes * n_out),
                                               (x, g, dx, U32(planes), b) + geo)
    return (dx,)


def _symbols(stem: str) -> tuple[str, ...]:
    return (f"{stem}_2d", f"{stem}_nd")


_ATOMIC = dict(reduction=Reduction.implementation_defined, atomics=True)
# Smooth max in double: a few float64 ulps per exp, log and sum term, relative to the terms
# |pivot| + |log(S) / beta| (the result can cancel to 0: e.g. pivot -log(2)/beta over two equal
# cells), then one rounding to float32.
SMOOTH_F64_ONCE = DeclaredBound(
    1.0, "evaluated in float64 (libdevice exp and log within a few float64 ulps; the window's sum "
         "of exponentials in [1, win]) and rounded once to float32; pivot + log(S) / beta can "
         "cancel, so the float64 error is relative to |pivot| + |log(S) / beta|, far under one "
         "u = 2^-24 of it", magnitude_units=1.0)

DECLS = (
    KernelDecl(Op.max_pool, "pool.cu", _symbols("tl_max_pool"),
               _symbols("tl_max_pool_bwd_atomic") + _symbols("tl_max_pool_argmax")
               + _symbols("tl_max_pool_bwd_gather"), _max_pool, max_pool_vjp, **_ATOMIC,
               summary="forward selects the first NaN, else the first maximum, of each window "
                       "(padding -inf): no rounding; VJP float32 sums of g per input cell",
               notes=("max-pool backward recomputes the argmax (in the scatter thread, or in "
                      "deterministic mode's first pass into an index buffer)",)),
    KernelDecl(Op.avg_pool, "pool.cu", _symbols("tl_avg_pool"),
               _symbols("tl_avg_pool_bwd_atomic") + _symbols("tl_avg_pool_bwd_gather"),
               _avg_pool, avg_pool_vjp, **_ATOMIC,
               summary="float32 left fold of the window's input cells in row-major window order, "
                       "then one division by the window size (padding counts as 0); VJP "
                       "g / win scattered (default) or the gathered sum of g divided once "
                       "(deterministic)"),
    KernelDecl(Op.smooth_max_pool, "pool.cu", _symbols("tl_smooth_max_pool"),
               _symbols("tl_smooth_max_pool_bwd_atomic") + _symbols("tl_smooth_max_pool_stats")
               + _symbols("tl_smooth_max_pool_bwd_gather"), _smooth_max_pool,
               smooth_max_pool_vjp, **_ATOMIC, bound=SMOOTH_F64_ONCE,
               summary="pivot + log(sum exp(beta (v - pivot))) / beta in float64 (padding 0), "
                       "rounded once; VJP g times the window's softmax weights, each term in "
                       "float64 (rounded once per atomicAdd, or the gathered sum once)"),
)
