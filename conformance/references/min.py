"""Reference for min, the mirror of max: a if a < b, b if b < a, a on equality, NaN if either is NaN;
VJP g to the smaller, g/2 to each on a tie, g to the NaN operand(s)."""

import numpy as np

from conformance.references._common import Reference, f32_grad, f32_inputs, same_shape
from conformance.references.max import select, split_grad

OP = "min"


def forward(inputs):
    a, b = f32_inputs(inputs, 2, OP)
    same_shape((a, b), OP)
    value = select(a, b, b < a)
    return Reference(value, value.astype(np.float64), kind="exact")


def vjp(inputs, grad_out):
    a, b = f32_inputs(inputs, 2, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return split_grad(a, b, g, a < b, b < a)
