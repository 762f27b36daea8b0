"""Reference for slice: a[..., start:stop, ...] along `axis` (0 <= start <= stop <= extent, step 1);
VJP: +0 everywhere except g placed in the slice. Both exact."""

import numpy as np

from conformance.references._common import ReferenceInputError, exact_ref, f32_grad, f32_inputs, normalize_axis

OP = "slice"


def _index(a, axis, start, stop):
    ax = normalize_axis(axis, a.ndim, OP)
    if not 0 <= start <= stop <= a.shape[ax]:
        raise ReferenceInputError(f"slice: need 0 <= start <= stop <= {a.shape[ax]}, got start={start}, stop={stop}")
    return (slice(None),) * ax + (slice(int(start), int(stop)),)


def forward(inputs, *, axis, start, stop):
    (a,) = f32_inputs(inputs, 1, OP)
    return exact_ref(a[_index(a, axis, start, stop)])


def vjp(inputs, grad_out, *, axis, start, stop):
    (a,) = f32_inputs(inputs, 1, OP)
    index = _index(a, axis, start, stop)
    g = f32_grad(grad_out, a[index].shape, OP)
    out = np.zeros(a.shape, np.float32)
    out[index] = g
    return (exact_ref(out),)
