"""Reference for max_pool: each window's first NaN, else its first maximum in row-major window order,
padding -inf; the selected float32 itself (kind 'exact', signed zero included).
VJP: g of each window goes to its selected cell (nothing for a padding cell); an input cell gets the exact
sum of the g of the windows that selected it, rounded once: kind 'reduction', terms the number of those
windows, magnitude sum |g|."""

import numpy as np

from conformance.references._common import Reference, sum_last_axis
from conformance.references._pool import checked, grad

OP = "max_pool"


def _selected(v: np.ndarray) -> np.ndarray:
    """[planes, out, win] -> the selected window position per window (first NaN, else first max)."""
    nan = np.isnan(v)
    first_nan = np.argmax(nan, axis=-1)
    with np.errstate(invalid="ignore"):
        top = np.max(np.where(nan, -np.inf, v), axis=-1, keepdims=True)
    first_max = np.argmax(v == top, axis=-1)
    return np.where(nan.any(axis=-1), first_nan, first_max)


def forward(inputs, **params):
    x, w = checked(inputs, params, OP)
    v = w.plane_values(x, -np.inf)
    if v.size == 0:
        out = np.zeros(w.shape, np.float32)
        return Reference(out, out.astype(np.float64), kind="exact")
    pick = _selected(v)
    value = np.take_along_axis(v, pick[..., None], -1)[..., 0].astype(np.float32).reshape(w.shape)
    return Reference(value, value.astype(np.float64), kind="exact")


def vjp(inputs, grad_out, **params):
    x, w = checked(inputs, params, OP)
    g = grad(grad_out, w, OP).reshape(w.planes, w.cells.shape[0])
    v = w.plane_values(x, -np.inf)
    chosen = np.zeros(v.shape, dtype=bool)
    if v.size:
        np.put_along_axis(chosen, _selected(v)[..., None], True, -1)
    terms = np.broadcast_to(g.astype(np.float64)[..., None], v.shape) if v.size else v
    matrix, valid, counts = w.gathered(chosen, terms)
    value, exact, magnitude = sum_last_axis(matrix.astype(np.float32), valid)
    shape = x.shape
    return (Reference(value.reshape(shape), exact.reshape(shape), magnitude.reshape(shape),
                      counts.reshape(shape), "reduction"),)
