"""softmax, log_softmax and hard-masked softmax (engine/csrc/cuda/softmax.cu), forward and VJP,
evaluated in double and rounded once: rows of up to 8192 contiguous entries (the last axis) held in
registers by a warp or a block (one read, one write); one block per row otherwise."""
from __future__ import annotations

from engine.providers.native_cuda.decl import F64_ONCE_ROWS, KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, F32, U32, axis_view, contiguous, empty,
                                                 kernel, mask_bytes, row_grid)
from engine.types import BackendOp as Op

_FILE = "softmax.cu"
_MASKED_FWD, _MASKED_BWD = "tl_masked_softmax_fwd", "tl_masked_softmax_bwd"
# Register-path variants (softmax.cu's header): (suffix, threads per row, largest n), smallest
# first; a row longer than the last one takes the general kernel. Rows of 257..1024 differ: the
# forward's warp per row (K = 32, warp shuffles only) measured faster on the H200 for
# log_softmax than a block per row (whose first-max search adds block barriers), the VJP's
# block per row (K = 4, 32 registers) ran at 98% of the copy ceiling where a warp (K = 32) ran
# at 60%.
_FWD_VARIANTS = (("_w2", 32, 64), ("_w8", 32, 256), ("_w32", 32, 1024), ("_b8", BLOCK, 2048),
                 ("_b32", BLOCK, 8192))
_VJP_VARIANTS = (("_w2", 32, 64), ("_w8", 32, 256), ("_b4", BLOCK, 1024), ("_b8", BLOCK, 2048),
                 ("_b32", BLOCK, 8192))


class _RowKernels:
    """One op's general kernel and its register-path variants, picked by the row's shape."""

    def __init__(self, symbol: str, variants: tuple) -> None:
        self.symbols = (symbol,) + tuple(symbol + v[0] for v in variants)
        self.general = kernel(_FILE, symbol)
        self.fast = tuple((kernel(_FILE, symbol + suffix), threads, most)
                          for suffix, threads, most in variants)

    def __call__(self, rows: int, n: int, inner: int, head: tuple, tail: tuple = ()) -> None:
        """Launch over `rows` rows of n: head = the arrays, tail = the arguments after inner."""
        if inner == 1:
            for kern, threads, most in self.fast:
                if n <= most:
                    per_block = BLOCK // threads
                    kern(row_grid((rows + per_block - 1) // per_block),
                         head + (U32(rows), U32(n)) + tail)
                    return
        self.general(row_grid(rows), head + (U32(rows), U32(n), U32(inner)) + tail)


_masked_fwd = _RowKernels(_MASKED_FWD, _FWD_VARIANTS)
_masked_bwd = _RowKernels(_MASKED_BWD, _VJP_VARIANTS)


def _rows(shape, axis: int) -> tuple[int, int, int]:
    """(rows, n, inner) of the [outer][n][inner] view around `axis`."""
    outer, n, inner = axis_view(shape, axis % len(shape))
    return outer * inner, n, inner


def masked_softmax_rows(x, mask, scale: float = 1.0):
    """Hard-masked softmax of scale * x along the last axis (mask: bool bytes of x's shape, or
    None: every key participates); composed attention calls this on its score matrix."""
    out = empty(x.shape)
    rows, n, inner = _rows(x.shape, -1)
    if out.size:
        _masked_fwd(rows, n, inner, (x, mask, out), (F32(scale),))
    return out


def _forward(kern: _RowKernels):
    def forward(a, axis=-1):
        out = empty(a.shape)
        rows, n, inner = _rows(a.shape, axis)
        if out.size:
            kern(rows, n, inner, (a, out))
        return out

    return forward


def _vjp(kern: _RowKernels):
    def vjp(inputs, output, g, axis=-1):
        g = contiguous(g)
        gx = empty(g.shape)
        rows, n, inner = _rows(g.shape, axis)
        if gx.size:
            kern(rows, n, inner, (contiguous(output), g, gx))
        return (gx,)

    return vjp


def _masked_forward(a, mask, axis=-1):
    out = empty(a.shape)
    rows, n, inner = _rows(a.shape, axis)
    if out.size:
        _masked_fwd(rows, n, inner, (a, mask_bytes(mask), out), (F32(1.0),))
    return out


def _masked_vjp(inputs, output, g, mask, axis=-1):
    g = contiguous(g)
    gx = empty(g.shape)
    rows, n, inner = _rows(g.shape, axis)
    if gx.size:
        _masked_bwd(rows, n, inner, (contiguous(output), g, mask_bytes(mask), gx))
    return (gx,)


_ROW_NOTE = ("rows of up to 8192 contiguous entries (the last axis): held in registers by a warp "
             "(n <= 1024) or a block (n <= 8192), one read and one write, exp once per element; "
             "longer rows and inner axes: one block per row, three passes",)


def _row_decl(op: Op, fwd: str, bwd: str, summary: str) -> KernelDecl:
    f, b = _RowKernels(fwd, _FWD_VARIANTS), _RowKernels(bwd, _VJP_VARIANTS)
    return KernelDecl(op, _FILE, f.symbols, b.symbols, _forward(f), _vjp(b), f64_rows=True,
                      bound=F64_ONCE_ROWS, summary=summary, notes=_ROW_NOTE)


DECLS = (
    _row_decl(Op.softmax, "tl_softmax_fwd", "tl_softmax_bwd",
              "a warp or block per row: max, sum of exp(x - max) and the quotients in float64, "
              "rounded once"),
    _row_decl(Op.log_softmax, "tl_log_softmax_fwd", "tl_log_softmax_bwd",
              "a warp or block per row: x - max - log1p(rest) in float64, rounded once"),
    KernelDecl(Op.hard_masked_softmax, _FILE, _masked_fwd.symbols, _masked_bwd.symbols,
               _masked_forward, _masked_vjp, f64_rows=True, bound=F64_ONCE_ROWS,
               summary="a warp or block per row over the participants only (blocked: exactly 0, "
                       "a row with none: zeros), float64, rounded once", notes=_ROW_NOTE),
)
