"""conv and conv_transpose (spatial rank 1..8, stride, padding, dilation, groups, optional batch
axis and bias), TorchLean's conv2d / conv_transpose2d entry points, and their local VJP rules.

The wrappers check everything the kernels index with before any kernel runs: every extent,
stride, padding and dilation on its own against UInt32 and every spatial product on its own (a
zero channel count must not hide an overflowing spatial product: spec section 5.3.2).
"""
from __future__ import annotations

import math

import numpy as np

from engine.convolution import conv_extent, conv_geometry, transpose_extent, transpose_geometry
from engine.errors import NotATensorError, ParameterTypeError, ParameterValueError, ShapeError, UInt32OverflowError
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.registry import device_rule
from engine.runtime.buffer import UINT32_MAX
from engine.tensor import Tensor
from engine.types import BackendOp as Op

MAX_RANK = 8


def _ints(op: str, name: str, value, rank: int) -> tuple[int, ...]:
    """An int (every axis) or a sequence of `rank` ints, as a tuple."""
    def whole(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
    if whole(value):
        out = (int(value),) * rank
    elif isinstance(value, (tuple, list)) and all(whole(v) for v in value):
        out = tuple(int(v) for v in value)
        if len(out) != rank:
            raise ParameterValueError(f"{op}: {name} {tuple(value)} has {len(out)} entries, the "
                                      f"kernel has spatial rank {rank}; give one int or {rank}")
    else:
        raise ParameterTypeError(f"{op}: {name} must be an int or a sequence of {rank} ints, got "
                                 f"{type(value).__name__} {value!r}")
    for v in out:
        if v > UINT32_MAX:
            raise UInt32OverflowError(f"{op}: {name} {v} is over the UInt32 limit {UINT32_MAX}; "
                                      "use a smaller value")
    return out


def _params(op: str, rank: int, stride, padding, dilation, groups) -> dict:
    s = _ints(op, "stride", stride, rank)
    p = _ints(op, "padding", padding, rank)
    d = _ints(op, "dilation", dilation, rank)
    if any(v <= 0 for v in s):
        raise ParameterValueError(f"{op}: stride {s} must be positive on every axis (stride 0 "
                                  "has no next window)")
    if any(v < 0 for v in p):
        raise ParameterValueError(f"{op}: padding {p} must be non-negative on every axis")
    if any(v <= 0 for v in d):
        raise ParameterValueError(f"{op}: dilation {d} must be positive on every axis")
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)):
        raise ParameterTypeError(f"{op}: groups must be an int, got {type(groups).__name__} "
                                 f"{groups!r}")
    if groups < 1:
        raise ParameterValueError(f"{op}: groups must be at least 1, got {groups}")
    return {"stride": s, "padding": p, "dilation": d, "groups": int(groups)}


def _fits(op: str, what: str, value: int) -> None:
    if value > UINT32_MAX:
        raise UInt32OverflowError(f"{op}: {what} is {value}, over the UInt32 limit {UINT32_MAX}; "
                                  "use smaller extents")


def _spatial(op: str, what: str, extents: tuple[int, ...]) -> None:
    """A spatial product on its own: the channel or batch count may be 0 and hide it."""
    _fits(op, f"the spatial product of {what} {extents}", math.prod(extents))


def _rank(op: str, x: Tensor, w: Tensor) -> int:
    """The spatial rank, after the checks of the kernel's and x's ranks and kernel extents."""
    rank = w.ndim - 2
    if not 1 <= rank <= MAX_RANK:
        raise ShapeError(f"{op}: the kernel has shape {w.shape} (spatial rank {rank}); wants "
                         f"rank 3..{MAX_RANK + 2}: [C, C / groups, k_1, ..., k_r] with 1 <= r <= "
                         f"{MAX_RANK}")
    if x.ndim not in (rank + 1, rank + 2):
        raise ShapeError(f"{op}: x has shape {x.shape} but a kernel of spatial rank {rank} wants "
                         f"x of rank {rank + 1} (C, *spatial) or {rank + 2} (N, C, *spatial)")
    if any(k == 0 for k in w.shape[2:]):
        raise ShapeError(f"{op}: kernel extent 0 in kernel shape {w.shape}; every kernel extent "
                         "must be at least 1")
    return rank


