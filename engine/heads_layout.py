"""The packed multi-head layout of attention_heads (engine/ops/attention_heads.py): q, k, v and
out [B, T, H*D], head j in columns j*D .. (j+1)*D - 1. split_heads and merge_heads are the
composition's reshape -> permute(0, 2, 1, 3) -> reshape and its inverse (copies: no rounding), and
causal_mask its causal triangle expanded per (batch, head); NumPy or CuPy arrays alike. A module of
its own (NumPy only) so the reference provider and the tape's rule share them."""
from __future__ import annotations

import numpy as np


def _xp(array):
    if type(array).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def split_heads(x, heads: int):
    """[B, T, H*D] -> [B*H, T, D], contiguous."""
    xp = _xp(x)
    b, t, w = x.shape
    d = w // heads
    return xp.ascontiguousarray(
        xp.transpose(x.reshape(b, t, heads, d), (0, 2, 1, 3))).reshape(b * heads, t, d)


def merge_heads(y, batch: int, heads: int):
    """[B*H, T, D] -> [B, T, H*D], contiguous: split_heads' inverse."""
    xp = _xp(y)
    _, t, d = y.shape
    return xp.ascontiguousarray(
        xp.transpose(y.reshape(batch, heads, t, d), (0, 2, 1, 3))).reshape(batch, t, heads * d)


def causal_mask(xp, problems: int, t: int):
    """bool [problems, t, t]: key s participates for query r iff s <= r, for every problem."""
    tri = xp.tril(xp.ones((t, t), dtype=bool))
    return xp.ascontiguousarray(xp.broadcast_to(tri, (problems, t, t)))
