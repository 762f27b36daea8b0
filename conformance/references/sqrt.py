"""Reference for sqrt: correctly rounded sqrt(a) (NaN for a < 0, -0 for -0); VJP g / (2 sqrt(a)),
evaluated exactly and rounded once (IEEE values at a = +-0, a < 0 and a = inf)."""

import numpy as np

from conformance import rounding
from conformance.references._common import Reference, elementwise_ziv, f32_grad, f32_inputs, ieee64
from conformance.references.fast import unary

OP = "sqrt"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    # IEEE float64 sqrt is correctly rounded, so r = fl64(sqrt(a)) is the nearest float64; rounding r to
    # float32 is then innocuous double rounding (Figueroa 1995: sqrt through a format of p' >= 2p + 2
    # bits, here 53 >= 50). The result is never subnormal (sqrt(2^-149) > 2^-75). Tested against mpmath.
    r = ieee64(np.sqrt, a)
    return Reference(rounding.round_f64_to_f32(r), r, kind="rounded")


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    ieee = ieee64(lambda x, y: y / (2 * np.sqrt(x)), a, g)
    ref = elementwise_ziv(lambda ctx, x, y: y / (2 * ctx.sqrt(x)), (a, g), ieee, "composite", route=a <= 0,
                         fast=unary.sqrt_vjp)
    return (ref,)
