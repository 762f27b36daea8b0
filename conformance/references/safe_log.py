"""Reference for safe_log: log(max(a, eps)) with eps rounded to float32 first and max's rules (NaN
propagates); VJP g / a where a > eps, else +0 (one correctly rounded quotient)."""

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, elementwise_rational, elementwise_ziv, f32_grad, f32_inputs, ieee64, param_f32,
)
from conformance.references.fast import unary
from conformance.references.max import select

OP = "safe_log"


def forward(inputs, *, eps=1e-12):
    (a,) = f32_inputs(inputs, 1, OP)
    eps_a = np.full(a.shape, param_f32(eps), dtype=np.float32)
    m = select(a, eps_a, eps_a > a)
    return elementwise_ziv(lambda ctx, x: ctx.log(x), (m,), ieee64(np.log, m), "transcendental", route=m <= 0,
                           fast=unary.log_forward)


def vjp(inputs, grad_out, *, eps=1e-12):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    live = a > param_f32(eps)
    if fast_paths.enabled():  # live elements: one quotient of float32 values (rounding.div_f32)
        value, exact = rounding.div_f32(g, a)
        return (Reference(np.where(live, value, np.float32(0.0)), np.where(live, exact, 0.0), kind="rounded"),)
    ieee = np.where(live, ieee64(lambda x, y: y / x, a, g), 0.0)
    return (elementwise_rational(lambda x, y: y / x, (a, g), ieee, "rounded", route=~live | (a == 0)),)
