"""Reference for add_layer_norm (x [..., d], r of x's shape, gamma [d], beta [d]): one output
[s, y] of shape (2,) + x.shape, the composition add -> layer_norm. s = float32(x + r) (NumPy's
float32 add is correctly rounded: half 0 is exact, value = s, magnitude |s|); y = layer_norm's
reference at s (references/layer_norm.py: evaluated exactly, rounded once; its magnitudes), kind
'composite'. A sum that overflows (s = +-inf) or holds a NaN makes its row special for layer_norm,
whose reference decides it by the IEEE formula.

VJP, for the cotangent [g0, g1] of [s, y]: dx = dr = g0 + layer_norm's dx at s for g1; dgamma and
dbeta are layer_norm's at s for g1. The sum's `exact` is dx.exact + g0 in float64: dx.exact is the
float64 nearest the exact layer_norm dx and the addition rounds once more, so `exact` is within
2^-53 (|dx| + |dx + g0|) of the exact gradient, and `value` its float32 rounding (one ulp off the
correct rounding only where the exact gradient lies within that distance of a float32 midpoint).
Its magnitude is dx's plus |g0|: the capsules' declared bound's u * magnitude absorbs that
distance (as references/bias_gelu.py's db)."""

from __future__ import annotations

import numpy as np

from conformance import rounding
from conformance.references import layer_norm
from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs

OP = "add_layer_norm"


def _sum(inputs):
    x, r, gamma, beta = f32_inputs(inputs, 4, OP)
    d = x.shape[-1] if x.ndim else None
    if x.ndim < 1 or r.shape != x.shape or gamma.shape != (d,) or beta.shape != (d,):
        raise ReferenceInputError(
            f"{OP} needs x [..., d], r of x's shape, gamma [d], beta [d]; got {x.shape}, "
            f"{r.shape}, {gamma.shape}, {beta.shape}")
    with np.errstate(all="ignore"):
        s = (x + r).astype(np.float32)             # one correctly rounded float32 addition
    return s, gamma, beta


def forward(inputs, *, eps=1e-5):
    s, gamma, beta = _sum(inputs)
    y = layer_norm.forward((s, gamma, beta), eps=eps)
    s64 = s.astype(np.float64)
    return Reference(np.stack([s, y.value]), np.stack([s64, y.exact]),
                     np.stack([np.abs(s64), y.magnitude]), s.shape[-1], "composite",
                     y.slow_elements)


def vjp(inputs, grad_out, *, eps=1e-5):
    s, gamma, beta = _sum(inputs)
    g = f32_grad(grad_out, (2,) + s.shape, OP)
    dx, dgamma, dbeta = layer_norm.vjp((s, gamma, beta), np.ascontiguousarray(g[1]), eps=eps)
    g0 = g[0].astype(np.float64)
    with np.errstate(all="ignore"):
        exact = dx.exact + g0
        magnitude = dx.magnitude + np.abs(g0)
    dsum = Reference(rounding.round_f64_to_f32(exact), exact, magnitude, s.shape[-1],
                     "composite", dx.slow_elements)
    return dsum, dsum, dgamma, dbeta
