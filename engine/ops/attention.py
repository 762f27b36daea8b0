"""Scaled dot-product attention with hard masks: one tape op whose local VJP recomputes the
probabilities. Mask true = the key participates; false = exactly zero weight; a fully blocked
query row gives zeros."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ShapeError
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask=None,
                                 scale: float | None = None) -> Tensor:
    if not (q.ndim == k.ndim == v.ndim and q.ndim in (2, 3)):
        raise ShapeError(f"scaled_dot_product_attention: q, k, v must all be rank 2 "
                         f"[tokens, dim] or rank 3 [batch, tokens, dim]; got {q.shape}, "
                         f"{k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or \
            q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"scaled_dot_product_attention: q {q.shape}, k {k.shape}, v {v.shape} "
                         "disagree; need equal batch, q[-1] == k[-1] and k[-2] == v[-2]")
    scores_shape = q.shape[:-1] + (k.shape[-2],)
    if mask is not None:
        m = mask if type(mask).__module__.startswith("cupy") else np.asarray(mask)
        if m.dtype != bool or tuple(m.shape) != scores_shape:
            raise ShapeError(f"scaled_dot_product_attention: mask must be boolean of shape "
                             f"{scores_shape}, got dtype {m.dtype} shape {tuple(m.shape)}")
        if q.device.label == "cuda" and isinstance(m, np.ndarray):
            import cupy
            m = cupy.asarray(m)
        mask = m
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    scale = _checks.finite_f32("scaled_dot_product_attention", "scale", scale)
    return apply(Op.scaled_dot_product_attention, (q, k, v), q.shape[:-1] + (v.shape[-1],),
                 {"mask": mask, "scale": float(np.float32(scale))})


def attention_probabilities(q, k, mask, scale):
    """Hard-masked softmax of q k^T * scale, in float32 array code (NumPy or CuPy)."""
    xp = xp_of(q)
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)) * xp.float32(scale)
    if s.shape[-1] == 0:    # no keys: nothing participates
        return s
    allowed = xp.ones(s.shape, dtype=bool) if mask is None else mask
    blocked_row = ~allowed.any(axis=-1, keepdims=True)
    masked = xp.where(allowed, s, xp.float32(-xp.inf))
    # Only a fully blocked row has its max replaced; a row of -inf scores stays NaN, as IEEE says.
    m = xp.where(blocked_row, xp.float32(0), masked.max(axis=-1, keepdims=True))
    e = xp.where(allowed, xp.exp(masked - m), xp.float32(0))
    total = e.sum(axis=-1, keepdims=True)
    return xp.where(blocked_row | ~allowed, xp.float32(0),
                    e / xp.where(blocked_row, xp.float32(1), total))


@local_vjp(Op.scaled_dot_product_attention)
@saves(0, 1, 2)
def _sdpa_vjp(inputs, out, g, mask, scale):
    with np.errstate(all="ignore"):   # non-finite inputs follow IEEE; NumPy need not warn
        return _sdpa_vjp_arrays(inputs, g, mask, scale)


def _sdpa_vjp_arrays(inputs, g, mask, scale):
    q, k, v = inputs
    xp = xp_of(g)
    from engine.runtime.capture_state import CAPTURE
    if CAPTURE.active:
        from engine.errors import GraphCaptureError
        raise GraphCaptureError(
            "scaled_dot_product_attention (VJP): the tape's rule picks its algorithm from the "
            "data on the host (finite inputs or not) and runs CuPy's cuBLAS, which a CUDA graph "
            "cannot hold; plan native_cuda.direct_attention or native_cuda.flash_attention "
            "for a captured step (the `graph_cuda` profile plans the flash one)")
    p = attention_probabilities(q, k, mask, scale)
    sc = xp.float32(scale)
    finite = all(bool(xp.isfinite(a).all()) for a in (q, k, v, g))
    if mask is None or finite:
        # Blocked entries have p = 0 and finite partners: their products are exact zeros.
        dp = xp.matmul(g, xp.swapaxes(v, -1, -2))
        if mask is not None:
            dp = xp.where(mask, dp, xp.float32(0))
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
        dq = xp.matmul(ds, k) * sc
        dk = xp.matmul(xp.swapaxes(ds, -1, -2), q) * sc
        dv = xp.matmul(xp.swapaxes(p, -1, -2), g)
    else:
        dq, dk, dv = _masked_sdpa_vjp(xp, q, k, v, g, p, mask, sc)
    return dq.astype(xp.float32), dk.astype(xp.float32), dv.astype(xp.float32)


def _masked_sdpa_vjp(xp, q, k, v, g, p, mask, sc):
    """The VJP with every product of a blocked entry left out, not multiplied by zero: an inf or
    NaN that only blocked entries touch takes no part (0 * inf would be NaN)."""
    m = mask[..., :, :, None]                                    # [.., Lq, Lk, 1]
    zero = xp.float32(0)
    dp = xp.where(mask, (g[..., :, None, :] * v[..., None, :, :]).sum(axis=-1), zero)
    c = xp.where(mask, p * dp, zero).sum(axis=-1, keepdims=True)
    ds = xp.where(mask, p * (dp - c), zero)
    dq = xp.where(m, ds[..., :, :, None] * k[..., None, :, :], zero).sum(axis=-2) * sc
    dk = xp.where(m, ds[..., :, :, None] * q[..., :, None, :], zero).sum(axis=-3) * sc
    dv = xp.where(m, p[..., :, :, None] * g[..., :, None, :], zero).sum(axis=-3)
    return dq, dk, dv
