"""Reference for cos: correctly rounded cos(a) (NaN at +-inf); VJP -g * sin(a), evaluated exactly and
rounded once (zero signs as (-g) * sin(a) gives them)."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64
from conformance.references.fast import unary

OP = "cos"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(lambda ctx, x: ctx.cos(x), (a,), ieee64(np.cos, a), "transcendental",
                          fast=unary.cos_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: -y * np.sin(x), a, g)
    return (elementwise_ziv(lambda ctx, x, y: -y * ctx.sin(x), (a, g), ieee, "composite", fast=unary.cos_vjp),)