def _check_groups(op: str, groups: int, c_in: int, c_out: int) -> None:
    if c_in % groups or c_out % groups:
        raise ParameterValueError(f"{op}: groups={groups} must divide both channel counts, got "
                                  f"C_in={c_in} and C_out={c_out}")


def _check_bias(op: str, b: Tensor | None, c_out: int) -> None:
    if b is not None and not isinstance(b, Tensor):
        raise NotATensorError(f"{op}: `b` is a {type(b).__name__}; pass an engine Tensor of shape "
                              f"({c_out},) or None for no bias term")
    if b is not None and b.shape != (c_out,):
        raise ShapeError(f"{op}: bias has shape {b.shape}, expected ({c_out},) (one per output "
                         "channel) or None")


def _check_extents(op: str, inp, k, out, p, d, s) -> None:
    for n, kk, pp, dd, ss in zip(inp, k, p, d, s):
        _fits(op, f"the padded extent {n} + 2*{pp}", n + 2 * pp)
        _fits(op, f"the dilated kernel extent {dd}*({kk}-1)+1", dd * (kk - 1) + 1)
        _fits(op, f"the strided extent ({n}-1)*{ss}+1", max(n - 1, 0) * ss + 1)
    _spatial(op, "x", inp)
    _spatial(op, "the kernel", k)
    _spatial(op, "the output", out)


def conv(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0, dilation=1,
         groups=1) -> Tensor:
    op = "conv"
    rank = _rank(op, x, w)
    params = _params(op, rank, stride, padding, dilation, groups)
    c_in = x.shape[-rank - 1]
    c_out, cg = w.shape[0], w.shape[1]
    g = params["groups"]
    _check_groups(op, g, c_in, c_out)
    if cg * g != c_in:
        raise ShapeError(f"{op}: x has {c_in} channels but the kernel {w.shape} with groups={g} "
                         f"takes {cg} x {g} = {cg * g}")
    _check_bias(op, b, c_out)
    inp, k = x.shape[-rank:], w.shape[2:]
    out = tuple(conv_extent(n, kk, s, p, d) for n, kk, s, p, d in
                zip(inp, k, params["stride"], params["padding"], params["dilation"]))
    _check_extents(op, inp, k, out, params["padding"], params["dilation"], params["stride"])
    shape = x.shape[:-rank - 1] + (c_out,) + out
    return apply(Op.conv, (x, w) if b is None else (x, w, b), shape, params)


def conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0,
                   dilation=1, groups=1) -> Tensor:
    op = "conv_transpose"
    rank = _rank(op, x, w)
    params = _params(op, rank, stride, padding, dilation, groups)
    c_in = x.shape[-rank - 1]
    g = params["groups"]
    c_out = w.shape[1] * g
    if w.shape[0] != c_in:
        raise ShapeError(f"{op}: x has {c_in} channels but the kernel {w.shape} takes "
                         f"{w.shape[0]} (kernel [C_in, C_out / groups, *k])")
    _check_groups(op, g, c_in, c_out)
    _check_bias(op, b, c_out)
    inp, k = x.shape[-rank:], w.shape[2:]
    out = tuple(transpose_extent(n, kk, s, p, d) for n, kk, s, p, d in
                zip(inp, k, params["stride"], params["padding"], params["dilation"]))
    _check_extents(op, inp, k, out, params["padding"], params["dilation"], params["stride"])
    _check_extents(op, out, k, inp, params["padding"], params["dilation"], params["stride"])
    shape = x.shape[:-rank - 1] + (c_out,) + out
    return apply(Op.conv_transpose, (x, w) if b is None else (x, w, b), shape, params)


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride: int = 1,
           padding: int = 0) -> Tensor:
    """TorchLean's 2-D entry point: scalar stride and padding, no dilation, no groups."""
    if w.ndim != 4:
        raise ShapeError(f"conv2d: wants a kernel [C_out, C_in, kh, kw], got shape {w.shape}")
    return conv(x, w, b, stride=stride, padding=padding)


