"""Reference for exp: correctly rounded exp(a) (exp(-inf) = +0, overflow to inf); VJP g * exp(a),
evaluated exactly and rounded once."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64, iv_exp
from conformance.references.fast import unary

OP = "exp"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(lambda ctx, x: iv_exp(ctx, x), (a,), ieee64(np.exp, a), "transcendental",
                          fast=unary.exp_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y * np.exp(x), a, g)
    return (elementwise_ziv(lambda ctx, x, y: y * iv_exp(ctx, x), (a, g), ieee, "composite", fast=unary.exp_vjp),)
