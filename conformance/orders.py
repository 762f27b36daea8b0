"""Fixed evaluation orders as float32 programs: a declared fixed order is a promise of bits.

fixed-left: a left fold over the terms in row-major order of the reduced axes (the first term starts
the fold); products rounded (contraction=separate) or fused into the add (contraction=fused, one
rounding of acc + a*b); contraction=implementation-defined accepts either, element by element.
fixed-tree: the pairwise tree of `engine.providers.reference.tree_sum` (element i + element i + h,
h = ceil(n/2), level by level). selective_scan's fixed-left order is its recurrence in time order,
h[t] = A[t] h[t-1] + B[t] X[t] from h0: separate, each product and the sum rounded; fused, one of
the two products contracted into the add (either, the other product rounded first).

An op's record holds the program of its declared fixed order (OpSpec.fixed_order, an
OrderProgram here); conformance/order_claims.py holds a capsule's claim against it. A declared
fixed order that no program replays is an unchecked claim: the campaign fails it as
`unchecked-order-claim`, unless the op's record says why its fixed order can only be held to
bitwise repeatability (OpSpec.order_repeat_only: a value that passes through elementary functions
whose bits no policy fixes). Contraction is a promise of bits only together
with a fixed order: under any other order every association is admissible and a contraction
declaration changes neither the bound nor a check (docs/PLUGINS.md).
"""
from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.error_terms import OVERFLOW
from engine.providers.reference import tree_sum
from engine.types import Contraction, Reduction

F32 = np.float32


def left_fold(terms: np.ndarray) -> np.ndarray:
    """Left fold of float32 terms over the last axis, in float32 (empty: +0)."""
    if terms.shape[-1] == 0:
        return np.zeros(terms.shape[:-1], dtype=F32)
    # ufunc.accumulate is strictly sequential (out[j] = out[j-1] + t[j], one rounding each; no
    # pairwise or SIMD reassociation, which NumPy uses only in reduce), so its last column is the
    # left fold, bit for bit (NaN payloads included), without a Python step per column
    with np.errstate(all="ignore"):
        return np.add.accumulate(terms.astype(F32, copy=False), axis=-1)[..., -1].copy()


