"""Reference for broadcast: NumPy broadcasting of a to `shape` (exact). VJP: g summed over the broadcast
axes (missing leading axes and size-1 axes that grew), kind 'reduction', terms = copies per element."""

import math

import numpy as np

from conformance.references._common import (
    Reference, ReferenceInputError, exact_ref, f32_grad, f32_inputs, sum_last_axis,
)

OP = "broadcast"


def _plan(a, shape):
    shape = tuple(int(d) for d in shape)
    lead = len(shape) - a.ndim
    if lead < 0 or any(s not in (1, t) for s, t in zip(a.shape, shape[lead:])):
        raise ReferenceInputError(f"broadcast: shape {a.shape} does not broadcast to {shape}")
    summed = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(a.shape) if s == 1 and shape[lead + i] != 1)
    return shape, summed


def forward(inputs, *, shape):
    (a,) = f32_inputs(inputs, 1, OP)
    shape, _ = _plan(a, shape)
    return exact_ref(np.broadcast_to(a, shape))


def vjp(inputs, grad_out, *, shape):
    (a,) = f32_inputs(inputs, 1, OP)
    shape, summed = _plan(a, shape)
    g = f32_grad(grad_out, shape, OP)
    kept = tuple(i for i in range(len(shape)) if i not in summed)
    n = math.prod(shape[i] for i in summed)
    moved = np.transpose(g, kept + summed).reshape(tuple(shape[i] for i in kept) + (n,))
    value, exact, magnitude = sum_last_axis(moved)
    return (Reference(value.reshape(a.shape), exact.reshape(a.shape), magnitude.reshape(a.shape), n, "reduction"),)
