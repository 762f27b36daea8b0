"""Planted bugs and correct kernels of issue 35's classes 1 and 5, as plain NumPy functions
(tests/test_mutations_sums.py runs them on the CPU; tests/test_cuda_mutations.py's `on_gpu`
wrapper runs the same functions as CUDA capsules, host arithmetic on device arrays).

Class 1, lost terms in long reductions: each bug loses a term, or a block of terms, only in long
reductions and away from the edge set's marker positions (the first, the last and the first term
after a power of two), where gamma_n * sum|terms| hides the loss of ordinary values; on inputs whose
sum is exact in every order the allowed error is 0 and the loss shows.

Class 5, order claims: a selective_scan that contracts with FMA while it declares separate
products, one that runs the native kernel's chunked order while it declares the left recurrence,
and an mse_loss declaring a fixed left order that no program can check."""
from __future__ import annotations

import math

import numpy as np

from conformance.orders import left_fold
from engine.pool_windows import _geometry, _values
from mutants import reduced

F32 = np.float32


def _pairwise(moved):
    with np.errstate(all="ignore"):
        return np.sum(moved, axis=-1, dtype=F32)       # NumPy's pairwise float32 summation


# --- class 1: planted bugs ------------------------------------------------------------------------

DROPPED_TERM = 12288      # the first term of a 4096-term block that is not a power of two


def sum_dropping_term_12288(a, axes=None, keepdims=False):
    """A sum in 4096-term blocks whose fourth block (a grid-stride hand-over that is not a power
    of two) skips its first term: term 12288 of every row of more than 12288 terms is lost;
    shorter rows are right."""
    moved, shape = reduced(a, axes, keepdims)
    if moved.shape[-1] > DROPPED_TERM:
        moved = np.delete(moved, DROPPED_TERM, axis=-1)
    return _pairwise(moved).reshape(shape)


MEAN_BLOCK = 4096


def mean_dropping_a_block(a, axes=None, keepdims=False):
    """A mean over blocks of 4096 terms whose block loop, for a row whose length is not a power of
    two and spans more than four blocks, never reads block 3 (terms 12288 .. 16383), yet divides by
    the full count."""
    moved, shape = reduced(a, axes, keepdims)
    n = moved.shape[-1]
    if n > 4 * MEAN_BLOCK and n & (n - 1):
        moved = np.concatenate([moved[..., : 3 * MEAN_BLOCK], moved[..., 4 * MEAN_BLOCK:]], -1)
    with np.errstate(all="ignore"):
        return (_pairwise(moved) / F32(n) if n else _pairwise(moved) * F32(np.nan)) \
            .astype(F32).reshape(shape)


DROPPED_K = 5000


def matmul_dropping_one_k_term(a, b, trans_a=False, trans_b=False):
    """A K-blocked matmul whose tile loop loses k = 5000 (inside the second 4096-wide tile) when K
    is longer than that; float64 accumulation otherwise, rounded once."""
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    if a.shape[-1] > DROPPED_K:
        a = np.delete(a, DROPPED_K, axis=-1)
        b = np.delete(b, DROPPED_K, axis=-2)
    with np.errstate(all="ignore"):
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(F32)


LOST_COLLISION = 4096


def scatter_add_losing_a_colliding_update(base, src, axis, indices):
    """An accumulation whose 12-bit retry counter wraps on a target's 4096th colliding update
    (the 4097th source into one target, counted in source order), which is lost: targets with
    fewer updates are right."""
    idx = np.asarray(indices, dtype=np.int64)
    out = np.moveaxis(np.array(base, dtype=np.float64), axis, 0)
    s = np.moveaxis(np.asarray(src, dtype=np.float64), axis, 0)
    seen = np.zeros(out.shape[0], dtype=np.int64)
    keep = np.ones(idx.size, dtype=bool)
    for j, t in enumerate(idx):       # a Python loop over the sources: a few ms per 2^16
        seen[t] += 1
        keep[j] = seen[t] != LOST_COLLISION + 1
    with np.errstate(all="ignore"):
        np.add.at(out, idx[keep], s[keep])
    return np.ascontiguousarray(np.moveaxis(out, 0, axis)).astype(F32)


LOST_CELL = 1024


def avg_pool_dropping_a_window_element(x, kernel_size, stride, padding, dilation):
    """Sums each window in tiles of 1024 cells and loses the first cell of the second tile (window
    cell 1024 in row-major window order) of every window longer than that, yet divides by the full
    window."""
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(0.0)).astype(np.float64)
    if v.shape[-1] > LOST_CELL:
        v[..., LOST_CELL] = 0.0
    with np.errstate(all="ignore"):
        return (v.sum(axis=-1) / math.prod(kernel_size)).astype(F32).reshape(lead + out)


# --- class 1: correct kernels in other valid orders -----------------------------------------------

def mean_vjp(inputs, out, g, axes=None, keepdims=False):
    """g / n broadcast back over the reduced axes (one float32 division per element)."""
    a = inputs[0]
    red = range(a.ndim) if axes is None else [x % a.ndim for x in axes]
    n = math.prod(a.shape[d] for d in red)
    kept = tuple(1 if d in red else s for d, s in enumerate(a.shape))
    if n == 0:
        return (np.zeros(a.shape, F32),)
    q = (np.reshape(g, kept) / F32(n)).astype(F32)
    return (np.array(np.broadcast_to(q, a.shape), dtype=F32),)


