"""Reference for matmul: op(a) @ op(b), op swapping the last two axes when its flag is set; rank 2, or
rank 3 with equal batch extents. Every element is an exact dot product of length k rounded once (kind
'reduction', magnitude sum_i |a_i b_i|, terms k). VJP dA = g @ op(b)^T and dB = op(a)^T @ g, each mapped
back through its flag, are matrix products of the same kind (terms N and M)."""

import numpy as np

from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs, matmul_exact

OP = "matmul"


def _t(x):
    return np.swapaxes(x, -1, -2)


def product(a, b):
    """The exact product a @ b as a Reference (a [..., M, K], b [..., K, N])."""
    value, exact, magnitude = matmul_exact(a, b)
    return Reference(value, exact, magnitude, a.shape[-1], "reduction")


def _operands(inputs, trans_a, trans_b):
    a, b = f32_inputs(inputs, 2, OP)
    if a.ndim != b.ndim or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[0] != b.shape[0]):
        raise ReferenceInputError(
            f"matmul needs two rank-2 or two rank-3 operands with equal batch, got {a.shape} and {b.shape}")
    oa, ob = (_t(a) if trans_a else a), (_t(b) if trans_b else b)
    if oa.shape[-1] != ob.shape[-2]:
        raise ReferenceInputError(f"matmul: op(a) {oa.shape} and op(b) {ob.shape} do not share the inner extent")
    return a, b, oa, ob


def forward(inputs, *, trans_a=False, trans_b=False):
    _, _, oa, ob = _operands(inputs, trans_a, trans_b)
    return product(oa, ob)


def vjp(inputs, grad_out, *, trans_a=False, trans_b=False):
    a, b, oa, ob = _operands(inputs, trans_a, trans_b)
    g = f32_grad(grad_out, oa.shape[:-1] + ob.shape[-1:], OP)
    # transposing a product's result is the same set of dot products: (g op(b)^T)^T = op(b) g^T
    da = product(ob, _t(g)) if trans_a else product(g, _t(ob))
    db = product(_t(g), oa) if trans_b else product(_t(oa), g)
    return da, db
