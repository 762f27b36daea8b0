"""Reference for reduce_mean: the exact sum over `axes` divided by n (the product of the reduced extents),
rounded once; NaN over an empty axis. Kind 'reduction', magnitude sum |a_i| / n, terms n.
VJP: g / n broadcast back (one correctly rounded quotient per element)."""

from fractions import Fraction

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, elementwise_rational, f32_grad, f32_inputs, ieee64, sum_last_axis,
)
from conformance.references.fast.dd import DD
from conformance.references.fast.elementwise import Fast
from conformance.references.reduce_sum import broadcast_back, reduced_layout

OP = "reduce_mean"


def forward(inputs, *, axes=None, keepdims=False):
    (a,) = f32_inputs(inputs, 1, OP)
    moved, out_shape, _, n = reduced_layout(a, axes, keepdims, OP)
    if n == 0:
        nan = np.full(out_shape, np.nan)
        return Reference(nan.astype(np.float32), nan, nan, 0, "reduction")
    sums = sum_last_axis(moved, divisor=n)
    value, exact, magnitude = sums
    return Reference(value.reshape(out_shape), exact.reshape(out_shape), magnitude.reshape(out_shape), n,
                     "reduction", slow_elements=sums.slow)


def _quotients(g: np.ndarray, n: int) -> Reference:
    """g / n per element, correctly rounded once."""
    if fast_paths.enabled() and float(np.float32(n)) == n:
        return Reference(*rounding.div_f32(g, np.full(g.shape, n, np.float32)), kind="rounded")  # two float32
    ieee = ieee64(lambda y: y / n, g)

    def fast(y):  # n is exact in float64 (n < 2^53)
        return Fast(DD(y) / DD(np.full(y.shape, float(n))), zero=y == 0)

    return elementwise_rational(lambda y: y / Fraction(n), (g,), ieee, "rounded", fast=fast)


def vjp(inputs, grad_out, *, axes=None, keepdims=False):
    (a,) = f32_inputs(inputs, 1, OP)
    _, out_shape, keep_shape, n = reduced_layout(a, axes, keepdims, OP)
    g = f32_grad(grad_out, out_shape, OP)
    if n == 0:  # a has no elements, so neither does its gradient
        return (Reference(np.zeros(a.shape, np.float32), np.zeros(a.shape), kind="rounded"),)
    q = _quotients(g, n)
    value = broadcast_back(q.value, a.shape, keep_shape)
    exact = broadcast_back(q.exact, a.shape, keep_shape)
    return (Reference(value, exact, kind="rounded", slow_elements=q.slow_elements),)
