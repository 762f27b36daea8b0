"""The attention_heads family (engine/ops/attention_heads.py): attention_heads, multi-head
attention on the packed [batch, tokens, heads * head_dim] layout.

Edge set (25 cases): ATTENTION_HEADS_FORMS: T across the 64-row tiles (1 .. 129), H 1 to 12, D 1 to
257, T = 1 with D = X / 6 over 2 heads, causal alternating with no mask, B, T or D empty; scale
1/sqrt(D); values normal. ATTENTION_HEADS_CAUSAL_TILES: causal T = 66, 100, 190;
ATTENTION_HEADS_SINGLE_KEY: the causal first row (T = 3) and T = 1 with `specials` in q.

Derived error bounds of attention_heads (RuntimeEntry): scaled_dot_product_attention's rules
applied per (batch entry, head). The entry is the composition reshape -> permute ->
scaled_dot_product_attention (causal triangle or no mask) -> permute back -> reshape, whose
reshapes and permutes are exact, so each head's outputs and gradients carry exactly the error of
that head's attention problem: the bound context (inputs, cotangent, forward output, forward
reference) and the reference are permuted into [B*H, T, D] problems with the causal mask as a
mask parameter, the attention rule bounds them, and the bound is permuted back.
reference.attention_heads and the op take the composed rule (families/attention.py);
native_cuda.attention_heads, which runs native_cuda.flash_attention's kernels on the packed
layout, takes the flash rule (attention.FLASH) as its own (OpSpec.capsule_rules)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from conformance.bad_inputs import filled
from conformance.edges import NORMAL, PAST_2_20, SPECIALS, Edge
from conformance.error_terms import DerivedRule
from conformance.families.attention import (ATTENTION_FORWARD, ATTENTION_VJP, FLASH,
                                            cancel_attention)
from conformance.families.spec import (DIMS, ELEMENTARY_ORDER, RANK, AuditCase, CapsuleRules,
                                       OpSpec, normal, param, shaped_inputs)
from conformance.layouts import ATTENTION_EXTENTS
from conformance.samplers import attention_scale, past_first_tile
from engine import ops
from engine.errors import ParameterTypeError, ShapeError
from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.types import BackendOp as Op, RuntimeEntry as Entry

GROUP = "norms and attention"


# --- layout: (rng, cls) -> (input shapes, params) -------------------------------------------------

HEAD_DIMS = (1, 2, 3, 5, 8)


def attention_heads_layout(rng, cls):
    """q, k, v [B, T, H*D]: B 1..2, T from ATTENTION_EXTENTS, H 1..3, D from HEAD_DIMS; causal
    unless the class is `masks` (then either, and half the time T = 64k + r past the first tile);
    an empty B, T or D for "empty"; scale 1/sqrt(D) (unrounded) unless the class is `params`
    (samplers.attention_scale)."""
    b, t = int(rng.integers(1, 3)), int(rng.choice(ATTENTION_EXTENTS))
    h, d = int(rng.integers(1, 4)), int(rng.choice(HEAD_DIMS))
    if cls == "empty":
        which = int(rng.integers(0, 3))
        b, t, d = [0 if i == which else x for i, x in enumerate((b, t, d))]
    causal = bool(rng.integers(0, 2)) if cls == "masks" else True
    if cls == "masks" and rng.integers(0, 2):    # half the masks: 64k + r tokens, small heads
        t, h, d = past_first_tile(rng), int(rng.integers(1, 3)), int(rng.choice(HEAD_DIMS[:3]))
    scale = 1.0 / math.sqrt(d) if d else 1.0
    if cls == "params":
        scale = attention_scale(rng)
    shape = (b, t, h * d)
    return [shape, shape, shape], {"heads": h, "causal": causal, "scale": scale}


# --- the fixed edge set ---------------------------------------------------------------------------
# (B, T, H, D): T across the flash kernels' 64-row tiles (a diagonal tile partial or whole, one to
# three tiles), H 1 to 12, D across the kernel widths and past them (257: the native capsule
# declines it), one case past 2^20 input elements (T = 1, D = X / 6: the reference's cost grows
# with T^2 H, not with D); causal alternating with no mask; then the empty forms.
ATTENTION_HEADS_FORMS = ((1, 1, 1, 1), (2, 2, 3, 2), (1, 31, 2, 3), (1, 32, 1, 5), (1, 33, 2, 2),
                         (1, 63, 1, 4), (1, 64, 2, 2), (1, 65, 1, 33), (2, 33, 12, 2),
                         (1, 127, 1, 2), (1, 128, 1, 1), (1, 129, 1, 2), (1, 17, 3, 64),
                         (2, 5, 4, 32), (1, 3, 1, 128), (1, 2, 1, 257),
                         (1, 1, 2, PAST_2_20 // 6 + 1), (0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 2, 0))


# issue 35: causal T = 64k + r (k >= 1, r > 1: a partial last tile after a whole one), and the
# causal first query row (one key) and T = 1 with SPECIALS in q: NaN, +inf and -inf scores
ATTENTION_HEADS_CAUSAL_TILES = ((1, 66, 2, 2), (2, 100, 1, 3), (1, 190, 1, 2))
ATTENTION_HEADS_SINGLE_KEY = ((1, 3, 2, 2), (2, 1, 2, 2))


def _heads_edge(b, t, h, d, causal, fill=NORMAL) -> Edge:
    scale = float(np.float32(1.0 / math.sqrt(d))) if d else 1.0
    return Edge(((b, t, h * d),) * 3, (("heads", h), ("causal", causal), ("scale", scale)), fill)


def _attention_heads() -> list[Edge]:
    out = [_heads_edge(b, t, h, d, i % 2 == 0) for i, (b, t, h, d) in
           enumerate(ATTENTION_HEADS_FORMS)]
    out += [_heads_edge(*form, True) for form in ATTENTION_HEADS_CAUSAL_TILES]
    return out + [_heads_edge(*form, True, SPECIALS) for form in ATTENTION_HEADS_SINGLE_KEY]


def _heads_terms(case) -> int:
    """causal: the last query row's T keys; max(D, T) (0 when the output is empty)."""
    q = case.inputs[0]
    d = q.shape[-1] // int(case.params["heads"]) if q.size else 0
    return max(d, q.shape[1]) if q.size and d else 0


