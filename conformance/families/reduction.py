"""The reduction family (engine/ops/reduction.py): reduce_sum, reduce_mean, mse_loss and the fused
cross_entropy loss.

Edge sets. reduce_sum, reduce_mean (22): REDUCE_TABLE: n terms for n in E and X over the last
axis, over a leading axis (axes (0,) and (-2,)), over two axes in unsorted order ((2, 0),
(-1, -3)), over all axes (None), keepdims both ways; an empty reduced axis (3, 0), an empty kept
axis (0, 4), rank 0; values sums, one NaN row. mse_loss (23): the elementwise shapes for pred and
target; values sums (pred marked). cross_entropy (25): CROSS_ENTROPY_FORMS: C in E and X over 1..3
rows, rows 1025 / 4097 / 65537 with few classes, (128, 256), one class; targets cycle random /
boundaries / reversed; values softmax (markers along the classes).

cross_entropy's derived bound (below, before its record):

Derived error bounds of the fused cross-entropy loss (RuntimeEntry cross_entropy), forward and
VJP, for a float64 evaluation rounded once to float32 (native_cuda.cross_entropy's tl_xent_* and
reference.cross_entropy's NumPy both evaluate so). log_softmax's rule (families/softmax.py) is the
model: each operation's rounding, each elementary function's error and the sums' gamma_k, first order,
here with float64's u64 = 2^-53 and the float32 rounding u of the policy at the end.

Assumption (stated once, as error_terms.ELEMENTARY_ULPS): float64 exp and log1p are within
EXP64_ULPS = 2 float64 ulps, relative 2^-51 (libdevice lists 1 ulp for both, CUDA C Programming
Guide, double-precision table; glibc's x86_64 tables 1 ulp).

Forward, per row (m the max, d_j = fl64(x_j - m), relative error u64 since x_j and m are float32):
- e_j = exp(d_j): relative |d_j| u64 + 2^-51 <= 746 u64 + 2^-51 where e_j is a normal float64
  (d_j >= -745; below, e_j is under 2^-1074 and its absolute loss stays below every float32
  rounding of a result: error_models' floor covers it);
- T = sum of C - 1 positive terms in any order: rho_T = 746 u64 + 2^-51 + gamma64_C;
- log1p(T): T/(1 + T) <= log1p(T), so T's relative error moves it by at most rho_T log1p(T),
  plus log1p's own 2^-51;
- l = log1p(T) + fl64(m - x_t): two non-negative terms, two roundings: rho_l = rho_T + 2^-51 + 2 u64.
Mean: N non-negative terms summed in any order (gamma64_N) and one division (u64): rho_L = rho_l +
gamma64_N + u64, a relative bound since every term has one sign. The float32 rounding adds u |L|:
  |got - L| <= (u + rho_L (1 + u)) (1 + 4u) |L|     (rho_L < 2^-42 for C, N below 2^20).
VJP, per element (c = fl64(g / N), relative u64; S = 1 + T, rho_S = rho_T + u64):
- off the target c (e_j / S): rho = rho_e + rho_S + 2 u64;
- at the target: -c T / S (first max) or -c (S - e_t) / S, S - e_t >= 1 >= e_t so S <= 2(S - e_t)
  and the subtraction's error stays relative: rho = 2 rho_S + 2 rho_e + 3 u64 covers both.
  |got - dA| <= (u + rho_V (1 + u)) (1 + 4u) |dA|,  rho_V = 2 rho_S + 2 rho_e + 4 u64."""
from __future__ import annotations

import math

import numpy as np

from conformance import exact_cases, orders
from conformance.edges import (INDEX_KINDS, PAST_2_20, SOFTMAX, SUMS, EXTENTS, Edge, cycle,
                               flat_shapes, norm_axis)
from conformance.error_terms import DerivedRule
from conformance.error_terms import clean as _clean, gamma as _gamma, k_of as _k
from conformance.families.spec import (AXES, DIMS, ELEMENTARY_ORDER, INDICES, RANK, AuditCase,
                                       OpSpec, binary, m23, normal, param, shaped_inputs, unary)
from conformance.focus import LOSS, REDUCED
from conformance.bad_inputs import filled
from conformance.layouts import UNSORTED_SHARE, binary_layout, signed_axis
from conformance.samplers import EDGE_EXTENTS, F32, cancel_pair, empty_shape, small_shape
from engine import ops
from engine.errors import IndexOutOfRangeError, ParameterTypeError, ShapeError
from engine.types import BackendOp as Op, RuntimeEntry as Entry

GROUP = "reductions"


# --- reduce_sum, reduce_mean ----------------------------------------------------------------------

