"""Reference for log: correctly rounded log(a) (-inf at +-0, NaN below 0); VJP g / a, one correctly
rounded quotient (the rule holds literally for a < 0 too; +-inf or NaN at a = +-0)."""

import numpy as np

from conformance.references._common import elementwise_rational, elementwise_ziv, f32_grad, f32_inputs, ieee64

OP = "log"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(lambda ctx, x: ctx.log(x), (a,), ieee64(np.log, a), "transcendental", route=a <= 0)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y / x, a, g)
    return (elementwise_rational(lambda x, y: y / x, (a, g), ieee, "rounded", route=a == 0),)
