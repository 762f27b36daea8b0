"""Shared pieces of the per-op references: the Reference record, input checks, and the exact engines
(elementwise Ziv, elementwise rational, exact sums and exact matrix products) the op modules use. Each
engine takes the certified fast path of fast/ first where one exists (elements it cannot decide come
back here, counted in Reference.slow_elements); fast.exact_only() turns the fast paths off."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
from mpmath.libmp import MPZ_ONE, fone, from_man_exp, mpf_add, mpf_sub

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references.fast import elementwise as fast_elementwise
from conformance.references.fast import sums as fast_sums

KINDS = ("exact", "rounded", "transcendental", "reduction", "composite")


class ReferenceInputError(ValueError):
    """Inputs or parameters a reference cannot evaluate (wrong dtype, count, shape, axis or index)."""


@dataclass
class Reference:
    """The oracle's answer for one output (or one gradient) of an op.

    value: float32, the exact result correctly rounded once (ties to even, gradual underflow, overflow
        to inf); NaN where the exact result is NaN; signed zeros where the op defines them.
    exact: float64 nearest to the exact result (inf/nan mirrored); |got - exact| measures the error.
    magnitude: float64 per element, what gamma_k multiplies: sum |terms| of the sum, dot product or
        matrix product behind the element (Higham). Composites with an inner sum give the running-error
        magnitude of their final expression (each op module's docstring says which); None otherwise.
    terms: number k of terms summed per element (an int when uniform, else an int array); None for
        non-reducing ops.
    kind: 'exact' (bitwise, signed zero included), 'rounded' (one correctly rounded operation),
        'transcendental' (correctly rounded library function), 'reduction' (sum, dot, matrix product),
        'composite' (a formula of several operations evaluated exactly, then rounded once).
    slow_elements: how many elements (or rows, for row-wise exact paths) a certified fast path left
        to the exact path (0 when the fast path decided everything, or when there was none).
    """

    value: np.ndarray
    exact: np.ndarray
    magnitude: np.ndarray | None = None
    terms: np.ndarray | int | None = None
    kind: str = "rounded"
    slow_elements: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Reference kind {self.kind!r} is not one of {KINDS}")
        self.value = np.asarray(self.value, dtype=np.float32)
        self.exact = np.asarray(self.exact, dtype=np.float64)
        if self.value.shape != self.exact.shape:
            raise ValueError(f"value shape {self.value.shape} differs from exact shape {self.exact.shape}")
        if self.magnitude is not None:
            self.magnitude = np.broadcast_to(np.asarray(self.magnitude, dtype=np.float64), self.value.shape)


def f32_inputs(inputs: Sequence, count: int | None, op: str) -> tuple[np.ndarray, ...]:
    """Check the input tuple: `count` arrays (None: at least one), each float32."""
    inputs = tuple(inputs)
    if count is not None and len(inputs) != count:
        raise ReferenceInputError(f"{op} takes {count} input array(s), got {len(inputs)}")
    if count is None and not inputs:
        raise ReferenceInputError(f"{op} takes at least one input array, got none")
    out = []
    for i, x in enumerate(inputs):
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ReferenceInputError(f"{op} input {i} must be float32, got {x.dtype}; cast it before calling")
        out.append(x)
    return tuple(out)


def f32_grad(grad_out, shape: tuple, op: str) -> np.ndarray:
    """Check the cotangent: float32 of the output's shape."""
    (g,) = f32_inputs((grad_out,), 1, op + " grad_out")
    if g.shape != tuple(shape):
        raise ReferenceInputError(f"{op} grad_out has shape {g.shape}, the output has shape {tuple(shape)}")
    return g


def same_shape(arrays: Sequence[np.ndarray], op: str) -> None:
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ReferenceInputError(f"{op} operands must have equal shapes (use broadcast), got {sorted(shapes)}")


def param_f32(x: float) -> np.float32:
    """A float parameter as the float32 kernels see it: correctly rounded to float32 first."""
    return rounding.round_f64_to_f32(np.asarray([float(x)]))[0]


def ieee64(fn: Callable, *arrays: np.ndarray) -> np.ndarray:
    """fn evaluated in float64 IEEE arithmetic, warnings silenced (used for special values and signs)."""
    with np.errstate(all="ignore"):
        return np.asarray(fn(*[np.asarray(a, dtype=np.float64) for a in arrays]), dtype=np.float64)


def exact_ref(values: np.ndarray) -> Reference:
    """A reference for pure data movement or sign manipulation: the float32 values themselves."""
    values = np.array(values, dtype=np.float32)
    return Reference(values, values.astype(np.float64), kind="exact")


def _routed(arrays: Sequence[np.ndarray], route: np.ndarray | None) -> np.ndarray:
    shape = arrays[0].shape
    special = np.zeros(shape, dtype=bool)
    for a in arrays:
        special |= ~np.isfinite(a)
    if route is not None:
        special |= np.broadcast_to(route, shape)
    return special


def _special_values(ieee: np.ndarray, special: np.ndarray, fast) -> tuple[np.ndarray, np.ndarray]:
    """value/exact arrays holding the IEEE values at the special elements (everywhere without a fast
    path: the exact path overwrites the rest). With one, only the special elements are rounded."""
    exact = np.array(ieee, dtype=np.float64)
    if fast is None or not fast_paths.enabled():
        return rounding.round_f64_to_f32(ieee).copy(), exact
    value = np.zeros(ieee.shape, np.float32)
    value[special] = rounding.round_f64_to_f32(ieee[special])
    return value, exact


def _fast_split(arrays, special, ieee, fast, value, exact) -> np.ndarray:
    """Run a certified fast formula on the non-special elements; fill what it decides into the flat
    value/exact arrays and return the flat indices the exact path must still take."""
    todo = np.flatnonzero(~special.reshape(-1))
    if fast is None or not fast_paths.enabled() or todo.size == 0:
        return todo
    flat = [np.asarray(np.broadcast_to(a, special.shape), dtype=np.float64).reshape(-1) for a in arrays]
    v32, v64, done, zero = fast_elementwise.evaluate(fast, flat, todo)
    vflat, eflat, iflat = value.reshape(-1), exact.reshape(-1), ieee.reshape(-1)
    vflat[todo[done]], eflat[todo[done]] = v32[done], v64[done]
    zi = todo[zero]  # exact zeros: the sign the IEEE formula gives (the exact path's convention)
    signed = np.where(np.signbit(iflat[zi]), -0.0, 0.0)
    vflat[zi], eflat[zi] = signed.astype(np.float32), signed
    return todo[~(done | zero)]


def _unique_rows(flat: Sequence[np.ndarray], idx: np.ndarray, neg_zero: np.ndarray):
    """(representative indices, inverse): idx grouped by identical input bits and zero sign, so the
    exact path evaluates each distinct element once (constant or repeated inputs are common)."""
    keys = np.stack([f[idx].view(np.uint64) for f in flat] + [neg_zero.astype(np.uint64)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return idx[first], inverse.reshape(-1)


def elementwise_ziv(fn: Callable, arrays: Sequence[np.ndarray], ieee: np.ndarray, kind: str,
                    route: np.ndarray | None = None, fast: Callable | None = None) -> Reference:
    """Elementwise reference of fn(ctx, *xs) (an mpmath.iv formula) through the Ziv loop.

    Elements with a non-finite input, or where `route` is set, take the exact special value in `ieee`
    (inf, nan, a signed zero, or a limit such as tanh(inf) = 1: each op builds it). Elsewhere `ieee`
    only supplies the sign of an exact zero result, as the op's formula gives it in IEEE arithmetic.
    `fast` (optional) is a certified formula (fast/elementwise.py): the elements it decides skip the
    Ziv loop; the others, evaluated once per distinct input, are counted in `slow_elements`.
    """
    special = _routed(arrays, route)
    value, exact = _special_values(ieee, special, fast)
    todo = _fast_split(arrays, special, ieee, fast, value, exact)
    flat = [np.asarray(np.broadcast_to(a, special.shape), dtype=np.float64).reshape(-1) for a in arrays]
    vflat, eflat, iflat = value.reshape(-1), exact.reshape(-1), ieee.reshape(-1)
    if todo.size:
        nz = np.signbit(iflat[todo])
        reps, inverse = _unique_rows(flat, todo, nz)
        got = [rounding.ziv(fn, *[f[i] for f in flat], negative_zero=bool(np.signbit(iflat[i]))) for i in reps]
        vflat[todo] = np.array([g[0] for g in got], np.float32)[inverse]
        eflat[todo] = np.array([g[1] for g in got], np.float64)[inverse]
    return Reference(value, exact, kind=kind, slow_elements=int(todo.size))


def elementwise_rational(fn: Callable, arrays: Sequence[np.ndarray], ieee: np.ndarray, kind: str,
                         route: np.ndarray | None = None, fast: Callable | None = None) -> Reference:
    """Elementwise reference of a rational formula fn(*Fractions) -> Fraction, rounded exactly once.

    Special elements as in elementwise_ziv; a zero result takes the sign `ieee` gives it. `fast` as
    in elementwise_ziv.
    """
    special = _routed(arrays, route)
    value, exact = _special_values(ieee, special, fast)
    todo = _fast_split(arrays, special, ieee, fast, value, exact)
    flat = [np.asarray(np.broadcast_to(a, special.shape), dtype=np.float64).reshape(-1) for a in arrays]
    vflat, eflat, iflat = value.reshape(-1), exact.reshape(-1), ieee.reshape(-1)
    if todo.size:
        reps, inverse = _unique_rows(flat, todo, np.signbit(iflat[todo]))
        v32, v64 = [], []
        for i in reps:
            r = fn(*[Fraction(f[i]) for f in flat])  # Fraction(float) is exact
            neg_zero = bool(np.signbit(iflat[i]))
            v32.append(rounding.round_ratio_to_f32(r.numerator, r.denominator, neg_zero))
            v64.append(rounding.round_ratio_to_f64(r.numerator, r.denominator, neg_zero))
        vflat[todo] = np.array(v32, np.float32)[inverse]
        eflat[todo] = np.array(v64, np.float64)[inverse]
    return Reference(value, exact, kind=kind, slow_elements=int(todo.size))


def _round_scaled(ints: np.ndarray, scale: int, neg_zero: np.ndarray, divisor: int = 1) -> tuple[np.ndarray, ...]:
    """Round exact rationals ints * 2^-scale / divisor to float32 and float64, elementwise."""
    v32 = np.empty(ints.shape, dtype=np.float32)
    v64 = np.empty(ints.shape, dtype=np.float64)
    f32, f64 = v32.reshape(-1), v64.reshape(-1)
    for i, (n, z) in enumerate(zip(ints.reshape(-1).tolist(), neg_zero.reshape(-1).tolist())):
        if divisor == 1:
            f32[i], f64[i] = rounding.round_dyadic_to_f32(n, -scale, z), rounding.round_dyadic_to_f64(n, -scale, z)
        else:
            den = divisor << scale
            f32[i], f64[i] = rounding.round_ratio_to_f32(n, den, z), rounding.round_ratio_to_f64(n, den, z)
    return v32, v64


def _all_negative_zero(x64: np.ndarray, valid: np.ndarray) -> np.ndarray:
    # IEEE: an exact zero sum is -0 only when every addend is -0 (x + (-x) and +0 + -0 give +0).
    neg0 = (x64 == 0) & np.signbit(x64)
    return np.all(neg0 | ~valid, axis=-1) & np.any(valid, axis=-1)


class Sums(tuple):
    """(value32, exact64, magnitude64) of a sum or product reference, with `slow`: how many output
    elements the certified fast path left to the exact integer path (0 when it decided all, or there
    was none). A plain 3-tuple to unpack; the count rides along as an attribute."""

    slow: int = 0

    def __new__(cls, items, slow: int = 0):
        out = super().__new__(cls, items)
        out.slow = int(slow)
        return out


_FAST_MIN_TERMS = 2048  # below this many terms in all, the exact integer path is cheap enough


def _sum_ints(xv: np.ndarray, neg_zero: np.ndarray, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact integer path: (value32, exact64) of finite row sums of xv [..., n] / divisor."""
    ints, scale = rounding.f32_to_scaled_ints(xv)
    total = ints.sum(axis=-1) if ints.shape[-1] else np.zeros(ints.shape[:-1], dtype=object)
    total = np.asarray(total, dtype=object).reshape(xv.shape[:-1])
    return _round_scaled(total, scale, neg_zero, divisor)


def sum_last_axis(x: np.ndarray, valid: np.ndarray | None = None, divisor: int = 1) -> Sums:
    """Exact sums of float32 x over its last axis, divided by `divisor` and rounded once:
    (value32, exact64, magnitude64), magnitude = sum |x| / divisor.

    Only entries where `valid` is set take part. Finite sums are computed exactly on integers (every
    float32 is an integer multiple of 2^-149); a sum with an inf or nan term follows IEEE (float64
    cannot overflow on float32 terms, so its sum gives the right inf or nan). An empty sum is +0.
    Big inputs take the certified paths of fast/sums.py first (fsum per long row, a compensated sum
    over many short rows); the rows they leave go to the integer path.
    """
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    valid = np.ones(x64.shape, dtype=bool) if valid is None else np.broadcast_to(valid, x64.shape)
    xv = np.where(valid, x64, 0.0)
    finite_terms = np.isfinite(xv)
    xf = np.where(finite_terms, xv, 0.0)
    neg_zero = _all_negative_zero(x64, valid)
    slow = 0
    if fast_paths.enabled() and x64.size > _FAST_MIN_TERMS:
        n = x64.shape[-1]
        rows = xf.reshape(-1, n)
        v32, v64, ok, zero = fast_sums.sum_rows(rows, divisor)
        nz = neg_zero.reshape(-1)
        v32 = np.where(zero, np.where(nz, np.float32(-0.0), np.float32(0.0)), v32)
        v64 = np.where(zero, np.where(nz, -0.0, 0.0), v64)
        left = np.flatnonzero(~ok)
        if left.size:
            v32[left], v64[left] = _sum_ints(rows[left], nz[left], divisor)
        slow = left.size
        value, exact = v32.reshape(x64.shape[:-1]), v64.reshape(x64.shape[:-1])
    else:
        value, exact = _sum_ints(xf, neg_zero, divisor)
    with np.errstate(all="ignore"):
        ieee = np.sum(xv, axis=-1) / divisor
        magnitude = np.sum(np.abs(xv), axis=-1) / divisor
    nonfinite = ~np.all(finite_terms, axis=-1)
    value = np.where(nonfinite, rounding.round_f64_to_f32(ieee), value)
    exact = np.where(nonfinite, ieee, exact)
    return Sums((value, exact, magnitude), slow)


def _dot_ints(arow: np.ndarray, bcol: np.ndarray, neg_zero: bool) -> tuple:
    """The exact integer path for one dot product of finite float32 vectors (as float64)."""
    ia, sa = rounding.f32_to_scaled_ints(arow)
    ib, sb = rounding.f32_to_scaled_ints(bcol)
    total = sum(int(p) * int(q) for p, q in zip(ia.tolist(), ib.tolist()))
    return (rounding.round_dyadic_to_f32(total, -(sa + sb), neg_zero),
            rounding.round_dyadic_to_f64(total, -(sa + sb), neg_zero))


def _matmul_fast(a64: np.ndarray, b64: np.ndarray, skip: np.ndarray):
    """Certified dot products (fast/sums.py) for every output of a64 @ b64 not in `skip`, in blocks
    of about 2^20 products; returns (value32, exact64, slow count), skipped outputs left at 0."""
    shape = a64.shape[:-1] + b64.shape[-1:]
    k = a64.shape[-1]
    a3 = a64.reshape((-1,) + a64.shape[-2:])
    b3 = b64.reshape((-1,) + b64.shape[-2:])
    value, exact = np.zeros(shape, np.float32), np.zeros(shape)
    vflat, eflat = value.reshape(-1), exact.reshape(-1)
    todo = np.flatnonzero(~skip.reshape(-1))
    m, n = shape[-2], shape[-1]
    block = max(1, (1 << 20) // max(k, 1))
    slow = 0
    for start in range(0, todo.size, block):
        idx = todo[start:start + block]
        bi, rest = np.divmod(idx, m * n)
        mi, ni = np.divmod(rest, n)
        rows, cols = a3[bi, mi, :], b3[bi, :, ni]
        v32, v64, ok, zero, neg0 = fast_sums.dot_rows(rows, cols)
        v32 = np.where(zero, np.where(neg0, np.float32(-0.0), np.float32(0.0)), v32)
        v64 = np.where(zero, np.where(neg0, -0.0, 0.0), v64)
        for j in np.flatnonzero(~ok):
            v32[j], v64[j] = _dot_ints(rows[j], cols[j], bool(neg0[j]))
            slow += 1
        vflat[idx], eflat[idx] = v32, v64
    return value, exact, slow


def matmul_exact(a: np.ndarray, b: np.ndarray) -> Sums:
    """Exact a @ b for float32 a [..., M, K], b [..., K, N], rounded once: (value32, exact64, magnitude64).

    Finite products are summed exactly on integers; an output whose row or column holds an inf or nan
    follows IEEE over the exact float64 products (a float32 product is exact in float64). An exact zero
    is -0 only when every product is -0 (and K >= 1). Big products take the certified dot products of
    fast/sums.py first; what they leave goes to the integer path, one dot product at a time.
    """
    a64 = np.asarray(a, dtype=np.float32).astype(np.float64)
    b64 = np.asarray(b, dtype=np.float32).astype(np.float64)
    out_shape = a64.shape[:-1] + b64.shape[-1:]
    with np.errstate(all="ignore"):
        magnitude = np.matmul(np.abs(a64), np.abs(b64))
        # products[..., m, k, n]: only materialised where it decides a sign or a special value
        bad_rows = ~np.all(np.isfinite(a64), axis=-1)[..., :, None]
        bad_cols = ~np.all(np.isfinite(b64), axis=-2)[..., None, :]
    special = np.broadcast_to(bad_rows | bad_cols, out_shape)
    k = a64.shape[-1]
    slow = 0
    if fast_paths.enabled() and k * math.prod(out_shape) > _FAST_MIN_TERMS:
        value, exact, slow = _matmul_fast(a64, b64, special)
        zero = np.zeros(out_shape, dtype=bool)
        neg_zero = np.zeros(out_shape, dtype=bool)
    else:
        ia, sa = rounding.f32_to_scaled_ints(np.where(np.isfinite(a64), a64, 0.0))
        ib, sb = rounding.f32_to_scaled_ints(np.where(np.isfinite(b64), b64, 0.0))
        total = np.matmul(ia, ib) if k else np.zeros(out_shape, dtype=object)
        total = np.asarray(total, dtype=object)
        zero = np.vectorize(lambda t: t == 0, otypes=[bool])(total) if total.size else np.zeros(total.shape, bool)
        neg_zero = np.zeros(total.shape, dtype=bool)
    ieee = np.zeros(out_shape, dtype=np.float64)
    for idx in zip(*np.nonzero(special | zero)):
        *batch, m, n = idx
        with np.errstate(all="ignore"):
            prods = a64[(*batch, m, slice(None))] * b64[(*batch, slice(None), n)]
            ieee[idx] = np.sum(prods)
        neg_zero[idx] = prods.size > 0 and bool(np.all((prods == 0) & np.signbit(prods)))
    if not (fast_paths.enabled() and k * math.prod(out_shape) > _FAST_MIN_TERMS):
        value, exact = _round_scaled(total, sa + sb, neg_zero)
    value = np.where(special, rounding.round_f64_to_f32(ieee), value)
    exact = np.where(special, ieee, exact)
    return Sums((value, exact, magnitude), slow)


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    """A possibly negative axis as an index in range(ndim)."""
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ReferenceInputError(f"{op}: axis {axis!r} is out of range for rank {ndim}")
    return int(axis) % ndim


def normalize_axes(axes, ndim: int, op: str) -> tuple[int, ...]:
    """None (all axes) or a tuple of distinct, possibly negative, axes as sorted indices."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = tuple(sorted(normalize_axis(a, ndim, op) for a in axes))
    if len(set(out)) != len(out):
        raise ReferenceInputError(f"{op}: axes {tuple(axes)!r} repeat an axis")
    return out


def check_indices(indices, extent: int, op: str) -> np.ndarray:
    """A 1-D integer index array with every entry in [0, extent)."""
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise ReferenceInputError(f"{op}: indices must be a 1-D integer array, got {idx.dtype} of shape {idx.shape}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= extent):
        raise ReferenceInputError(f"{op}: indices must lie in [0, {extent}), got range [{idx.min()}, {idx.max()}]")
    return idx


# ---------------------------------------------------------------- interval helpers for the Ziv loop


def _point(ctx, raw):
    return ctx.make_mpf((raw, raw))


def iv_log1p(ctx, x):
    """log(1 + x) for an interval x >= 0, rigorously enclosed.

    Below 2^-(prec/2) the series bounds x - x^2/2 <= log1p(x) <= x - x^2/2 + x^3/3 (x >= 0, both sides
    increasing) are tighter than log(1 + x) at this precision; above it, 1 + x loses under prec/2 bits.
    (mpmath's own iv log1p drops the x^3/3 term without widening the interval.)
    """
    lo, hi = x._mpi_
    if hi[1] == 0 or hi[2] + hi[3] <= -(ctx.prec // 2):
        xl, xh = _point(ctx, lo), _point(ctx, hi)
        lower = (xl - xl * xl / 2)._mpi_[0]
        upper = (xh - xh * xh / 2 + xh * xh * xh / 3)._mpi_[1]
        return ctx.make_mpf((lower, upper))
    return ctx.log(1 + x)


def iv_exp(ctx, x):
    """ctx.exp(x) widened by a relative 2^(4 - prec), which makes it a rigorous enclosure.

    mpmath (1.4.1) rounds a fixed-point approximation of exp (prec + 14 bits) in the asked direction;
    when that approximation falls on the working grid both endpoints coincide and the "interval" can
    miss the true value: exp(x) for a tiny float32-derived x comes out as exactly 1 + x at 80 bits,
    dropping x^2/2. The widening covers the approximation's few units of 2^-(prec + 14). The one exact
    value, exp(0) = 1, stays a point (so exact ties such as g sigmoid(0) = g/2 still decide).
    """
    lo, hi = x._mpi_
    if lo[1] == 0 and hi[1] == 0 and lo[2] == 0 and hi[2] == 0:  # the point 0: exp(0) = 1 exactly
        return ctx.mpf(1)
    e = ctx.exp(x)
    d = from_man_exp(1, 4 - ctx.prec)
    widen = ctx.make_mpf((mpf_sub(fone, d, 0), mpf_add(fone, d, 0)))
    return e * widen


def iv_tanh(ctx, x):
    """tanh of an interval not straddling 0 (mpmath.iv has none): (1 - e^-2x) / (1 + e^-2x) for x >= 0,
    with the rigorous iv_exp (1 - e cancels, so an exp enclosure that misses would show)."""
    lo, hi = x._mpi_
    if lo[0] == 0:  # lo >= 0
        e = iv_exp(ctx, -2 * x)
        return (1 - e) / (1 + e)
    if hi[0] == 1 or hi[1] == 0:  # hi <= 0: tanh is odd
        return -iv_tanh(ctx, -x)
    raise ValueError(f"iv_tanh needs an interval of one sign, got {x}")


def iv_sigmoid(ctx, x):
    """1 / (1 + e^-x): no cancellation anywhere, so the interval stays tight."""
    return 1 / (1 + iv_exp(ctx, -x))


_STAND_IN = -1100  # log2 of a perturbation below every rounding boundary gap (2^-1075) near a dyadic


def iv_add_exact(ctx, point: tuple, t):
    """An interval for point + t: point an exact raw mpf that is a multiple of 2^-1074 (any sum of
    float32 or float64 values), t an interval of one sign.

    Interval arithmetic would round point + t outward onto the point itself whenever |t| is below the
    working precision's spacing at the point, and a point sitting on a rounding midpoint then never
    decides. Here the endpoints are exact sums instead. When |t| < 2^-1100 even that is pointless
    (and could need millions of bits), so the point moves by 2^-1101 in t's direction: every float32 or
    float64 rounding boundary other than the point lies at least 2^-1075 away, so that stand-in rounds
    exactly as point + t does (the returned interval then bounds the rounding, not the value).
    """
    lo, hi = t._mpi_
    if lo[1] == 0 and hi[1] == 0:  # t = 0
        return ctx.make_mpf((point, point))
    negative, positive = hi[0] == 1, lo[0] == 0 and lo[1] != 0  # strictly one sign: t != 0
    if max(lo[2] + lo[3], hi[2] + hi[3]) < _STAND_IN and (negative or positive):
        # the mantissa is MPZ_ONE, not 1: under mpmath's gmpy2 backend a raw mpf holds an mpz
        nudged = mpf_add(point, (int(negative), MPZ_ONE, _STAND_IN - 1, 1), 0)
        return ctx.make_mpf((nudged, nudged))
    return ctx.make_mpf((mpf_add(point, lo, 0), mpf_add(point, hi, 0)))
