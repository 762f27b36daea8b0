"""Reference for clamp: min(max(a, lo), hi) with the max/min rules (equality keeps a, so
clamp(-0, 0, 1) = -0; NaN propagates), lo and hi rounded to float32 first; VJP g where lo < a < hi,
else +0 (0 at the bounds and for NaN)."""

import numpy as np

from conformance.references._common import ReferenceInputError, exact_ref, f32_grad, f32_inputs, param_f32
from conformance.references.max import select

OP = "clamp"


def _bounds(lo, hi):
    lo32, hi32 = param_f32(lo), param_f32(hi)
    if not lo32 <= hi32:
        raise ReferenceInputError(f"clamp needs lo <= hi (as float32), got lo={lo!r}, hi={hi!r}")
    return lo32, hi32


def forward(inputs, *, lo, hi):
    (a,) = f32_inputs(inputs, 1, OP)
    lo32, hi32 = _bounds(lo, hi)
    lo_a, hi_a = np.full(a.shape, lo32, np.float32), np.full(a.shape, hi32, np.float32)
    m = select(a, lo_a, lo_a > a)
    return exact_ref(select(m, hi_a, hi_a < m))


def vjp(inputs, grad_out, *, lo, hi):
    (a,) = f32_inputs(inputs, 1, OP)
    lo32, hi32 = _bounds(lo, hi)
    g = f32_grad(grad_out, a.shape, OP)
    return (exact_ref(np.where((lo32 < a) & (a < hi32), g, np.float32(0.0))),)