# --- derived bounds: attention's, per (batch entry, head) -----------------------------------------

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


HEADS_FORWARD = _rule(ATTENTION_FORWARD)
HEADS_VJP = _rule(ATTENTION_VJP)
HEADS_FLASH = CapsuleRules("native_cuda.attention_heads", forward=_rule(FLASH.forward),
                           vjp=_rule(FLASH.vjp))


def _heads_audit(rng, idx):
    # gpt2-124m's heads (12 of 64) over 4 x 128 tokens: 96 (sequence, head) pairs of two 64-row
    # tiles each, enough blocks for any unfixed order to show, at an eighth of the CPU reference's
    # time of 8 x 256 tokens (84 of the CPU suite's 134 s)
    qkv = tuple(normal(rng, 4, 128, 768) for _ in range(3))
    return qkv, {"heads": 12, "causal": True, "scale": float(np.float32(64 ** -0.5))}, \
        (4, 128, 768)


def _heads(s, q=(1, 2, 4), k=None, heads=2, causal=True):
    return ops.attention_heads(filled(s, q), filled(s, k or q), filled(s, q), heads,
                               causal=causal)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Entry.attention_heads, attention_heads_layout, _attention_heads, catalogue=51,
        extra_classes=("masks", "params"), near_overflow=2.0 ** 62, wide_max_exp=57,
        determinism=AuditCase(20, _heads_audit),
        error_inputs=(
            *shaped_inputs(30, "attention_heads",
                           lambda s, a: ops.attention_heads(a, a, a, 2), (1, 2, 4)),
            param(148, "attention_heads: k of another shape", DIMS,
                  lambda s: _heads(s, k=(1, 3, 4)), ShapeError,
                  r"q, k, v must be equal rank-3 shapes \[batch, tokens, heads \* head_dim\]; "
                  r"got \(1, 2, 4\), \(1, 3, 4\), \(1, 2, 4\)"),
            param(149, "attention_heads: heads not dividing the width", DIMS,
                  lambda s: _heads(s, heads=3), ShapeError,
                  r"heads = 3 must be a positive int dividing the width 4"),
            param(150, "attention_heads: rank-2 q", RANK,
                  lambda s: _heads(s, q=(2, 4)), ShapeError,
                  r"must be equal rank-3 shapes"),
            param(151, "attention_heads: causal not a bool", DIMS,
                  lambda s: _heads(s, causal="yes"), ParameterTypeError,
                  r"causal must be True or False, got 'yes'"),
            param(152, "attention_heads: float heads", DIMS,
                  lambda s: _heads(s, heads=2.0), ParameterTypeError,
                  r"heads must be an int, got float 2.0")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        cancellation=cancel_attention, forward_rule=HEADS_FORWARD, vjp_rule=HEADS_VJP,
        capsule_rules=(HEADS_FLASH,), terms=_heads_terms),
)
