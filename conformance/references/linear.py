"""Reference for linear: x @ w^T + b (x [..., in], w [out, in], b [out]); each element is the exact sum of
in + 1 terms (the dot product and b) rounded once: kind 'reduction', magnitude sum |x_i w_i| + |b|.
VJP (g @ w, g^T x summed over leading axes, g summed over leading axes), exact sums rounded once."""

import math

import numpy as np

from conformance.references._common import (
    Reference, ReferenceInputError, f32_grad, f32_inputs, matmul_exact, sum_last_axis,
)

OP = "linear"


def _checked(inputs):
    x, w, b = f32_inputs(inputs, 3, OP)
    if x.ndim < 1 or w.ndim != 2 or b.ndim != 1 or w.shape[1] != x.shape[-1] or b.shape[0] != w.shape[0]:
        raise ReferenceInputError(
            f"linear needs x [..., in], w [out, in], b [out]; got {x.shape}, {w.shape}, {b.shape}")
    lead = x.shape[:-1]
    return x.reshape(math.prod(lead), x.shape[-1]), w, b, lead


def forward(inputs):
    x2, w, b, lead = _checked(inputs)
    # b joins the dot product as one more term: [x, 1] @ [w^T; b]
    xa = np.concatenate([x2, np.ones((x2.shape[0], 1), np.float32)], axis=1)
    wa = np.concatenate([w.T, b[None, :]], axis=0)
    value, exact, magnitude = matmul_exact(xa, wa)
    shape = lead + (w.shape[0],)
    return Reference(value.reshape(shape), exact.reshape(shape), magnitude.reshape(shape), x2.shape[1] + 1, "reduction")


def vjp(inputs, grad_out):
    x2, w, b, lead = _checked(inputs)
    g = f32_grad(grad_out, lead + (w.shape[0],), OP).reshape(x2.shape[0], w.shape[0])
    dx = Reference(*matmul_exact(g, w), terms=w.shape[0], kind="reduction")
    dx = Reference(dx.value.reshape(lead + (x2.shape[1],)), dx.exact.reshape(lead + (x2.shape[1],)),
                   dx.magnitude.reshape(lead + (x2.shape[1],)), dx.terms, "reduction")
    dw = Reference(*matmul_exact(np.ascontiguousarray(g.T), x2), terms=x2.shape[0], kind="reduction")
    db = Reference(*sum_last_axis(np.ascontiguousarray(g.T)), terms=x2.shape[0], kind="reduction")
    return dx, dw, db
