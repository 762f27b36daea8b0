"""Fused multi-head attention on the packed layout (section 5.3.7, as bias_gelu): one tape op with
its own local VJP in place of reshape -> permute(0, 2, 1, 3) -> scaled_dot_product_attention ->
permute back -> reshape, the chain engine/nn/attention.py builds. attention_heads(q, k, v, heads)
takes q, k, v [B, T, H*D] (the projections' matmul outputs as they are) and gives out
[B, T, H*D]: for each batch entry and head j, scaled dot-product attention over columns
j*D .. (j+1)*D - 1, with the causal hard mask (key s participates for query t iff s <= t) when
`causal`, no mask otherwise. Its values and gradients are the composition's exactly: the rule
below permutes into the scaled_dot_product_attention rule and back (copies, no rounding), and
the native capsule runs the flash kernels on the packed layout in place (same operations)."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ParameterTypeError, ShapeError
from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import xp_of
from engine.ops.attention import _sdpa_vjp_arrays
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import RuntimeEntry as Entry


def attention_heads(q: Tensor, k: Tensor, v: Tensor, heads: int, causal: bool = True,
                    scale: float | None = None) -> Tensor:
    """Multi-head attention of q, k, v [B, T, heads * D] per head (module docstring)."""
    if not (q.ndim == k.ndim == v.ndim == 3) or not (q.shape == k.shape == v.shape):
        raise ShapeError(f"attention_heads: q, k, v must be equal rank-3 shapes [batch, tokens, "
                         f"heads * head_dim]; got {q.shape}, {k.shape}, {v.shape}; reshape "
                         "the projections to [batch, tokens, width] first")
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)):
        raise ParameterTypeError(f"attention_heads: heads must be an int, got "
                                 f"{type(heads).__name__} {heads!r}; pass the model's head count")
    if heads < 1 or q.shape[2] % heads:
        raise ShapeError(f"attention_heads: heads = {heads!r} must be a positive int dividing "
                         f"the width {q.shape[2]} of q {q.shape}; pass the model's head count")
    if not isinstance(causal, (bool, np.bool_)):
        raise ParameterTypeError(f"attention_heads: causal must be True or False, got "
                                 f"{causal!r}; pass True for the causal triangle, False for no "
                                 "mask")
    d = q.shape[2] // heads
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    scale = _checks.finite_f32("attention_heads", "scale", scale)
    return apply(Entry.attention_heads, (q, k, v), q.shape,
                 {"heads": int(heads), "causal": bool(causal),
                  "scale": float(np.float32(scale))})


@local_vjp(Entry.attention_heads)
@saves(0, 1, 2)
def _attention_heads_vjp(inputs, out, g, heads, causal, scale):
    """The scaled_dot_product_attention rule on the permuted operands, permuted back: the
    composition's gradients bit for bit (reshape and permute VJPs are copies)."""
    q, k, v = inputs
    batch = q.shape[0]
    xp = xp_of(g)
    split = tuple(split_heads(x, heads) for x in (q, k, v))
    mask = causal_mask(xp, batch * heads, q.shape[1]) if causal else None
    with np.errstate(all="ignore"):   # non-finite inputs follow IEEE; NumPy need not warn
        grads = _sdpa_vjp_arrays(split, split_heads(g, heads), mask, scale)
    return tuple(merge_heads(x, batch, heads) for x in grads)
