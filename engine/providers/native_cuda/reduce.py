"""Sums (engine/csrc/cuda/reduce.cu): reduce_sum, reduce_mean and their VJPs, the broadcast-VJP
sum, and mse_loss (engine/csrc/cuda/loss.cu).

Default mode adds chunk partials with float atomicAdd (order unspecified; PTX's atom.add.f32
flushes subnormal inputs and results); deterministic mode sums partials in a fixed order with
ordinary adds, which keep subnormals. Atomic targets start at -0.0, the identity of IEEE
addition, so a sum of -0 terms stays -0 in both modes.
"""
from __future__ import annotations

import math

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, F32, F64, I32, U32, contiguous, copy,
                                                 cupy, empty, grid, kernel, negative_zeros, zeros)
from engine.providers.native_cuda.strided import broadcast_into
from engine.runtime.deterministic import get_deterministic_reductions
from engine.tape_saves import saves
from engine.types import BackendOp as Op, Reduction

ROW_SEGMENT = 8192       # elements per block in long row reductions and mse_loss
GROUP_ROW_MAX = 4096     # rows up to this length: one pass, a lane group per row
COL_BLOCKS = 1024         # blocks a column reduction aims at (~8 per H200 multiprocessor)
COL_RUN_MIN = 16         # rows per thread's run at least: two float4 rounds of eight (reduce.cu)

_rows_kernel = kernel("reduce.cu", "tl_reduce_rows")
_group_kernel = kernel("reduce.cu", "tl_reduce_rows_group")
_cols_kernel = kernel("reduce.cu", "tl_reduce_cols")
_div32_kernel = kernel("reduce.cu", "tl_div_f32")
_div64_kernel = kernel("reduce.cu", "tl_div_f64")


def _vec_rows(x, r: int) -> int:
    """1 when every row of x (rows of r elements) starts 16-byte aligned, so the kernels may read
    four floats per load; the order of the adds is the same either way (reduce.cu)."""
    return int(r % 4 == 0 and x.data.ptr % 16 == 0)