def _fma(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc + a * b with one rounding, elementwise: the product is exact in float64, TwoSum gives
    acc + p = s + err exactly, and fl32(s + err) = fl32(s) unless s is itself a float32 rounding
    boundary (a midpoint, or the overflow threshold), where err's sign picks the side
    (fused_fold_1d's argument; about five times faster than rounding the pair s + err in
    general, which the scan's per-step programs need). s is a boundary when its two float64
    neighbours round apart AND s is halfway between those two roundings (2s = up + down, exact
    for float32 neighbours) or is the overflow threshold: neighbours that round apart alone
    are not enough, since a neighbour may itself be a midpoint whose tie goes away from s
    (1 + 2^-23 + p with s one float64 below the midpoint 1 + 3 2^-24 once gave 1 + 2^-22)."""
    if acc.ndim == 1 and len(acc) <= 8 and type(a) is type(b) is np.ndarray and \
            a.shape == acc.shape == b.shape and \
            acc.dtype.kind == a.dtype.kind == b.dtype.kind == "f":
        small = _fma_small(acc, a, b)
        if small is not None:
            return small
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        acc64 = acc.astype(np.float64)
        s = acc64 + p
        bb = s - acc64
        err = (acc64 - (s - bb)) + (p - bb)
        out = s.astype(F32)
        tricky = np.isfinite(s) & np.isfinite(err) & (err != 0)
        if np.any(tricky):
            up = np.nextafter(s, np.inf).astype(F32)
            down = np.nextafter(s, -np.inf).astype(F32)
            boundary = (up != down) & ((s + s == up.astype(np.float64) + down)
                                       | (np.abs(s) == OVERFLOW))
            out = np.where(tricky & boundary, np.where(err > 0, up, down), out)
    return np.asarray(out, dtype=F32)


def _fma_small(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """_fma over a few elements of float arrays in Python floats, fused_fold_1d's step for each
    (a scan's state row: a few us a call where the vectorised one allocates some fifteen arrays,
    each poisoned under a capsule's run), or None where an input is not finite (NaN payloads are
    left to NumPy's evaluation). Finite inputs make every s and err finite, each rounded by
    _round_pair32."""
    xs, ys, accs = a.tolist(), b.tolist(), acc.tolist()
    isfinite = math.isfinite
    if not (all(map(isfinite, xs)) and all(map(isfinite, ys)) and all(map(isfinite, accs))):
        return None
    out = []
    for c, x, y in zip(accs, xs, ys):
        p = x * y
        s = c + p
        bb = s - c
        out.append(_round_pair32(s, (c - (s - bb)) + (p - bb)))
    return np.array(out, dtype=F32)


_F32_PACK = struct.Struct("<f")


def _round32(x: float) -> float:
    """A finite float64 correctly rounded to float32 (ties to even, gradual underflow, overflow to
    inf): C's double-to-float conversion, which struct's 'f' format performs."""
    if abs(x) >= OVERFLOW:     # at or above, round-to-nearest gives inf
        return math.copysign(math.inf, x)
    return _F32_PACK.unpack(_F32_PACK.pack(x))[0]


def _round_pair32(s: float, err: float) -> float:
    """fl32(s + err) for a finite TwoSum pair (s = fl64(acc + p), err its exact error): fl32(s),
    unless s is a float32 rounding boundary, where err's sign picks the side (_fma's argument
    and its boundary test, in Python floats)."""
    r = _round32(s)
    if err != 0.0 and r != s:
        up, down = _round32(math.nextafter(s, math.inf)), _round32(math.nextafter(s, -math.inf))
        if up != down and (s + s == up + down or abs(s) == OVERFLOW):
            r = up if err > 0 else down
    return r


def fused_fold_1d(a: np.ndarray, b: np.ndarray) -> np.float32:
    """The left-fold FMA dot product of two float32 vectors, acc = fl32(acc + a_k b_k), in plain
    Python floats: well under a microsecond a step where the vectorised _fma costs 50 us, for the
    long single dot products of the edge set. Exact by the argument of _fma: the product is exact
    in float64, TwoSum gives acc + p = s + err exactly, and fl32(s + err) = fl32(s) unless s is
    itself a float32 rounding boundary (a midpoint, or the overflow threshold), which the exact
    value then lies beyond on err's side: |err| is below a float64 ulp of s, so no other boundary
    is crossed. s is a boundary when _fma's test says so. Non-finite steps follow IEEE in float64,
    as _fma does."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a64.size == 0:
        return F32(0.0)
    if not (np.isfinite(a64).all() and np.isfinite(b64).all()):
        return _fused_fold_specials(a64.tolist(), b64.tolist())
    # Finite inputs: every product is finite and exact (so computed at once), acc + p cannot
    # overflow float64, and acc only leaves the finite range by rounding to +-inf, where it stays
    # (s = +-inf, which rounds to itself). fl32 is a store into a float32 memoryview cell: C's
    # double-to-float conversion, as struct's 'f' (_round32) but without its overflow check,
    # IEEE's round to nearest even with overflow to inf, and about four times cheaper. TwoSum's
    # err is only needed where fl32(s) != s, the boundary test only where err != 0: the loop is
    # _round_pair32 written out, its _round32 a cell store (the fold's hot path).
    ps = (a64 * b64).tolist()
    with np.errstate(all="ignore"):
        acc = float(F32(ps[0]))
    cell = memoryview(bytearray(4)).cast("f")
    nextafter, inf = math.nextafter, math.inf
    for p in itertools.islice(ps, 1, None):
        s = acc + p
        cell[0] = s
        r = cell[0]
        if r != s:
            bb = s - acc
            err = (acc - (s - bb)) + (p - bb)
            if err != 0.0:
                cell[0] = nextafter(s, inf)
                up = cell[0]
                cell[0] = nextafter(s, -inf)
                down = cell[0]
                if up != down and (s + s == up + down or abs(s) == OVERFLOW):
                    r = up if err > 0 else down
        acc = r
    return F32(acc)


def _fused_fold_specials(xs: list, ys: list) -> np.float32:
    """fused_fold_1d over inputs with an inf or a NaN: each step's products in Python, the
    non-finite steps rounded by NumPy (NaN payloads as _fma gives them)."""
    with np.errstate(all="ignore"):
        acc = float(F32(xs[0] * ys[0]))
    isfinite = math.isfinite
    for x, y in zip(xs[1:], ys[1:]):
        p = x * y
        s = acc + p
        if not (isfinite(s) and isfinite(p) and isfinite(acc)):
            with np.errstate(all="ignore"):
                acc = float(F32(s))
            continue
        bb = s - acc
        acc = _round_pair32(s, (acc - (s - bb)) + (p - bb))
    return F32(acc)


def dot_fold(a: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
    """Left-fold dot products over the last axis of a [..., k] and b [..., k] (broadcast)."""
    k = a.shape[-1]
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    if k == 0:
        return np.zeros(shape, dtype=F32)
    if fused and math.prod(shape) <= 16:   # few long dot products: fold each in plain floats
        aa, bb = np.broadcast_to(a, shape + (k,)), np.broadcast_to(b, shape + (k,))
        out = np.empty(shape, dtype=F32)
        for idx in np.ndindex(shape):
            out[idx] = fused_fold_1d(aa[idx], bb[idx])
        return out
    with np.errstate(all="ignore"):
        acc = np.broadcast_to(a[..., 0] * b[..., 0], shape).astype(F32)
        for j in range(1, k):
            if fused:
                acc = _fma(acc, np.broadcast_to(a[..., j], shape), np.broadcast_to(b[..., j], shape))
            else:
                acc = acc + (a[..., j] * b[..., j]).astype(F32)
    return acc


def dot_tree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        prods = (a * b).astype(F32)
    return tree_sum(prods, (prods.ndim - 1,))


def _reduced(a, axes):
    nd = a.ndim
    red = tuple(range(nd)) if axes is None else tuple(sorted(ax % nd for ax in axes))
    keep = [d for d in range(nd) if d not in red]
    terms = int(np.prod([a.shape[d] for d in red], dtype=np.int64))   # -1 fails on empty axes
    moved = np.transpose(a, keep + list(red)).reshape([a.shape[d] for d in keep] + [terms])
    out_keep = tuple(1 if d in red else a.shape[d] for d in range(nd))
    return moved, red, out_keep


def _sum(a, axes, keepdims, order):
    moved, red, keep_shape = _reduced(a, axes)
    out = left_fold(moved) if order is Reduction.fixed_left else tree_sum(a, red)
    return out.reshape(keep_shape) if keepdims else out.reshape(moved.shape[:-1])


def _matmul(a, b, trans_a, trans_b, order, fused):
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    # out[..., i, j] = dot(a[..., i, :], b[..., :, j])
    aa = a[..., :, None, :]
    bb = np.swapaxes(b, -1, -2)[..., None, :, :]
    if order is Reduction.fixed_tree:
        return dot_tree(aa, bb)
    return dot_fold(aa, bb, fused)


def _scatter_left(base, src, axis, indices):
    out = np.moveaxis(base.copy(), axis, 0)
    s = np.moveaxis(src, axis, 0)
    with np.errstate(all="ignore"):
        for j, i in enumerate(np.asarray(indices, dtype=np.int64)):
            out[i] = out[i] + s[j]
    return np.moveaxis(out, 0, axis)


def _sum_program(inputs, params, order, fused_options):
    return [_sum(inputs[0], params.get("axes"), params.get("keepdims", False), order)]


def _mean_program(inputs, params, order, fused_options):
    a = inputs[0]
    s = _sum(a, params.get("axes"), params.get("keepdims", False), order)
    _, red, _ = _reduced(a, params.get("axes"))
    n = int(np.prod([a.shape[d] for d in red])) if red else 1
    with np.errstate(all="ignore"):
        return [(s / F32(n)).astype(F32) if n else s * F32(np.nan)]


def _matmul_program(inputs, params, order, fused_options):
    return [_matmul(*inputs, params.get("trans_a", False), params.get("trans_b", False),
                    order, f) for f in fused_options]


def _linear_program(inputs, params, order, fused_options):
    x, w, b = inputs
    outs = []
    for f in fused_options:
        dots = _matmul(x.reshape(-1, x.shape[-1]), w, False, True, order, f)
        with np.errstate(all="ignore"):
            outs.append((dots + b).astype(F32).reshape(x.shape[:-1] + (w.shape[0],)))
    return outs


def _scatter_left_program(inputs, params, order, fused_options):
    return [_scatter_left(inputs[0], inputs[1], params["axis"], params["indices"])]


def _scan(inputs, step) -> np.ndarray:
    """The recurrence h[t] = step(A[t], h[t-1], B[t], X[t]) from h0, in float32, all channels at
    once (A and B constant (state,) or token-dependent (seq, state))."""
    A, B, X, h0 = (np.asarray(x, dtype=F32) for x in inputs)
    seq, state = X.shape
    token = A.ndim == 2
    rows = seq if token else 1            # explicit: reshape(-1, 0) cannot infer it for state 0
    a, b = A.reshape(rows, state), B.reshape(rows, state)
    out = np.empty((seq, state), dtype=F32)
    h = h0.astype(F32, copy=True)
    with np.errstate(all="ignore"):
        for t in range(seq):
            r = t if token else 0
            h = step(a[r], h, b[r], X[t])
            out[t] = h
    return out


def _scan_separate(a, h, b, x):
    return (a * h).astype(F32) + (b * x).astype(F32)


def _scan_fused_state(a, h, b, x):
    return _fma((b * x).astype(F32), a, h)        # fma(A, h, fl(B X))


def _scan_fused_input(a, h, b, x):
    return _fma((a * h).astype(F32), b, x)        # fma(B, X, fl(A h))


def _scan_program(inputs, params, order, fused_options):
    steps = [_scan_separate] if False in fused_options else []
    if True in fused_options:
        steps += [_scan_fused_state, _scan_fused_input]
    return [_scan(inputs, step) for step in steps]


@dataclass(frozen=True)
class OrderProgram:
    """The float32 program of a declared fixed order, as an op's record holds it
    (OpSpec.fixed_order): `run(inputs, params, order, fused options)` gives the results the order
    allows, one per admissible contraction."""
    # its name in reports and tests
    name: str
    # (inputs, params, order, fused options) -> results
    run: Callable
    # the orders it replays, and whether with a fused contraction too (sums of plain terms have
    # nothing to fuse; a tree of products is defined with the products rounded only; scatter_add
    # and a recurrence have no tree order)
    defines: dict


LEFT, TREE = Reduction.fixed_left, Reduction.fixed_tree
SUM = OrderProgram("sum", _sum_program, {LEFT: True, TREE: True})
MEAN = OrderProgram("mean", _mean_program, {LEFT: True, TREE: True})
MATMUL = OrderProgram("matmul", _matmul_program, {LEFT: True, TREE: False})
LINEAR = OrderProgram("linear", _linear_program, {LEFT: True, TREE: False})
SCATTER_LEFT = OrderProgram("scatter-left", _scatter_left_program, {LEFT: True})
SCAN = OrderProgram("scan", _scan_program, {LEFT: True})
PROGRAMS = (SUM, MEAN, MATMUL, LINEAR, SCATTER_LEFT, SCAN)


def fused_options(policy) -> list[bool]:
    """The contractions a policy admits: fused, separate, or either."""
    return {Contraction.fused: [True], Contraction.separate: [False]}.get(policy.contraction,
                                                                          [False, True])


def order_mismatch(got: np.ndarray, allowed: list[np.ndarray]) -> np.ndarray:
    """Elements that equal none of the allowed results (NaN matches NaN; zero signs are not
    compared: the sign of an all-negative-zero sum depends on the fold's seed, which no policy fixes)."""
    g = np.asarray(got, dtype=F32)
    bad = np.ones(g.shape, dtype=bool)
    for r in allowed:
        r = np.asarray(r, dtype=F32).reshape(g.shape)
        bad &= ~((g == r) | (np.isnan(g) & np.isnan(r)))
    return bad
