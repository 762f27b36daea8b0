"""Reference for log: correctly rounded log(a) (-inf at +-0, NaN below 0); VJP g / a, one correctly
rounded quotient (the rule holds literally for a < 0 too; +-inf or NaN at a = +-0)."""

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, elementwise_rational, elementwise_ziv, f32_grad, f32_inputs, ieee64,
)
from conformance.references.fast import unary

OP = "log"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(lambda ctx, x: ctx.log(x), (a,), ieee64(np.log, a), "transcendental", route=a <= 0,
                           fast=unary.log_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    if fast_paths.enabled():  # one quotient of float32 values, IEEE specials included (rounding.div_f32)
        return (Reference(*rounding.div_f32(g, a), kind="rounded"),)
    ieee = ieee64(lambda x, y: y / x, a, g)
    return (elementwise_rational(lambda x, y: y / x, (a, g), ieee, "rounded", route=a == 0),)