def _axes_params(rng, shape):
    nd = len(shape)
    if nd == 0 or rng.integers(0, 4) == 0:
        axes = None
    else:
        k = int(rng.integers(1, nd + 1))
        picked = [int(a) for a in rng.choice(nd, size=k, replace=False)]
        if k < 2 or rng.random() >= UNSORTED_SHARE:
            picked.sort()
        elif picked == sorted(picked):
            picked.reverse()                 # a shuffle that came out sorted: unsorted by force
        axes = tuple(signed_axis(rng, a, nd) for a in picked)
    return {"axes": axes, "keepdims": bool(rng.integers(0, 2))}


def reduce_layout(rng, cls):
    if cls == "shapes":
        rank = int(rng.integers(1, 4))
        shape = [int(x) for x in rng.choice([1, 2, 3], size=rank)]
        ax = int(rng.integers(0, rank))
        shape[ax] = int(rng.choice(EDGE_EXTENTS))
        return [tuple(shape)], {"axes": (signed_axis(rng, ax, rank),),
                                "keepdims": bool(rng.integers(0, 2))}
    if cls == "empty":
        shape = empty_shape(rng)
        zero_ax = shape.index(0)
        return [shape], {"axes": (signed_axis(rng, zero_ax, len(shape)),),
                         "keepdims": bool(rng.integers(0, 2))}
    shape = small_shape(rng, int(rng.integers(0, 5)), 1, 9) if cls == "normal" else \
        small_shape(rng, int(rng.integers(1, 3)), 3, 17)
    return [shape], _axes_params(rng, shape)


# (shape, axes, keepdims): the reduced extents multiply to each n of E and X
REDUCE_TABLE = (
    ((7,), None, False), ((3, 31), (-1,), False), ((32, 3), (0,), True), ((33, 3), (-2,), False),
    ((2, 251), (1,), True), ((15, 2, 17), (2, 0), False), ((16, 16), None, True),
    ((257, 1), (-2,), True), ((31, 33), None, False), ((1024, 3), (-2,), True),
    ((3, 1025), (-1,), False), ((63, 1, 65), (-1, -3), False), ((2, 4096), (-1,), True),
    ((4097, 2), (0,), False), ((4099,), (-1,), True), ((255, 3, 257), (0, 2), False),
    ((65536,), None, False), ((65537, 2), (-2,), True), ((PAST_2_20,), (0,), False),
    ((3, 0), (-1,), False), ((0, 4), (1,), True), ((), None, False),
)


def _reduce() -> list[Edge]:
    out = []
    for shape, axes, keepdims in REDUCE_TABLE:
        red = tuple(range(len(shape))) if axes is None else tuple(
            norm_axis(a, len(shape)) for a in axes)
        out.append(Edge((shape,), (("axes", axes), ("keepdims", keepdims)), SUMS, marked=red,
                        nan_row=True))
    return out


def _reduced_axes(a: np.ndarray, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(a.ndim))
    return tuple(sorted({int(x) % a.ndim for x in ((axes,) if isinstance(axes, int) else axes)}))


def _reduced_terms(case) -> int:
    """The reduced extent (0 when the output is empty)."""
    a = case.inputs[0]
    red = _reduced_axes(a, case.params.get("axes"))
    kept = math.prod(a.shape[d] for d in range(a.ndim) if d not in red)
    return math.prod(a.shape[d] for d in red) if kept else 0


def _every_element(case) -> int:
    """A loss reads every element."""
    return case.inputs[0].size


# --- mse_loss -------------------------------------------------------------------------------------

def _mse_loss() -> list[Edge]:
    return [Edge((s, s), (), SUMS, marked=tuple(range(len(s)))) for s in flat_shapes()]


def _ex(ref):
    return _clean(np.abs(ref.exact))


def _mse_bound(ref, ctx, unit):
    # n squared differences (subtract, square: one product, so k as for a dot product), the sum,
    # and the division by n: gamma_{k + 2} of the mean itself (every term is >= 0).
    n = max(int(np.asarray(ctx.inputs[0]).size), 1)
    return _gamma(_k(ctx, n, products=True) + 2, unit) * _clean(ref.magnitude)


def _vjp_mse(ref, ctx, unit):
    # (p - t) * (2 g / n): the subtraction, the division and the product: 3u relative.
    return _ex(ref) * 3 * unit * (1 + 4 * unit)


MSE_FORWARD = DerivedRule("derived: gamma_{k+2} * mean", "squared differences summed under the "
                          "reduction policy, then divided by n", _mse_bound)
MSE_VJP = DerivedRule("derived: 3u |dA|", "(p - t)(2 g / n) in float32", _vjp_mse)


# --- cross_entropy --------------------------------------------------------------------------------

