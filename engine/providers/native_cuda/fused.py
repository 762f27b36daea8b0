"""bias_gelu (engine/csrc/cuda/bias_gelu.cu): gelu(x + b) with b broadcast over x's leading axes,
and its VJP (g gelu'(s), and db = the column sums of it), in fixed orders. Two capsules, as
native_cuda.gelu: the plain native_cuda.bias_gelu evaluates gelu and its VJP in float32
(tl_act_f32.cuh, the same functors as native_cuda.gelu; what the cuda profiles plan), the
accurate variant native_cuda.bias_gelu.accurate in float64 rounded once (accurate_cuda plans
it). One forward launch; the VJP writes dx and per-chunk double column partials in one launch and
adds the partials in order in a second, so a long row axis spreads over many blocks."""
from __future__ import annotations

import numpy as np

from engine.capsule import ACCURATE
from engine.providers.native_cuda import elementwise
from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, U32, contiguous, cupy, empty, grid, kernel,
                                                 new_array)
from engine.types import BackendOp as Op, Reduction, RuntimeEntry as Entry

_FILE = "bias_gelu.cu"
_fwd = kernel(_FILE, "tl_bias_gelu_fwd")
_bwd = kernel(_FILE, "tl_bias_gelu_bwd")
_db = kernel(_FILE, "tl_bias_gelu_db")
_fwd_f32 = kernel(_FILE, "tl_bias_gelu_f32", "pppuu")                # (x, b, y, n, d)
_bwd_f32 = kernel(_FILE, "tl_bias_gelu_bwd_f32", "pppppuuuuu")     # (x, b, g, gx, part, rows,
                                                                     #  d, chunk, col_blocks, vec)
CHUNKS = 64              # the accurate VJP's row chunks (blockIdx.y): column partials per chunk
# The float32 VJP's blocks: about one wave of the H200 (132 SMs x 6 resident blocks of 256 at its
# 40 registers), a function of the shape alone, so the sums' order (and bits) do not depend on
# the device. Each block covers 128 columns (float4) or 32 (scalar) and a chunk of rows, 8 warps
# walking the chunk's rows.
F32_VJP_BLOCKS = 792
_WARPS = BLOCK // 32
# native_cuda.gelu's declared bound (its float32 forward GeluF32), read from its declaration: the
# fast forward is GeluF32 of the exact input s, so it carries the same bound, whatever it becomes
GELU_F32_BOUND = next(d.bound for d in elementwise.DECLS
                      if d.op is Op.gelu and d.variant is None)


def _fast_path(d: int, *arrays) -> bool:
    """The float4 path of the float32 kernels: d % 4 == 0 and every pointer 16-byte aligned (the
    kernels test the same)."""
    if d & 3:
        return False
    ptrs = 0
    for a in arrays:
        ptrs |= a.data.ptr
    return not ptrs & 15


def bias_gelu(x, b):
    y = empty(x.shape)
    n = x.size
    if n:
        _fwd(grid(n), (x, b, y, U32(n), U32(b.size)))
    return y


