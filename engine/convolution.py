"""Convolution geometry (output extents, the parameter tuples) and the NumPy evaluation of conv
and its adjoints in float64, shared by the op wrappers, the reference provider and the CPU tape
rule. A leaf module: NumPy only, so every layer may import it.

Index rule (docs/OPS.md): output position o and kernel tap k read input position
i = o * s - p + k * d on every spatial axis; a tap with i outside [0, in) is skipped (no term).
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

F32 = np.float32


def conv_extent(n: int, k: int, s: int, p: int, d: int) -> int:
    """floor((n + 2p - d(k-1) - 1) / s) + 1, and 0 when no window fits (n + 2p < d(k-1) + 1)."""
    span = d * (k - 1) + 1
    return 0 if n + 2 * p < span else (n + 2 * p - span) // s + 1


def transpose_extent(n: int, k: int, s: int, p: int, d: int) -> int:
    """(n - 1) s - 2p + d(k-1) + 1, saturating at 0."""
    return max(0, (n - 1) * s - 2 * p + d * (k - 1) + 1)


@dataclass(frozen=True)
class Geometry:
    """One convolution y = conv(x, w) seen from the forward conv: x [N, C_in, *inp], w [C_out,
    C_in / groups, *k], y [N, C_out, *out]. conv_transpose is the adjoint of such a conv (its
    input plays y, its output plays x)."""
    n: int
    c_in: int
    c_out: int
    groups: int
    inp: tuple[int, ...]
    out: tuple[int, ...]
    k: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.k)


def _per_axis(value, rank: int) -> tuple[int, ...]:
    """A handler's stride / padding / dilation as a tuple of ints (an int means every axis)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * rank
    return tuple(int(v) for v in value)


def conv_geometry(x_shape, w_shape, stride, padding, dilation, groups) -> tuple[Geometry, bool]:
    """The Geometry of conv(x, w) and whether x has a batch axis."""
    r = len(w_shape) - 2
    return _conv_geometry(tuple(x_shape), tuple(w_shape), _per_axis(stride, r),
                          _per_axis(padding, r), _per_axis(dilation, r), int(groups))


def transpose_geometry(x_shape, w_shape, stride, padding, dilation, groups):
    """conv_transpose(x, w) as the adjoint of a conv (see _transpose_geometry)."""
    r = len(w_shape) - 2
    return _transpose_geometry(tuple(x_shape), tuple(w_shape), _per_axis(stride, r),
                               _per_axis(padding, r), _per_axis(dilation, r), int(groups))


# Both geometries are cached: a training step asks for the same few on every call (host time).
@functools.lru_cache(maxsize=512)
def _conv_geometry(x_shape, w_shape, stride, padding, dilation, groups) -> tuple[Geometry, bool]:
    """The Geometry of conv(x, w) with normalised params, and whether x has a batch axis."""
    rank = len(w_shape) - 2
    batched = len(x_shape) == rank + 2
    n = x_shape[0] if batched else 1
    inp, k = tuple(x_shape[-rank:]), tuple(w_shape[2:])
    out = tuple(conv_extent(*a) for a in zip(inp, k, stride, padding, dilation))
    return Geometry(n, x_shape[-rank - 1], w_shape[0], groups, inp, out, k, tuple(stride),
                    tuple(padding), tuple(dilation)), batched


@functools.lru_cache(maxsize=512)
def _transpose_geometry(x_shape, w_shape, stride, padding, dilation, groups):
    """conv_transpose(x, w) as the adjoint of a conv: that conv's x is this op's output (C_out =
    w[1] * groups channels), its output is this op's x (C_in = w[0] channels)."""
    rank = len(w_shape) - 2
    batched = len(x_shape) == rank + 2
    n = x_shape[0] if batched else 1
    inp, k = tuple(x_shape[-rank:]), tuple(w_shape[2:])
    out = tuple(transpose_extent(*a) for a in zip(inp, k, stride, padding, dilation))
    return Geometry(n, w_shape[1] * groups, w_shape[0], groups, out, inp, k, tuple(stride),
                    tuple(padding), tuple(dilation)), batched


