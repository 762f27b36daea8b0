"""Reference for scale: alpha * a with alpha rounded to float32 first, one correctly rounded product;
VJP alpha * g, likewise."""

import numpy as np

from conformance import rounding
from conformance.references._common import Reference, f32_grad, f32_inputs, param_f32

OP = "scale"


def _times_alpha(x, alpha):
    return Reference(*rounding.mul_f32(np.full(x.shape, param_f32(alpha), dtype=np.float32), x), kind="rounded")


def forward(inputs, *, alpha):
    (a,) = f32_inputs(inputs, 1, OP)
    return _times_alpha(a, alpha)


def vjp(inputs, grad_out, *, alpha):
    (a,) = f32_inputs(inputs, 1, OP)
    return (_times_alpha(f32_grad(grad_out, a.shape, OP), alpha),)
