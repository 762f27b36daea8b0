"""layer_norm and batch_norm (engine/csrc/cuda/norm.cu): one forward and one backward kernel each,
two-pass statistics, evaluated in double and rounded once."""
from __future__ import annotations

import math

import numpy as np

from engine.providers.native_cuda.decl import F64_ONCE_CANCELLING, KernelDecl
from engine.providers.native_cuda.launch import (F32, U32, contiguous, cupy, empty, kernel,
                                                 row_grid, sm_count, zeros)
from engine.types import BackendOp as Op

_ln_fwd = kernel("norm.cu", "tl_layer_norm_fwd")
_ln_bwd = kernel("norm.cu", "tl_layer_norm_bwd")
_bn_fwd = kernel("norm.cu", "tl_batch_norm_fwd")
_bn_bwd = kernel("norm.cu", "tl_batch_norm_bwd")


def _layer_norm(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    y = empty(x.shape)
    if y.size:
        _ln_fwd(row_grid(rows), (x, gamma, beta, y, U32(rows), U32(d), F32(eps)))
    return y


def _layer_norm_vjp(inputs, output, g, eps=1e-5):
    """dx row by row; dgamma and dbeta from per-block column partials that the last block to
    finish sums in block order (one launch; the block count depends on the GPU's SM count)."""
    x, gamma, _ = inputs
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    dx = empty(x.shape)
    if rows == 0 or d == 0:
        return dx, zeros(gamma.shape), zeros(gamma.shape)
    cp = cupy()
    blocks = min(rows, 2 * sm_count())
    part_g = cp.empty((blocks, d), np.float64)
    part_b = cp.empty((blocks, d), np.float64)
    ticket = cp.zeros(1, np.uint32)
    dgamma, dbeta = empty(gamma.shape), empty(gamma.shape)
    _ln_bwd((blocks,), (x, gamma, contiguous(g), dx, part_g, part_b, ticket, dgamma, dbeta,
                        U32(rows), U32(d), F32(eps)))
    return dx, dgamma, dbeta


def _bn_view(shape) -> tuple[int, int, int]:
    return shape[0], shape[1], math.prod(shape[2:])


def _batch_norm(x, gamma, beta, eps=1e-5):
    n, c, s = _bn_view(x.shape)
    y = empty(x.shape)
    if y.size:
        _bn_fwd(row_grid(c), (x, gamma, beta, y, U32(n), U32(c), U32(s), F32(eps)))
    return y


def _batch_norm_vjp(inputs, output, g, eps=1e-5):
    x, gamma, _ = inputs
    n, c, s = _bn_view(x.shape)
    dx, dgamma, dbeta = empty(x.shape), empty(gamma.shape), empty(gamma.shape)
    if c:   # an empty channel still gets its sums (+0) from the kernel
        _bn_bwd(row_grid(c), (x, gamma, contiguous(g), dx, dgamma, dbeta, U32(n), U32(c), U32(s),
                              F32(eps)))
    return dx, dgamma, dbeta


DECLS = (
    KernelDecl(Op.layer_norm, "norm.cu", ("tl_layer_norm_fwd",), ("tl_layer_norm_bwd",),
               _layer_norm, _layer_norm_vjp, f64_rows=True, bound=F64_ONCE_CANCELLING,
               summary="one block per row, two-pass statistics (mean, then mean of squared "
                       "deviations) and the affine map in float64, rounded once",
               notes=("dgamma and dbeta: per-block column partials summed by the last block in "
                      "block order; the block count follows the GPU's SM count",)),
    KernelDecl(Op.batch_norm, "norm.cu", ("tl_batch_norm_fwd",), ("tl_batch_norm_bwd",),
               _batch_norm, _batch_norm_vjp, f64_rows=True, bound=F64_ONCE_CANCELLING,
               summary="one block per channel over N x spatial, two-pass statistics in float64, "
                       "rounded once"),
)
