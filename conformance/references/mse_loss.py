"""Reference for mse_loss: mean((pred - target)^2) of shape (), computed exactly on integers and rounded
once (NaN when empty); big inputs take an exact fsum of the squares' two_prod expansions first. Kind
'composite', magnitude the exact mean itself (every term is >= 0), terms n.
VJP (2 (p - t) g / n, -2 (p - t) g / n), each evaluated exactly and rounded once."""

import functools
from fractions import Fraction

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, elementwise_rational, f32_grad, f32_inputs, ieee64, same_shape,
)
from conformance.references.fast import sums as fast_sums
from conformance.references.fast.dd import DD, two_sum
from conformance.references.fast.elementwise import Fast

OP = "mse_loss"


def forward(inputs):
    p, t = f32_inputs(inputs, 2, OP)
    same_shape((p, t), OP)
    n = p.size
    with np.errstate(all="ignore"):
        ieee = np.mean((p.astype(np.float64) - t.astype(np.float64)) ** 2) if n else np.float64(np.nan)
    if n == 0 or not np.isfinite(ieee):  # float64 cannot overflow here: inf or nan comes from the inputs
        return Reference(np.float32(ieee), ieee, np.abs(ieee), n, "composite")
    if fast_paths.enabled() and n > 1024:
        terms = fast_sums.squared_difference_terms(p.reshape(-1).astype(np.float64), t.reshape(-1).astype(np.float64))
        value, exact, ok = fast_sums.mean_of_terms(terms, n)
        if ok:
            return Reference(np.float32(value), np.float64(exact), np.float64(exact), n, "composite")
    ints, scale = rounding.f32_to_scaled_ints(np.concatenate([p.reshape(-1), t.reshape(-1)]))
    diffs = ints[:n] - ints[n:]
    num, den = int(np.sum(diffs * diffs)), n << (2 * scale)
    value = rounding.round_ratio_to_f32(num, den)
    exact = rounding.round_ratio_to_f64(num, den)
    return Reference(np.float32(value), np.float64(exact), np.float64(exact), n, "composite")


def vjp(inputs, grad_out):
    p, t = f32_inputs(inputs, 2, OP)
    same_shape((p, t), OP)
    g = f32_grad(grad_out, (), OP)
    n = p.size
    if n == 0:
        empty = Reference(np.zeros(p.shape, np.float32), np.zeros(p.shape), kind="composite")
        return empty, empty
    gb = np.broadcast_to(g, p.shape)
    grads = []
    for sign in (2, -2):
        ieee = ieee64(lambda x, y, z: sign * (x - y) * z / n, p, t, gb)
        exact = elementwise_rational(lambda x, y, z: sign * (x - y) * z / Fraction(n), (p, t, gb), ieee, "composite",
                                     fast=functools.partial(_fast_grad, sign, n))
        grads.append(exact)
    return tuple(grads)


def _fast_grad(sign, n, x, y, z):
    """sign (x - y) z / n in dd: x - y exact (two_sum), times the exact 2z, divided by the exact n."""
    dh, dl = two_sum(x, -y)
    d = DD(dh, dl)
    return Fast(d.mul_fp(sign * z) / DD(np.full(x.shape, float(n))), zero=(x == y) | (z == 0))
