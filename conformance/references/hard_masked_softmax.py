"""Reference for hard_masked_softmax: softmax over the entries whose mask is true; a false entry has an
exactly zero numerator and takes no part in the max or the sum (its value, even NaN, is ignored); a row
with no participant is all +0. VJP: softmax's on the participants, +0 elsewhere and on blocked rows.
Kind 'composite', magnitude as softmax's, terms = the row's participant count per element."""

import numpy as np

from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs
from conformance.references.softmax import softmax_rows_counted, softmax_vjp_rows_counted, to_rows

OP = "hard_masked_softmax"


def _rows_and_mask(a, mask, axis):
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != a.shape:
        raise ReferenceInputError(f"{OP}: mask must be a bool array of shape {a.shape}, got {mask.dtype} {mask.shape}")
    rows, back = to_rows(a, axis, OP)
    part, _ = to_rows(mask, axis, OP)
    part = part.astype(bool)
    terms = np.broadcast_to(part.sum(axis=-1, keepdims=True), part.shape)
    return rows, part, back, back(terms).astype(np.int64)


def forward(inputs, *, mask, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    rows, part, back, terms = _rows_and_mask(a, mask, axis)
    value, exact, slow = softmax_rows_counted(rows, part)
    return Reference(back(value), back(exact), back(np.abs(exact)), terms, "composite", slow)


def vjp(inputs, grad_out, *, mask, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    rows, part, back, terms = _rows_and_mask(a, mask, axis)
    g_rows, _ = to_rows(g, axis, OP)
    _, s_exact, _ = softmax_rows_counted(rows, part)
    value, exact, magnitude, slow = softmax_vjp_rows_counted(rows, g_rows, part, s_exact)
    return (Reference(back(value), back(exact), back(magnitude), terms, "composite", slow),)
