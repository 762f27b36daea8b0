"""softmax, log_softmax and hard-masked softmax (engine/csrc/cuda/softmax.cu): one block per row
along the axis, evaluated in double and rounded once, forward and VJP."""
from __future__ import annotations

from engine.providers.native_cuda.launch import (F32, U32, axis_view, contiguous, empty, kernel,
                                                 mask_bytes, row_grid)
from engine.types import BackendOp as Op

_FILE = "softmax.cu"
_fwd = {Op.softmax: kernel(_FILE, "tl_softmax_fwd"),
        Op.log_softmax: kernel(_FILE, "tl_log_softmax_fwd"),
        Op.hard_masked_softmax: kernel(_FILE, "tl_masked_softmax_fwd")}
_bwd = {Op.softmax: kernel(_FILE, "tl_softmax_bwd"),
        Op.log_softmax: kernel(_FILE, "tl_log_softmax_bwd"),
        Op.hard_masked_softmax: kernel(_FILE, "tl_masked_softmax_bwd")}


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
        _fwd[Op.hard_masked_softmax](row_grid(rows), (x, mask, out, U32(rows), U32(n), U32(inner),
                                                      F32(scale)))
    return out


def _forward(op: Op):
    kern = _fwd[op]

    def forward(a, axis=-1):
        out = empty(a.shape)
        rows, n, inner = _rows(a.shape, axis)
        if out.size:
            kern(row_grid(rows), (a, out, U32(rows), U32(n), U32(inner)))
        return out

    return forward


def _vjp(op: Op):
    kern = _bwd[op]

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
        _fwd[Op.hard_masked_softmax](row_grid(rows), (a, mask_bytes(mask), out, U32(rows), U32(n),
                                                      U32(inner), F32(1.0)))
    return out


def _masked_vjp(inputs, output, g, mask, axis=-1):
    g = contiguous(g)
    gx = empty(g.shape)
    rows, n, inner = _rows(g.shape, axis)
    if gx.size:
        _bwd[Op.hard_masked_softmax](row_grid(rows), (contiguous(output), g, mask_bytes(mask), gx,
                                                      U32(rows), U32(n), U32(inner)))
    return (gx,)


def handlers() -> dict[Op, tuple]:
    return {
        Op.softmax: (_forward(Op.softmax), _vjp(Op.softmax)),
        Op.log_softmax: (_forward(Op.log_softmax), _vjp(Op.log_softmax)),
        Op.hard_masked_softmax: (_masked_forward, _masked_vjp),
    }
