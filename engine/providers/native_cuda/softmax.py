"""softmax, log_softmax and hard-masked softmax (engine/csrc/cuda/softmax.cu): one block per row
along the axis, evaluated in double and rounded once, forward and VJP."""
from __future__ import annotations

from engine.providers.native_cuda.decl import F64_ONCE_ROWS, KernelDecl
from engine.providers.native_cuda.launch import (F32, U32, axis_view, contiguous, empty, kernel,
                                                 mask_bytes, row_grid)
from engine.types import BackendOp as Op

_FILE = "softmax.cu"
_MASKED_FWD, _MASKED_BWD = "tl_masked_softmax_fwd", "tl_masked_softmax_bwd"
_masked_fwd = kernel(_FILE, _MASKED_FWD)
_masked_bwd = kernel(_FILE, _MASKED_BWD)


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
        _masked_fwd(row_grid(rows), (x, mask, out, U32(rows), U32(n), U32(inner), F32(scale)))
    return out


def _forward(symbol: str):
    kern = kernel(_FILE, symbol)

    def forward(a, axis=-1):
        out = empty(a.shape)
        rows, n, inner = _rows(a.shape, axis)
        if out.size:
            kern(row_grid(rows), (a, out, U32(rows), U32(n), U32(inner)))
        return out

    return forward


def _vjp(symbol: str):
    kern = kernel(_FILE, symbol)

    def vjp(inputs, output, g, axis=-1):
        g = contiguous(g)
        gx = empty(g.shape)
        rows, n, inner = _rows(g.shape, axis)
        if gx.size:
            kern(row_grid(rows), (contiguous(output), g, gx, U32(rows), U32(n), U32(inner)))
        return (gx,)

    return vjp


def _masked_forward(a, mask, axis=-1):
    out = empty(a.shape)
    rows, n, inner = _rows(a.shape, axis)
    if out.size:
        _masked_fwd(row_grid(rows), (a, mask_bytes(mask), out, U32(rows), U32(n), U32(inner),
                                     F32(1.0)))
    return out


def _masked_vjp(inputs, output, g, mask, axis=-1):
    g = contiguous(g)
    gx = empty(g.shape)
    rows, n, inner = _rows(g.shape, axis)
    if gx.size:
        _masked_bwd(row_grid(rows), (contiguous(output), g, mask_bytes(mask), gx, U32(rows),
                                     U32(n), U32(inner)))
    return (gx,)


def _row_decl(op: Op, fwd: str, bwd: str, summary: str) -> KernelDecl:
    return KernelDecl(op, _FILE, (fwd,), (bwd,), _forward(fwd), _vjp(bwd), f64_rows=True,
                      bound=F64_ONCE_ROWS, summary=summary)


DECLS = (
    _row_decl(Op.softmax, "tl_softmax_fwd", "tl_softmax_bwd",
              "one block per row: max, sum of exp(x - max) and the quotients in float64, "
              "rounded once"),
    _row_decl(Op.log_softmax, "tl_log_softmax_fwd", "tl_log_softmax_bwd",
              "one block per row: x - max - log1p(rest) in float64, rounded once"),
    KernelDecl(Op.hard_masked_softmax, _FILE, (_MASKED_FWD,), (_MASKED_BWD,), _masked_forward,
               _masked_vjp, f64_rows=True, bound=F64_ONCE_ROWS,
               summary="one block per row over the participants only (blocked: exactly 0, a row "
                       "with none: zeros), float64, rounded once"),
)
