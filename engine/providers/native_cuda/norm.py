"""layer_norm and batch_norm (engine/csrc/cuda/norm.cu), two-pass statistics evaluated in double
and rounded once. layer_norm rows of up to 8192 (forward) / 4096 (backward) features are held in
registers by a warp, a quarter block or a block; wider rows take one block per row; batch_norm one
block per channel, or several per channel (split by planes) for large channels."""
from __future__ import annotations

import math

import numpy as np

from engine.providers.native_cuda.decl import F64_ONCE_CANCELLING, KernelDecl
from engine.providers.native_cuda.launch import (BLOCK, F32, F64, I32, U32, contiguous, cupy,
                                                 empty, grid, kernel, row_grid, sm_count, zeros)
from engine.tape_saves import saves
from engine.types import BackendOp as Op, RuntimeEntry as Entry

def _ln_kernels(prefix: str):
    """(general fwd, general bwd, fwd register variants, fwd float4 variants, bwd register
    variants) of layer_norm (prefix tl_layer_norm) or add_layer_norm (tl_add_layer_norm): the
    same variants, norm.cu's RES templates."""
    return (kernel("norm.cu", f"{prefix}_fwd"), kernel("norm.cu", f"{prefix}_bwd"),
            # Register-path variants (norm.cu's header): (kernel, threads per row, widest d),
            # narrowest first.
            tuple((kernel("norm.cu", f"{prefix}_fwd_{v}"), g, most) for v, g, most in
                  (("w8", 32, 256), ("b4", BLOCK, 1024), ("b8", BLOCK, 2048),
                   ("b32", BLOCK, 8192))),
            # Warp-per-row float4 variants (d % 4 == 0 and 16-byte aligned buffers): (kernel,
            # widest d).
            tuple((kernel("norm.cu", f"{prefix}_fwd_{v}"), most) for v, most in
                  (("v4", 512), ("v8", 1024))),
            tuple((kernel("norm.cu", f"{prefix}_bwd_{v}"), g, most) for v, g, most in
                  (("w8", 32, 256), ("q4", 128, 512), ("q8", 128, 1024), ("b8", BLOCK, 2048),
                   ("b16", BLOCK, 4096))))


_ln_fwd, _ln_bwd, _LN_FWD, _LN_FWD_VEC, _LN_BWD = _ln_kernels("tl_layer_norm")
_add_fwd, _add_bwd, _ADD_FWD, _ADD_FWD_VEC, _ADD_BWD = _ln_kernels("tl_add_layer_norm")
_ln_cols = kernel("norm.cu", "tl_layer_norm_bwd_cols")
# Blocks per SM of the backward grid: what the registers let run at once (nvcc -Xptxas -v,
# sm_90: w8 113, q4 93, q8 121 registers: two blocks of 256; b8 152, b16 227: one; the
# add_layer_norm variants 122, 92, 124, 152, 228: the same), so the grid is one wave and the
# per-block partials (blocks x d doubles) are no more than one wave needs.
_LN_BWD_PER_SM = {f"{p}_{v}": n for p in ("tl_layer_norm_bwd", "tl_add_layer_norm_bwd")
                  for v, n in (("w8", 2), ("q4", 2), ("q8", 2), ("b8", 1), ("b16", 1))}
_LN_BWD_PER_SM.update({"tl_layer_norm_bwd": 2, "tl_add_layer_norm_bwd": 2})


def _variant(table, d: int):
    """(kernel, rows per block) of the narrowest register variant that holds d, or None."""
    for kern, threads, most in table:
        if d <= most:
            return kern, BLOCK // threads
    return None


_bn_fwd = kernel("norm.cu", "tl_batch_norm_fwd")
_bn_bwd = kernel("norm.cu", "tl_batch_norm_bwd")
_BN_SPLIT = ("tl_bn_part_stat", "tl_bn_finish_stat", "tl_bn_apply", "tl_bn_part_grad",
             "tl_bn_finish_grad", "tl_bn_apply_grad")
