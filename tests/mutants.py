"""Planted-bug kernels and correct kernels with other valid orders, as plain NumPy functions (the
mutation suite, tests/test_mutations.py, runs them on the CPU; tests/test_cuda_mutations.py wraps
them for the GPU). Each planted bug is a class of defect real kernels have; each is written so that
it is wrong only in that one way."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from conformance.orders import left_fold
from conformance.rounding import round_ratio_to_f32
from engine.providers.reference import tree_sum

F32 = np.float32


def reduced(a, axes, keepdims):
    """a with the reduced axes moved last and merged, and the output shape."""
    nd = a.ndim
    red = tuple(range(nd)) if axes is None else tuple(sorted({x % nd for x in axes}))
    keep = [d for d in range(nd) if d not in red]
    terms = int(np.prod([a.shape[d] for d in red], dtype=np.int64))   # -1 fails on empty axes
    moved = np.transpose(a, keep + list(red)).reshape([a.shape[d] for d in keep] + [terms])
    shape = tuple(1 if d in red else a.shape[d] for d in range(nd)) if keepdims else \
        tuple(a.shape[d] for d in keep)
    return moved, shape


def tree_reduce(a, axes=None, keepdims=False):
    """The reference provider's sum: the fixed pairwise tree over the reduced terms."""
    moved, shape = reduced(a, axes, keepdims)
    with np.errstate(all="ignore"):
        return tree_sum(moved, (moved.ndim - 1,)).astype(F32).reshape(shape)


def sum_vjp(inputs, out, g, axes=None, keepdims=False):
    """g broadcast back over the reduced axes. The tests carry their own rule so that they judge
    the forward order alone (the engine's local rule is checked by the reference campaign)."""
    a = inputs[0]
    red = range(a.ndim) if axes is None else [x % a.ndim for x in axes]
    kept = tuple(1 if d in red else s for d, s in enumerate(a.shape))
    return (np.array(np.broadcast_to(np.reshape(g, kept), a.shape), dtype=F32),)


def exp64(a):
    with np.errstate(all="ignore"):
        return np.exp(a.astype(np.float64)).astype(F32)


# --- planted bugs: values ---------------------------------------------------------------------

def add_truncating(a, b):
    exact = a.astype(np.float64) + b.astype(np.float64)
    r = exact.astype(F32)
    with np.errstate(all="ignore"):
        away = np.abs(r.astype(np.float64)) > np.abs(exact)
        return np.where(away & np.isfinite(exact), np.nextafter(r, F32(0)), r).astype(F32)


def sum_dropping_last(a, axes=None, keepdims=False):
    moved, shape = reduced(a, axes, keepdims)
    return tree_sum(moved[..., :-1], (moved.ndim - 1,)).reshape(shape)


def matmul_float16(a, b, trans_a=False, trans_b=False):
    a = (np.swapaxes(a, -1, -2) if trans_a else a).astype(np.float16)
    b = (np.swapaxes(b, -1, -2) if trans_b else b).astype(np.float16)
    with np.errstate(all="ignore"):
        return np.matmul(a, b).astype(F32)     # float16 products and float16 accumulation


def mul_flushing(a, b):
    with np.errstate(all="ignore"):
        r = a * b
    tiny = (r != 0) & (np.abs(r) < F32(2.0 ** -126))
    return np.where(tiny, np.copysign(F32(0), r), r).astype(F32)


def relu_keeping_negative_zero(a):
    return np.where((a > 0) | np.isnan(a), a, np.where(a == 0, a, F32(0))).astype(F32)


def relu_two_bugs(a):
    """-0 kept (signed-zero) and NaN turned into 0 (nan-mismatch): two reasons, two classes."""
    return np.where(a > 0, a, np.where(a == 0, a, F32(0))).astype(F32)


def masked_softmax_sentinel(a, mask, axis=-1):
    x = np.where(mask, a.astype(np.float64), -1000.0)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(F32)


def softmax_without_max(a, axis=-1):
    """float32 exp(a) / sum exp(a): overflows to inf/inf = NaN for entries above 88.7."""
    with np.errstate(all="ignore"):
        e = np.exp(a)
        return (e / np.sum(e, axis=axis, keepdims=True, dtype=F32)).astype(F32)


def sub_vjp_wrong_sign(inputs, out, g):
    return g, g          # the second input's gradient should be -g


def broadcast_wrong_axis(a, shape):
    """Reads source axis d with the output index of the next output axis."""
    out_idx = np.indices(shape)
    nd = len(shape)
    lead = nd - a.ndim
    sel = []
    for d in range(a.ndim):
        o = lead + d
        src = out_idx[(o + 1) % nd] if a.shape[d] != 1 else np.zeros(shape, dtype=np.int64)
        sel.append(src % a.shape[d] if a.shape[d] else src)
    return np.ascontiguousarray(a[tuple(sel)] if a.ndim else np.broadcast_to(a, shape))


def sum_nondeterministic(a, axes=None, keepdims=False):
    moved, shape = reduced(a, axes, keepdims)
    perm = np.random.default_rng().permutation(moved.shape[-1])   # a new order on every call
    return tree_sum(moved[..., perm], (moved.ndim - 1,)).reshape(shape)


# --- planted bugs: memory and layout (issue 20's blind spots) ------------------------------------