def _group_log2(r: int) -> int:
    """log2 of the lanes per row of tl_reduce_rows_group: the fewest (a power of two, at most a
    warp) that leave each lane at most eight four-element units."""
    units = -(-r // 4)
    lanes = 1
    while lanes < 32 and lanes * 8 < units:
        lanes *= 2
    return lanes.bit_length() - 1


def _sum_pass(x, outer: int, r: int, inner: int, det: bool):
    """Flat sums of x viewed as [outer][r][inner] over r (r >= 1): a flat array of outer*inner.

    The kernel and its chunk counts depend on the shape alone. Short rows take one pass with no
    atomics; long rows are chunked: default mode adds chunk partials with atomics, deterministic
    mode writes them to a buffer that a second pass sums in a fixed order.
    """
    if inner == 1 and r <= GROUP_ROW_MAX:
        out = empty(outer)
        lg = _group_log2(r)
        blocks = -(-(outer << lg) // BLOCK)
        _group_kernel((blocks,), (x, out, U32(outer), U32(r), U32(lg), I32(_vec_rows(x, r))))
        return out
    if inner == 1:
        chunks = -(-r // ROW_SEGMENT)
        seg = -(-r // chunks)
        seg = -(-seg // 4) * 4           # chunk starts stay 16-byte aligned
        chunks = -(-r // seg)
        vec = I32(_vec_rows(x, r))
        if chunks == 1:
            out = empty(outer)
            _rows_kernel((outer,), (x, out, U32(r), U32(1), U32(seg), I32(0), vec))
            return out
        if not det:
            out = negative_zeros(outer)
            _rows_kernel((outer * chunks,), (x, out, U32(r), U32(chunks), U32(seg), I32(1), vec))
            return out
        part = empty(outer * chunks)
        _rows_kernel((outer * chunks,), (x, part, U32(r), U32(chunks), U32(seg), I32(0), vec))
        return _sum_pass(part, outer, chunks, 1, det)
    cols = outer * inner
    lg = col_lanes_log2(inner)
    chunks, seg = col_chunks(outer, r, inner)
    blocks = grid(outer * chunks * -(-inner // (4 << lg)) * BLOCK)   # a block per (o, c, group)
    vec = I32(inner % 4 == 0 and x.data.ptr % 16 == 0)

    def launch(dst, n_chunks, atomic):
        _cols_kernel(blocks, (x, dst, U32(outer), U32(r), U32(inner), U32(n_chunks), U32(seg),
                              I32(atomic), vec, U32(lg)))
    if chunks == 1:
        out = empty(cols)
        launch(out, 1, 0)
        return out
    if not det:
        out = negative_zeros(cols)
        launch(out, chunks, 1)
        return out
    part = empty(outer * chunks * inner)
    launch(part, chunks, 0)
    return _sum_pass(part, outer, chunks, inner, det)


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


def sum_axes(a, axes) -> object:
    """Sum of a over `axes` (sorted, non-negative) as a flat array of the kept extents."""
    red = set(axes)
    kept = [s for d, s in enumerate(a.shape) if d not in red]
    count = math.prod(a.shape[d] for d in red)
    if math.prod(kept) == 0:
        return empty(math.prod(kept))
    if count == 0:
        return zeros(math.prod(kept))
    groups: list[list] = []             # [extent, reduced?], unit axes dropped, runs merged
    for d, s in enumerate(a.shape):
        if s == 1:
            continue
        if groups and groups[-1][1] == (d in red):
            groups[-1][0] *= s
        else:
            groups.append([s, d in red])
    x = a.reshape(-1)
    if not any(r for _, r in groups):
        return copy(x)
    det = get_deterministic_reductions()
    while any(r for _, r in groups):
        j = max(i for i, (_, r) in enumerate(groups) if r)
        outer = math.prod(e for e, _ in groups[:j])
        inner = math.prod(e for e, _ in groups[j + 1:])
        x = _sum_pass(x, outer, groups[j][0], inner, det)
        del groups[j]
        if 0 < j < len(groups) and not groups[j - 1][1] and not groups[j][1]:
            groups[j - 1][0] *= groups.pop(j)[0]
    return x


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
    return sum_axes(a, ax).reshape(_out_shape(a.shape, ax, keepdims))


def _divide_into(x, out, count: int) -> None:
    """out = x / count elementwise: IEEE float division when count is exact in float (<= 2^24),
    else the quotient in double rounded once."""
    if x.size:
        if count <= 1 << 24:
            _div32_kernel(grid(x.size), (x, out, U32(x.size), F32(count)))
        else:
            _div64_kernel(grid(x.size), (x, out, U32(x.size), F64(count)))


def _reduce_mean(a, axes=None, keepdims=False):
    ax = _norm_axes(a.ndim, axes)
    count = math.prod(a.shape[d] for d in ax)
    shape = _out_shape(a.shape, ax, keepdims)
    if count == 0:
        return cupy().full(shape, np.nan, np.float32)
    s = sum_axes(a, ax)
    _divide_into(s, s, count)
    return s.reshape(shape)


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

_mse_partial = kernel("loss.cu", "tl_mse_partial")
_sum_partials = kernel("loss.cu", "tl_sum_partials")
_mse_finish = kernel("loss.cu", "tl_mse_finish")
_mse_bwd = kernel("loss.cu", "tl_mse_bwd")


def _aligned(*arrays) -> int:
    """1 when every array starts 16-byte aligned (the float4 paths of loss.cu)."""
    return int(all(a.data.ptr % 16 == 0 for a in arrays))


def _mse_loss(pred, target):
    n = pred.size
    if n == 0:
        return cupy().full((), np.nan, np.float32)
    blocks = -(-n // ROW_SEGMENT)
    vec = I32(_aligned(pred, target))
    if blocks == 1:
        out = empty(1)
        _mse_partial((1,), (pred, target, out, U32(n), U32(ROW_SEGMENT), I32(0), vec))
    elif not get_deterministic_reductions():
        out = negative_zeros(1)
        _mse_partial((blocks,), (pred, target, out, U32(n), U32(ROW_SEGMENT), I32(1), vec))
    else:
        part = empty(blocks)
        _mse_partial((blocks,), (pred, target, part, U32(n), U32(ROW_SEGMENT), I32(0), vec))
        out = empty(1)
        _sum_partials((1,), (part, out, U32(blocks)))
    _mse_finish((1,), (out, F64(n)))
    return out.reshape(())


@saves(0, 1)
def _mse_loss_vjp(inputs, output, g):
    """(2 (p - t) g / n, its negation), evaluated in double and rounded once (tl_mse_bwd): p - t
    of two float32 values near the range limit would overflow in float32."""
    pred, target = inputs
    gp, gt = empty(pred.shape), empty(pred.shape)
    n = pred.size
    if n:
        vec = I32(_aligned(pred, target, gp, gt))
        _mse_bwd(grid(-(-n // 4)), (pred, target, contiguous(g), gp, gt, U32(n), F64(n), vec))
    return gp, gt


_ATOMIC = dict(reduction=Reduction.implementation_defined, atomics=True)

DECLS = (
    KernelDecl(Op.reduce_sum, "reduce.cu",
               ("tl_reduce_rows_group", "tl_reduce_rows", "tl_reduce_cols"),
               ("shape.cu:tl_strided_copy", "shape.cu:tl_rows_copy"), _reduce_sum,
               _reduce_sum_vjp, **_ATOMIC,
               summary="float32 sums; rows up to 4096 in one pass (a lane group per row, 16-byte "
                       "loads where aligned, no atomics); longer rows and columns in chunks whose "
                       "partials are added with atomicAdd (order unspecified, "
                       "subnormals flushed by PTX) in default mode, a fixed two-level tree in "
                       "deterministic mode; within gamma_n * sum|x|"),
    KernelDecl(Op.reduce_mean, "reduce.cu",
               ("tl_reduce_rows_group", "tl_reduce_rows", "tl_reduce_cols", "tl_div_f32",
                "tl_div_f64"),
               ("tl_div_f32", "tl_div_f64", "shape.cu:tl_strided_copy", "shape.cu:tl_rows_copy"),
               _reduce_mean, _reduce_mean_vjp, **_ATOMIC,
               summary="reduce_sum's sum, then one division by the count (IEEE float division "
                       "for counts up to 2^24, float64 quotient rounded once above)"),
    KernelDecl(Op.mse_loss, "loss.cu", ("tl_mse_partial", "tl_sum_partials", "tl_mse_finish"),
               ("tl_mse_bwd",), _mse_loss, _mse_loss_vjp, **_ATOMIC,
               summary="d = p - t and d*d each rounded in float32, summed as reduce_sum does, "
                       "divided once by n: within gamma_(n+2) * sum (p - t)^2 plus the final "
                       "division"),
)
