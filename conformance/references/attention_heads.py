"""Reference for attention_heads (q, k, v [B, T, H*D], out [B, T, H*D]): scaled dot-product
attention per (batch entry, head j) over columns j*D .. (j+1)*D - 1 with the causal hard mask
(key s participates for query t iff s <= t) when `causal`, no mask otherwise; scale rounded to
float32 (None: 1/sqrt(D)). The composition reshape -> permute(0, 2, 1, 3) ->
scaled_dot_product_attention -> permute back -> reshape, whose reshapes and permutes are exact: so
the oracle permutes the operands (and the cotangent) into [B*H, T, D] problems, asks the
scaled_dot_product_attention oracle (references/scaled_dot_product_attention.py: its exact path,
magnitudes, term counts and signed-zero rules) and permutes each field of its answers back. Kind
'composite' for every output."""

from __future__ import annotations

import numpy as np

from conformance.references import scaled_dot_product_attention as sdpa
from conformance.references._common import (Reference, ReferenceInputError, f32_grad,
                                            f32_inputs)
from engine.heads_layout import causal_mask, merge_heads, split_heads

OP = "attention_heads"


def _checked(inputs, heads, causal):
    q, k, v = f32_inputs(inputs, 3, OP)
    if not (q.ndim == 3 and q.shape == k.shape == v.shape):
        raise ReferenceInputError(f"{OP}: q, k, v must be equal rank-3 shapes [B, T, H*D]; got "
                                  f"{q.shape}, {k.shape}, {v.shape}")
    if not isinstance(heads, (int, np.integer)) or heads < 1 or q.shape[2] % heads:
        raise ReferenceInputError(f"{OP}: heads = {heads!r} must be a positive int dividing the "
                                  f"width {q.shape[2]}")
    mask = causal_mask(np, q.shape[0] * heads, q.shape[1]) if causal else None
    return q, k, v, mask


def _merged(ref: Reference, batch: int, heads: int) -> Reference:
    def back(a):
        if a is None or np.ndim(a) == 0:
            return a
        return merge_heads(np.asarray(a), batch, heads)
    return Reference(back(ref.value), back(ref.exact), back(ref.magnitude), back(ref.terms),
                     ref.kind, ref.slow_elements)


def forward(inputs, *, heads=1, causal=True, scale=None):
    q, k, v, mask = _checked(inputs, heads, causal)
    ref = sdpa.forward(tuple(split_heads(x, heads) for x in (q, k, v)), mask=mask, scale=scale)
    return _merged(ref, q.shape[0], heads)


def vjp(inputs, grad_out, *, heads=1, causal=True, scale=None):
    q, k, v, mask = _checked(inputs, heads, causal)
    g = f32_grad(grad_out, q.shape, OP)
    refs = sdpa.vjp(tuple(split_heads(x, heads) for x in (q, k, v)), split_heads(g, heads),
                    mask=mask, scale=scale)
    return tuple(_merged(r, q.shape[0], heads) for r in refs)
