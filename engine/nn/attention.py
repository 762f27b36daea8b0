"""Multi-head self-attention over (batch, tokens, model_dim), scheduled as section 5.3.8 describes:
(batch, tokens) flattened for the four shared projections, (batch, head) folded into the batch axis
of one attention node. Its values and gradients equal repeated single-sample attention. With the
causal mask (mask="causal") and a plan that has the fused entry attention_heads, the node reads
the projections' [batch, tokens, model_dim] outputs per head in place (no permutes, no mask
tensor): the same values and gradients as the permuted path."""
from __future__ import annotations

import math

import numpy as np

from engine import ops
from engine.errors import ShapeError
from engine.nn.layers import Module, uniform_init
from engine.tensor import Tensor, tensor
from engine.types import RuntimeEntry


def heads_planned() -> bool:
    """Whether the session's profile plans a capsule for attention_heads (BackendProfile.plans)."""
    from engine.session import current_session
    return current_session().profile.plans(RuntimeEntry.attention_heads)


class MultiHeadAttention(Module):
    def __init__(self, model_dim: int, heads: int, seed: int) -> None:
        if heads < 1 or model_dim % heads:
            raise ShapeError(f"MultiHeadAttention: model_dim {model_dim} must be a positive "
                             f"multiple of heads {heads}")
        self.model_dim, self.heads = model_dim, heads
        bound = 1.0 / math.sqrt(model_dim)
        self.wq, self.wk, self.wv, self.wo = (
            tensor(uniform_init((model_dim, model_dim), bound, seed + i), requires_grad=True)
            for i in range(4))

    def parameters(self) -> list[Tensor]:
        return [self.wq, self.wk, self.wv, self.wo]

    def forward(self, x: Tensor, mask=None) -> Tensor:
        """x: [batch, tokens, model_dim] or [tokens, model_dim]; mask: bool [tokens, tokens]
        (shared), [batch, tokens, tokens], or [batch * heads, tokens, tokens] (sample b's head j
        at row block b * heads + j: passed to the attention node as it is, NumPy or CuPy, so a
        model that keeps it pays no expansion or upload per call); true = the key participates.
        mask="causal": key s participates for query t iff s <= t (attention_heads where the plan
        has it, else that triangle expanded per head)."""
        single = x.ndim == 2
        if single:
            x = ops.reshape(x, (1,) + x.shape)
        if x.ndim != 3 or x.shape[2] != self.model_dim:
            raise ShapeError(f"MultiHeadAttention: wants [batch, tokens, {self.model_dim}] or "
                             f"[tokens, {self.model_dim}], got {x.shape}")
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        flat = ops.reshape(x, (b * t, d))
        if isinstance(mask, str):
            if mask != "causal":
                raise ShapeError(f"MultiHeadAttention: mask {mask!r} is not a mask; the one "
                                 "named mask is \"causal\" (else pass a boolean array)")
            if heads_planned():
                return self._packed(flat, b, t, single)
            mask = np.tril(np.ones((t, t), dtype=bool))

        def heads_of(w: Tensor) -> Tensor:
            y = ops.matmul(flat, w, trans_b=True)                 # [b*t, d]
            y = ops.permute(ops.reshape(y, (b, t, h, dh)), (0, 2, 1, 3))
            return ops.reshape(y, (b * h, t, dh))

        attn_mask = None
        if tuple(getattr(mask, "shape", ())) == (b * h, t, t) and \
                getattr(mask, "dtype", None) == bool:
            attn_mask = mask   # already one row block per (batch, head): a model reuses it
        elif mask is not None:
            m = np.asarray(mask, dtype=bool)
            if m.shape not in ((t, t), (b, t, t)):
                raise ShapeError(f"MultiHeadAttention: mask shape {m.shape} should be ({t}, {t}), "
                                 f"({b}, {t}, {t}) or, expanded per head, ({b * h}, {t}, {t})")
            m = np.broadcast_to(m if m.ndim == 3 else m[None], (b, t, t))
            attn_mask = np.repeat(m, h, axis=0).reshape(b * h, t, t)
        o = ops.scaled_dot_product_attention(heads_of(self.wq), heads_of(self.wk),
                                             heads_of(self.wv), mask=attn_mask)
        o = ops.reshape(ops.permute(ops.reshape(o, (b, h, t, dh)), (0, 2, 1, 3)), (b * t, d))
        out = ops.reshape(ops.matmul(o, self.wo, trans_b=True), (b, t, d))
        return ops.reshape(out, (t, d)) if single else out

    def _packed(self, flat: Tensor, b: int, t: int, single: bool) -> Tensor:
        """Causal attention through attention_heads on the projections as they are."""
        d = self.model_dim

        def proj(w: Tensor) -> Tensor:
            return ops.reshape(ops.matmul(flat, w, trans_b=True), (b, t, d))
        o = ops.attention_heads(proj(self.wq), proj(self.wk), proj(self.wv), self.heads,
                                causal=True)
        out = ops.reshape(ops.matmul(ops.reshape(o, (b * t, d)), self.wo, trans_b=True),
                          (b, t, d))
        return ops.reshape(out, (t, d)) if single else out
