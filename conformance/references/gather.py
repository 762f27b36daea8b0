"""Reference for gather: take(a, indices, axis) (exact). VJP: scatter_add of g into zeros of a's shape,
exact sums rounded once (kind 'reduction', terms = times each position was gathered; a +0 start makes
an exact zero +0)."""

import numpy as np

from conformance.references._common import Reference, check_indices, exact_ref, f32_grad, f32_inputs, normalize_axis
from conformance.references.scatter_add import grouped_sum

OP = "gather"


def forward(inputs, *, axis, indices):
    (a,) = f32_inputs(inputs, 1, OP)
    ax = normalize_axis(axis, a.ndim, OP)
    return exact_ref(np.take(a, check_indices(indices, a.shape[ax], OP), axis=ax))


def vjp(inputs, grad_out, *, axis, indices):
    (a,) = f32_inputs(inputs, 1, OP)
    ax = normalize_axis(axis, a.ndim, OP)
    idx = check_indices(indices, a.shape[ax], OP)
    g = f32_grad(grad_out, a.shape[:ax] + (len(idx),) + a.shape[ax + 1:], OP)
    ref = grouped_sum(np.zeros(a.shape, np.float32), g, idx, ax)
    return (Reference(ref.value, ref.exact, ref.magnitude, ref.terms - 1, "reduction"),)
