"""Reference for concat: a_0 .. a_{k-1} joined along `axis` (k >= 1); VJP: the matching slices of g.
All exact."""

import numpy as np

from conformance.references._common import ReferenceInputError, exact_ref, f32_grad, f32_inputs, normalize_axis

OP = "concat"


def _checked(inputs, axis):
    arrays = f32_inputs(inputs, None, OP)
    ax = normalize_axis(axis, arrays[0].ndim, OP)
    def off_axis(x):
        return x.shape[:ax] + x.shape[ax + 1:]

    for x in arrays:
        if x.ndim != arrays[0].ndim or off_axis(x) != off_axis(arrays[0]):
            raise ReferenceInputError(f"concat: shapes {[y.shape for y in arrays]} differ off axis {ax}")
    return arrays, ax


def forward(inputs, *, axis):
    arrays, ax = _checked(inputs, axis)
    return exact_ref(np.concatenate(arrays, axis=ax))


def vjp(inputs, grad_out, *, axis):
    arrays, ax = _checked(inputs, axis)
    g = f32_grad(grad_out, np.concatenate(arrays, axis=ax).shape, OP)
    bounds = np.cumsum([0] + [x.shape[ax] for x in arrays])
    return tuple(exact_ref(np.take(g, np.arange(lo, hi), axis=ax)) for lo, hi in zip(bounds[:-1], bounds[1:]))