def sum_in_blocks(a, axes=None, keepdims=False):
    """Left folds over blocks of 1024 terms, then a left fold of the block sums (a two-pass GPU
    sum's order), in float32."""
    moved, shape = reduced(a, axes, keepdims)
    n = moved.shape[-1]
    if n == 0:
        return np.zeros(shape, F32)
    count = -(-n // 1024)
    blocks = np.concatenate([moved, np.zeros(moved.shape[:-1] + (count * 1024 - n,), F32)], -1) \
        .reshape(moved.shape[:-1] + (count, 1024))
    with np.errstate(all="ignore"):
        return left_fold(np.sum(blocks, axis=-1, dtype=F32)).reshape(shape)


def mean_pairwise(a, axes=None, keepdims=False):
    """NumPy's pairwise float32 sum, then one float32 division by n (NaN for an empty row)."""
    moved, shape = reduced(a, axes, keepdims)
    n = moved.shape[-1]
    with np.errstate(all="ignore"):
        return (_pairwise(moved) / F32(n) if n else _pairwise(moved) * F32(np.nan)) \
            .astype(F32).reshape(shape)


def linear_float32(x, w, b):
    """x @ w^T in float32 (BLAS sgemm: its order and FMA use), then one float32 add of the bias."""
    with np.errstate(all="ignore"):
        return (np.matmul(x, w.T) + b).astype(F32)


def scatter_add_reversed(base, src, axis, indices):
    """The sources added in float32 from the last to the first."""
    idx = np.asarray(indices, dtype=np.int64)
    out = np.moveaxis(np.array(base, dtype=F32), axis, 0)
    s = np.moveaxis(np.asarray(src, dtype=F32), axis, 0)
    with np.errstate(all="ignore"):
        np.add.at(out, idx[::-1], s[::-1])
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))


def avg_pool_float32_left(x, kernel_size, stride, padding, dilation):
    """native CUDA's order: a float32 left fold of each window's cells, then one division."""
    xp, lead, cells, out = _geometry(x, kernel_size, stride, padding, dilation)
    v = _values(xp, cells, F32(0.0)).astype(F32)
    with np.errstate(all="ignore"):
        return (left_fold(v) / F32(math.prod(kernel_size))).astype(F32).reshape(lead + out) \
            if math.prod(kernel_size) <= 1 << 24 else \
            (left_fold(v).astype(np.float64) / math.prod(kernel_size)).astype(F32) \
            .reshape(lead + out)


# --- class 5: selective_scan orders ---------------------------------------------------------------

def _scan_rows(A, B, X):
    seq, state = X.shape
    token = A.ndim == 2
    rows = seq if token else 1
    return A.reshape(rows, state), B.reshape(rows, state), (lambda t: t if token else 0)


def _fma(acc, x, y):
    """acc + x * y rounded once (vectorised; conformance.orders' exact pair trick)."""
    from conformance.orders import _fma as fma
    return fma(acc.astype(F32), x.astype(F32), y.astype(F32))


def scan_fma(A, B, X, h0):
    """h[t] = fma(A[t], h[t-1], B[t] X[t]): the product of the carried state contracted into the
    add (what -fmad=true makes of TorchLean's a * h + b * x)."""
    a, b, row = _scan_rows(A, B, X)
    out = np.empty(X.shape, F32)
    h = np.array(h0, dtype=F32)
    with np.errstate(all="ignore"):
        for t in range(X.shape[0]):
            h = _fma((b[row(t)] * X[t]).astype(F32), a[row(t)], h)
            out[t] = h
    return out


CHUNK = 32


def scan_chunked(A, B, X, h0):
    """The chunked parallel scan (native_cuda's order from 256 steps on, here at every length):
    per 32-step chunk the coefficient product and the recurrence from 0, then the carries in chunk
    order, then each chunk's recurrence from its carry; float32, products and sums separate."""
    a, b, row = _scan_rows(A, B, X)
    seq, state = X.shape
    out = np.empty(X.shape, F32)
    carry = np.array(h0, dtype=F32)
    with np.errstate(all="ignore"):
        for start in range(0, seq, CHUNK):
            stop = min(start + CHUNK, seq)
            p, q = np.ones(state, F32), np.zeros(state, F32)
            for t in range(start, stop):
                p = (p * a[row(t)]).astype(F32) if t > start else a[row(t)].astype(F32)
                q = (a[row(t)] * q + b[row(t)] * X[t]).astype(F32)
            h = carry
            for t in range(start, stop):
                h = (a[row(t)] * h + b[row(t)] * X[t]).astype(F32)
                out[t] = h
            carry = (p * carry + q).astype(F32)
    return out


def mse_pairwise(pred, target):
    """mean((pred - target)^2) with NumPy's pairwise float32 sum: a correct value, whose declared
    fixed left order nothing can check (mse_loss has no order program)."""
    with np.errstate(all="ignore"):
        d = (pred - target).astype(F32)
        n = d.size
        s = np.sum((d * d).astype(F32), dtype=F32)
        return (s / F32(n) if n else s * F32(np.nan)).astype(F32)
