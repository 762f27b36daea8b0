"""Reference for max: a if a > b, b if b > a, a on equality, NaN if either is NaN. VJP: g to the larger,
g/2 to each on a tie (correctly rounded: halving a subnormal rounds), g to the NaN operand(s)."""

import numpy as np

from conformance import rounding
from conformance.references._common import Reference, f32_grad, f32_inputs, same_shape

OP = "max"


def select(a, b, b_wins):
    """The shared max/min forward: b where b_wins, else a (equality keeps a), NaN if either is NaN."""
    out = np.where(b_wins, b, a)
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), out).astype(np.float32)


def split_grad(a, b, g, a_wins, b_wins):
    """The shared max/min VJP: (da, db) as References of kind 'rounded' (only g/2 can round)."""
    half, half64 = rounding.mul_f32(g, np.full(g.shape, 0.5, dtype=np.float32))
    g64 = g.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    any_nan = nan_a | nan_b
    tie = (a == b) & ~any_nan
    grads = []
    for wins, is_nan in ((a_wins, nan_a), (b_wins, nan_b)):
        take = np.where(any_nan, is_nan, wins & ~any_nan)
        value = np.where(take, g, np.where(tie, half, np.float32(0.0)))
        exact = np.where(take, g64, np.where(tie, half64, 0.0))
        grads.append(Reference(value, exact, kind="rounded"))
    return tuple(grads)


def forward(inputs):
    a, b = f32_inputs(inputs, 2, OP)
    same_shape((a, b), OP)
    value = select(a, b, b > a)
    return Reference(value, value.astype(np.float64), kind="exact")


def vjp(inputs, grad_out):
    a, b = f32_inputs(inputs, 2, OP)
    g = f32_grad(grad_out, a.shape, OP)
    return split_grad(a, b, g, a > b, b > a)
