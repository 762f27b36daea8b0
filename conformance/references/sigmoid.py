"""Reference for sigmoid: correctly rounded 1 / (1 + exp(-a)) (0 at -inf, 1 at +inf); VJP g * s (1 - s),
evaluated exactly as g / ((1 + e^-a)(1 + e^a)) and rounded once."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64, iv_exp, iv_sigmoid
from conformance.references.fast import unary

OP = "sigmoid"


def _ieee_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(iv_sigmoid, (a,), ieee64(_ieee_sigmoid, a), "transcendental", fast=unary.sigmoid_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y * _ieee_sigmoid(x) * (1 - _ieee_sigmoid(x)), a, g)
    ref = elementwise_ziv(lambda ctx, x, y: y / ((1 + iv_exp(ctx, -x)) * (1 + iv_exp(ctx, x))), (a, g), ieee, "composite",
                         fast=unary.sigmoid_vjp)
    return (ref,)
