"""max_pool, avg_pool and smooth_max_pool over the trailing r spatial axes of x ([N,] C, *spatial),
with their local VJP rules: NumPy (engine/pool_windows.py) on the CPU, our pool.cu kernels on CUDA.

Parameters arrive as an int or r ints and leave normalised to r-tuples, the form the handlers and
the harness's layouts use; kernel_size as an int means the 2-D window (k, k)."""
from __future__ import annotations

import math

import numpy as np

from engine import pool_windows as windows
from engine.errors import ParameterTypeError, ParameterValueError, ShapeError, UInt32OverflowError
from engine.ops import _checks
from engine.ops._dispatch import _input_problem, apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.registry import device_rule
from engine.runtime.buffer import UINT32_MAX, element_count
from engine.session import current_session
from engine.tensor import Tensor
from engine.types import BackendOp as Op

MAX_RANK = 8


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _kernel_size(op: str, kernel_size) -> tuple[int, ...]:
    if _is_int(kernel_size):
        return (int(kernel_size),) * 2     # TorchLean's 2-D entry points: a (k, k) window
    if isinstance(kernel_size, (bool, np.bool_, str, bytes)) or not hasattr(kernel_size,
                                                                            "__len__"):
        raise ParameterTypeError(f"{op}: kernel_size must be an int or a sequence of ints, got "
                                 f"{type(kernel_size).__name__} {kernel_size!r}")
    k = tuple(kernel_size)
    if not 1 <= len(k) <= MAX_RANK:
        raise ShapeError(f"{op}: kernel_size {k} has spatial rank {len(k)}; pooling supports "
                         f"ranks 1 to {MAX_RANK}: pass 1 to {MAX_RANK} extents")
    return _ints(op, "kernel_size", k, len(k))


def _ints(op: str, name: str, value, r: int) -> tuple[int, ...]:
    """An int (every axis) or r ints, each a whole number (never a bool)."""
    if _is_int(value):
        return (int(value),) * r
    if isinstance(value, (bool, np.bool_, str, bytes)) or not hasattr(value, "__len__"):
        raise ParameterTypeError(f"{op}: {name} must be an int or a sequence of {r} ints, got "
                                 f"{type(value).__name__} {value!r}")
    vals = tuple(value)
    bad = [v for v in vals if not _is_int(v)]
    if bad:
        raise ParameterTypeError(f"{op}: {name} must hold ints, got {type(bad[0]).__name__} "
                                 f"{bad[0]!r} in {vals!r}")
    if len(vals) != r:
        raise ShapeError(f"{op}: {name} {vals} has {len(vals)} entries for a spatial rank of "
                         f"{r} (len(kernel_size)); pass one int or {r} ints")
    return tuple(int(v) for v in vals)


def _at_least(op: str, name: str, vals: tuple[int, ...], low: int, what: str) -> None:
    for axis, v in enumerate(vals):
        if v < low:
            raise ParameterValueError(f"{op}: {name} {vals} has {v} on spatial axis {axis}; "
                                      f"{what}")
        if v > UINT32_MAX:
            raise UInt32OverflowError(f"{op}: {name} {vals} has {v} on spatial axis {axis}, "
                                      f"over the UInt32 limit {UINT32_MAX}; use a smaller "
                                      f"{name}")


def _check_input(op: Op, x: Tensor) -> None:
    """The wrapper's tensor checks (device, length, layout, UInt32 extents) before its shape is
    read: a foreign or malformed tensor is named as such, not as a rank error."""
    if not isinstance(x, Tensor):
        return   # the public wrapper (engine/ops/_public.py) names a non-tensor
    session = current_session()
    data = x.buffer.data
    n = x.numel
    if (x.buffer.device is not session.device or data.size != n or n > UINT32_MAX
            or (n == 0 and x.shape and max(x.shape) > UINT32_MAX) or data.ndim != 1
            or (n > 1 and data.strides[0] != 4) or data.dtype != np.float32):
        _input_problem(op, 0, x, session)


def geometry(op: Op, x: Tensor, kernel_size, stride, padding, dilation):
    """(params as r-tuples, output shape), or the named error of the first check that fails."""
    name = op.label
    _check_input(op, x)
    k = _kernel_size(name, kernel_size)
    r = len(k)
    if x.ndim not in (r + 1, r + 2):
        raise ShapeError(f"{name}: x has shape {x.shape} (rank {x.ndim}) but a spatial rank of "
                         f"{r} (kernel_size {k}) needs x (C, *spatial) of rank {r + 1} or "
                         f"(N, C, *spatial) of rank {r + 2}")
    s = k if stride is None else _ints(name, "stride", stride, r)
    p = _ints(name, "padding", padding, r)
    d = _ints(name, "dilation", dilation, r)
    _at_least(name, "kernel_size", k, 1, "every window extent must be at least 1")
    _at_least(name, "stride", s, 1, "every stride must be at least 1")
    _at_least(name, "padding", p, 0, "padding cannot be negative")
    _at_least(name, "dilation", d, 1, "every dilation must be at least 1")
    spatial = x.shape[x.ndim - r:]
    # each product on its own: a zero channel or batch count must not hide an overflowing one
    for what, extents in (("input spatial", spatial), ("window", k),
                          ("output spatial", windows.out_spatial(spatial, k, s, p, d))):
        count = element_count(extents)
        if count > UINT32_MAX:
            raise UInt32OverflowError(f"{name}: the {what} extents {tuple(extents)} hold {count} "
                                      f"cells, over the UInt32 limit {UINT32_MAX}; use smaller "
                                      "extents")
    params = {"kernel_size": k, "stride": s, "padding": p, "dilation": d}
    return params, x.shape[:x.ndim - r] + windows.out_spatial(spatial, k, s, p, d)


