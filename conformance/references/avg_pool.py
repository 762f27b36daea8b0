"""Reference for avg_pool: the exact sum of each window (padding counts as 0) divided by the full window
size win = prod(kernel_size), rounded once: kind 'reduction', terms win, magnitude sum |x| / win.
VJP: an input cell gets the exact sum of g over the windows that hold it, divided by win and rounded
once: kind 'reduction', terms the number of those windows, magnitude sum |g| / win."""

import numpy as np

from conformance.references._common import Reference, sum_last_axis
from conformance.references._pool import checked, grad

OP = "avg_pool"


def forward(inputs, **params):
    x, w = checked(inputs, params, OP)
    v = w.plane_values(x, 0.0).reshape(-1, w.win).astype(np.float32)
    value, exact, magnitude = sum_last_axis(v, divisor=w.win)
    return Reference(value.reshape(w.shape), exact.reshape(w.shape), magnitude.reshape(w.shape), w.win,
                     "reduction")


def vjp(inputs, grad_out, **params):
    x, w = checked(inputs, params, OP)
    g = grad(grad_out, w, OP).reshape(w.planes, w.cells.shape[0], 1).astype(np.float64)
    every = np.ones((w.planes,) + w.cells.shape, dtype=bool)
    matrix, valid, counts = w.gathered(every, np.broadcast_to(g, every.shape))
    value, exact, magnitude = sum_last_axis(matrix.astype(np.float32), valid, divisor=w.win)
    shape = x.shape
    return (Reference(value.reshape(shape), exact.reshape(shape), magnitude.reshape(shape),
                      counts.reshape(shape), "reduction"),)
