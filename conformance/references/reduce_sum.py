"""Reference for reduce_sum: the exact sum over `axes` (all when None) rounded once; kind 'reduction' with
magnitude sum |a_i| and terms n. An empty sum is +0; an exact zero is -0 only when every term is -0.
VJP: g broadcast back over the reduced axes (exact)."""

import math

import numpy as np

from conformance.references._common import (
    Reference, exact_ref, f32_grad, f32_inputs, normalize_axes, sum_last_axis,
)

OP = "reduce_sum"


def reduced_layout(a, axes, keepdims, op):
    """(a with reduced axes moved last and flattened, output shape, keepdims shape, term count n)."""
    red = normalize_axes(axes, a.ndim, op)
    kept = tuple(i for i in range(a.ndim) if i not in red)
    n = math.prod(a.shape[i] for i in red)
    moved = np.transpose(a, kept + red).reshape(tuple(a.shape[i] for i in kept) + (n,))
    keep_shape = tuple(1 if i in red else a.shape[i] for i in range(a.ndim))
    out_shape = keep_shape if keepdims else tuple(a.shape[i] for i in kept)
    return moved, out_shape, keep_shape, n


def broadcast_back(g, a_shape, keep_shape):
    """g (output shape) repeated over the reduced axes of a."""
    return np.broadcast_to(g.reshape(keep_shape), a_shape)


def forward(inputs, *, axes=None, keepdims=False):
    (a,) = f32_inputs(inputs, 1, OP)
    moved, out_shape, _, n = reduced_layout(a, axes, keepdims, OP)
    sums = sum_last_axis(moved)
    value, exact, magnitude = sums
    return Reference(value.reshape(out_shape), exact.reshape(out_shape), magnitude.reshape(out_shape), n,
                     "reduction", slow_elements=sums.slow)


def vjp(inputs, grad_out, *, axes=None, keepdims=False):
    (a,) = f32_inputs(inputs, 1, OP)
    _, out_shape, keep_shape, _ = reduced_layout(a, axes, keepdims, OP)
    g = f32_grad(grad_out, out_shape, OP)
    return (exact_ref(broadcast_back(g, a.shape, keep_shape)),)
