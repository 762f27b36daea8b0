"""Sums (engine/csrc/cuda/reduce.cu): reduce_sum, reduce_mean and their VJPs, the broadcast-VJP
sum, and mse_loss (engine/csrc/cuda/loss.cu).

Default mode adds chunk partials with float atomicAdd (order unspecified; PTX's atom.add.f32
flushes subnormal inputs and results); deterministic mode sums partials in a fixed order with
ordinary adds, which keep subnormals. Atomic targets start at -0.0, the identity of IEEE
addition, so a sum of -0 terms stays -0 in both modes.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, Kernel, contiguous, copy, cupy, empty,
                                                 grid, kernel, new_array, zeros)
from engine.providers.native_cuda.strided import broadcast_into
from engine.runtime.deterministic import get_deterministic_reductions
from engine.tape_saves import saves
from engine.types import BackendOp as Op, Reduction

ROW_SEGMENT = 8192       # elements per block in long row reductions and mse_loss
GROUP_ROW_MAX = 4096     # rows up to this length: one pass, a lane group per row
COL_BLOCKS = 1024         # blocks a column reduction aims at (~8 per H200 multiprocessor)
COL_RUN_MIN = 16         # rows per thread's run at least: two float4 rounds of eight (reduce.cu)
EXACT_COUNT = 1 << 24    # counts up to this are exact in float: reduce_mean divides in float

# Prepared launches (launch.Kernel.launch): the sums' host path is a few of them per call
_rows_kernel = kernel("reduce.cu", "tl_reduce_rows", "ppuuuii")
_group_kernel = kernel("reduce.cu", "tl_reduce_rows_group", "ppuuuif")
_cols_kernel = kernel("reduce.cu", "tl_reduce_cols", "ppuuuuuiiu")
_div32_kernel = kernel("reduce.cu", "tl_div_f32", "ppuf")
_div64_kernel = kernel("reduce.cu", "tl_div_f64", "ppud")
_neg_zeros_kernel = kernel("reduce.cu", "tl_neg_zeros", "pu")


def _group_log2(r: int) -> int:
    """log2 of the lanes per row of tl_reduce_rows_group: the fewest (a power of two, at most a
    warp) that leave each lane at most eight four-element units."""
    units = -(-r // 4)
    lanes = 1
    while lanes < 32 and lanes * 8 < units:
        lanes *= 2
    return lanes.bit_length() - 1


class SumPass(NamedTuple):
    """One launch of a sum: `kernel` on `blocks` blocks reads the previous pass's output (the
    input, for the first pass) and writes `size` floats, starting from -0 where `fill` (default
    mode's atomic targets). Its parameters after (in, out) are `aligned` when the buffer it reads
    starts 16-byte aligned, else `scalar`: they differ only in the float4 flag, which the shape
    may rule out too (the order of the adds is the same either way: reduce.cu)."""
    kernel: Kernel
    blocks: int
    size: int
    fill: bool
    scalar: tuple
    aligned: tuple


def _passes(outer: int, r: int, inner: int, det: bool) -> list[SumPass]:
    """The launches summing [outer][r][inner] over r (r >= 1) to a flat outer*inner.

    The kernel and its chunk counts depend on the shape alone. Short rows take one pass with no
    atomics; long rows are chunked: default mode adds chunk partials with atomics, deterministic
    mode writes them to a buffer that a second pass sums in a fixed order.
    """
    if inner == 1 and r <= GROUP_ROW_MAX:
        lg = _group_log2(r)
        blocks = -(-(outer << lg) // BLOCK)
        return [SumPass(_group_kernel, blocks, outer, False, (outer, r, lg, 0, 1.0),
                        (outer, r, lg, int(r % 4 == 0), 1.0))]
    if inner == 1:
        chunks = -(-r // ROW_SEGMENT)
        seg = -(-r // chunks)
        seg = -(-seg // 4) * 4           # chunk starts stay 16-byte aligned
        chunks = -(-r // seg)
        vec = int(r % 4 == 0)

        def rows(n_out, atomic):
            return SumPass(_rows_kernel, outer * chunks, n_out, bool(atomic),
                           (r, chunks, seg, atomic, 0), (r, chunks, seg, atomic, vec))
        if chunks == 1:
            return [rows(outer, 0)]
        if not det:
            return [rows(outer, 1)]
        return [rows(outer * chunks, 0)] + _passes(outer, chunks, 1, det)
    lg = col_lanes_log2(inner)
    chunks, seg = col_chunks(outer, r, inner)
    blocks = grid(outer * chunks * -(-inner // (4 << lg)) * BLOCK)[0]   # a block per (o, c, group)
    vec = int(inner % 4 == 0)

    def cols(n_chunks, n_out, atomic):
        return SumPass(_cols_kernel, blocks, n_out, bool(atomic),
                       (outer, r, inner, n_chunks, seg, atomic, 0, lg),
                       (outer, r, inner, n_chunks, seg, atomic, vec, lg))
    if chunks == 1:
        return [cols(1, outer * inner, 0)]
    if not det:
        return [cols(chunks, outer * inner, 1)]
    return [cols(chunks, outer * chunks * inner, 0)] + _passes(outer, chunks, inner, det)


def col_lanes_log2(inner: int) -> int:
    """log2 of LQ, the lanes (one four-column quad each) of a tl_reduce_cols block: the smallest
    power of two at least the row's quads, at most a warp; the block's 256 / LQ runs split the
    rows."""
    quads = -(-inner // 4)
    lanes = 1
    while lanes < 32 and lanes < quads:
        lanes *= 2
    return lanes.bit_length() - 1


def col_chunks(outer: int, r: int, inner: int) -> tuple[int, int]:
    """(chunks, rows per chunk) of a column reduction over r rows, from the shape alone: enough
    chunks that about COL_BLOCKS blocks are busy, each chunk at least COL_RUN_MIN rows per run
    of the block; default mode adds the chunks' sums with atomics, so the count also bounds the
    atomics per output."""
    lg = col_lanes_log2(inner)
    blocks = outer * -(-inner // (4 << lg))
    runs = BLOCK >> lg
    chunks = 1
    if blocks < COL_BLOCKS:
        chunks = max(1, min(-(-COL_BLOCKS // blocks), r // (runs * COL_RUN_MIN)))
    seg = -(-r // chunks)
    return -(-r // seg), seg


class SumPlan(NamedTuple):
    """How one (shape, axes, mode) is summed: `kind` "passes" (the launches in `passes`), "empty"
    (nothing kept), "zeros" (nothing summed) or "copy" (only unit axes summed); the result has
    `shape`; a mean then divides by `count` (`divide`: in a launch of its own, unless the last
    pass divides)."""
    kind: str
    passes: tuple[SumPass, ...]
    shape: tuple[int, ...]
    count: int
    divide: bool


@lru_cache(maxsize=4096)
def sum_plan(shape: tuple, axes: tuple, out_shape: tuple, det: bool, mean: bool) -> SumPlan:
    """The plan of a sum (or mean) of an array of `shape` over `axes` (sorted, non-negative),
    shaped `out_shape`: everything that depends on the shape and the mode alone, computed once
    per distinct call (the per-call host path is then the launches)."""
    red = set(axes)
    size = math.prod(s for d, s in enumerate(shape) if d not in red)
    count = math.prod(shape[d] for d in red)
    if size == 0:
        return SumPlan("empty", (), out_shape, count, False)
    if count == 0:
        return SumPlan("zeros", (), out_shape, count, False)
    groups: list[list] = []             # [extent, reduced?], unit axes dropped, runs merged
    for d, s in enumerate(shape):
        if s == 1:
            continue
        if groups and groups[-1][1] == (d in red):
            groups[-1][0] *= s
        else:
            groups.append([s, d in red])
    if not any(r for _, r in groups):
        return SumPlan("copy", (), out_shape, count, mean)
    passes: list[SumPass] = []
    while any(r for _, r in groups):
        j = max(i for i, (_, r) in enumerate(groups) if r)
        outer = math.prod(e for e, _ in groups[:j])
        inner = math.prod(e for e, _ in groups[j + 1:])
        passes += _passes(outer, groups[j][0], inner, det)
        del groups[j]
        if 0 < j < len(groups) and not groups[j - 1][1] and not groups[j][1]:
            groups[j - 1][0] *= groups.pop(j)[0]
    divide = mean
    last = passes[-1]
    if mean and count <= EXACT_COUNT and last.kernel is _group_kernel:
        # the group kernel divides its row sums itself (tl_div_f32's quotient, bit for bit)
        d = float(count)
        passes[-1] = last._replace(scalar=last.scalar[:-1] + (d,),
                                   aligned=last.aligned[:-1] + (d,))
        divide = False
    return SumPlan("passes", tuple(passes), out_shape, count, divide)


def sum_axes(a, axes, shape=None, mean: bool = False):
    """Sum (or, with `mean`, mean) of a over `axes` (sorted, non-negative), shaped `shape`
    (default: a flat array of the kept extents)."""
    if shape is None:
        shape = (math.prod(s for d, s in enumerate(a.shape) if d not in axes),)
    plan = sum_plan(a.shape, axes, shape, get_deterministic_reductions(), mean)
    if plan.kind == "passes":
        src = a.data.ptr
        last = plan.passes[-1]
        for p in plan.passes:
            out = new_array(plan.shape if p is last else (p.size,), p.size)
            dst = out.data.ptr
            if p.fill:
                _neg_zeros_kernel.launch(grid(p.size)[0], dst, p.size)
            p.kernel.launch(p.blocks, src, dst, *(p.scalar if src % 16 else p.aligned))
            src = dst
    elif plan.kind == "empty":
        return empty(plan.shape)
    elif plan.kind == "zeros":
        return zeros(plan.shape)
    else:
        out = copy(a.reshape(plan.shape))
    if plan.divide:
        _divide_into(out, out, plan.count)
    return out


def _norm_axes(ndim: int, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({ax % ndim for ax in axes})) if ndim else ()


def _out_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def _reduce_sum(a, axes=None, keepdims=False):
    ax = _norm_axes(a.ndim, axes)
    return sum_axes(a, ax, _out_shape(a.shape, ax, keepdims))


def _divide_into(x, out, count: int) -> None:
    """out = x / count elementwise: IEEE float division when count is exact in float (<= 2^24),
    else the quotient in double rounded once."""
    n = x.size
    if n:
        kern = _div32_kernel if count <= EXACT_COUNT else _div64_kernel
        kern.launch(grid(n)[0], x.data.ptr, out.data.ptr, n, float(count))


def _reduce_mean(a, axes=None, keepdims=False):
    ax = _norm_axes(a.ndim, axes)
    shape = _out_shape(a.shape, ax, keepdims)
    if math.prod(a.shape[d] for d in ax) == 0:
        return cupy().full(shape, np.nan, np.float32)
    return sum_axes(a, ax, shape, mean=True)


def _expand(g, shape, axes):
    kept = tuple(1 if d in axes else s for d, s in enumerate(shape))
    return broadcast_into(contiguous(g).reshape(kept), shape)


@saves()
def _reduce_sum_vjp(inputs, output, g, axes=None, keepdims=False):
    a = inputs[0]
    return (_expand(g, a.shape, _norm_axes(a.ndim, axes)),)


@saves()
def _reduce_mean_vjp(inputs, output, g, axes=None, keepdims=False):
    a = inputs[0]
    ax = _norm_axes(a.ndim, axes)
    count = math.prod(a.shape[d] for d in ax)
    if count == 0:
        return (zeros(a.shape),)
    g = contiguous(g)
    q = empty(g.shape)
    _divide_into(g, q, count)
    return (_expand(q, a.shape, ax),)


# --- mse_loss -------------------------------------------------------------------------------

_mse_partial = kernel("loss.cu", "tl_mse_partial", "pppuuii")
_sum_partials = kernel("loss.cu", "tl_sum_partials", "ppu")
_mse_finish = kernel("loss.cu", "tl_mse_finish", "pd")
_mse_bwd = kernel("loss.cu", "tl_mse_bwd", "pppppudi")


def _aligned(*arrays) -> int:
    """1 when every array starts 16-byte aligned (the float4 paths of loss.cu)."""
    return int(all(a.data.ptr % 16 == 0 for a in arrays))


def _mse_loss(pred, target):
    n = pred.size
    if n == 0:
        return cupy().full((), np.nan, np.float32)
    blocks = -(-n // ROW_SEGMENT)
    vec = _aligned(pred, target)
    p, t = pred.data.ptr, target.data.ptr
    out = new_array((), 1)
    if blocks == 1:
        _mse_partial.launch(1, p, t, out.data.ptr, n, ROW_SEGMENT, 0, vec)
    elif not get_deterministic_reductions():
        _neg_zeros_kernel.launch(1, out.data.ptr, 1)
        _mse_partial.launch(blocks, p, t, out.data.ptr, n, ROW_SEGMENT, 1, vec)
    else:
        part = new_array((blocks,), blocks)
        _mse_partial.launch(blocks, p, t, part.data.ptr, n, ROW_SEGMENT, 0, vec)
        _sum_partials.launch(1, part.data.ptr, out.data.ptr, blocks)
    _mse_finish.launch(1, out.data.ptr, float(n))
    return out


@saves(0, 1)
def _mse_loss_vjp(inputs, output, g):
    """(2 (p - t) g / n, its negation), evaluated in double and rounded once (tl_mse_bwd): p - t
    of two float32 values near the range limit would overflow in float32."""
    pred, target = inputs
    gp, gt = empty(pred.shape), empty(pred.shape)
    n = pred.size
    if n:
        vec = _aligned(pred, target, gp, gt)
        _mse_bwd.launch(grid(-(-n // 4))[0], pred.data.ptr, target.data.ptr,
                        contiguous(g).data.ptr, gp.data.ptr, gt.data.ptr, n, float(n), vec)
    return gp, gt


_ATOMIC = dict(reduction=Reduction.implementation_defined, atomics=True)

DECLS = (
    KernelDecl(Op.reduce_sum, "reduce.cu",
               ("tl_reduce_rows_group", "tl_reduce_rows", "tl_reduce_cols", "tl_neg_zeros"),
               ("shape.cu:tl_strided_copy", "shape.cu:tl_rows_copy"), _reduce_sum,
               _reduce_sum_vjp, **_ATOMIC,
               summary="float32 sums; rows up to 4096 in one pass (a lane group per row, 16-byte "
                       "loads where aligned, no atomics); longer rows and columns in chunks whose "
                       "partials are added with atomicAdd (order unspecified, "
                       "subnormals flushed by PTX) in default mode, a fixed two-level tree in "
                       "deterministic mode; within gamma_n * sum|x|"),
    KernelDecl(Op.reduce_mean, "reduce.cu",
               ("tl_reduce_rows_group", "tl_reduce_rows", "tl_reduce_cols", "tl_neg_zeros",
                "tl_div_f32", "tl_div_f64"),
               ("tl_div_f32", "tl_div_f64", "shape.cu:tl_strided_copy", "shape.cu:tl_rows_copy"),
               _reduce_mean, _reduce_mean_vjp, **_ATOMIC,
               summary="reduce_sum's sum, then one division by the count (IEEE float division "
                       "for counts up to 2^24, in the row kernel's own launch where it sums the "
                       "last axis; float64 quotient rounded once above)"),
    KernelDecl(Op.mse_loss, "loss.cu", ("tl_mse_partial", "tl_sum_partials", "tl_mse_finish",
                                        "reduce.cu:tl_neg_zeros"),
               ("tl_mse_bwd",), _mse_loss, _mse_loss_vjp, **_ATOMIC,
               summary="d = p - t and d*d each rounded in float32, summed as reduce_sum does, "
                       "divided once by n: within gamma_(n+2) * sum (p - t)^2 plus the final "
                       "division"),
)