def _beta(beta) -> float:
    b = _checks.number("smooth_max_pool", "beta", beta)
    with np.errstate(over="ignore"):
        b32 = np.float32(b)
    if not (math.isfinite(b32) and b32 != 0):
        raise ParameterValueError(f"smooth_max_pool: beta must be finite and nonzero after "
                                  f"rounding to float32, got {beta!r} (float32 {float(b32)!r}); pass "
                                  f"a beta with 2^-149 <= |beta| <= 3.4028235e38")
    return float(b32)


def max_pool(x: Tensor, kernel_size, stride=None, padding=0, dilation=1) -> Tensor:
    params, out = geometry(Op.max_pool, x, kernel_size, stride, padding, dilation)
    return apply(Op.max_pool, (x,), out, params)


def avg_pool(x: Tensor, kernel_size, stride=None, padding=0, dilation=1) -> Tensor:
    params, out = geometry(Op.avg_pool, x, kernel_size, stride, padding, dilation)
    return apply(Op.avg_pool, (x,), out, params)


def smooth_max_pool(x: Tensor, kernel_size, beta, stride=None, padding=0, dilation=1) -> Tensor:
    params, out = geometry(Op.smooth_max_pool, x, kernel_size, stride, padding, dilation)
    params["beta"] = _beta(beta)
    return apply(Op.smooth_max_pool, (x,), out, params)


# On CUDA each rule runs the native capsule's backward kernels (pool.cu, our flags): the atomic
# scatter by default, the per-input gather in deterministic mode; each decorator names them. The
# native-cuda provider lends them through the registry (ops never import a provider).

@local_vjp(Op.max_pool, tape=(
    "pool.cu:tl_max_pool_bwd_atomic_2d", "pool.cu:tl_max_pool_bwd_atomic_nd",
    "pool.cu:tl_max_pool_argmax_2d", "pool.cu:tl_max_pool_argmax_nd",
    "pool.cu:tl_max_pool_bwd_gather_2d", "pool.cu:tl_max_pool_bwd_gather_nd"))
def _max_pool_vjp(inputs, out, g, kernel_size, stride, padding, dilation):
    # g of each window goes to its selected cell: the first NaN, else the first maximum
    if on_device(g):
        return device_rule(Op.max_pool)(inputs, out, g, kernel_size, stride, padding, dilation)
    return (windows.max_pool_grad(inputs[0], g, kernel_size, stride, padding, dilation),)


@local_vjp(Op.avg_pool, tape=(
    "pool.cu:tl_avg_pool_bwd_atomic_2d", "pool.cu:tl_avg_pool_bwd_atomic_nd",
    "pool.cu:tl_avg_pool_bwd_gather_2d", "pool.cu:tl_avg_pool_bwd_gather_nd"))
def _avg_pool_vjp(inputs, out, g, kernel_size, stride, padding, dilation):
    # g / prod(kernel_size) to every input cell of the window (padding takes its share away)
    if on_device(g):
        return device_rule(Op.avg_pool)(inputs, out, g, kernel_size, stride, padding, dilation)
    return (windows.avg_pool_grad(inputs[0], g, kernel_size, stride, padding, dilation),)


@local_vjp(Op.smooth_max_pool, tape=(
    "pool.cu:tl_smooth_max_pool_bwd_atomic_2d", "pool.cu:tl_smooth_max_pool_bwd_atomic_nd",
    "pool.cu:tl_smooth_max_pool_stats_2d", "pool.cu:tl_smooth_max_pool_stats_nd",
    "pool.cu:tl_smooth_max_pool_bwd_gather_2d", "pool.cu:tl_smooth_max_pool_bwd_gather_nd"))
def _smooth_max_pool_vjp(inputs, out, g, kernel_size, stride, padding, dilation, beta):
    # g times the window's softmax(beta v) weight, to every input cell (none to padding)
    if on_device(g):
        return device_rule(Op.smooth_max_pool)(inputs, out, g, kernel_size, stride, padding,
                                               dilation, beta)
    return (windows.smooth_max_pool_grad(inputs[0], g, beta, kernel_size, stride, padding,
                                         dilation),)
