"""Reference for softplus: correctly rounded log(1 + exp(a)) (inf at inf, +0 at -inf), evaluated as
log1p(e^a) for a <= 0 and a + log1p(e^-a) above (no cancellation); VJP g * sigmoid(a)."""

import numpy as np

from conformance.references._common import (
    elementwise_ziv, f32_grad, f32_inputs, ieee64, iv_exp, iv_log1p, iv_sigmoid,
)
from conformance.references.fast import unary

OP = "softplus"


def _softplus(ctx, x):
    if x._mpi_[1][0] == 1 or x._mpi_[1][1] == 0:  # x <= 0
        return iv_log1p(ctx, iv_exp(ctx, x))
    return x + iv_log1p(ctx, iv_exp(ctx, -x))


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    ieee = ieee64(lambda x: np.logaddexp(0.0, x), a)  # inf at inf, 0 at -inf, nan at nan
    return elementwise_ziv(_softplus, (a,), ieee, "transcendental", fast=unary.softplus_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y / (1.0 + np.exp(-x)), a, g)
    return (elementwise_ziv(lambda ctx, x, y: y * iv_sigmoid(ctx, x), (a, g), ieee, "composite",
                            fast=unary.softplus_vjp),)
