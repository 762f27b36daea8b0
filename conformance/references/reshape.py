"""Reference for reshape: the same elements in row-major order under a new shape (same element count);
VJP g reshaped back. Both exact."""

import math

from conformance.references._common import ReferenceInputError, exact_ref, f32_grad, f32_inputs

OP = "reshape"


def _target(a, shape):
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape) or math.prod(shape) != a.size:
        raise ReferenceInputError(f"reshape: shape {shape} does not hold the {a.size} elements of shape {a.shape}")
    return shape


def forward(inputs, *, shape):
    (a,) = f32_inputs(inputs, 1, OP)
    return exact_ref(a.reshape(_target(a, shape)))


def vjp(inputs, grad_out, *, shape):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, _target(a, shape), OP)
    return (exact_ref(g.reshape(a.shape)),)
