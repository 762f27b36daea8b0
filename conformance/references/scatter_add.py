"""Reference for scatter_add: a copy of base with src[..., j, ...] added into position indices[j] along
`axis`, duplicates accumulating; each element is the exact sum base + its sources rounded once (kind
'reduction', terms 1 + number of sources, -0 only when every term is -0). VJP (g, take(g, indices, axis)),
exact. The grouped exact sum here also serves gather's VJP."""

import numpy as np

from conformance.references._common import (
    Reference, ReferenceInputError, check_indices, exact_ref, f32_grad, f32_inputs, normalize_axis,
    sum_last_axis,
)

OP = "scatter_add"


def grouped_sum(base: np.ndarray, src: np.ndarray, idx: np.ndarray, ax: int) -> Reference:
    """Exact base + scattered src along axis ax, rounded once; terms = 1 + sources per element."""
    rest = int(np.prod(base.shape[:ax] + base.shape[ax + 1:], dtype=np.int64))
    b = np.moveaxis(base, ax, 0).reshape(base.shape[ax], rest)
    s = np.moveaxis(src, ax, 0).reshape(len(idx), rest)
    counts = np.bincount(idx, minlength=b.shape[0]) if idx.size else np.zeros(b.shape[0], np.int64)
    width = 1 + int(counts.max(initial=0))
    terms = np.zeros(b.shape + (width,), np.float32)
    valid = np.zeros(terms.shape, bool)
    terms[..., 0], valid[..., 0] = b, True
    filled = np.ones(b.shape[0], np.int64)
    for j, target in enumerate(idx):  # each target's row of terms: base, then its sources (the sum is exact)
        terms[target, :, filled[target]] = s[j]
        valid[target, :, filled[target]] = True
        filled[target] += 1
    value, exact, magnitude = sum_last_axis(terms, valid)
    moved_shape = (base.shape[ax],) + base.shape[:ax] + base.shape[ax + 1:]

    def back(y):
        return np.moveaxis(np.asarray(y).reshape(moved_shape), 0, ax)

    count = back(np.broadcast_to(counts[:, None], b.shape))
    return Reference(back(value), back(exact), back(magnitude), 1 + count, "reduction")


def _checked(inputs, axis, indices):
    base, src = f32_inputs(inputs, 2, OP)
    ax = normalize_axis(axis, base.ndim, OP)
    idx = check_indices(indices, base.shape[ax], OP)
    want = base.shape[:ax] + (len(idx),) + base.shape[ax + 1:]
    if src.shape != want:
        raise ReferenceInputError(f"scatter_add: src has shape {src.shape}, expected {want}")
    return base, src, ax, idx


def forward(inputs, *, axis, indices):
    base, src, ax, idx = _checked(inputs, axis, indices)
    return grouped_sum(base, src, idx, ax)


def vjp(inputs, grad_out, *, axis, indices):
    base, src, ax, idx = _checked(inputs, axis, indices)
    g = f32_grad(grad_out, base.shape, OP)
    return exact_ref(g), exact_ref(np.take(g, idx, axis=ax))
