"""Reference for permute: transpose(a, perm); VJP transpose(g, inverse perm). Both exact."""

import numpy as np

from conformance.references._common import ReferenceInputError, exact_ref, f32_grad, f32_inputs

OP = "permute"


def _perm(a, perm):
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(a.ndim)):
        raise ReferenceInputError(f"permute: perm {perm} is not a permutation of range({a.ndim})")
    return perm


def forward(inputs, *, perm):
    (a,) = f32_inputs(inputs, 1, OP)
    return exact_ref(np.transpose(a, _perm(a, perm)))


def vjp(inputs, grad_out, *, perm):
    (a,) = f32_inputs(inputs, 1, OP)
    perm = _perm(a, perm)
    g = f32_grad(grad_out, tuple(a.shape[p] for p in perm), OP)
    return (exact_ref(np.transpose(g, np.argsort(perm))),)
