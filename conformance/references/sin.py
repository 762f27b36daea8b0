"""Reference for sin: correctly rounded sin(a) (sin(-0) = -0, NaN at +-inf); VJP g * cos(a), evaluated
exactly and rounded once."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64
from conformance.references.fast import unary

OP = "sin"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(lambda ctx, x: ctx.sin(x), (a,), ieee64(np.sin, a), "transcendental",
                          fast=unary.sin_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y * np.cos(x), a, g)
    return (elementwise_ziv(lambda ctx, x, y: y * ctx.cos(x), (a, g), ieee, "composite", fast=unary.sin_vjp),)
