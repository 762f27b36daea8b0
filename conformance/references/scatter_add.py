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


_DENSE_WIDTH = 64  # targets with more sources than this are summed on their own rows


def grouped_sum(base: np.ndarray, src: np.ndarray, idx: np.ndarray, ax: int) -> Reference:
    """Exact base + scattered src along axis ax, rounded once; terms = 1 + sources per element.

    Each target's terms (its base, then its sources) form one row of sum_last_axis: targets with at
    most _DENSE_WIDTH sources share a dense [targets, rest, width] layout (filled by one sort of the
    indices, no Python loop per index), each busier target gets its own [rest, 1 + count] rows, so a
    million sources on one target never make a million-by-million array.
    """
    rest = int(np.prod(base.shape[:ax] + base.shape[ax + 1:], dtype=np.int64))
    b = np.moveaxis(base, ax, 0).reshape(base.shape[ax], rest)
    s = np.moveaxis(src, ax, 0).reshape(len(idx), rest)
    t_n = b.shape[0]
    counts = np.bincount(idx, minlength=t_n) if idx.size else np.zeros(t_n, np.int64)
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    rank = np.arange(idx.size) - np.searchsorted(sidx, sidx, side="left")  # position among its target's sources
    light = counts <= _DENSE_WIDTH
    width = 1 + int(counts[light].max(initial=0))
    terms = np.zeros((t_n, rest, width), np.float32)
    valid = np.zeros(terms.shape, bool)
    terms[:, :, 0], valid[:, :, 0] = b, True
    take = light[sidx]
    terms[sidx[take], :, 1 + rank[take]] = s[order[take]]
    valid[sidx[take], :, 1 + rank[take]] = True
    sums = sum_last_axis(terms, valid)
    value, exact, magnitude = (np.array(a) for a in sums)
    slow = sums.slow
    for t in np.flatnonzero(~light):  # busy targets: their own rows [rest, 1 + count]
        rows = np.concatenate([b[t][None, :], s[order[sidx == t]]], axis=0).T
        heavy = sum_last_axis(np.ascontiguousarray(rows))
        value[t], exact[t], magnitude[t] = heavy
        slow += heavy.slow
    moved_shape = (base.shape[ax],) + base.shape[:ax] + base.shape[ax + 1:]

    def back(y):
        return np.moveaxis(np.asarray(y).reshape(moved_shape), 0, ax)

    count = back(np.broadcast_to(counts[:, None], b.shape))
    return Reference(back(value), back(exact), back(magnitude), 1 + count, "reduction", slow)


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