def conv_transpose2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride: int = 1,
                     padding: int = 0) -> Tensor:
    """TorchLean's 2-D transposed entry point: scalar stride and padding."""
    if w.ndim != 4:
        raise ShapeError(f"conv_transpose2d: wants a kernel [C_in, C_out, kh, kw], got shape "
                         f"{w.shape}")
    return conv_transpose(x, w, b, stride=stride, padding=padding)


# --- local VJP rules: NumPy in float64 rounded once on the CPU, our conv.cu kernels on CUDA ------
# (lent by the native-cuda provider through the registry: ops never import a provider)

_REDUCE = ("conv.cu:tl_conv_dw_chunks", "conv.cu:tl_conv2d_dw_tiled", "conv.cu:tl_conv_db_chunks",
           "conv.cu:tl_conv_sum_chunks", "conv.cu:tl_conv_neg_zeros")


@local_vjp(Op.conv, tape=("conv.cu:tl_conv_dx_nd", "conv.cu:tl_conv2d_fwd_tiled",
                          "conv.cu:tl_conv2d_fwd_tiled_n64") + _REDUCE)
def _conv_vjp(inputs, out, g, stride, padding, dilation, groups):
    # CUDA: conv.cu's conv_dx_nd (dx; rank 2 at stride 1: conv2d_fwd_tiled reading the kernel
    # flipped), conv_dw_chunks or conv2d_dw_tiled (dw), conv_db_chunks (db), in default mode
    # conv_neg_zeros (their accumulators) and in deterministic mode conv_sum_chunks
    if on_device(g):
        return device_rule(Op.conv)(inputs, out, g, stride, padding, dilation, groups)
    from engine import convolution as C
    x, w = inputs[0], inputs[1]
    geo, _ = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    gy = g.reshape((geo.n, geo.c_out) + geo.out)
    xb = x.reshape((geo.n, geo.c_in) + geo.inp)
    with np.errstate(all="ignore"):
        dx = C.input_grad64(geo, gy, w).reshape(x.shape).astype(np.float32)
        dw = C.kernel_grad64(geo, gy, xb).astype(np.float32)
        grads = (dx, dw)
        if len(inputs) == 3:
            grads += (C.bias_grad64(gy, geo.c_out).astype(np.float32),)
    return grads


@local_vjp(Op.conv_transpose, tape=("conv.cu:tl_conv2d_fwd_tiled",
                                    "conv.cu:tl_conv2d_fwd_tiled_n64", "conv.cu:tl_conv_fwd_nd")
           + _REDUCE)
def _conv_transpose_vjp(inputs, out, g, stride, padding, dilation, groups):
    # CUDA: dx is conv's forward (conv.cu's conv2d_fwd_tiled for rank 2, conv_fwd_nd otherwise);
    # dw and db: conv_dw_chunks or conv2d_dw_tiled, conv_db_chunks, in default mode
    # conv_neg_zeros (their accumulators) and in deterministic mode conv_sum_chunks
    if on_device(g):
        return device_rule(Op.conv_transpose)(inputs, out, g, stride, padding, dilation,
                                              groups)
    from engine import convolution as C
    x, w = inputs[0], inputs[1]
    geo, _ = transpose_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    gy = g.reshape((geo.n, geo.c_in) + geo.inp)          # the adjoint conv's input side
    xb = x.reshape((geo.n, geo.c_out) + geo.out)         # the adjoint conv's output side
    with np.errstate(all="ignore"):
        dx = C.forward64(geo, gy, w).reshape(x.shape).astype(np.float32)
        dw = C.kernel_grad64(geo, xb, gy).astype(np.float32)
        grads = (dx, dw)
        if len(inputs) == 3:
            grads += (C.bias_grad64(gy, geo.c_in).astype(np.float32),)
    return grads
