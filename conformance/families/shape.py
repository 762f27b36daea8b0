"""The shape family (engine/ops/shape.py): reshape, permute, broadcast, concat and slice. Exact
data movement: every output element is one input element.

Edge sets: reshape (22), permute (22), broadcast (22), concat (21), slice (22): the extent n in E
on the reshaped, moved, broadcast, concatenated or sliced axis (broadcast alternates long copies
with a length-1 source repeated n times, whose VJP sums n terms), X on one case; empty and rank-0
forms; values mixed."""
from __future__ import annotations

import math

from conformance.bad_inputs import BIG, filled
from conformance.edges import EXTENTS, LARGE, MIXED, PAST_2_20, Edge, cycle
from conformance.families.spec import (AXES, COUNT, DIMS, EXTENT, FLAT, INDICES, RANK, AuditCase,
                                       OpSpec, m23, normal, one_term_of, param)
from conformance.layouts import base_shape, factor, signed_axis
from engine import ops
from engine.errors import ShapeError, UInt32OverflowError
from engine.types import BackendOp as Op

GROUP = "shape and indexing"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def reshape_layout(rng, cls):
    s = base_shape(rng, cls)
    n = math.prod(s)
    if n == 1 and rng.integers(0, 2):
        new = ()
    elif n == 0:
        new = (0,) + tuple(int(x) for x in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    else:
        new = factor(rng, n, int(rng.integers(1, 5)))
    return [s], {"shape": new}


def permute_layout(rng, cls):
    s = base_shape(rng, cls)
    return [s], {"perm": tuple(int(p) for p in rng.permutation(len(s)))}


def broadcast_layout(rng, cls):
    dst = list(base_shape(rng, cls, rank_lo=1))
    if cls != "empty":
        dst = [d if d else 1 for d in dst]
    drop = int(rng.integers(0, len(dst) + 1))
    src = [1 if rng.integers(0, 2) else d for d in dst[drop:]]
    if cls == "empty":
        src = [d if d == 0 else s for s, d in zip(src, dst[drop:])]
    return [tuple(src)], {"shape": tuple(dst)}


def concat_layout(rng, cls):
    base = list(base_shape(rng, cls, rank_lo=1))
    axis = int(rng.integers(0, len(base)))
    k = int(rng.integers(1, 5))
    shapes = []
    for _ in range(k):
        s = list(base)
        s[axis] = int(rng.integers(0 if cls == "empty" else 1, 5)) if cls != "shapes" else \
            int(rng.choice((1, 31, 33, 256)))
        shapes.append(tuple(s))
    return shapes, {"axis": signed_axis(rng, axis, len(base))}


def slice_layout(rng, cls):
    s = base_shape(rng, cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    n = s[axis]
    start = int(rng.integers(0, n + 1))
    stop = int(rng.integers(start, n + 1))
    return [s], {"axis": signed_axis(rng, axis, len(s)), "start": start, "stop": stop}


# --- the fixed edge sets --------------------------------------------------------------------------

def _split(n: int) -> tuple[int, int]:
    """(a, n // a) with a the largest divisor of n up to sqrt(n): (1, n) for a prime."""
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return a, n // a


def _reshape() -> list[Edge]:
    pairs = []
    for i, n in enumerate(EXTENTS):
        a, b = _split(n)
        pairs.append(((n,), (a, b)) if i % 2 == 0 else ((a, b), (b, 1, a)))
    pairs += [((PAST_2_20,), _split(PAST_2_20)), ((0, 3), (3, 0, 1)), ((), (1, 1)),
              ((1, 1, 1), ())]
    return [Edge((src,), (("shape", new),), MIXED) for src, new in pairs]


PERMUTE_FORMS = (lambda n: ((n, 3), (1, 0)), lambda n: ((2, n, 3), (2, 0, 1)),
                 lambda n: ((3, 1, n), (2, 1, 0)), lambda n: ((n, 2, 1, 2), (3, 1, 0, 2)))


def _permute() -> list[Edge]:
    pairs = [cycle(PERMUTE_FORMS, i)(n) if n < LARGE else ((n, 2), (1, 0))
             for i, n in enumerate(EXTENTS)]
    pairs += [((PAST_2_20, 2), (1, 0)), ((0, 3, 2), (2, 0, 1)), ((), ()), ((1, 1, 1), (2, 0, 1))]
    return [Edge((s,), (("perm", p),), MIXED) for s, p in pairs]


# (source, target): long copies, and a length-1 source repeated n times (its VJP sums n terms)
BROADCAST_FORMS = (lambda n: ((n,), (2, n)), lambda n: ((1,), (n,)),
                   lambda n: ((n, 1), (n, 3)), lambda n: ((1, n), (2, 1, n)))


def _broadcast() -> list[Edge]:
    pairs = [cycle(BROADCAST_FORMS, i)(n) for i, n in enumerate(EXTENTS)]
    pairs += [((1, PAST_2_20), (2, PAST_2_20)), ((0,), (3, 0)), ((1,), (0,)), ((), (3,))]
    return [Edge((s,), (("shape", t),), MIXED) for s, t in pairs]


CONCAT_FORMS = (lambda n: (((2, n), (2, 1)), -1), lambda n: (((n, 3), (1, 3), (2, 3)), 0),
                lambda n: (((n,),), 0), lambda n: (((1, 2), (n, 2)), -2))


def _concat() -> list[Edge]:
    forms = [cycle(CONCAT_FORMS, i)(n) for i, n in enumerate(EXTENTS)]
    forms += [(((PAST_2_20,), (1,)), -1), (((2, 0), (2, 3)), 1), (((0, 3), (0, 3)), -2)]
    return [Edge(shapes, (("axis", axis),), MIXED) for shapes, axis in forms]


def _slice() -> list[Edge]:
    out = []
    for i, n in enumerate(EXTENTS):
        shape, axis = ((n, 2), (0, -2)[i % 2]) if i % 4 < 2 else ((2, n), (1, -1)[i % 2])
        start, stop = cycle(((1, n), (0, n - 1), (0, n), (n // 2, n)), i // 2)
        out.append(Edge((shape,), (("axis", axis), ("start", start), ("stop", stop)), MIXED))
    for shape, axis, start, stop in (((PAST_2_20,), -1, 1, PAST_2_20), ((0, 3), 0, 0, 0),
                                     ((4, 3), -1, 2, 2), ((1, 5), 0, 0, 1)):
        out.append(Edge((shape,), (("axis", axis), ("start", start), ("stop", stop)), MIXED))
    return out


# --- Case.terms: one term per output element ------------------------------------------------------

def _requested(case) -> int:
    return math.prod(case.params["shape"])


def _concatenated(case) -> int:
    return sum(x.size for x in case.inputs)


def _sliced(case) -> int:
    a, p = case.inputs[0], case.params
    ax = p["axis"] % a.ndim
    return a.size // a.shape[ax] * (p["stop"] - p["start"]) if a.shape[ax] else 0


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.reshape, reshape_layout, _reshape, catalogue=28,
        cancellation=None,
        error_inputs=(
            param(8, "reshape: element count", FLAT, lambda s: ops.reshape(m23(s), (4, 2)),
                  ShapeError, r"cannot view 6 elements .* as \(4, 2\)"),
            param(9, "reshape: negative extent", DIMS, lambda s: ops.reshape(m23(s), (-2, -3)),
                  ShapeError, r"shape \(-2, -3\) has a negative"),
            param(10, "reshape: extent 2^32", EXTENT, lambda s: ops.reshape(m23(s), (BIG, 0)),
                  UInt32OverflowError, r"axis 0 has extent 4294967296")),
        summary_group=GROUP, terms=one_term_of(_requested)),
    OpSpec(Op.permute, permute_layout, _permute, catalogue=29,
        cancellation=None,
        error_inputs=(
            param(11, "permute: repeated axis", DIMS, lambda s: ops.permute(m23(s), (0, 0)),
                  ShapeError, r"\(0, 0\) is not a permutation"),
            param(12, "permute: wrong rank", RANK, lambda s: ops.permute(m23(s), (0, 1, 2)),
                  ShapeError, r"\(0, 1, 2\) is not a permutation of range\(2\)")),
        summary_group=GROUP),
    OpSpec(Op.broadcast, broadcast_layout, _broadcast, catalogue=30,
        cancellation=None,
        determinism=AuditCase(5, lambda rng, idx: (
            (normal(rng, 1, 256),), {"shape": (4096, 256)}, (4096, 256))),
        error_inputs=(
            param(13, "broadcast: incompatible", DIMS,
                  lambda s: ops.broadcast(m23(s), (3, 3)), ShapeError,
                  r"\(2, 3\) does not broadcast to \(3, 3\)"),
            param(14, "broadcast: rank shrinks", RANK, lambda s: ops.broadcast(m23(s), (6,)),
                  ShapeError, r"does not broadcast to \(6,\)"),
            param(15, "broadcast: extent 2^32", EXTENT,
                  lambda s: ops.broadcast(filled(s, (1,)), (BIG,)), UInt32OverflowError,
                  r"extent 4294967296"),
            param(16, "broadcast: count 2^32", COUNT,
                  lambda s: ops.broadcast(filled(s, (1, 1)), (2**16, 2**16)),
                  UInt32OverflowError, r"holds 4294967296 elements")),
        summary_group=GROUP, terms=one_term_of(_requested)),
    OpSpec(Op.concat, concat_layout, _concat, catalogue=31,
        cancellation=None,
        error_inputs=(
            param(17, "concat: no tensors", DIMS, lambda s: ops.concat([], axis=0), ShapeError,
                  r"needs at least one tensor"),
            param(18, "concat: mismatched axis", DIMS,
                  lambda s: ops.concat([m23(s), filled(s, (3, 3))], axis=1), ShapeError,
                  r"tensor 1 has shape \(3, 3\), incompatible with \(2, 3\) along axis 1"),
            param(19, "concat: axis out of range", AXES, lambda s: ops.concat([m23(s)], axis=2),
                  ShapeError, r"axis 2 is out of range"),
            param(20, "concat: rank 0", RANK, lambda s: ops.concat([filled(s, ())], axis=0),
                  ShapeError, r"rank-0 tensors cannot")),
        summary_group=GROUP, terms=one_term_of(_concatenated)),
    OpSpec(Op.slice, slice_layout, _slice, catalogue=32,
        cancellation=None,
        error_inputs=(
            param(21, "slice: stop past extent", INDICES, lambda s: ops.slice(m23(s), 1, 1, 4),
                  ShapeError, r"\[1, 4\) is not a range within \[0, 3\]"),
            param(22, "slice: start after stop", INDICES, lambda s: ops.slice(m23(s), 0, 2, 1),
                  ShapeError, r"\[2, 1\) is not a range"),
            param(23, "slice: axis out of range", AXES, lambda s: ops.slice(m23(s), 5, 0, 1),
                  ShapeError, r"axis 5 is out of range")),
        summary_group=GROUP, terms=one_term_of(_sliced)),
)
