"""Reference for relu: a if a > 0 else +0 (relu(-0) = +0, relu(NaN) = NaN); VJP g where a > 0, else +0
(NaN compares false, so its gradient is 0)."""

import numpy as np

from conformance.references._common import exact_ref, f32_grad, f32_inputs

OP = "relu"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return exact_ref(np.where(a > 0, a, np.where(np.isnan(a), a, np.float32(0.0))))


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return (exact_ref(np.where(a > 0, g, np.float32(0.0))),)