def relu_clobbering_input(a):
    """A right answer, computed in place: the caller's input is overwritten with the result."""
    out = np.where((a > 0) | np.isnan(a), a, F32(0)).astype(F32)
    a[...] = out
    return out.copy()


def sub_vjp_negating_grad_in_place(inputs, out, g):
    """Right gradients, but the cotangent it was handed is negated in place."""
    ga = g.copy()
    np.negative(g, out=g)
    return ga, g.copy()


def exp_prefix_only(a):
    """Writes only the first 1024 elements of its output; the rest is whatever memory held."""
    out = np.empty(a.shape, F32)
    flat, src = out.reshape(-1), a.reshape(-1)
    n = min(src.size, 1024)
    flat[:n] = exp64(src[:n])
    return out


def sum_mirroring_negative_axes(a, axes=None, keepdims=False):
    """Reads a negative axis -k as axis k - 1 (counting from the front): right for rank 1 and for
    non-negative axes, wrong for every other negative axis."""
    if axes is not None:
        axes = tuple(x if x >= 0 else -x - 1 for x in (axes if isinstance(axes, tuple)
                                                        else (axes,)))
    return tree_reduce(a, axes, keepdims)


def sum_assuming_sorted_axes(a, axes=None, keepdims=False):
    """Reduces only the first axis of an unsorted tuple (a kernel that walks axes in order and
    stops when one goes backwards)."""
    if isinstance(axes, tuple) and len(axes) > 1:
        norm = [x % a.ndim for x in axes]
        if norm != sorted(norm):
            axes = axes[:1]
    return tree_reduce(a, axes, keepdims)


def sum_dropping_tail_block(a, axes=None, keepdims=False):
    """Sums in blocks of 1024 terms and drops the last partial block when there are more than
    1024 terms: right for every short reduction, wrong only on long ones."""
    moved, shape = reduced(a, axes, keepdims)
    n = moved.shape[-1]
    if n > 1024 and n % 1024:
        moved = moved[..., : n - n % 1024]
    return tree_sum(moved, (moved.ndim - 1,)).reshape(shape)


# --- correct kernels with other valid orders -----------------------------------------------------

def sum_reversed(a, axes=None, keepdims=False):
    moved, shape = reduced(a, axes, keepdims)
    return left_fold(moved[..., ::-1]).reshape(shape)


def sum_pairwise(a, axes=None, keepdims=False):
    moved, shape = reduced(a, axes, keepdims)
    with np.errstate(all="ignore"):
        return np.sum(moved, axis=-1, dtype=F32).reshape(shape)   # NumPy's pairwise summation


def sum_left(a, axes=None, keepdims=False):
    moved, shape = reduced(a, axes, keepdims)
    return left_fold(moved).reshape(shape)


def _fma_exact(acc, x, y):
    """acc + x * y rounded once, with exact rationals (an FMA by definition)."""
    if not (np.isfinite(acc) and np.isfinite(x) and np.isfinite(y)):
        with np.errstate(all="ignore"):
            return F32(np.float64(acc) + np.float64(x) * np.float64(y))
    r = Fraction(float(acc)) + Fraction(float(x)) * Fraction(float(y))
    neg_zero = r == 0 and np.signbit(acc) and np.signbit(F32(x) * F32(y))
    return round_ratio_to_f32(r.numerator, r.denominator, bool(neg_zero))


def matmul_fma_left(a, b, trans_a=False, trans_b=False):
    """A left-fold FMA dot product per element, exactly: slow, so long K uses the float64 pair
    trick of conformance.orders (one rounding of acc + a*b, the same value)."""
    from conformance.orders import dot_fold
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    if a.shape[-1] > 64:
        return dot_fold(a[..., :, None, :], np.swapaxes(b, -1, -2)[..., None, :, :], fused=True)
    out = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=F32)
    for idx in np.ndindex(out.shape):
        *batch, i, j = idx
        row, col = a[tuple(batch) + (i,)], b[tuple(batch) + (slice(None), j)]
        if row.size == 0:
            continue
        with np.errstate(all="ignore"):
            acc = F32(row[0] * col[0])
        for k in range(1, row.size):
            acc = _fma_exact(acc, row[k], col[k])
        out[idx] = acc
    return out


def matmul_float64(a, b, trans_a=False, trans_b=False):
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    with np.errstate(all="ignore"):
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(F32)


def softmax_f32(a, axis=-1):
    """An honest float32 softmax: exp(a - max) / sum, every step in float32, no declared bound
    (the derived bound judges it); empty rows and special values as docs/OPS.md states."""
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
        e = np.exp((a - m).astype(F32))
        return (e / np.sum(e, axis=axis, keepdims=True, dtype=F32)).astype(F32)


def masked_softmax_f32(a, mask, axis=-1):
    """An honest float32 hard-masked softmax: the maximum over participants only, blocked entries
    exactly 0, a row with no participant all zeros."""
    mask = np.asarray(mask, dtype=bool)
    with np.errstate(all="ignore"):
        m = np.max(np.where(mask, a, F32(-np.inf)), axis=axis, keepdims=True, initial=-np.inf)
        m = np.where(np.any(mask, axis=axis, keepdims=True), m, F32(0))   # no participant: 0
        e = np.where(mask, np.exp((a - m).astype(F32)), F32(0)).astype(F32)
        s = np.sum(e, axis=axis, keepdims=True, dtype=F32)
        return np.where(mask & (s != 0), e / np.where(s == 0, F32(1), s), F32(0)).astype(F32)