def cross_entropy_layout(rng, cls):
    """logits (N, C) with N, C >= 1 and N targets in [0, C): one edge extent on N or on C for
    "shapes"; the "indices" class draws every target the same class, or only 0 and C - 1."""
    if cls == "shapes":
        edge, small = int(rng.choice(EDGE_EXTENTS)), int(rng.integers(1, 4))
        rows, classes = (edge, small) if rng.integers(0, 2) else (small, edge)
    elif cls in ("normal", "cancellation"):
        rows, classes = (int(x) for x in rng.integers(1, 10, size=2))
        if cls == "cancellation":        # a target that can dominate (samplers.confident_logits)
            classes = max(classes, 2)
    else:
        rows, classes = (int(x) for x in rng.integers(1, 13, size=2))
    targets = rng.integers(0, classes, size=rows).astype(np.int64)
    if cls == "indices":
        kind = rng.integers(0, 2)
        targets = (np.full(rows, int(rng.integers(0, classes)), np.int64) if kind == 0 else
                   rng.choice(np.array([0, classes - 1], np.int64), size=rows))
    return [(rows, classes)], {"targets": targets}


# (rows, classes): classes C in E and X over one to three rows, rows across the same boundaries
# with few classes, gpt2's byte vocabulary (256) over 128 rows, one class (the loss is +0)
CROSS_ENTROPY_FORMS = tuple((1 + i % 3, c) for i, c in enumerate(EXTENTS)) + (
    (1, PAST_2_20), (1025, 3), (4097, 2), (65537, 1), (128, 256), (1, 1), (4, 1))


def _cross_entropy() -> list[Edge]:
    return [Edge(((rows, classes),), (), SOFTMAX, marked=(1,), indices=cycle(INDEX_KINDS, i),
                 n_indices=rows, index_param="targets")
            for i, (rows, classes) in enumerate(CROSS_ENTROPY_FORMS)]


# The dominating entry's margin over the rest of its row, by case index: the first band deep
# enough that a float64 log(1 + T) (T ~ e^-margin) has lost T far beyond a float32 ulp of the
# result (1 + T rounds by up to 2^-53, T is under 2^-37 past margins of 26: over 2^-16 of it;
# past 37 + log C, T is under 2^-53 and lost entirely), the second where a float32 evaluation's
# 1 + T loses it (T under 2^-24 from 17 on, relative 2^-24 / T from 5).
CONFIDENT_MARGINS = ((26.0, 40.0), (5.0, 12.0))


def confident_logits(arrays, params, cls, index, rng):
    """cross_entropy's cancellation class: every row's target logit is the row's maximum by a
    margin from the case's band (CONFIDENT_MARGINS by case index, the same band for every row, so
    the mean loss is as tiny as each row's log1p(T) ~ T: the loss log-sum-exp minus the target
    cancels to it). One class, or no rows: unchanged (the loss is exactly 0)."""
    x = np.asarray(arrays[0], np.float64)
    if cls != "cancellation" or x.ndim != 2 or x.shape[0] == 0 or x.shape[1] < 2:
        return arrays
    targets = np.asarray(params["targets"], np.int64)
    rows = np.arange(x.shape[0])
    others = np.where(np.arange(x.shape[1]) == targets[:, None], -np.inf, x).max(axis=1)
    lo, hi = CONFIDENT_MARGINS[index % len(CONFIDENT_MARGINS)]
    x = x.copy()
    x[rows, targets] = others + rng.uniform(lo, hi, size=rows.size)
    return [x.astype(F32)] + list(arrays[1:])


U64 = 2.0 ** -53
EXP64_REL = 2.0 ** -51     # EXP64_ULPS = 2 float64 ulps, relative (the module docstring)
D_MAX = 746.0              # |d| beyond which exp(d) is below every normal float64


def _rho_e() -> float:
    return D_MAX * U64 + EXP64_REL


def _rho_t(classes: int) -> float:
    return _rho_e() + float(_gamma(max(classes, 1), U64))


def _shape(ctx):
    return np.shape(np.asarray(ctx.inputs[0]))


def xent_forward_bound(ref, ctx, unit):
    rows, classes = _shape(ctx)
    rho_l = _rho_t(classes) + EXP64_REL + 2 * U64
    rho = rho_l + float(_gamma(max(rows, 1), U64)) + U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


def xent_vjp_bound(ref, ctx, unit):
    _, classes = _shape(ctx)
    rho_s = _rho_t(classes) + U64
    rho = 2 * rho_s + 2 * _rho_e() + 4 * U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


CROSS_ENTROPY_FORWARD = DerivedRule(
    "derived: (u + rho_L) |L|, rho_L = 746u64 + gamma64_C + gamma64_N + ...",
    "per row log1p(T) + (max - x_t) in float64 (non-negative terms), the rows' mean in "
    "float64, rounded once to float32", xent_forward_bound)
CROSS_ENTROPY_VJP = DerivedRule(
    "derived: (u + rho_V) |dA|, rho_V = 2 rho_S + 2 rho_e + 4u64",
    "(g / N)(e_j / S) and, at the target, -(g / N) T / S or -(g / N)(S - e_t) / S in float64 "
    "(no cancellation), rounded once to float32", xent_vjp_bound)