_bn_part_stat, _bn_finish_stat, _bn_apply, _bn_part_grad, _bn_finish_grad, _bn_apply_grad = (
    kernel("norm.cu", name) for name in _BN_SPLIT)
BN_SPLIT_MIN = 1 << 14     # elements per channel from which a channel is split over blocks
BN_SPLIT_BLOCKS = 1024     # blocks the split path aims at (channels x chunks)


_WARPS = BLOCK // 32


def _vector_variant(d: int, *arrays, table=_LN_FWD_VEC):
    """The warp-per-row float4 forward for rows wider than a warp's scalar variant holds (w8: 256)
    and at most 1024 wide, when every buffer allows 16-byte accesses; else None."""
    if d <= 256 or d % 4 or any(a.data.ptr % 16 for a in arrays):
        return None
    for kern, most in table:
        if d <= most:
            return kern
    return None


def _ln_forward(kernels, x, gamma, beta, y, eps, extra=()):
    """Launch the forward variant for x's rows: `kernels` (general, register, float4) and
    `extra` the arguments after x (add_layer_norm's r and s)."""
    general, table, vec_table = kernels
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if not y.size:
        return
    args = (x,) + tuple(extra) + (gamma, beta, y, U32(rows), U32(d), F32(eps))
    vec = _vector_variant(d, x, gamma, beta, y, *extra, table=vec_table)
    fast = _variant(table, d)
    if vec is not None:
        vec(row_grid((rows + _WARPS - 1) // _WARPS), args)
    elif fast is None:
        general(row_grid(rows), args)
    else:
        kern, per_block = fast
        kern(row_grid((rows + per_block - 1) // per_block), args)


def _layer_norm(x, gamma, beta, eps=1e-5):
    y = empty(x.shape)
    _ln_forward((_ln_fwd, _LN_FWD, _LN_FWD_VEC), x, gamma, beta, y, eps)
    return y


def _ln_backward(kernels, x, gamma, g, eps, extra=()):
    """dx, dgamma, dbeta of layer_norm at x (add_layer_norm: x the saved sum, `extra` the sum's
    cotangent and whether there is one)."""
    general, table = kernels
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    dx = empty(x.shape)
    if rows == 0 or d == 0:
        return dx, zeros(gamma.shape), zeros(gamma.shape)
    cp = cupy()
    dgamma, dbeta = empty(gamma.shape), empty(gamma.shape)
    g = contiguous(g)
    fast = _variant(table, d)
    kern, per_block = fast if fast is not None else (general, 1)
    blocks = min((rows + per_block - 1) // per_block, _LN_BWD_PER_SM[kern.symbol] * sm_count())
    part_g, part_b = cp.empty((2, blocks, d), np.float64)   # one allocation, two halves
    kern((blocks,), (x, gamma, g) + tuple(extra) + (dx, part_g, part_b, U32(rows), U32(d),
                                                     F32(eps)))
    _ln_cols(cols_grid(d), (part_g, part_b, dgamma, dbeta, U32(blocks), U32(d)))
    return dx, dgamma, dbeta


@saves(0, 1)
def _layer_norm_vjp(inputs, output, g, eps=1e-5):
    """dx row by row; dgamma and dbeta from column partials in float64, one per block (register
    path: the block's row groups added in group order; wider rows: the block's rows in order),
    then tl_layer_norm_bwd_cols adds the blocks' partials in a fixed order (norm.cu). The grid
    (one wave: _LN_BWD_PER_SM blocks per SM) follows the GPU's SM count, so the order (and the
    last bits) may differ between GPUs, never between runs on one."""
    x, gamma, _ = inputs
    return _ln_backward((_ln_bwd, _LN_BWD), x, gamma, g, eps)


def _add_layer_norm(x, r, gamma, beta, eps=1e-5):
    """[s, y] stacked: s = x + r (float32 adds) written as each row is loaded, y = layer_norm(s):
    one pass over x and r where add then layer_norm read s back."""
    out = empty((2,) + tuple(x.shape))
    _ln_forward((_add_fwd, _ADD_FWD, _ADD_FWD_VEC), x, gamma, beta, out[1], eps,
                extra=(contiguous(r), out[0]))
    return out


@saves(2, output=True)
def _add_layer_norm_vjp(inputs, output, g, eps=1e-5):
    """g: the cotangent of [s, y], stacked or as the tape's Parts (None: zero). dx = dr = gs +
    layer_norm's dx at s for gy, added in double before the one rounding; dgamma and dbeta as
    layer_norm's. A missing gy is zeros (layer_norm's kernels then give its exact zeros)."""
    gamma = inputs[2]
    s = output[0]
    gs, gy = g[0], g[1]
    if gy is None:
        gy = zeros(s.shape)
    extra = (contiguous(gs), I32(1)) if gs is not None else (gy, I32(0))   # 0: gs is not read
    dx, dgamma, dbeta = _ln_backward((_add_bwd, _ADD_BWD), s, gamma, gy, eps, extra=extra)
    return dx, dx, dgamma, dbeta


def cols_grid(d: int) -> tuple:
    """tl_layer_norm_bwd_cols's grid: a block per 32-column tile (grid-stride beyond the cap)."""
    return (min(-(-d // 32), 1 << 16),)


def _bn_view(shape) -> tuple[int, int, int]:
    return shape[0], shape[1], math.prod(shape[2:])


def _bn_chunks(n: int, c: int, s: int) -> int:
    """Chunks per channel (planes k, k + chunks, ... each), from the shape alone so the order of
    every sum is fixed by the shape: 1 (the block-per-channel kernels) for small channels, for
    N = 1, or when the channels alone fill the grid."""
    if n < 2 or n * s < BN_SPLIT_MIN:
        return 1
    return max(1, min(n, BN_SPLIT_BLOCKS // c))


def _bn_stats(x, n: int, c: int, s: int, chunks: int, eps: float):
    """(mean, rstd) per channel in float64: two passes, partials summed in chunk order."""
    cp = cupy()
    part = cp.empty(c * chunks, np.float64)
    mean, rstd = cp.empty(c, np.float64), cp.empty(c, np.float64)
    count = float(n * s)
    blocks, per_channel = (c * chunks,), grid(c)
    _bn_part_stat(blocks, (x, part, part, U32(n), U32(c), U32(s), U32(chunks), I32(0)))
    _bn_finish_stat(per_channel, (part, mean, U32(c), U32(chunks), F64(count), F32(eps), I32(0)))
    _bn_part_stat(blocks, (x, mean, part, U32(n), U32(c), U32(s), U32(chunks), I32(1)))
    _bn_finish_stat(per_channel, (part, rstd, U32(c), U32(chunks), F64(count), F32(eps), I32(1)))
    return mean, rstd


def _batch_norm(x, gamma, beta, eps=1e-5):
    n, c, s = _bn_view(x.shape)
    y = empty(x.shape)
    if not y.size:
        return y
    chunks = _bn_chunks(n, c, s)
    if chunks == 1:
        _bn_fwd(row_grid(c), (x, gamma, beta, y, U32(n), U32(c), U32(s), F32(eps)))
        return y
    mean, rstd = _bn_stats(x, n, c, s, chunks, eps)
    _bn_apply(row_grid(n * c), (x, gamma, beta, mean, rstd, y, U32(n), U32(c), U32(s)))
    return y


@saves(0, 1)
def _batch_norm_vjp(inputs, output, g, eps=1e-5):
    x, gamma, _ = inputs
    n, c, s = _bn_view(x.shape)
    dx, dgamma, dbeta = empty(x.shape), empty(gamma.shape), empty(gamma.shape)
    chunks = _bn_chunks(n, c, s) if x.size else 1
    g = contiguous(g)
    if chunks == 1:
        if c:   # an empty channel still gets its sums (+0) from the kernel
            _bn_bwd(row_grid(c), (x, gamma, g, dx, dgamma, dbeta, U32(n), U32(c), U32(s),
                                  F32(eps)))
        return dx, dgamma, dbeta
    cp = cupy()
    mean, rstd = _bn_stats(x, n, c, s, chunks, eps)
    part = cp.empty(2 * c * chunks, np.float64)
    ma, mb = cp.empty(c, np.float64), cp.empty(c, np.float64)
    _bn_part_grad((c * chunks,), (x, g, mean, rstd, part, U32(n), U32(c), U32(s), U32(chunks)))
    _bn_finish_grad(grid(c), (part, gamma, dgamma, dbeta, ma, mb, U32(c), U32(chunks),
                              F64(float(n * s))))
    _bn_apply_grad(row_grid(n * c), (x, g, gamma, mean, rstd, ma, mb, dx, U32(n), U32(c),
                                     U32(s)))
    return dx, dgamma, dbeta


DECLS = (
    KernelDecl(Op.layer_norm, "norm.cu",
               ("tl_layer_norm_fwd",) + tuple(k.symbol for k, _, _ in _LN_FWD)
               + tuple(k.symbol for k, _ in _LN_FWD_VEC),
               ("tl_layer_norm_bwd", "tl_layer_norm_bwd_cols")
               + tuple(k.symbol for k, _, _ in _LN_BWD),
               _layer_norm, _layer_norm_vjp, f64_rows=True, bound=F64_ONCE_CANCELLING,
               summary="a row held in registers by a warp, a quarter block or a block (d <= 8192 "
                       "forward, 4096 backward; one block per row beyond), two-pass statistics "
                       "(mean, then mean of squared deviations) and the affine map in float64, "
                       "rounded once",
               notes=("dgamma and dbeta: column partials in float64, one per block (the "
                      "block's row groups added in group order), then a second launch adds "
                      "the blocks' partials in a fixed order (32-column tiles, eight warps "
                      "each); any order of float64 sums stays within the declared bound; the "
                      "grid follows the GPU's SM count",)),
    KernelDecl(Op.batch_norm, "norm.cu",
               ("tl_batch_norm_fwd", "tl_bn_part_stat", "tl_bn_finish_stat", "tl_bn_apply"),
               ("tl_batch_norm_bwd", "tl_bn_part_stat", "tl_bn_finish_stat", "tl_bn_part_grad",
                "tl_bn_finish_grad", "tl_bn_apply_grad"),
               _batch_norm, _batch_norm_vjp, f64_rows=True, bound=F64_ONCE_CANCELLING,
               summary="one block per channel over N x spatial (channels of at least 2^14 "
                       "elements: split over blocks by planes, the partials summed in a fixed "
                       "order), two-pass statistics in float64, rounded once"),
    KernelDecl(Entry.add_layer_norm, "norm.cu",
               ("tl_add_layer_norm_fwd",) + tuple(k.symbol for k, _, _ in _ADD_FWD)
               + tuple(k.symbol for k, _ in _ADD_FWD_VEC),
               ("tl_add_layer_norm_bwd", "tl_layer_norm_bwd_cols")
               + tuple(k.symbol for k, _, _ in _ADD_BWD),
               _add_layer_norm, _add_layer_norm_vjp, f64_rows=True, bound=F64_ONCE_CANCELLING,
               summary="layer_norm's kernels with the row formed as s = x + r (float32 adds) "
                       "while it is loaded, s written beside y ([s, y] stacked); VJP: "
                       "layer_norm's at s, the sum's own cotangent added to dx in float64 "
                       "before the one rounding",
               notes=("dgamma and dbeta as layer_norm's: column partials in float64, one per "
                      "block, summed in a fixed order by a second launch; the grid follows "
                      "the GPU's SM count",)),
)
