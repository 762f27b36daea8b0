"""bias_gelu (engine/csrc/cuda/bias_gelu.cu): gelu(x + b) with b broadcast over x's leading axes,
and its VJP (g gelu'(s), and db = the column sums of it), in float64 and rounded once, in fixed
orders. One forward launch; the VJP writes dx and per-chunk column partials in one launch and adds
the partials in a second, so a long row axis spreads over many blocks."""
from __future__ import annotations

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import BLOCK, U32, contiguous, cupy, empty, grid, kernel
from engine.types import Reduction, RuntimeEntry as Entry

_fwd = kernel("bias_gelu.cu", "tl_bias_gelu_fwd")
_bwd = kernel("bias_gelu.cu", "tl_bias_gelu_bwd")
_db = kernel("bias_gelu.cu", "tl_bias_gelu_db")
CHUNKS = 64              # row chunks of the VJP (blockIdx.y): partial column sums per chunk


def bias_gelu(x, b):
    y = empty(x.shape)
    n = x.size
    if n:
        _fwd(grid(n), (x, b, y, U32(n), U32(b.size)))
    return y


def bias_gelu_vjp(inputs, output, g):
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


DECLS = (
    KernelDecl(Entry.bias_gelu, "bias_gelu.cu", ("tl_bias_gelu_fwd",),
               ("tl_bias_gelu_bwd", "tl_bias_gelu_db"), bias_gelu, bias_gelu_vjp,
               reduction=Reduction.fixed_left, f64_rows=True,
               summary="s = x + b in float32 (one rounding, the composition's), gelu(s) in "
                       "float64 (libdevice exp), rounded once; VJP g gelu'(s) in float64 "
                       "(libdevice tanh) rounded once, db its float64 sum over the rows in a "
                       "fixed order (64 row chunks, then the chunks), rounded once: within the "
                       "derived bounds of conformance/derived_bias_gelu.py"),
)