def _xent(s, logits=(2, 3), targets=(0, 2), fill=1.0):
    return ops.cross_entropy(filled(s, logits, fill), targets)


def _xent_audit(rng, idx):
    # gpt2's shape: 4096 rows of 256 classes, a warp per row, the rows' sum in one block
    return (normal(rng, 4096, 256),), {"targets": rng.integers(0, 256, 4096).astype(np.int64)}, ()


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.reduce_sum, reduce_layout, _reduce, catalogue=22,
        focus=REDUCED, halvable=True, fixed_order=orders.SUM,
        determinism=AuditCase(0, lambda rng, idx: (
            (normal(rng, 1 << 20),), {"axes": None, "keepdims": False}, ())),
        error_inputs=(
            *unary(17, Op.reduce_sum),
            param(0, "reduce_sum: axis 2 of rank 2", AXES,
                  lambda s: ops.reduce_sum(m23(s), axes=(2,)), ShapeError,
                  r"axis 2 is out of range for rank 2"),
            param(2, "reduce_sum: repeated axis", AXES,
                  lambda s: ops.reduce_sum(m23(s), axes=(0, -2)), ShapeError,
                  r"axes \(0, -2\) repeat an axis")),
        summary_group=GROUP, exact_sums=exact_cases.REDUCE, terms=_reduced_terms),
    OpSpec(Op.reduce_mean, reduce_layout, _reduce, catalogue=23,
        extra_roundings=1, divides_sum=True, focus=REDUCED, halvable=True,
        fixed_order=orders.MEAN,
        determinism=AuditCase(1, lambda rng, idx: (
            (normal(rng, 512, 2048),), {"axes": (1,), "keepdims": False}, (512,))),
        error_inputs=(
            *unary(18, Op.reduce_mean),
            param(1, "reduce_mean: axis -3 of rank 2", AXES,
                  lambda s: ops.reduce_mean(m23(s), axes=(-3,)), ShapeError,
                  r"axis -3 is out of range")),
        summary_group=GROUP, exact_sums=exact_cases.REDUCE, terms=_reduced_terms),
    OpSpec(Op.mse_loss, binary_layout, _mse_loss, catalogue=27,
        focus=LOSS,
        determinism=AuditCase(2, lambda rng, idx: (
            (normal(rng, 1 << 18), normal(rng, 1 << 18)), {}, ())),
        error_inputs=binary(5, Op.mse_loss), summary_group=GROUP,
        cancellation=cancel_pair(1), forward_rule=MSE_FORWARD, vjp_rule=MSE_VJP,
        terms=_every_element),
    OpSpec(Entry.cross_entropy, cross_entropy_layout, _cross_entropy, catalogue=49,
        extra_classes=("indices",), allows_empty=False, cancellation=None, focus=LOSS,
        determinism=AuditCase(18, _xent_audit), param_values=confident_logits,
        error_inputs=(
            *shaped_inputs(28, "cross_entropy", lambda s, a: ops.cross_entropy(a, [0, 1]),
                           (2, 3)),
            param(138, "cross_entropy: target = classes", INDICES,
                  lambda s: _xent(s, targets=[0, 3]), IndexOutOfRangeError,
                  r"target 3 is outside \[0, 3\) for logits with 3 classes"),
            param(139, "cross_entropy: negative target", INDICES,
                  lambda s: _xent(s, targets=[-1, 0]), IndexOutOfRangeError,
                  r"target -1 is outside \[0, 3\)"),
            param(140, "cross_entropy: float targets", DIMS,
                  lambda s: _xent(s, targets=[0.0, 1.0]), ParameterTypeError,
                  r"targets must be integer class indices, got dtype float64"),
            param(141, "cross_entropy: one target for two rows", DIMS,
                  lambda s: _xent(s, targets=[0]), ShapeError,
                  r"1 targets for 2 rows of logits"),
            param(142, "cross_entropy: 2-D targets", RANK,
                  lambda s: _xent(s, targets=[[0], [1]]), ShapeError,
                  r"targets must be 1-D \(one class per row\), got shape \(2, 1\)"),
            param(143, "cross_entropy: rank-3 logits", RANK,
                  lambda s: _xent(s, logits=(1, 2, 3), targets=[0]), ShapeError,
                  r"takes logits \[N, C\] \(rank 2\), got shape \(1, 2, 3\)"),
            param(144, "cross_entropy: no classes", DIMS,
                  lambda s: _xent(s, logits=(2, 0), targets=[0, 0]), ShapeError,
                  r"needs at least one row and one class, got logits shape \(2, 0\)")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        forward_rule=CROSS_ENTROPY_FORWARD, vjp_rule=CROSS_ENTROPY_VJP, terms=_every_element),
)
