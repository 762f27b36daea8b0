"""The constants and gamma(k) of the accumulating ops' float32 error models (accumulate.py and the
op groups it dispatches to, accumulate_norms.py and accumulate_attention.py), held once."""
from __future__ import annotations

import math

import numpy as np

U32 = 2.0 ** -24         # float32's unit roundoff
T32 = 8 * U32            # float32 exp, log, rsqrt: 4 ulps (accumulate_norms.py says whose)
TINY32 = 2.0 ** -149     # float32's least subnormal
MARGIN = 2.0 ** -50
SLACK = 1 + 2.0 ** -30   # the newer ops' bounds, raised by their own float64 evaluation's error


def gamma(k) -> np.ndarray:
    """Higham's gamma(k) = k u / (1 - k u), u = 2^-24."""
    k = np.asarray(k, dtype=np.float64)
    return k * U32 / (1 - k * U32)


def tiny_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """2^-150 times the number of products a_ij b_jk below float32's normal range (each such
    product's rounding error in float32, at most), per element of a @ b."""
    tiny = lambda t: ((t > 0) & (t < 2.0 ** -126)).astype(np.float64)   # noqa: E731
    aa, ab = np.abs(a), np.abs(b)
    if aa.size == 0 or ab.size == 0 or \
            np.min(aa, initial=np.inf, where=aa > 0) * \
            np.min(ab, initial=np.inf, where=ab > 0) >= 2.0 ** -126:    # float16's always are
        return np.zeros((a.shape[0], b.shape[1]))
    counts = np.sum(tiny(aa[:, :, None] * ab[None, :, :]), axis=1)
    return counts * TINY32 / 2


def row_fsum(g: np.ndarray) -> np.ndarray:
    """Each row's sum over the last axis, kept as a length-1 axis: math.fsum's correctly rounded
    sum of a finite row, NumPy's of one holding an infinity or NaN (whose sum is that special)."""
    out = np.empty(g.shape[:-1] + (1,))
    for idx in np.ndindex(g.shape[:-1]):
        row = g[idx]
        out[idx] = math.fsum(row) if np.all(np.isfinite(row)) else float(np.sum(row))
    return out
