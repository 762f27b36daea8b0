"""The indexing family (engine/ops/indexing.py): gather and scatter_add.

Edge sets (22 cases per op): the indexed axis of extent n in E with index arrays of length n
(cycling random with duplicates and both boundaries / boundaries only / reversed), 65537 indices
into an axis of 3 (scatter_add: about 21845 accumulations per element), X on one case; empty axes
and empty index arrays; values mixed (gather) and normal (scatter_add)."""
from __future__ import annotations

import math

import numpy as np

from conformance import exact_cases, orders
from conformance.bad_inputs import BIG, filled
from conformance.edges import EXTENTS, INDEX_KINDS, MIXED, NORMAL, PAST_2_20, RANDOM, Edge, \
    cycle, norm_axis
from conformance.families.spec import (AXES, DIMS, INDICES, RANK, AuditCase, OpSpec, m23, normal,
                                       one_term_of, param)
from conformance.layouts import base_shape, signed_axis
from engine import ops
from engine.errors import IndexOutOfRangeError, ShapeError
from engine.types import BackendOp as Op

GROUP = "shape and indexing"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def _indices(rng, extent: int, cls: str) -> np.ndarray:
    if extent == 0:
        return np.zeros(0, dtype=np.int64)
    n = int(rng.integers(0, 2 * extent + 3))
    if cls == "indices":
        kind = rng.integers(0, 3)
        if kind == 0:                       # every index the same: maximal duplication
            return np.full(max(n, 2), int(rng.integers(0, extent)), dtype=np.int64)
        if kind == 1:                       # boundaries only
            return rng.choice([0, extent - 1], size=max(n, 2)).astype(np.int64)
    return rng.integers(0, extent, size=n).astype(np.int64)


def gather_layout(rng, cls):
    s = base_shape(rng, "normal" if cls == "indices" else cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    idx = _indices(rng, s[axis], cls)
    return [s], {"axis": signed_axis(rng, axis, len(s)), "indices": idx}


def scatter_layout(rng, cls):
    s = base_shape(rng, "normal" if cls == "indices" else cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    idx = _indices(rng, s[axis], cls)
    src = list(s)
    src[axis] = idx.size
    return [s, tuple(src)], {"axis": signed_axis(rng, axis, len(s)), "indices": idx}


# --- the fixed edge sets --------------------------------------------------------------------------

def _indexed_forms() -> list[tuple]:
    """(shape, axis, index kind, index count) for gather and the base of scatter_add."""
    forms = []
    for i, n in enumerate(EXTENTS):
        shape, axis = ((n, 2), (0, -2)[i // 2 % 2]) if i % 2 == 0 else ((2, n), (1, -1)[i // 2 % 2])
        forms.append((shape, axis, cycle(INDEX_KINDS, i), n))
    return forms


def _gather() -> list[Edge]:
    forms = _indexed_forms() + [((3, 2), -2, RANDOM, 65537), ((PAST_2_20,), 0, RANDOM, 1025),
                                ((0, 3), 0, RANDOM, 0), ((4, 2), 1, RANDOM, 0)]
    return [Edge((s,), (("axis", ax),), MIXED, indices=kind, n_indices=m)
            for s, ax, kind, m in forms]


def _scatter_add() -> list[Edge]:
    forms = _indexed_forms() + [((3, 2), 0, RANDOM, 65537), ((4,), -1, RANDOM, PAST_2_20),
                                ((0, 3), 0, RANDOM, 0), ((4, 2), -1, RANDOM, 0)]
    out = []
    for s, ax, kind, m in forms:
        src = list(s)
        src[norm_axis(ax, len(s))] = m
        out.append(Edge((s, tuple(src)), (("axis", ax),), NORMAL, indices=kind, n_indices=m))
    return out


def _gathered(case) -> int:
    """gather's output elements."""
    a, p = case.inputs[0], case.params
    ax = p["axis"] % a.ndim
    return math.prod(a.shape[:ax] + a.shape[ax + 1:]) * len(p["indices"])


def _scattered_terms(case) -> int:
    """1 plus the largest index multiplicity (0 when the output is empty)."""
    base, idx = case.inputs[0], np.asarray(case.params["indices"])
    if base.size == 0:
        return 0
    return 1 + (int(np.bincount(idx).max()) if idx.size else 0)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.gather, gather_layout, _gather, catalogue=33,
        extra_classes=("indices",), cancellation=None,
        determinism=AuditCase(6, lambda rng, idx: (
            (normal(rng, 256, 64),), {"axis": 0, "indices": idx[:16384]}, (16384, 64))),
        error_inputs=(
            param(24, "gather: index = extent", INDICES,
                  lambda s: ops.gather(m23(s), 1, [0, 3]), IndexOutOfRangeError,
                  r"index 3 is outside \[0, 3\)"),
            param(25, "gather: negative index", INDICES,
                  lambda s: ops.gather(m23(s), 0, [-1]), IndexOutOfRangeError,
                  r"index -1 is outside \[0, 2\)"),
            param(26, "gather: index 2^32", "indices fit UInt32",
                  lambda s: ops.gather(m23(s), 0, [BIG]), IndexOutOfRangeError,
                  r"index 4294967296 is outside"),
            param(27, "gather: 2-D indices", RANK, lambda s: ops.gather(m23(s), 0, [[0]]),
                  ShapeError, r"1-D sequence of ints, got dtype int64 with shape \(1, 1\)"),
            param(28, "gather: float indices", DIMS, lambda s: ops.gather(m23(s), 0, [0.5]),
                  ShapeError, r"got dtype float64"),
            param(29, "gather: axis out of range", AXES,
                  lambda s: ops.gather(m23(s), 2, [0]), ShapeError,
                  r"axis 2 is out of range")),
        summary_group=GROUP, terms=one_term_of(_gathered)),
    OpSpec(Op.scatter_add, scatter_layout, _scatter_add, catalogue=34,
        extra_classes=("indices",), fixed_order=orders.SCATTER_LEFT,
        determinism=AuditCase(7, lambda rng, idx: (
            (normal(rng, 256, 16), normal(rng, 65536, 16)), {"axis": 0, "indices": idx}, (256, 16))),
        error_inputs=(
            param(30, "scatter_add: src shape", DIMS,
                  lambda s: ops.scatter_add(m23(s), m23(s), 0, [1]), ShapeError,
                  r"src shape \(2, 3\) should be \(1, 3\)"),
            param(31, "scatter_add: index out of range", INDICES,
                  lambda s: ops.scatter_add(m23(s), filled(s, (1, 3)), 0, [2]),
                  IndexOutOfRangeError, r"index 2 is outside \[0, 2\)")),
        summary_group=GROUP, exact_sums=exact_cases.SCATTER,
        terms=_scattered_terms),
)
