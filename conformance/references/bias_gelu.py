"""Reference for bias_gelu (x [..., d], b [d]): gelu(s) with s = float32(x + b), the composition
add -> gelu: the float32 sum (NumPy's float32 add is correctly rounded) is exact input to the gelu
reference (references/gelu.py: evaluated exactly, rounded once), kind 'composite'. VJP: dx =
gelu's VJP at s with the cotangent g (exactly, rounded once); db = sum over the leading axes of
g gelu'(s), magnitude sum |g gelu'(s)|, terms = rows.

db. Under fast.exact_only() each column is one Ziv loop over the interval terms (exact, rounded
once). Otherwise (the campaign's path) the terms are gelu's VJP 'exact' values (each the float64
nearest its exact term, so within 2^-53 of it relatively) summed by math.fsum (correctly rounded):
`exact` is then within 2^-53 (sum |terms| + |db|) of the exact column sum, a term the derived
bound carries (conformance/families/fused.py, REFERENCE_REL), and `value` its float32
rounding (one ulp off the correct rounding only where the exact sum lies within that distance of
a float32 midpoint). A column holding a NaN term (s NaN) is NaN; the infinities' terms are the
limits (g * 1 at +inf, g * -0 at -inf), exact in float64.
"""

from __future__ import annotations

import math

import numpy as np

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references import gelu
from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs
from conformance.references.fast import sums as fast_sums

OP = "bias_gelu"


def _sum(inputs):
    x, b = f32_inputs(inputs, 2, OP)
    if x.ndim == 0 or b.shape != (x.shape[-1],):
        raise ReferenceInputError(f"{OP} takes x [..., d] and b [d], got {x.shape} and {b.shape}")
    with np.errstate(all="ignore"):
        return x, (x + b).astype(np.float32)       # one correctly rounded float32 addition


def forward(inputs):
    _, s = _sum(inputs)
    return gelu.forward((s,))


def vjp(inputs, grad_out):
    x, s = _sum(inputs)
    g = f32_grad(grad_out, x.shape, OP)
    (dx,) = gelu.vjp((s,), g)
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])                 # explicit: reshape(-1, 0) cannot infer it
    terms = dx.exact.reshape(rows, d)
    value, exact = np.zeros(d, np.float32), np.zeros(d)
    magnitude = np.abs(terms).sum(axis=0)
    s_cols, g_cols = s.reshape(rows, d), g.reshape(rows, d)
    slow = 0
    finite = np.all(np.isfinite(terms), axis=0)
    done = np.zeros(d, bool)
    if fast_paths.enabled() and finite.any():      # the exact float64-term sums, vectorised
        cols = np.flatnonzero(finite)
        v32, v64, ok, zero = fast_sums.sum_rows(np.ascontiguousarray(terms[:, cols].T))
        neg = np.all(np.signbit(terms[:, cols]), axis=0) & (rows > 0)   # IEEE: -0 only then
        v32 = np.where(zero, np.where(neg, np.float32(-0.0), np.float32(0.0)), v32)
        v64 = np.where(zero, np.where(neg, -0.0, 0.0), v64)
        value[cols[ok]], exact[cols[ok]] = v32[ok], v64[ok]
        done[cols[ok]] = True
    for j in np.flatnonzero(~done):
        col = terms[:, j]
        if np.isnan(col).any():
            value[j], exact[j] = np.nan, np.nan
        elif fast_paths.enabled() or not np.all(np.isfinite(s_cols[:, j])):
            exact[j] = math.fsum(col.tolist()) if rows else 0.0
            value[j] = rounding.round_f64_to_f32(np.array([exact[j]]))[0]
        else:
            v32, v64 = rounding.ziv(lambda ctx, *a: _column(ctx, a, rows), *s_cols[:, j],
                                    *g_cols[:, j])
            value[j], exact[j] = v32, v64
            slow += rows
    db = Reference(value, exact, magnitude, rows, "composite", slow)
    return (Reference(dx.value, dx.exact, np.abs(dx.exact), 1, "composite",
                      dx.slow_elements), db)


def _column(ctx, args, rows):
    total = ctx.mpf(0)
    for a, gi in zip(args[:rows], args[rows:]):
        total += gelu._dgelu(ctx, a, gi)
    return total
