"""The linalg family (engine/ops/linalg.py): matmul and linear.

Edge sets. matmul (24): K (the summed extent) for K in E with (M, N) in 1..3 and the four
transpose-flag pairs, rank 3 (batch 2) at K = 33 and K = 4099; M = 1025 and N = 1025 with small
K; K = X with M = N = 1; empty M, K and N; values sums (a marked along K). linear (22):
in-features for n in E (lead axes (), (2,), (3,), (2, 2), (1,), (2, 1, 3); only (), (1,), (2,)
for n >= 65535), out 1..3; in = X (lead ()); empty lead, in = 0, out = 0; values sums (x marked
along in)."""
from __future__ import annotations

import math

from conformance import exact_cases, orders
from conformance.bad_inputs import filled
from conformance.edges import EXTENTS, LARGE, PAST_2_20, SHORT_LEADS, SUMS, Edge, cycle
from conformance.families.spec import DIMS, RANK, AuditCase, OpSpec, m23, normal, param
from conformance.focus import DOT
from conformance.samplers import EDGE_EXTENTS, small_shape
from engine import ops
from engine.errors import ShapeError
from engine.types import BackendOp as Op

GROUP = "linear algebra"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def matmul_layout(rng, cls):
    batch = (int(rng.integers(1, 4)),) if rng.integers(0, 2) else ()
    m, n = (int(x) for x in rng.integers(1, 6, size=2))
    k = int(rng.integers(1, 9))
    if cls == "shapes":
        k = int(rng.choice(EDGE_EXTENTS))
        m, n = (int(x) for x in rng.integers(1, 4, size=2))
    elif cls == "empty":
        m, k, n = [int(rng.integers(1, 4)) if i != int(rng.integers(0, 3)) else 0 for i in range(3)]
    ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    sa = batch + ((k, m) if ta else (m, k))
    sb = batch + ((n, k) if tb else (k, n))
    return [sa, sb], {"trans_a": ta, "trans_b": tb}


def linear_layout(rng, cls):
    lead = small_shape(rng, int(rng.integers(0, 3)), 1, 4)
    fin, fout = (int(x) for x in rng.integers(1, 7, size=2))
    if cls == "shapes":
        fin = int(rng.choice(EDGE_EXTENTS))
    elif cls == "empty":
        lead = lead + (0,)
    return [lead + (fin,), (fout, fin), (fout,)], {}


# --- the fixed edge sets --------------------------------------------------------------------------

MATMUL_MN = ((1, 1), (2, 3), (3, 1), (1, 2), (3, 3), (2, 2))


def _matmul_edge(batch, m, k, n, ta, tb) -> Edge:
    sa = batch + ((k, m) if ta else (m, k))
    sb = batch + ((n, k) if tb else (k, n))
    k_axis = len(batch) + (0 if ta else 1)
    return Edge((sa, sb), (("trans_a", ta), ("trans_b", tb)), SUMS, marked=(k_axis,))


def _matmul() -> list[Edge]:
    out = []
    for i, k in enumerate(EXTENTS):
        m, n = cycle(MATMUL_MN, i)
        batch = (2,) if k in (33, 4099) else ()
        out.append(_matmul_edge(batch, m, k, n, bool(i & 1), bool(i & 2)))
    out += [_matmul_edge((), 1025, 3, 2, True, False), _matmul_edge((), 2, 5, 1025, False, True),
            _matmul_edge((), 1, PAST_2_20, 1, False, True),
            _matmul_edge((), 0, 4, 3, False, False), _matmul_edge((), 2, 0, 3, True, False),
            _matmul_edge((), 2, 4, 0, False, True)]
    return out


LINEAR_LEADS = ((), (2,), (3,), (2, 2), (1,), (2, 1, 3))


def _linear_edge(lead, fin, fout) -> Edge:
    return Edge((lead + (fin,), (fout, fin), (fout,)), (), SUMS, marked=(len(lead),))


def _linear() -> list[Edge]:
    out = [_linear_edge(cycle(LINEAR_LEADS if fin < LARGE else SHORT_LEADS, i), fin, 1 + i % 3)
           for i, fin in enumerate(EXTENTS)]
    out += [_linear_edge((), PAST_2_20, 1), _linear_edge((0,), 5, 3), _linear_edge((2,), 0, 3),
            _linear_edge((2,), 4, 0)]
    return out


def _dot_terms(case) -> int:
    """K (0 when the output is empty)."""
    (a, b), p = case.inputs, case.params
    k, m = (a.shape[-2], a.shape[-1]) if p.get("trans_a") else (a.shape[-1], a.shape[-2])
    n = b.shape[-2] if p.get("trans_b") else b.shape[-1]
    return k if math.prod(a.shape[:-2]) * m * n else 0


def _linear_terms(case) -> int:
    """in + 1: the bias is a term (0 when the output is empty)."""
    x, w, _ = case.inputs
    return w.shape[1] + 1 if math.prod(x.shape[:-1]) * w.shape[0] else 0


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.matmul, matmul_layout, _matmul, catalogue=35,
        products=True, focus=DOT, halvable=True, fixed_order=orders.MATMUL,
        determinism=AuditCase(3, lambda rng, idx: (
            (normal(rng, 96, 1024), normal(rng, 1024, 80)), {"trans_a": False, "trans_b": False},
            (96, 80))),
        error_inputs=(
            param(32, "matmul: rank 4", RANK,
                  lambda s: ops.matmul(filled(s, (1, 1, 2, 2)), filled(s, (1, 1, 2, 2))),
                  ShapeError, r"two rank-2 or two rank-3 tensors, got shapes \(1, 1, 2, 2\)"),
            param(33, "matmul: inner extents", DIMS, lambda s: ops.matmul(m23(s), m23(s)),
                  ShapeError, r"inner extents differ: \(2, 3\) @ \(2, 3\)"),
            param(34, "matmul: batch extents", DIMS,
                  lambda s: ops.matmul(filled(s, (2, 2, 2)), filled(s, (3, 2, 2))),
                  ShapeError, r"batch extents 2 and 3 differ"),
            param(35, "matmul: mixed ranks", RANK,
                  lambda s: ops.matmul(m23(s), filled(s, (1, 3, 2))), ShapeError,
                  r"got shapes \(2, 3\) and")),
        summary_group=GROUP, exact_sums=exact_cases.MATMUL, terms=_dot_terms),
    OpSpec(Op.linear, linear_layout, _linear, catalogue=36,
        products=True, fixed_order=orders.LINEAR,
        determinism=AuditCase(4, lambda rng, idx: (
            (normal(rng, 64, 512), normal(rng, 48, 512), normal(rng, 48)), {}, (64, 48))),
        error_inputs=(
            param(36, "linear: weight shape", DIMS,
                  lambda s: ops.linear(m23(s), filled(s, (4, 2)), filled(s, (4,))), ShapeError,
                  r"disagree"),
            param(37, "linear: bias rank", RANK,
                  lambda s: ops.linear(m23(s), filled(s, (4, 3)), filled(s, (4, 1))),
                  ShapeError, r"b \[out\]")),
        summary_group=GROUP, exact_sums=exact_cases.LINEAR, terms=_linear_terms),
)
