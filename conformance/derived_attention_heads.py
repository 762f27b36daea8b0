"""Derived error bounds of attention_heads (RuntimeEntry): scaled_dot_product_attention's rules
applied per (batch entry, head). The entry is the composition reshape -> permute ->
scaled_dot_product_attention (causal triangle or no mask) -> permute back -> reshape, whose
reshapes and permutes are exact, so each head's outputs and gradients carry exactly the error of
that head's attention problem: the bound context (inputs, cotangent, forward output, forward
reference) and the reference are permuted into [B*H, T, D] problems with the causal mask as a
mask parameter, the attention rule bounds them, and the bound is permuted back.
reference.attention_heads and the op take the composed rule (derived_norm_attention.py);
native_cuda.attention_heads, which runs native_cuda.flash_attention's kernels on the packed
layout, takes the flash rule (derived_flash.py) by capsule name."""
from __future__ import annotations

import dataclasses

import numpy as np

from conformance import derived_flash
from conformance.derived_norm_attention import FORWARD_RULES as ATT_FORWARD
from conformance.derived_norm_attention import VJP_RULES as ATT_VJP
from conformance.error_terms import DerivedRule
from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.types import BackendOp as Op, RuntimeEntry as Entry

CAPSULE = "native_cuda.attention_heads"


def _split_ref(ref, heads: int):
    if ref is None:
        return None

    def split(a):
        return a if a is None or np.ndim(a) == 0 else split_heads(np.asarray(a), heads)
    return dataclasses.replace(ref, value=split(ref.value), exact=split(ref.exact),
                               magnitude=split(ref.magnitude), terms=split(ref.terms))


def per_head(bound):
    """A bound(ref, ctx, unit) of scaled_dot_product_attention as attention_heads' bound."""
    def heads_bound(ref, ctx, unit):
        q = ctx.inputs[0]
        heads, batch, t = int(ctx.params["heads"]), q.shape[0], q.shape[1]
        params = {"mask": causal_mask(np, batch * heads, t) if ctx.params["causal"] else None,
                  "scale": ctx.params.get("scale")}
        split_ctx = dataclasses.replace(
            ctx, op=Op.scaled_dot_product_attention, params=params,
            inputs=tuple(split_heads(np.asarray(x), heads) for x in ctx.inputs[:3]),
            out=None if ctx.out is None else split_heads(np.asarray(ctx.out), heads),
            fwd_ref=_split_ref(ctx.fwd_ref, heads),
            g=None if ctx.g is None else split_heads(np.asarray(ctx.g), heads))
        b = bound(_split_ref(ref, heads), split_ctx, unit)
        return merge_heads(np.asarray(b), batch, heads)
    return heads_bound


def _rule(rule: DerivedRule) -> DerivedRule:
    return dataclasses.replace(rule, label=f"{rule.label}, per (batch entry, head)",
                               reason=f"scaled_dot_product_attention's, per head: {rule.reason}",
                               bound=per_head(rule.bound))


FORWARD_RULES = {Entry.attention_heads: _rule(ATT_FORWARD[Op.scaled_dot_product_attention])}
VJP_RULES = {Entry.attention_heads: _rule(ATT_VJP[Op.scaled_dot_product_attention])}
CAPSULE_FORWARD_RULES = {CAPSULE: _rule(derived_flash.FORWARD_RULES[derived_flash.CAPSULE])}
CAPSULE_VJP_RULES = {CAPSULE: _rule(derived_flash.VJP_RULES[derived_flash.CAPSULE])}
