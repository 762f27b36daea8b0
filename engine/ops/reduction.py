"""Sums, means, the mean-squared-error loss and the fused cross-entropy loss, with their local
VJP rules."""
from __future__ import annotations

import numpy as np

from engine.errors import IndexOutOfRangeError, ParameterTypeError, ShapeError
from engine.ops import _checks
from engine.ops import _tape_cuda as tape
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops._xp import contiguous, f32, xp_of
from engine.registry import device_rule
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op, RuntimeEntry as Entry


def _norm_axes(op: str, a: Tensor, axes) -> tuple[int, ...] | None:
    if axes is None:
        return None
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    elif isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        # A float or a string here failed inside the iteration, as a bare TypeError.
        raise ParameterTypeError(f"{op}: axes must be None, an int or a sequence of ints, got "
                                 f"{type(axes).__name__} {axes!r}; pass e.g. axes=1 or "
                                 "axes=(0, 1)")
    out = tuple(sorted(_checks.axis(op, ax, a.ndim) for ax in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: axes {tuple(axes)} repeat an axis")
    return out


def _out_shape(a: Tensor, axes, keepdims) -> tuple[int, ...]:
    red = range(a.ndim) if axes is None else axes
    if keepdims:
        return tuple(1 if d in red else s for d, s in enumerate(a.shape))
    return tuple(s for d, s in enumerate(a.shape) if d not in red)


def reduce_sum(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:
    ax = _norm_axes("reduce_sum", a, axes)
    return apply(Op.reduce_sum, (a,), _out_shape(a, ax, keepdims),
                 {"axes": ax, "keepdims": bool(keepdims)})


def reduce_mean(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:
    ax = _norm_axes("reduce_mean", a, axes)
    return apply(Op.reduce_mean, (a,), _out_shape(a, ax, keepdims),
                 {"axes": ax, "keepdims": bool(keepdims)})


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    if pred.shape != target.shape:
        raise ShapeError(f"mse_loss: pred shape {pred.shape} differs from target shape "
                         f"{target.shape}; pass equal shapes")
    return apply(Op.mse_loss, (pred, target), ())


def _reduced_axes(shape, axes) -> tuple[int, ...]:
    """The reduced axes as non-negative indices: a handler is called with the axes as given
    (negative, unsorted, or a bare int), not only as the wrapper normalises them."""
    if axes is None:
        return tuple(range(len(shape)))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({int(ax) % len(shape) for ax in axes})) if shape else ()


def _expand(g, shape, axes, keepdims):
    xp = xp_of(g)
    red = _reduced_axes(shape, axes)
    kept = tuple(1 if d in red else s for d, s in enumerate(shape))
    return xp.broadcast_to(g.reshape(kept), shape)


@local_vjp(Op.reduce_sum)
@saves()
def _reduce_sum_vjp(inputs, out, g, axes, keepdims):
    return (contiguous(_expand(g, inputs[0].shape, axes, keepdims)),)


@local_vjp(Op.reduce_mean, tape=("tl_tape_div_scalar",))
@saves()
def _reduce_mean_vjp(inputs, out, g, axes, keepdims):
    shape = inputs[0].shape
    red = _reduced_axes(shape, axes)
    n = 1
    for d in red:
        n *= shape[d]
    if on_device(g):   # the broadcast back is a copy; tl_tape_div_scalar divides by f32(n)
        return (tape.of_g("tl_tape_div_scalar", contiguous(_expand(g, shape, axes, keepdims)),
                          n),)
    xp = xp_of(g)
    return (contiguous(_expand(g, shape, axes, keepdims) / f32(xp, n)),)


@local_vjp(Op.mse_loss, tape=("tl_tape_mse",))
@saves(0, 1)
def _mse_vjp(inputs, out, g):
    pred, target = inputs
    if on_device(g):
        return tape.mse(pred, target, g, max(pred.size, 1))        # tl_tape_mse: d64, then (d, -d)
    xp = xp_of(g)
    # In float64: p - t of two float32 values near the range limit overflows float32.
    d64 = (pred.astype(xp.float64) - target.astype(xp.float64)) * (
        2.0 * g.astype(xp.float64) / max(pred.size, 1))
    d = d64.astype(xp.float32)
    return d, -d


# --- cross_entropy: one tape op for log_softmax + gather + reduce_mean + scale(-1) -------------

def _targets(targets, rows: int, classes: int):
    """The targets as int64 indices in [0, classes), one per row (a host array checked entry by
    entry, or engine.indices.CheckedIndices checked by its bound)."""
    from engine.indices import CheckedIndices
    if isinstance(targets, CheckedIndices):
        if targets.upper > classes:
            raise IndexOutOfRangeError(
                f"cross_entropy: targets are checked below {targets.upper}, which may reach past "
                f"the {classes} classes of the logits; pass targets checked against {classes}")
        t = targets.data
    else:
        t = targets if type(targets).__module__.startswith("cupy") else np.asarray(targets)
        if t.size and t.dtype.kind not in "iu":
            raise ParameterTypeError(
                f"cross_entropy: targets must be integer class indices, got dtype {t.dtype}; "
                "pass one int per row")
        if t.ndim != 1:
            raise ShapeError(f"cross_entropy: targets must be 1-D (one class per row), got "
                             f"shape {tuple(t.shape)}")
        if t.size:
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or hi >= classes:
                bad = lo if lo < 0 else hi
                raise IndexOutOfRangeError(
                    f"cross_entropy: target {bad} is outside [0, {classes}) for logits with "
                    f"{classes} classes; pass class indices in range")
    if t.size != rows:
        raise ShapeError(f"cross_entropy: {t.size} targets for {rows} rows of logits; give one "
                         "target class per row")
    return t


def cross_entropy(logits: Tensor, targets) -> Tensor:
    """mean_i -log_softmax(logits[i])[targets[i]] (shape ()): logits [N, C], N, C >= 1, and N
    integer targets in [0, C) (a host array, or CheckedIndices on the device)."""
    if logits.ndim != 2:
        raise ShapeError(f"cross_entropy: takes logits [N, C] (rank 2), got shape "
                         f"{logits.shape}; reshape to one row of class scores per example")
    rows, classes = logits.shape
    if rows == 0 or classes == 0:
        raise ShapeError(f"cross_entropy: needs at least one row and one class, got logits "
                         f"shape {logits.shape}")
    t = _targets(targets, rows, classes)
    # the session's device, not the logits': apply() names a tensor on the other device
    from engine.session import current_session
    if current_session().device.label == "cuda" and not type(t).__module__.startswith("cupy"):
        import cupy
        t = cupy.asarray(t.astype(np.int64))
    elif not type(t).__module__.startswith("cupy"):
        t = t.astype(np.int64)
    return apply(Entry.cross_entropy, (logits,), (), {"targets": t})


def cross_entropy_grad64(x, targets, g):
    """(g / N)(softmax(x) - onehot) in float64, rounded once: for the target, -T / S when it is
    the first max k (T the sum of exp(x - max) without k's 1, S = 1 + T), else -(S - e_t) / S,
    so s_t - 1 never cancels; a NaN row (a NaN or +inf entry, or all -inf) is NaN."""
    x = x.astype(np.float64)
    n = x.shape[0]
    rows, t = np.arange(n), np.asarray(targets, np.int64).reshape(-1)
    k = np.argmax(x, axis=1)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=1, keepdims=True))
        rest = e.copy()
        rest[rows, k] = 0.0
        big_t = rest.sum(axis=1)
        s = 1.0 + big_t
        v = e / s[:, None]
        v[rows, t] = np.where(t == k, -(big_t / s), -((s - e[rows, t]) / s))
        out = (float(g) / n) * v
    nan_row = np.isnan(x).any(axis=1) | np.isposinf(x).any(axis=1) | np.isneginf(x).all(axis=1)
    out[nan_row] = np.nan
    return out.astype(np.float32)


@local_vjp(Entry.cross_entropy, tape=("xent.cu:tl_xent_bwd",))
def _cross_entropy_vjp(inputs, out, g, targets):
    if on_device(g):   # xent.cu's tl_xent_bwd: the same float64 formula, rounded once (lent by
        # the native-cuda provider through the registry: ops never import a provider)
        return device_rule(Entry.cross_entropy)(inputs, out, g, targets)
    return (cross_entropy_grad64(inputs[0], targets, g),)
