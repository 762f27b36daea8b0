"""Reference for sub: a - b correctly rounded once (IEEE zero signs); VJP (g, -g), exact."""

import numpy as np

from conformance import rounding
from conformance.references._common import Reference, exact_ref, f32_grad, f32_inputs, same_shape

OP = "sub"


def forward(inputs):
    a, b = f32_inputs(inputs, 2, OP)
    same_shape((a, b), OP)
    value, exact = rounding.sub_f32(a, b)
    return Reference(value, exact, kind="rounded")


def vjp(inputs, grad_out):
    a, b = f32_inputs(inputs, 2, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return exact_ref(g), exact_ref(np.negative(g))  # negation flips the sign bit, -0 included
