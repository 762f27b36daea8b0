"""Reference for inv: 1 / a correctly rounded (+-inf at +-0, +-0 at +-inf); VJP -g / a^2, evaluated
exactly and rounded once."""

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import Reference, elementwise_rational, f32_grad, f32_inputs, ieee64
from conformance.references.fast import unary

OP = "inv"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    if fast_paths.enabled():  # one quotient of float32 values, IEEE specials included (rounding.div_f32)
        return Reference(*rounding.div_f32(np.ones_like(a), a), kind="rounded")
    ieee = ieee64(lambda x: 1.0 / x, a)
    return elementwise_rational(lambda x: 1 / x, (a,), ieee, "rounded", route=a == 0)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: -y / (x * x), a, g)
    return (elementwise_rational(lambda x, y: -y / (x * x), (a, g), ieee, "composite", route=a == 0,
                                 fast=unary.inv_vjp),)
