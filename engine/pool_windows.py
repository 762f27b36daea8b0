"""Pooling windows in NumPy (docs/OPS.md, pooling): output extents, the flat input offset of every
window cell, and the three pooling rules with their gradients, for the reference provider and the
CPU VJP rules. Imports NumPy only, so engine/ops/ and engine/providers/ can both use it.

Arrays are viewed as [planes][spatial...] (planes = N * C). A window cell is an input offset in its
plane or -1 (padding); cells run in row-major window order (last kernel axis fastest)."""
from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def out_extent(n: int, k: int, s: int, p: int, d: int) -> int:
    """floor((n + 2p - d(k-1) - 1) / s) + 1, and 0 when the input is empty, the padding exceeds
    half the window (2p > k) or the padded input is shorter than one window (no phantom window)."""
    span = d * (k - 1) + 1
    if n == 0 or 2 * p > k or n + 2 * p < span:
        return 0
    return (n + 2 * p - span) // s + 1


def out_spatial(spatial, k, s, p, d) -> tuple[int, ...]:
    return tuple(out_extent(*a) for a in zip(spatial, k, s, p, d))


def window_cells(spatial, k, s, p, d) -> np.ndarray:
    """int64 [out_size, win]: the input offset of each window cell, -1 for padding."""
    r = len(spatial)
    out = out_spatial(spatial, k, s, p, d)
    cells = np.zeros(out + tuple(k), dtype=np.int64)
    inside = np.ones(out + tuple(k), dtype=bool)
    for j in range(r):
        pos = (np.arange(out[j], dtype=np.int64)[:, None] * s[j] - p[j]
               + np.arange(k[j], dtype=np.int64)[None, :] * d[j])
        shape = [1] * (2 * r)
        shape[j], shape[r + j] = out[j], k[j]
        pos = pos.reshape(shape)
        inside &= (pos >= 0) & (pos < spatial[j])
        cells = cells * spatial[j] + pos
    cells = np.where(inside, cells, -1)
    return cells.reshape(math.prod(out), math.prod(k))


def _planes(x, r):
    lead = x.shape[:x.ndim - r]
    return x.reshape(math.prod(lead), math.prod(x.shape[x.ndim - r:])), lead


def _values(xp, cells, pad):
    """[planes, out_size, win] window values, `pad` at padding cells."""
    safe = np.where(cells >= 0, cells, 0)
    return np.where(cells >= 0, xp[:, safe], pad)


def _scatter(planes, in_size, cells, terms):
    """float64 [planes, in_size]: terms [planes, ...] added into their cells (cells broadcast to
    the terms' shape; -1 takes nothing), then rounded once by the caller."""
    acc = np.zeros((planes, in_size), dtype=np.float64)
    cells = np.broadcast_to(cells, terms.shape)
    live = cells >= 0
    if live.any():
        rows = np.broadcast_to(np.arange(planes).reshape((planes,) + (1,) * (terms.ndim - 1)),
                               terms.shape)
        np.add.at(acc, (rows[live], cells[live]), terms[live])
    return acc


def _geometry(x, kernel_size, stride, padding, dilation):
    r = len(kernel_size)
    spatial = x.shape[x.ndim - r:]
    xp, lead = _planes(x, r)
    cells = window_cells(spatial, kernel_size, stride, padding, dilation)
    out = out_spatial(spatial, kernel_size, stride, padding, dilation)
    return xp, lead, cells, out


def max_pool(x, kernel_size, stride, padding, dilation):
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(-np.inf))
    # numpy.argmax returns the first NaN, else the first maximum: the rule of docs/OPS.md
    arg = np.argmax(v, axis=-1) if v.shape[-1] else np.zeros(v.shape[:-1], np.int64)
    return np.take_along_axis(v, arg[..., None], -1)[..., 0].astype(F32).reshape(lead + out)


def max_pool_grad(x, g, kernel_size, stride, padding, dilation):
    """g of each window to its selected cell (none for a padding cell), summed in float64."""
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(-np.inf))
    planes = xp.shape[0]
    if v.size == 0:
        return np.zeros(x.shape, F32)
    arg = np.argmax(v, axis=-1)                                  # [planes, out_size]
    chosen = np.take_along_axis(np.broadcast_to(cells, v.shape), arg[..., None], -1)[..., 0]
    with np.errstate(all="ignore"):
        acc = _scatter(planes, xp.shape[1], chosen,
                       g.reshape(planes, cells.shape[0]).astype(np.float64))
    return acc.astype(F32).reshape(x.shape)


def avg_pool(x, kernel_size, stride, padding, dilation):
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(0.0)).astype(np.float64)
    with np.errstate(all="ignore"):
        y = v.sum(axis=-1) / math.prod(kernel_size)
    return y.astype(F32).reshape(lead + out)


def avg_pool_grad(x, g, kernel_size, stride, padding, dilation):
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    planes = xp.shape[0]
    g64 = g.reshape(planes, cells.shape[0], 1).astype(np.float64)
    with np.errstate(all="ignore"):
        acc = _scatter(planes, xp.shape[1], cells, np.broadcast_to(g64, (planes,) + cells.shape))
        acc = acc / math.prod(kernel_size)     # the sum of g, then one division
    return acc.astype(F32).reshape(x.shape)


def _smooth_parts(x, beta, kernel_size, stride, padding, dilation):
    """Window values (padding 0), pivot, the terms e = exp(beta (v - pivot)) and rest = S - 1, the
    sum of the terms but the first pivot's (exp(0) = 1 exactly), so log1p(rest) keeps a rest below
    2^-53; a NaN or an infinite pivot makes rest NaN (the IEEE formula's exp(inf - inf))."""
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(0.0)).astype(np.float64)
    with np.errstate(all="ignore"):
        pick = (np.argmax if beta > 0 else np.argmin)(v, axis=-1)[..., None] if v.shape[1] else \
            np.zeros(v.shape[:2] + (1,), np.int64)
        pivot = np.take_along_axis(v, pick, -1) if v.shape[1] else np.zeros(v.shape[:2] + (1,))
        e = np.exp(beta * (v - pivot))
        others = np.arange(v.shape[-1]) != pick
        rest = np.where(others, e, 0.0).sum(axis=-1, keepdims=True)
        rest = np.where(pivot - pivot == 0, rest, pivot - pivot)
    return xp, lead, cells, out, pivot, e, rest


def smooth_max_pool(x, beta, kernel_size, stride, padding, dilation):
    """pivot + log1p(rest) / beta in float64, rounded once (beta rounded to float32 first)."""
    beta = float(F32(beta))
    _, lead, _, out, pivot, _, rest = _smooth_parts(x, beta, kernel_size, stride, padding,
                                                    dilation)
    with np.errstate(all="ignore"):
        y = pivot[..., 0] + np.log1p(rest[..., 0]) / beta
    return y.astype(F32).reshape(lead + out)


def smooth_max_pool_grad(x, g, beta, kernel_size, stride, padding, dilation):
    """dx = sum over windows of g * softmax(beta v) weights e / (1 + rest), in float64, rounded
    once."""
    beta = float(F32(beta))
    xp, _, cells, _, _, e, rest = _smooth_parts(x, beta, kernel_size, stride, padding, dilation)
    planes = xp.shape[0]
    with np.errstate(all="ignore"):
        terms = g.reshape(planes, cells.shape[0], 1).astype(np.float64) * (e / (1.0 + rest))
        acc = _scatter(planes, xp.shape[1], cells, terms)
    return acc.astype(F32).reshape(x.shape)
