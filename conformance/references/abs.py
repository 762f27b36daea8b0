"""Reference for abs: |a| with the sign bit cleared (NaN stays NaN); VJP g*sign(a): g for a > 0, -g for
a < 0, +0 at a = +-0 (the rule's literal 0, whatever g is), NaN where a is NaN."""

import numpy as np

from conformance.references._common import exact_ref, f32_grad, f32_inputs

OP = "abs"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return exact_ref(np.abs(a))


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    out = np.where(a > 0, g, np.where(a < 0, np.negative(g), np.float32(0.0)))
    return (exact_ref(np.where(np.isnan(a), np.float32(np.nan), out)),)