def forward_f32(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """conv(x, w) + b evaluated in float64 and rounded once (the reference provider)."""
    geo, _ = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    shape = x.shape[:-geo.rank - 1] + (geo.c_out,) + geo.out
    with np.errstate(all="ignore"):
        y = forward64(geo, x.reshape((geo.n, geo.c_in) + geo.inp), w, b)
        return y.reshape(shape).astype(F32)


def transpose_f32(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """conv_transpose(x, w) + b evaluated in float64 and rounded once."""
    geo, _ = transpose_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    shape = x.shape[:-geo.rank - 1] + (geo.c_in,) + geo.inp
    with np.errstate(all="ignore"):
        y = input_grad64(geo, x.reshape((geo.n, geo.c_out) + geo.out), w, b)
        return y.reshape(shape).astype(F32)


def _tap_slices(g: Geometry, tap: tuple[int, ...]):
    """For one kernel tap: (output slices, input slices) of the positions where the tap is in
    range, or None when it is in range nowhere."""
    out_sl, in_sl = [], []
    for n, m, s, p, d, t in zip(g.inp, g.out, g.stride, g.padding, g.dilation, tap):
        off = t * d - p                      # i = o s + off
        lo = (-off + s - 1) // s if off < 0 else 0      # the smallest o with i >= 0
        hi = min(m - 1, (n - 1 - off) // s)              # the largest o with i < n
        if hi < lo:
            return None
        out_sl.append(slice(lo, hi + 1))
        in_sl.append(slice(lo * s + off, hi * s + off + 1, s))
    return tuple(out_sl), tuple(in_sl)


def _taps(g: Geometry):
    return itertools.product(*(range(k) for k in g.k))


def forward64(g: Geometry, x, w, b=None) -> np.ndarray:
    """y = conv(x, w) + b in float64 (x [N, C_in, *inp]; any order: the caller rounds once)."""
    x = np.asarray(x, np.float64).reshape((g.n, g.groups, g.c_in // g.groups) + g.inp)
    w = np.asarray(w, np.float64).reshape((g.groups, g.c_out // g.groups, g.c_in // g.groups)
                                          + g.k)
    y = np.zeros((g.n, g.groups, g.c_out // g.groups) + g.out)
    for tap in _taps(g):
        sl = _tap_slices(g, tap)
        if sl is None:
            continue
        o, i = sl
        xs = x[(slice(None),) * 3 + i]                       # [N, G, ci, *o]
        ws = w[(slice(None),) * 3 + tap]                     # [G, co, ci]
        y[(slice(None),) * 3 + o] += np.einsum("ngc...,goc->ngo...", xs, ws)
    y = y.reshape((g.n, g.c_out) + g.out)
    if b is not None:
        y += np.asarray(b, np.float64).reshape((1, g.c_out) + (1,) * g.rank)
    return y


def input_grad64(g: Geometry, gy, w, b=None) -> np.ndarray:
    """dx = the adjoint of conv applied to gy [N, C_out, *out], plus b [C_in] when given (the
    conv_transpose forward), in float64."""
    gy = np.asarray(gy, np.float64).reshape((g.n, g.groups, g.c_out // g.groups) + g.out)
    w = np.asarray(w, np.float64).reshape((g.groups, g.c_out // g.groups, g.c_in // g.groups)
                                          + g.k)
    dx = np.zeros((g.n, g.groups, g.c_in // g.groups) + g.inp)
    for tap in _taps(g):
        sl = _tap_slices(g, tap)
        if sl is None:
            continue
        o, i = sl
        gs = gy[(slice(None),) * 3 + o]
        ws = w[(slice(None),) * 3 + tap]
        dx[(slice(None),) * 3 + i] += np.einsum("ngo...,goc->ngc...", gs, ws)
    dx = dx.reshape((g.n, g.c_in) + g.inp)
    if b is not None:
        dx += np.asarray(b, np.float64).reshape((1, g.c_in) + (1,) * g.rank)
    return dx


def kernel_grad64(g: Geometry, gy, x) -> np.ndarray:
    """dw [C_out, C_in / groups, *k] = sum over N and output positions of gy * x, in float64."""
    gy = np.asarray(gy, np.float64).reshape((g.n, g.groups, g.c_out // g.groups) + g.out)
    x = np.asarray(x, np.float64).reshape((g.n, g.groups, g.c_in // g.groups) + g.inp)
    dw = np.zeros((g.groups, g.c_out // g.groups, g.c_in // g.groups) + g.k)
    for tap in _taps(g):
        sl = _tap_slices(g, tap)
        if sl is None:
            continue
        o, i = sl
        # explicit position counts: -1 cannot be inferred when an axis is empty
        pos = math.prod(sl_.stop - sl_.start for sl_ in o)
        gs = gy[(slice(None),) * 3 + o].reshape(g.n, g.groups, g.c_out // g.groups, pos)
        xs = x[(slice(None),) * 3 + i].reshape(g.n, g.groups, g.c_in // g.groups, pos)
        dw[(slice(None),) * 3 + tap] = np.einsum("ngop,ngcp->goc", gs, xs)
    return dw.reshape((g.c_out, g.c_in // g.groups) + g.k)


def bias_grad64(gy, channels: int) -> np.ndarray:
    """db [C] = the sum of gy [N, C, *spatial] over N and the spatial axes, in float64."""
    gy = np.asarray(gy, np.float64)
    return gy.reshape(gy.shape[0], channels, math.prod(gy.shape[2:])).sum(axis=(0, 2))
