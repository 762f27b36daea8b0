"""Reference for add: a + b correctly rounded once (IEEE zero signs); VJP (g, g), exact."""

from conformance import rounding
from conformance.references._common import Reference, exact_ref, f32_grad, f32_inputs, same_shape

OP = "add"


def forward(inputs):
    a, b = f32_inputs(inputs, 2, OP)
    same_shape((a, b), OP)
    value, exact = rounding.add_f32(a, b)
    return Reference(value, exact, kind="rounded")


def vjp(inputs, grad_out):
    a, b = f32_inputs(inputs, 2, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return exact_ref(g), exact_ref(g)
