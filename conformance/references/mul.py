"""Reference for mul: a * b correctly rounded once; VJP (g*b, g*a), each one correctly rounded product."""

from conformance import rounding
from conformance.references._common import Reference, f32_grad, f32_inputs, same_shape

OP = "mul"


def forward(inputs):
    a, b = f32_inputs(inputs, 2, OP)
    same_shape((a, b), OP)
    value, exact = rounding.mul_f32(a, b)
    return Reference(value, exact, kind="rounded")


def vjp(inputs, grad_out):
    a, b = f32_inputs(inputs, 2, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return Reference(*rounding.mul_f32(g, b), kind="rounded"), Reference(*rounding.mul_f32(g, a), kind="rounded")