def bias_gelu_vjp(inputs, output_, g):
    x, b = inputs
    d = b.size
    rows = x.size // d if d else 0
    gx, db = empty(x.shape), empty(b.shape)
    if d == 0:
        return gx, db
    if rows == 0:
        db.fill(0)          # a sum of no terms
        return gx, db
    chunks = min(rows, CHUNKS)
    chunk = -(-rows // chunks)
    chunks = -(-rows // chunk)
    part = cupy().empty((chunks, d), np.float64)
    _bwd((-(-d // BLOCK), chunks), (x, b, contiguous(g), gx, part, U32(rows), U32(d), U32(chunk)))
    _db(grid(d), (part, db, U32(chunks), U32(d)))
    return gx, db


def bias_gelu_f32(x, b):
    n, d = x.size, b.size
    y = new_array(x.shape, n)
    if n:
        per = 4 if _fast_path(d, x, b, y) else 1     # elements per thread
        _fwd_f32.launch(-(-n // (per * BLOCK)), x.data.ptr, b.data.ptr, y.data.ptr, n, d)
    return y


def f32_vjp_chunks(rows: int, col_blocks: int) -> tuple[int, int]:
    """(chunks, chunk): the float32 VJP's row chunks for `rows` (>= 1) rows, about
    F32_VJP_BLOCKS blocks in all and at least one row per warp of a chunk."""
    chunks = max(1, min(-(-rows // _WARPS), -(-F32_VJP_BLOCKS // col_blocks)))
    chunk = -(-rows // chunks)
    return -(-rows // chunk), chunk


def bias_gelu_f32_vjp(inputs, output_, g):
    x, b = inputs
    g = contiguous(g)
    d = b.size
    rows = x.size // d if d else 0
    gx, db = new_array(x.shape, x.size), new_array(b.shape, d)
    if d == 0:
        return gx, db
    if rows == 0:
        db.fill(0)          # a sum of no terms
        return gx, db
    vec = _fast_path(d, x, b, g, gx)
    col_blocks = -(-d // (128 if vec else 32))
    chunks, chunk = f32_vjp_chunks(rows, col_blocks)
    part = cupy().empty((chunks, d), np.float64)
    _bwd_f32.launch(col_blocks * chunks, x.data.ptr, b.data.ptr, g.data.ptr, gx.data.ptr,
                    part.data.ptr, rows, d, chunk, col_blocks, int(vec))
    _db(grid(d), (part, db, U32(chunks), U32(d)))
    return gx, db


_F32_NOTE = ("s = x + b in float32 (one rounding, the composition's), then native_cuda.gelu's "
             "float32 functors (tl_act_f32.cuh): the forward GeluF32 of s, within that header's "
             "declared bound (the same DeclaredBound as native_cuda.gelu's); the VJP's dx = "
             "GeluBF32(s, g), a float, judged by native_cuda.gelu's derived rule at s "
             "(conformance/families/elementwise.py), and db the double sum of those float terms (rows "
             "in order per warp, the 8 warps in order, the row chunks in order), rounded once "
             "(conformance/families/fused.py). float4 loads and stores where d % 4 == 0 and "
             "the pointers are 16-byte aligned; the accurate variant "
             "native_cuda.bias_gelu.accurate keeps the float64 kernels, rounded once")
DECLS = (
    KernelDecl(Entry.bias_gelu, _FILE, ("tl_bias_gelu_f32",),
               ("tl_bias_gelu_bwd_f32", "tl_bias_gelu_db"), bias_gelu_f32, bias_gelu_f32_vjp,
               reduction=Reduction.fixed_left, bound=GELU_F32_BOUND,
               summary="fast float32 capsule: gelu(float32(x + b)) by native_cuda.gelu's float32 "
                       "functors, forward within their declared bound, VJP by their derived rule, "
                       "db a fixed-order double sum of the float32 terms rounded once; the "
                       "accurate variant native_cuda.bias_gelu.accurate evaluates in float64",
               notes=(_F32_NOTE,)),
    KernelDecl(Entry.bias_gelu, _FILE, ("tl_bias_gelu_fwd",),
               ("tl_bias_gelu_bwd", "tl_bias_gelu_db"), bias_gelu, bias_gelu_vjp,
               reduction=Reduction.fixed_left, f64_rows=True, variant=ACCURATE,
               summary="accurate variant: s = x + b in float32 (one rounding, the composition's), "
                       "gelu(s) in float64 (libdevice exp), rounded once; VJP g gelu'(s) in "
                       "float64 (libdevice tanh) rounded once, db its float64 sum over the rows in "
                       "a fixed order (64 row chunks, then the chunks), rounded once: within the "
                       "derived bounds of conformance/families/fused.py (the plain "
                       "native_cuda.bias_gelu is the fast float32 one)"),
)
