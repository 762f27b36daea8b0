"""Reference for tanh: correctly rounded tanh(a) (tanh(-0) = -0, +-1 at +-inf); VJP g * (1 - t^2),
evaluated exactly as g * 4e / (1 + e)^2 with e = exp(-2|a|) (no cancellation) and rounded once."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64, iv_exp, iv_tanh
from conformance.references.fast import unary

OP = "tanh"


def _dtanh(ctx, abs_a, g):
    e = iv_exp(ctx, -2 * abs_a)
    return g * (4 * e) / ((1 + e) * (1 + e))


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    return elementwise_ziv(iv_tanh, (a,), ieee64(np.tanh, a), "transcendental", fast=unary.tanh_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y * (1 - np.tanh(x) ** 2), a, g)
    return (elementwise_ziv(_dtanh, (np.abs(a), g), ieee, "composite", fast=unary.tanh_vjp),)
