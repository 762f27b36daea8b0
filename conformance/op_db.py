"""One record per op: everything the harness knows about testing that op (cf. PyTorch's OpInfo,
kept small). The generators, the error models, shrinking, the fixed-order programs, the guard
suite, the determinism audit and the reference registry all read these records instead of keeping
per-op tables of their own; a new op is one new `OpSpec` here (plus its layout, reference module
and, where it needs one, a derived bound).

Where a list the harness builds from the records has a pinned order (the guard suite's cases, the
determinism audit's shared random stream; fixtures/case_digests.json pins both), the record says
where its entries stand (`ErrorInput.rank`, `AuditCase.turn`): SPECS's own order is the catalogue
order, the one references.OPS lists."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance import derived, orders
from conformance import exact_cases as X
from conformance.focus import DOT, ELEMENTWISE, LOSS, REDUCED, ROW, Focus, group, smaller_case
from conformance import layouts as L
from conformance import samplers as S
from conformance.exact_sums import ExactSums
from conformance.bad_inputs import (BIG, PARAMETERS, UNARY_INPUTS, ErrorInput,
                                    binary_operand_errors, filled, foreign, lying, short, strided,
                                    huge_matrix, unary_input_errors)
from conformance.samplers import FLT_MAX
from engine import ops
from engine.errors import (DeviceMismatchError, IndexOutOfRangeError, LayoutError,
                           LengthMismatchError, NonFiniteInputError, ParameterTypeError,
                           ParameterValueError, ShapeError, UInt32OverflowError)
from engine.session import current_session
from engine.types import BackendOp as Op, RuntimeEntry as Entry



@dataclass(frozen=True)
class AuditCase:
    """The determinism audit's case for an op: large enough that an atomic reduction spreads over
    many thread blocks."""
    # its turn in the audit's one random stream (cases draw in turn order, after the shared indices)
    turn: int
    # (rng, indices) -> (inputs, params, output shape); `indices` is the stream the index ops share
    draw: Callable


@dataclass(frozen=True)
class Skip:
    """A check the harness does not run for an op, and why."""
    # what is skipped, e.g. "vjp" or "campaign:cuda"
    scope: str
    # why, in words a report can show
    reason: str


@dataclass(frozen=True)
class OpSpec:
    """How the harness tests one op."""
    # the op
    op: Op
    # (rng, cls) -> (input shapes, params), from layouts.py; cls decides edge/empty shapes
    layout: Callable
    # extra generator classes beyond the value and shape classes (masks, indices, params)
    extra_classes: tuple[str, ...] = ()
    # whether an empty axis is a valid input for this op
    allows_empty: bool = True
    # the near-overflow centre for this op's inputs (exp overflows near 88.72, not FLT_MAX)
    near_overflow: float = FLT_MAX
    # the input domain: "real", or "positive" (mostly positive values; negatives still appear)
    domain: str = "real"
    # how a cancellation case is built: "pair" (b ~ -a for add, b ~ a for sub), "sum", "none",
    # "norm" (nearly constant groups, beta ~ -xhat gamma), "attention" (near-equal v rows, or
    # near-equal scores over v of both signs)
    cancellation: str = "sum"
    # the wide class's largest exponent: composites whose float32 evaluation squares or multiplies
    # two inputs (sums of squares, scores) overflow beyond 2^64; their wide values stay where the
    # evaluation cannot, and the near-overflow class probes that edge instead
    wide_max_exp: int = 127
    # the module under conformance/references/ with its mpmath forward (and vjp); "" = the op's name
    reference: str = ""
    # calls its wrapper must reject, with the error and message (the guard suite's per-op cases)
    error_inputs: tuple[ErrorInput, ...] = ()
    # whether its reduction terms are rounded products (dot products: k + 1 under fixed orders)
    products: bool = False
    # roundings after the reduction (reduce_mean's division); linear's bias is one of its terms
    extra_roundings: int = 0
    # whether the sum is divided by n afterwards: the reference's magnitude is sum|terms| / n
    divides_sum: bool = False
    # what a failing element reads (conformance/focus.py), or None: shrinking keeps the case whole
    focus: Focus | None = None
    # whether shrinking may drop half of the terms (a 1-D reduction or row, one dot product)
    halvable: bool = False
    # the float32 program of a declared fixed order (orders.OrderProgram), or None
    fixed_order: orders.OrderProgram | None = None
    # the determinism audit's case, or None: the audit then has none for this op
    determinism: AuditCase | None = None
    # checks skipped for this op, each with its scope and reason (none today)
    skips: tuple[Skip, ...] = ()
    # its fixed edge set's family (a key of edges.FAMILIES: elementwise, reduce, softmax, ...)
    edges: str = ""
    # the op family the run summary's throughput lines group it under
    family: str = "other"
    # whether it takes array inputs (the random ops draw from a shape and a seed: no value classes)
    takes_inputs: bool = True
    # (arrays, cls, index, rng) -> arrays: the op's own shaping of the drawn values, applied last
    # (selective_scan keeps A finite and cycles |A| regimes), or None
    values: Callable | None = None
    # how its outputs sum their terms (exact_sums.ExactSums): the input-aware bound (0 where the
    # sum is exact in every order) and the "exact-sums" generator class; None: neither
    exact_sums: ExactSums | None = None
    # why a fixed order declared for this op is held to bitwise repeatability alone (no program
    # can replay it), or "": a fixed order without a program is refused (orders.unchecked_claim)
    order_repeat_only: str = ""
    # (arrays, params, cls, index, rng) -> arrays: shaping that reads the params, applied after
    # `values` (cross_entropy's confident rows need the targets, a softmax row its axis), or None
    param_values: Callable | None = None

    def __post_init__(self) -> None:
        if not self.reference:
            object.__setattr__(self, "reference", self.op.label)
        if not self.edges:
            object.__setattr__(self, "edges", self.op.label)

    # The derived bounds, by reference: error_models.py reads derived.FORWARD_RULES / VJP_RULES when it
    # judges, so the record looks its entries up rather than copying them.
    @property
    def forward_rule(self) -> derived.DerivedRule | None:
        """The derived bound of the value, for capsules that declare none."""
        return derived.FORWARD_RULES.get(self.op)

    @property
    def vjp_rule(self) -> derived.DerivedRule | None:
        """The derived bound of the gradients."""
        return derived.VJP_RULES.get(self.op)


# --- shrinking a failing element of a normalisation group or an attention row --------------------

def _layer_norm_group(case, idx: tuple, output: str):
    """The failing element's row (value, dx); dgamma and dbeta read every row: no smaller case."""
    x, gamma, beta = case.inputs
    g = case.cotangent
    if not idx or output not in ("value", "grad[0]") or x.ndim < 2:
        return None
    row = tuple(idx[:-1])
    return smaller_case(case, (np.array(x[row], F32), gamma, beta), dict(case.params),
                        None if g is None else np.array(g[row], F32))


def _add_layer_norm_group(case, idx: tuple, output: str):
    """The row of x and r (either half of the value, dx, dr)."""
    x, r, gamma, beta = case.inputs
    g = case.cotangent
    if not idx or output not in ("value", "grad[0]", "grad[1]") or x.ndim < 2:
        return None
    row = tuple(idx[1:-1]) if output == "value" else tuple(idx[:-1])   # value: [2, ..., d]
    return smaller_case(case, (np.array(x[row], F32), np.array(r[row], F32), gamma, beta),
                        dict(case.params),
                        None if g is None else np.array(g[(slice(None),) + row], F32))


def _batch_norm_group(case, idx: tuple, output: str):
    """The failing element's channel (any output)."""
    x, gamma, beta = case.inputs
    g = case.cotangent
    if not idx:
        return None
    c = idx[1] if output in ("value", "grad[0]") else idx[0]
    if x.shape[1] < 2:
        return None
    sl = slice(c, c + 1)
    return smaller_case(case, (np.array(x[:, sl], F32), np.array(gamma[sl], F32),
                               np.array(beta[sl], F32)), dict(case.params),
                        None if g is None else np.array(g[:, sl], F32))


def _attention_group(case, idx: tuple, output: str):
    """The failing element's query row (value, dq) or its batch entry (dk, dv)."""
    p, g = dict(case.params), case.cotangent
    if not idx:
        return None
    per_element = output in ("value", "grad[0]")
    q, k, v = case.inputs
    mask = p.get("mask")
    if q.ndim == 3:
        b = slice(idx[0], idx[0] + 1)
        sel_q = (b, slice(idx[1], idx[1] + 1)) if per_element else (b,)
        sel_kv = (b,)
    elif per_element:
        sel_q, sel_kv = (slice(idx[0], idx[0] + 1),), ()
    else:
        return None
    if mask is not None:
        p["mask"] = np.array(np.asarray(mask)[sel_q], dtype=bool)
    return smaller_case(case, (np.array(q[sel_q], F32), np.array(k[sel_kv], F32),
                               np.array(v[sel_kv], F32)), p,
                        None if g is None else np.array(g[sel_q], F32))


F32 = np.float32


# --- error inputs: the parameter checks of each op -----------------------------------------------

def _param(position: int, name: str, check: str, call, error: type, message: str) -> ErrorInput:
    return ErrorInput((PARAMETERS, position), name, check, call, error, message)


def _m(s):
    return filled(s, (2, 3))


_DIMS, _RANK, _AXES, _INDICES = ("supported op dimensions", "supported rank", "axes in range",
                                 "indices in range")
_FLAT, _EXTENT, _COUNT = ("flat lengths match logical shapes", "every axis fits UInt32",
                          "element count fits UInt32")


def _unary(position: int, op: Op, fn=None):
    """The input checks of one tensor, for `fn(a)` (default: the op with no parameters)."""
    return unary_input_errors(position, op.label, fn or (lambda a: getattr(ops, op.label)(a)))


def _binary(position: int, op: Op):
    return binary_operand_errors(position, op.label, getattr(ops, op.label))


# --- determinism audit cases ---------------------------------------------------------------------

def _n(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _attention_audit(rng, idx):
    qkv = (_n(rng, 8, 64, 32), _n(rng, 8, 64, 32), _n(rng, 8, 64, 32))
    causal = np.broadcast_to(np.tril(np.ones((64, 64), bool)), (8, 64, 64)).copy()
    return qkv, {"mask": causal, "scale": float(np.float32(32 ** -0.5))}, (8, 64, 32)


def _pool_audit(rng, **extra):
    """Overlapping 3x3 windows (stride 1, padding 1) over 16 planes of 64x64: every input cell is
    scattered to from nine windows, by threads of different blocks."""
    params = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1),
              **extra}
    return (_n(rng, 4, 4, 64, 64),), params, (4, 4, 64, 64)


def _pool_geometry_errors() -> tuple[ErrorInput, ...]:
    """max_pool's geometry checks (avg_pool and smooth_max_pool share the code: a few of theirs
    stand beside their records)."""
    mp = ops.max_pool
    big = (BIG,)
    return (
        _param(70, "max_pool: spatial rank 9", _RANK, lambda s: mp(_m(s), (1,) * 9), ShapeError,
               r"kernel_size \(1, 1, 1, 1, 1, 1, 1, 1, 1\) has spatial rank 9; pooling supports "
               r"ranks 1 to 8"),
        _param(71, "max_pool: spatial rank 0", _RANK, lambda s: mp(_m(s), ()), ShapeError,
               r"kernel_size \(\) has spatial rank 0"),
        _param(72, "max_pool: x rank 4 for a 1-D window", _RANK,
               lambda s: mp(filled(s, (1, 1, 2, 3)), (1,)), ShapeError,
               r"x has shape \(1, 1, 2, 3\) \(rank 4\) but a spatial rank of 1 \(kernel_size "
               r"\(1,\)\) needs x \(C, \*spatial\) of rank 2 or \(N, C, \*spatial\) of rank 3"),
        _param(73, "max_pool: kernel extent 0", _DIMS, lambda s: mp(_m(s), (0,)),
               ParameterValueError, r"kernel_size \(0,\) has 0 on spatial axis 0; every window "
                                    r"extent must be at least 1"),
        _param(74, "max_pool: stride 0", _DIMS, lambda s: mp(_m(s), (1,), stride=(0,)),
               ParameterValueError, r"stride \(0,\) has 0 on spatial axis 0"),
        _param(75, "max_pool: negative padding", _DIMS, lambda s: mp(_m(s), (2,), padding=-1),
               ParameterValueError, r"padding \(-1,\) has -1 on spatial axis 0; padding cannot "
                                    r"be negative"),
        _param(76, "max_pool: dilation 0", _DIMS, lambda s: mp(_m(s), (1,), dilation=0),
               ParameterValueError, r"dilation \(0,\) has 0 on spatial axis 0"),
        _param(77, "max_pool: kernel extent 2^32", _EXTENT, lambda s: mp(_m(s), big),
               UInt32OverflowError, r"kernel_size \(4294967296,\) has 4294967296 on spatial "
                                    r"axis 0, over the UInt32 limit 4294967295"),
        _param(78, "max_pool: stride 2^32", _EXTENT, lambda s: mp(_m(s), (1,), stride=big),
               UInt32OverflowError, r"stride \(4294967296,\) has 4294967296"),
        _param(79, "max_pool: padding 2^32", _EXTENT, lambda s: mp(_m(s), (1,), padding=big),
               UInt32OverflowError, r"padding \(4294967296,\) has 4294967296"),
        _param(80, "max_pool: dilation 2^32", _EXTENT, lambda s: mp(_m(s), (1,), dilation=big),
               UInt32OverflowError, r"dilation \(4294967296,\) has 4294967296"),
        _param(81, "max_pool: input spatial 2^32 under C = 0", _COUNT,
               lambda s: mp(filled(s, (0, 2**16, 2**16)), (1, 1)), UInt32OverflowError,
               r"the input spatial extents \(65536, 65536\) hold 4294967296 cells, over the "
               r"UInt32 limit"),
        _param(82, "max_pool: window 2^32 cells", _COUNT,
               lambda s: mp(filled(s, (0, 1, 1)), (2**16, 2**16)), UInt32OverflowError,
               r"the window extents \(65536, 65536\) hold 4294967296 cells"),
        _param(83, "max_pool: output spatial past UInt32 under C = 0", _COUNT,
               lambda s: mp(filled(s, (0, 65535, 65536)), 2, stride=1, padding=1),
               UInt32OverflowError, r"the output spatial extents \(65536, 65537\) hold "
                                    r"4295032832 cells"),
        _param(84, "max_pool: stride of the wrong length", _DIMS,
               lambda s: mp(_m(s), (1,), stride=(1, 1)), ShapeError,
               r"stride \(1, 1\) has 2 entries for a spatial rank of 1"),
        _param(85, "max_pool: float kernel_size", _DIMS, lambda s: mp(_m(s), 2.0),
               ParameterTypeError, r"kernel_size must be an int or a sequence of ints, got float"),
        _param(86, "max_pool: bool stride", _DIMS, lambda s: mp(_m(s), (1,), stride=True),
               ParameterTypeError, r"stride must be an int or a sequence of 1 ints, got bool True"),
    )


# --- the records ---------------------------------------------------------------------------------

_EXP_EDGE = 88.72283935546875     # exp overflows just above, and underflows below -103.97
# why a fixed order declared for these ops is held to bitwise repeatability alone (OpSpec
# .order_repeat_only; orders.unchecked_claim refuses a fixed order without a program elsewhere)
ELEMENTARY_ORDER = ("its value passes through elementary functions (exp, log, tanh) whose float32 "
                    "bits no numerical policy fixes, so no program can replay a fixed order bit "
                    "for bit; the order's other promise, bitwise repeatability, is checked")

SPECS: tuple[OpSpec, ...] = (
    OpSpec(Op.add, L.binary_layout, cancellation="pair", focus=ELEMENTWISE,
           error_inputs=_binary(0, Op.add),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.sub, L.binary_layout, cancellation="pair", focus=ELEMENTWISE,
           error_inputs=_binary(1, Op.sub),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.mul, L.binary_layout, cancellation="none", focus=ELEMENTWISE,
           error_inputs=_binary(2, Op.mul),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.max, L.binary_layout, cancellation="pair", focus=ELEMENTWISE,
           error_inputs=_binary(3, Op.max),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.min, L.binary_layout, cancellation="pair", focus=ELEMENTWISE,
           error_inputs=_binary(4, Op.min),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.scale, L.scale_layout, ("params",), cancellation="none", focus=ELEMENTWISE,
           error_inputs=(
               *_unary(12, Op.scale, lambda a: ops.scale(a, 2.0)),
               _param(49, "scale: NaN alpha", _DIMS, lambda s: ops.scale(_m(s), float("nan")),
                      ParameterValueError, r"alpha must be a number, got NaN"),
               _param(50, "scale: string alpha", _DIMS, lambda s: ops.scale(_m(s), "x"),
                      ParameterTypeError, r"alpha must be a real number, got str 'x'")),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.abs, L.unary_layout, cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(0, Op.abs),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.sqrt, L.unary_layout, domain="positive", cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(1, Op.sqrt),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.clamp, L.clamp_layout, ("params",), cancellation="none", focus=ELEMENTWISE,
           error_inputs=(
               *_unary(13, Op.clamp, lambda a: ops.clamp(a, 0.0, 1.0)),
               _param(48, "clamp: lo above hi", _DIMS, lambda s: ops.clamp(_m(s), 1.0, 0.0),
                      ParameterValueError, r"lo=1.0 is above hi=0.0")),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.relu, L.unary_layout, cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(2, Op.relu),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.gelu, L.unary_layout, near_overflow=_EXP_EDGE / 2, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(3, Op.gelu), values=S.far_tail(3.0, 11.0),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.sigmoid, L.unary_layout, near_overflow=_EXP_EDGE, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(4, Op.sigmoid),
           values=S.far_tail(5.0, 105.0, both_signs=True),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.tanh, L.unary_layout, near_overflow=_EXP_EDGE / 2, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(5, Op.tanh),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.softplus, L.unary_layout, near_overflow=_EXP_EDGE, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(6, Op.softplus),
           values=S.far_tail(5.0, 105.0),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.exp, L.unary_layout, near_overflow=_EXP_EDGE, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(7, Op.exp),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.log, L.unary_layout, domain="positive", cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(8, Op.log),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.sin, L.unary_layout, cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(9, Op.sin),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.cos, L.unary_layout, cancellation="none", focus=ELEMENTWISE,
           error_inputs=_unary(10, Op.cos),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.inv, L.unary_layout, near_overflow=2.0 ** 126, cancellation="none",
           focus=ELEMENTWISE, error_inputs=_unary(11, Op.inv),
           edges="elementwise", family="elementwise"),
    OpSpec(Op.safe_log, L.safe_log_layout, ("params",), domain="positive", cancellation="none",
           focus=ELEMENTWISE, error_inputs=(
               *_unary(14, Op.safe_log),
               _param(51, "safe_log: eps 0", _DIMS, lambda s: ops.safe_log(_m(s), 0.0),
                      ParameterValueError, r"eps must be positive, got 0.0")),
           edges="elementwise", family="elementwise"),
    # Random ops take no array inputs: only their shapes and parameters vary.
    OpSpec(Op.rand_uniform, L.rand_layout, cancellation="none", error_inputs=(
        _param(44, "rand_uniform: count 2^32", _COUNT,
               lambda s: ops.rand_uniform((2**16, 2**16), seed=1), UInt32OverflowError,
               r"holds 4294967296 elements"),
        _param(45, "rand_uniform: negative seed", _DIMS,
               lambda s: ops.rand_uniform((2,), seed=-1), ParameterValueError,
               r"seed must be a whole number in \[0, 2\^64\), got -1"),
        _param(46, "rand_uniform: bool seed", _DIMS,
               lambda s: ops.rand_uniform((2,), seed=True), ParameterTypeError,
               r"seed must be a whole number in \[0, 2\^64\), got bool True")),
           edges="random", family="random", takes_inputs=False),
    OpSpec(Op.bernoulli_mask, L.bernoulli_layout, ("params",), cancellation="none", error_inputs=(
        _param(47, "bernoulli_mask: p = 1.5", _DIMS,
               lambda s: ops.bernoulli_mask((2,), 1.5, seed=1), ParameterValueError,
               r"got 1.5"),),
           edges="random", family="random", takes_inputs=False),
    OpSpec(Op.reduce_sum, L.reduce_layout, focus=REDUCED, halvable=True, fixed_order=orders.SUM,
           determinism=AuditCase(0, lambda rng, idx: (
               (_n(rng, 1 << 20),), {"axes": None, "keepdims": False}, ())),
           error_inputs=(
               *_unary(17, Op.reduce_sum),
               _param(0, "reduce_sum: axis 2 of rank 2", _AXES,
                      lambda s: ops.reduce_sum(_m(s), axes=(2,)), ShapeError,
                      r"axis 2 is out of range for rank 2"),
               _param(2, "reduce_sum: repeated axis", _AXES,
                      lambda s: ops.reduce_sum(_m(s), axes=(0, -2)), ShapeError,
                      r"axes \(0, -2\) repeat an axis")),
           edges="reduce", family="reductions", exact_sums=X.REDUCE),
    OpSpec(Op.reduce_mean, L.reduce_layout, extra_roundings=1, divides_sum=True, focus=REDUCED,
           halvable=True, fixed_order=orders.MEAN,
           determinism=AuditCase(1, lambda rng, idx: (
               (_n(rng, 512, 2048),), {"axes": (1,), "keepdims": False}, (512,))),
           error_inputs=(
               *_unary(18, Op.reduce_mean),
               _param(1, "reduce_mean: axis -3 of rank 2", _AXES,
                      lambda s: ops.reduce_mean(_m(s), axes=(-3,)), ShapeError,
                      r"axis -3 is out of range")),
           edges="reduce", family="reductions", exact_sums=X.REDUCE),
    OpSpec(Op.softmax, L.softmax_layout, focus=ROW, halvable=True,
           param_values=S.dominant_rows, error_inputs=(
        *_unary(15, Op.softmax),
        _param(3, "softmax: axis 3", _AXES, lambda s: ops.softmax(_m(s), axis=3), ShapeError,
               r"axis 3 is out of range for rank 2"),
        _param(4, "softmax: rank 0", _RANK, lambda s: ops.softmax(filled(s, ())), ShapeError,
               r"needs rank >= 1, got a rank-0")),
           edges="softmax", family="softmax family",
           order_repeat_only=ELEMENTARY_ORDER),
    OpSpec(Op.log_softmax, L.softmax_layout, focus=ROW, halvable=True,
           param_values=S.dominant_rows, error_inputs=(
        *_unary(16, Op.log_softmax),
        _param(5, "log_softmax: rank 0", _RANK, lambda s: ops.log_softmax(filled(s, ())),
               ShapeError, r"needs rank >= 1")),
           edges="softmax", family="softmax family",
           order_repeat_only=ELEMENTARY_ORDER),
    # not halvable: the mask would have to be halved with the row
    OpSpec(Op.hard_masked_softmax, L.masked_softmax_layout, ("masks",), focus=ROW,
           param_values=S.dominant_rows, error_inputs=(
        _param(6, "hard_masked_softmax: float mask", _DIMS,
               lambda s: ops.hard_masked_softmax(_m(s), np.ones((2, 3))), ShapeError,
               r"mask must be boolean, got dtype float64"),
        _param(7, "hard_masked_softmax: mask shape", _DIMS,
               lambda s: ops.hard_masked_softmax(_m(s), np.ones((3, 2), bool)), ShapeError,
               r"mask shape \(3, 2\) differs from scores shape \(2, 3\)")),
           edges="softmax", family="softmax family",
           order_repeat_only=ELEMENTARY_ORDER),
    OpSpec(Op.mse_loss, L.mse_layout, cancellation="pair", focus=LOSS,
           determinism=AuditCase(2, lambda rng, idx: (
               (_n(rng, 1 << 18), _n(rng, 1 << 18)), {}, ())),
           error_inputs=_binary(5, Op.mse_loss),
           edges="mse_loss", family="reductions"),
    OpSpec(Op.reshape, L.reshape_layout, cancellation="none", error_inputs=(
        _param(8, "reshape: element count", _FLAT, lambda s: ops.reshape(_m(s), (4, 2)),
               ShapeError, r"cannot view 6 elements .* as \(4, 2\)"),
        _param(9, "reshape: negative extent", _DIMS, lambda s: ops.reshape(_m(s), (-2, -3)),
               ShapeError, r"shape \(-2, -3\) has a negative"),
        _param(10, "reshape: extent 2^32", _EXTENT, lambda s: ops.reshape(_m(s), (BIG, 0)),
               UInt32OverflowError, r"axis 0 has extent 4294967296")),
           edges="reshape", family="shape and indexing"),
    OpSpec(Op.permute, L.permute_layout, cancellation="none", error_inputs=(
        _param(11, "permute: repeated axis", _DIMS, lambda s: ops.permute(_m(s), (0, 0)),
               ShapeError, r"\(0, 0\) is not a permutation"),
        _param(12, "permute: wrong rank", _RANK, lambda s: ops.permute(_m(s), (0, 1, 2)),
               ShapeError, r"\(0, 1, 2\) is not a permutation of range\(2\)")),
           edges="permute", family="shape and indexing"),
    OpSpec(Op.broadcast, L.broadcast_layout, cancellation="none",
           determinism=AuditCase(5, lambda rng, idx: (
               (_n(rng, 1, 256),), {"shape": (4096, 256)}, (4096, 256))),
           error_inputs=(
               _param(13, "broadcast: incompatible", _DIMS,
                      lambda s: ops.broadcast(_m(s), (3, 3)), ShapeError,
                      r"\(2, 3\) does not broadcast to \(3, 3\)"),
               _param(14, "broadcast: rank shrinks", _RANK, lambda s: ops.broadcast(_m(s), (6,)),
                      ShapeError, r"does not broadcast to \(6,\)"),
               _param(15, "broadcast: extent 2^32", _EXTENT,
                      lambda s: ops.broadcast(filled(s, (1,)), (BIG,)), UInt32OverflowError,
                      r"extent 4294967296"),
               _param(16, "broadcast: count 2^32", _COUNT,
                      lambda s: ops.broadcast(filled(s, (1, 1)), (2**16, 2**16)),
                      UInt32OverflowError, r"holds 4294967296 elements")),
           edges="broadcast", family="shape and indexing"),
    OpSpec(Op.concat, L.concat_layout, cancellation="none", error_inputs=(
        _param(17, "concat: no tensors", _DIMS, lambda s: ops.concat([], axis=0), ShapeError,
               r"needs at least one tensor"),
        _param(18, "concat: mismatched axis", _DIMS,
               lambda s: ops.concat([_m(s), filled(s, (3, 3))], axis=1), ShapeError,
               r"tensor 1 has shape \(3, 3\), incompatible with \(2, 3\) along axis 1"),
        _param(19, "concat: axis out of range", _AXES, lambda s: ops.concat([_m(s)], axis=2),
               ShapeError, r"axis 2 is out of range"),
        _param(20, "concat: rank 0", _RANK, lambda s: ops.concat([filled(s, ())], axis=0),
               ShapeError, r"rank-0 tensors cannot")),
           edges="concat", family="shape and indexing"),
    OpSpec(Op.slice, L.slice_layout, cancellation="none", error_inputs=(
        _param(21, "slice: stop past extent", _INDICES, lambda s: ops.slice(_m(s), 1, 1, 4),
               ShapeError, r"\[1, 4\) is not a range within \[0, 3\]"),
        _param(22, "slice: start after stop", _INDICES, lambda s: ops.slice(_m(s), 0, 2, 1),
               ShapeError, r"\[2, 1\) is not a range"),
        _param(23, "slice: axis out of range", _AXES, lambda s: ops.slice(_m(s), 5, 0, 1),
               ShapeError, r"axis 5 is out of range")),
           edges="slice", family="shape and indexing"),
    OpSpec(Op.gather, L.gather_layout, ("indices",), cancellation="none",
           determinism=AuditCase(6, lambda rng, idx: (
               (_n(rng, 256, 64),), {"axis": 0, "indices": idx[:16384]}, (16384, 64))),
           error_inputs=(
               _param(24, "gather: index = extent", _INDICES,
                      lambda s: ops.gather(_m(s), 1, [0, 3]), IndexOutOfRangeError,
                      r"index 3 is outside \[0, 3\)"),
               _param(25, "gather: negative index", _INDICES,
                      lambda s: ops.gather(_m(s), 0, [-1]), IndexOutOfRangeError,
                      r"index -1 is outside \[0, 2\)"),
               _param(26, "gather: index 2^32", "indices fit UInt32",
                      lambda s: ops.gather(_m(s), 0, [BIG]), IndexOutOfRangeError,
                      r"index 4294967296 is outside"),
               _param(27, "gather: 2-D indices", _RANK, lambda s: ops.gather(_m(s), 0, [[0]]),
                      ShapeError, r"1-D sequence of ints, got dtype int64 with shape \(1, 1\)"),
               _param(28, "gather: float indices", _DIMS, lambda s: ops.gather(_m(s), 0, [0.5]),
                      ShapeError, r"got dtype float64"),
               _param(29, "gather: axis out of range", _AXES,
                      lambda s: ops.gather(_m(s), 2, [0]), ShapeError,
                      r"axis 2 is out of range")),
           edges="gather", family="shape and indexing"),
    OpSpec(Op.scatter_add, L.scatter_layout, ("indices",), fixed_order=orders.SCATTER_LEFT,
           determinism=AuditCase(7, lambda rng, idx: (
               (_n(rng, 256, 16), _n(rng, 65536, 16)), {"axis": 0, "indices": idx}, (256, 16))),
           error_inputs=(
               _param(30, "scatter_add: src shape", _DIMS,
                      lambda s: ops.scatter_add(_m(s), _m(s), 0, [1]), ShapeError,
                      r"src shape \(2, 3\) should be \(1, 3\)"),
               _param(31, "scatter_add: index out of range", _INDICES,
                      lambda s: ops.scatter_add(_m(s), filled(s, (1, 3)), 0, [2]),
                      IndexOutOfRangeError, r"index 2 is outside \[0, 2\)")),
           edges="scatter_add", family="shape and indexing", exact_sums=X.SCATTER),
    OpSpec(Op.matmul, L.matmul_layout, products=True, focus=DOT, halvable=True,
           fixed_order=orders.MATMUL,
           determinism=AuditCase(3, lambda rng, idx: (
               (_n(rng, 96, 1024), _n(rng, 1024, 80)), {"trans_a": False, "trans_b": False},
               (96, 80))),
           error_inputs=(
               _param(32, "matmul: rank 4", _RANK,
                      lambda s: ops.matmul(filled(s, (1, 1, 2, 2)), filled(s, (1, 1, 2, 2))),
                      ShapeError, r"two rank-2 or two rank-3 tensors, got shapes \(1, 1, 2, 2\)"),
               _param(33, "matmul: inner extents", _DIMS, lambda s: ops.matmul(_m(s), _m(s)),
                      ShapeError, r"inner extents differ: \(2, 3\) @ \(2, 3\)"),
               _param(34, "matmul: batch extents", _DIMS,
                      lambda s: ops.matmul(filled(s, (2, 2, 2)), filled(s, (3, 2, 2))),
                      ShapeError, r"batch extents 2 and 3 differ"),
               _param(35, "matmul: mixed ranks", _RANK,
                      lambda s: ops.matmul(_m(s), filled(s, (1, 3, 2))), ShapeError,
                      r"got shapes \(2, 3\) and")),
           edges="matmul", family="linear algebra", exact_sums=X.MATMUL),
    OpSpec(Op.linear, L.linear_layout, products=True, fixed_order=orders.LINEAR,
           determinism=AuditCase(4, lambda rng, idx: (
               (_n(rng, 64, 512), _n(rng, 48, 512), _n(rng, 48)), {}, (64, 48))),
           error_inputs=(
               _param(36, "linear: weight shape", _DIMS,
                      lambda s: ops.linear(_m(s), filled(s, (4, 2)), filled(s, (4,))), ShapeError,
                      r"disagree"),
               _param(37, "linear: bias rank", _RANK,
                      lambda s: ops.linear(_m(s), filled(s, (4, 3)), filled(s, (4, 1))),
                      ShapeError, r"b \[out\]")),
           edges="linear", family="linear algebra", exact_sums=X.LINEAR),
    # the float32 two-pass statistics overflow when n (x - mu)^2 reaches 2^128: 2^60 is that edge
    # for groups of about 256; scores overflow when d |q||k| does: 2^62 is the edge for d of 16
    OpSpec(Op.layer_norm, L.layer_norm_layout, ("params",), near_overflow=2.0 ** 60,
           cancellation="norm", wide_max_exp=57, focus=group(_layer_norm_group), error_inputs=(
               _param(38, "layer_norm: gamma shape", _DIMS,
                      lambda s: ops.layer_norm(_m(s), filled(s, (2,)), filled(s, (3,))),
                      ShapeError, r"gamma \[d\], beta \[d\]; got \(2, 3\), \(2,\), \(3,\)"),
               _param(39, "layer_norm: eps 0", _DIMS,
                      lambda s: ops.layer_norm(_m(s), filled(s, (3,)), filled(s, (3,)), eps=0.0),
                      ParameterValueError,
                      r"eps must be a positive finite number that float32 can hold, got 0.0")),
           edges="layer_norm", family="norms and attention"),
    OpSpec(Op.batch_norm, L.batch_norm_layout, ("params",), near_overflow=2.0 ** 60,
           cancellation="norm", wide_max_exp=57, focus=group(_batch_norm_group), error_inputs=(
               _param(40, "batch_norm: rank 1", _RANK,
                      lambda s: ops.batch_norm(filled(s, (3,)), filled(s, (3,)), filled(s, (3,))),
                      ShapeError, r"x \[N, C, ...\]"),),
           edges="batch_norm", family="norms and attention"),
    OpSpec(Op.scaled_dot_product_attention, L.attention_layout, ("masks", "params"),
           near_overflow=2.0 ** 62, cancellation="attention", wide_max_exp=57, focus=group(_attention_group),
           determinism=AuditCase(8, _attention_audit), error_inputs=(
               _param(41, "attention: rank 4", _RANK,
                      lambda s: ops.scaled_dot_product_attention(*(filled(s, (1, 1, 2, 2)),) * 3),
                      ShapeError, r"all be rank 2"),
               _param(42, "attention: key width", _DIMS,
                      lambda s: ops.scaled_dot_product_attention(_m(s), filled(s, (2, 4)), _m(s)),
                      ShapeError, r"disagree"),
               _param(43, "attention: mask shape", _DIMS,
                      lambda s: ops.scaled_dot_product_attention(_m(s), _m(s), _m(s),
                                                                 mask=np.ones((3, 3), bool)),
                      ShapeError, r"mask must be boolean of shape \(2, 2\)")),
           edges="attention", family="norms and attention",
           order_repeat_only=ELEMENTARY_ORDER),
    # --- pooling: max selects (exact), avg divides a sum once, smooth max is a log-sum-exp ---
    OpSpec(Op.max_pool, L.pool_layout, cancellation="none",
           determinism=AuditCase(11, lambda rng, idx: _pool_audit(rng)),
           error_inputs=(*_unary(21, Op.max_pool, lambda a: ops.max_pool(a, (1,))),
                         *_pool_geometry_errors()),
           edges="pooling", family="convolution and pooling"),
    OpSpec(Op.avg_pool, L.pool_layout, extra_roundings=1, divides_sum=True, products=True,
           determinism=AuditCase(12, lambda rng, idx: _pool_audit(rng)),
           error_inputs=(
               *_unary(22, Op.avg_pool, lambda a: ops.avg_pool(a, (1,))),
               _param(87, "avg_pool: stride 0", _DIMS,
                      lambda s: ops.avg_pool(_m(s), (1,), stride=0), ParameterValueError,
                      r"stride \(0,\) has 0 on spatial axis 0; every stride must be at least 1"),
               _param(88, "avg_pool: spatial 2^32 under C = 0", _COUNT,
                      lambda s: ops.avg_pool(filled(s, (0, 2**16, 2**16)), 1),
                      UInt32OverflowError, r"input spatial extents \(65536, 65536\) hold "
                                           r"4294967296 cells"),
               _param(89, "avg_pool: x rank 2 for a 2-D window", _RANK,
                      lambda s: ops.avg_pool(_m(s), 2), ShapeError,
                      r"x has shape \(2, 3\) \(rank 2\) but a spatial rank of 2")),
           edges="pooling", family="convolution and pooling", exact_sums=X.POOL),
    OpSpec(Op.smooth_max_pool, L.smooth_pool_layout, ("params",), products=True,
           determinism=AuditCase(13, lambda rng, idx: _pool_audit(rng, beta=0.5)),
           error_inputs=(
               *_unary(23, Op.smooth_max_pool, lambda a: ops.smooth_max_pool(a, (1,), 0.5)),
               *(_param(pos, f"smooth_max_pool: beta {name}", _DIMS,
                        lambda s, b=beta: ops.smooth_max_pool(_m(s), (1,), b),
                        ParameterValueError, r"beta must be finite and nonzero after rounding to "
                                             r"float32, got " + shown)
                 for pos, name, beta, shown in (
                     (90, "0", 0.0, r"0\.0"), (91, "inf", float("inf"), r"inf"),
                     (92, "nan", float("nan"), r"nan"), (93, "1e-50 (rounds to 0)", 1e-50,
                                                         r"1e-50 \(float32 0\.0\)"),
                     (94, "1e39 (rounds to inf)", 1e39, r"1e\+39 \(float32 inf\)"))),
               _param(95, "smooth_max_pool: string beta", _DIMS,
                      lambda s: ops.smooth_max_pool(_m(s), (1,), "big"), ParameterTypeError,
                      r"beta must be a real number, got str 'big'"),
               _param(96, "smooth_max_pool: kernel extent 0", _DIMS,
                      lambda s: ops.smooth_max_pool(_m(s), (0,), 0.5), ParameterValueError,
                      r"kernel_size \(0,\) has 0 on spatial axis 0"),
               _param(97, "smooth_max_pool: spatial 2^32 under C = 0", _COUNT,
                      lambda s: ops.smooth_max_pool(filled(s, (0, 2**16, 2**16)), 1, 0.5),
                      UInt32OverflowError, r"input spatial extents \(65536, 65536\) hold")),
           edges="pooling", family="convolution and pooling",
           order_repeat_only=ELEMENTARY_ORDER),
)



# --- the spectral family: packed rfft / irfft (RuntimeEntry records) and fft_fno ----------------

def _fno(s, x=(4, 3), w=(2, 3, 3), wi=None, fill=1.0):
    return ops.fft_fno(filled(s, x, fill), filled(s, w), filled(s, wi or w))


def _spectral_inputs(position: int, name: str, fn, shape) -> tuple[ErrorInput, ...]:
    """The device, flat-length and layout checks of input 0, for `fn(s, a)` with `a` of a shape
    the op takes (bad_inputs.unary_input_errors draws rank-1 tensors: these ops need a rank)."""
    n = int(np.prod(shape))
    rank = (UNARY_INPUTS, position)
    dims = re.escape(str(tuple(shape)))
    return (
        ErrorInput(rank + (0,), f"{name}: input on the other device", "session targets the device",
                   lambda s: fn(s, foreign(s, shape)), DeviceMismatchError,
                   r"input 0 lives on `\w+` but the session runs on `\w+`"),
        ErrorInput(rank + (1,), f"{name}: flat length off by one",
                   "flat lengths match logical shapes", lambda s: fn(s, short(s, shape)),
                   LengthMismatchError, rf"input 0 buffer holds {n - 1} elements but its shape "
                                        rf"{dims} needs {n}"),
        ErrorInput(rank + (2,), f"{name}: strided buffer", "strides contiguous",
                   lambda s: fn(s, strided(s, shape)), LayoutError,
                   r"not one contiguous float32 run \(ndim 1, strides \(8,\)"),
    )


_FINITE = "inputs finite"
_SPECTRUM = r"the packed spectrum would hold \d+ floats .* over the UInt32 limit 4294967295"
_NO_SPECIAL = Skip("class:special", "the FFT entry points and fft_fno take finite inputs only "
                                    "(their wrappers raise NonFiniteInputError: one non-finite "
                                    "value would spread over every output)")


# cuFFT's order is the library's (the capsules declare it implementation-defined): both entry
# points are audited at 2^20 transform elements, past the size where its C2R changed algorithm
def _rfft_audit(rng, idx):
    return (_n(rng, 256, 4096),), {}, (256, 2049, 2)


def _irfft_audit(rng, idx):
    return (_n(rng, 256, 2049, 2),), {"n": 4096}, (256, 4096)


def _fno_audit(rng, idx):
    x, wr, wi = _n(rng, 64, 256, 16), _n(rng, 96, 16, 16), _n(rng, 96, 16, 16)
    return (x, wr * np.float32(1 / 256), wi * np.float32(1 / 256)), {}, (64, 256, 16)


SPECTRAL_SPECS: tuple[OpSpec, ...] = (
    OpSpec(Op.fft_fno, L.fft_fno_layout, near_overflow=2.0 ** 45, cancellation="none",
           wide_max_exp=45, skips=(_NO_SPECIAL,), determinism=AuditCase(14, _fno_audit),
           error_inputs=(
               *_spectral_inputs(26, "fft_fno", lambda s, a: ops.fft_fno(
                   a, filled(s, (2, 3, 3)), filled(s, (2, 3, 3))), (4, 3)),
               _param(100, "fft_fno: modes 0", _DIMS, lambda s: _fno(s, w=(0, 3, 3)), ShapeError,
                      r"modes = w_re.shape\[0\] = 0 is outside \[1, grid // 2 \+ 1\] = \[1, 3\]"),
               _param(101, "fft_fno: modes above grid // 2 + 1", _DIMS,
                      lambda s: _fno(s, w=(4, 3, 3)), ShapeError,
                      r"modes = w_re.shape\[0\] = 4 is outside \[1, grid // 2 \+ 1\] = \[1, 3\] "
                      r"for grid 4"),
               _param(102, "fft_fno: grid 0", _DIMS, lambda s: _fno(s, x=(0, 3)), ShapeError,
                      r"grid and width must be at least 1, got x shape \(0, 3\)"),
               _param(103, "fft_fno: width 0", _DIMS,
                      lambda s: _fno(s, x=(2, 4, 0), w=(1, 0, 0)), ShapeError,
                      r"grid and width must be at least 1, got x shape \(2, 4, 0\)"),
               _param(104, "fft_fno: w_im shape differs", _DIMS,
                      lambda s: _fno(s, wi=(2, 3, 2)), ShapeError,
                      r"w_re and w_im must both be \(modes, width, width\) = \(modes, 3, 3\), "
                      r"got \(2, 3, 3\) and \(2, 3, 2\)"),
               _param(105, "fft_fno: weight width", _DIMS, lambda s: _fno(s, w=(2, 2, 2)),
                      ShapeError, r"got \(2, 2, 2\) and \(2, 2, 2\)"),
               _param(106, "fft_fno: rank 4", _RANK, lambda s: _fno(s, x=(1, 1, 4, 3)),
                      ShapeError, r"takes x \(grid, width\) or \(batch, grid, width\), got "
                                  r"shape \(1, 1, 4, 3\)"),
               _param(107, "fft_fno: batch x grid x width 2^32", _COUNT,
                      lambda s: ops.fft_fno(lying(s, (2**16, 2**8, 2**8)), filled(s, (1, 256, 256)),
                                            filled(s, (1, 256, 256))),
                      UInt32OverflowError, _SPECTRUM),
               _param(108, "fft_fno: NaN in x", _FINITE, lambda s: _fno(s, fill=float("nan")),
                      NonFiniteInputError, r"fft_fno: x holds a NaN or an infinity"),
               _param(109, "fft_fno: inf in w_im", _FINITE,
                      lambda s: ops.fft_fno(filled(s, (4, 3)), filled(s, (2, 3, 3)),
                                            filled(s, (2, 3, 3), float("inf"))),
                      NonFiniteInputError, r"fft_fno: w_im holds a NaN or an infinity")),
           edges="spectral", family="linear algebra"),
    OpSpec(Entry.rfft, L.rfft_layout, near_overflow=2.0 ** 100, cancellation="none",
           wide_max_exp=100, skips=(_NO_SPECIAL,), determinism=AuditCase(16, _rfft_audit),
           error_inputs=(
               *_spectral_inputs(24, "rfft", lambda s, a: ops.rfft(a), (2, 3)),
               _param(110, "rfft: rank 1", _RANK, lambda s: ops.rfft(filled(s, (3,))), ShapeError,
                      r"takes x \(batch, n\), got shape \(3,\)"),
               _param(111, "rfft: n 0", _DIMS, lambda s: ops.rfft(filled(s, (2, 0))), ShapeError,
                      r"transform length n must be at least 1, got shape \(2, 0\)"),
               _param(112, "rfft: spectrum 2^32", _COUNT,
                      lambda s: ops.rfft(lying(s, (2, 2**31))), UInt32OverflowError, _SPECTRUM),
               _param(113, "rfft: NaN", _FINITE,
                      lambda s: ops.rfft(filled(s, (2, 3), float("nan"))), NonFiniteInputError,
                      r"rfft: x holds a NaN or an infinity")),
           edges="spectral", family="linear algebra"),
    OpSpec(Entry.irfft, L.irfft_layout, near_overflow=2.0 ** 100, cancellation="none",
           wide_max_exp=100, skips=(_NO_SPECIAL,), determinism=AuditCase(17, _irfft_audit),
           error_inputs=(
               *_spectral_inputs(25, "irfft", lambda s, a: ops.irfft(a, 2), (2, 2, 2)),
               _param(114, "irfft: n 0", _DIMS, lambda s: ops.irfft(filled(s, (2, 1, 2)), 0),
                      ParameterValueError, r"n must be a whole number in \[1, 2\^32\), got 0"),
               _param(115, "irfft: float n", _DIMS,
                      lambda s: ops.irfft(filled(s, (2, 3, 2)), 4.0), ParameterTypeError,
                      r"n must be a whole number, got float 4.0"),
               _param(116, "irfft: bins differ", _DIMS,
                      lambda s: ops.irfft(filled(s, (2, 4, 2)), 4), ShapeError,
                      r"\(batch, 3, 2\) for n = 4, got shape \(2, 4, 2\)"),
               _param(117, "irfft: inf", _FINITE,
                      lambda s: ops.irfft(filled(s, (2, 3, 2), float("inf")), 4),
                      NonFiniteInputError, r"irfft: z holds a NaN or an infinity")),
           edges="spectral", family="linear algebra"),
)


SPECS = SPECS + SPECTRAL_SPECS

# --- selective_scan ------------------------------------------------------------------------------

def _scan_of_a(a):
    """selective_scan with `a` as A (input 0) and good companions on the session's device (small
    ones when a's extent is past what a test should allocate: the wrapper refuses a first)."""
    s = current_session()
    state = a.shape[-1] if a.shape and a.shape[-1] <= 4096 else 3
    seq = a.shape[0] if a.ndim == 2 and a.shape[0] <= 4096 else 2
    coef = a.shape if a.shape and a.shape[-1] <= 4096 else (state,)
    return ops.selective_scan(a, filled(s, coef), filled(s, (seq, state)), filled(s, (state,)))


def _scan(s, a_shape=(3,), b_shape=None, x_shape=(2, 3), h_shape=(3,), bad=None):
    """selective_scan on filled tensors; bad = (index, value) writes one value of A."""
    a = filled(s, a_shape, 0.5)
    if bad is not None:
        a.buffer.data[bad[0]] = bad[1]
    return ops.selective_scan(a, filled(s, b_shape or a_shape), filled(s, x_shape),
                              filled(s, h_shape))


def _scan_audit(rng, idx):
    # the parallel path (seq 512 >= PARALLEL_MIN_SEQ: 16 chunks of 32 steps), token-dependent,
    # |A| just below 1; 2^17 outputs, each checked against the exact recurrence (mpmath: the
    # audit's cost on the CPU grows with the count)
    seq, state = 512, 256
    a = (1 - 2.0 ** -6 * rng.random((seq, state))).astype(np.float32)
    return (a, _n(rng, seq, state), _n(rng, seq, state), _n(rng, state)), {}, (seq, state)


_SCAN = "selective_scan"
SPECS += (
    OpSpec(Op.selective_scan, L.scan_layout, near_overflow=2.0 ** 60, cancellation="none",
           wide_max_exp=60, determinism=AuditCase(15, _scan_audit), values=L.scan_values,
           fixed_order=orders.SCAN,
           error_inputs=(
               *_unary(27, Op.selective_scan, _scan_of_a),
               _param(130, "selective_scan: X rank 1", _RANK,
                      lambda s: _scan(s, x_shape=(3,)), ShapeError,
                      r"X must be \(seq, state\), got shape \(3,\)"),
               _param(131, "selective_scan: h0 shape", _DIMS,
                      lambda s: _scan(s, h_shape=(2,)), ShapeError,
                      r"h0 must be \(state,\) = \(3,\) to match X \(2, 3\), got \(2,\)"),
               _param(132, "selective_scan: A and B shapes differ", _DIMS,
                      lambda s: _scan(s, b_shape=(2, 3)), ShapeError,
                      r"A and B must have one shape, got A \(3,\) and B \(2, 3\)"),
               _param(133, "selective_scan: A state", _DIMS, lambda s: _scan(s, a_shape=(4,)),
                      ShapeError, r"must be \(state,\) = \(3,\) \(constant\) or "
                                  r"\(seq, state\) = \(2, 3\) \(token-dependent\) to match "
                                  r"X \(2, 3\), got \(4,\)"),
               _param(134, "selective_scan: token A seq", _DIMS,
                      lambda s: _scan(s, a_shape=(3, 3)), ShapeError,
                      r"\(token-dependent\) to match X \(2, 3\), got \(3, 3\)"),
               _param(135, "selective_scan: seq * state 2^32", _COUNT,
                      lambda s: ops.selective_scan(filled(s, (65536,)), filled(s, (65536,)),
                                                   huge_matrix(s, 65536, 65536),
                                                   filled(s, (65536,))),
                      UInt32OverflowError, r"input 2: shape \(65536, 65536\) holds 4294967296 "
                                           r"elements, over the UInt32 limit 4294967295"),
               _param(136, "selective_scan: infinite A", _DIMS,
                      lambda s: _scan(s, bad=(1, np.inf)), NonFiniteInputError,
                      r"A must be finite, got inf at index \(1,\) of A \(3,\)"),
               _param(137, "selective_scan: NaN in a token A", _DIMS,
                      lambda s: _scan(s, a_shape=(2, 3), bad=(3, np.nan)), NonFiniteInputError,
                      r"A must be finite, got nan at index \(1, 0\) of A \(2, 3\)")),
           edges="scan", family="linear algebra"),
)

# --- convolution: conv and conv_transpose (guard positions 44..69, audit turns 9 and 10) ----------

def _conv_audit(transpose: bool):
    def draw(rng, idx):
        # 1600 positions per kernel element: 7 dKernel chunks racing in the atomic mode, over
        # 2304 kernel elements; 25600 outputs, each checked against its exact dot product
        x, w, b = _n(rng, 4, 16, 20, 20), _n(rng, 16, 16, 3, 3), _n(rng, 16)
        params = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
        return (x, w, b), params, (4, 16, 20, 20)
    return draw


def _cv(s, x=(2, 5, 5), w=(3, 2, 3, 3), b=None, transpose=False, **kw):
    """A conv (or conv_transpose) call on good tensors of the given shapes."""
    fn = ops.conv_transpose if transpose else ops.conv
    return fn(filled(s, x), filled(s, w), None if b is None else filled(s, b), **kw)


def _conv_errors(position: int, op: str, transpose: bool):
    """The guards of one convolution op. Positions 44..51 of the reserved range are already
    taken (rand_uniform .. safe_log), so each op takes one free position and numbers its cases
    beneath it: ranks (PARAMETERS, position, 0..17)."""
    t = transpose

    def _param(sub, name, check, call, error, message):
        return ErrorInput((PARAMETERS, position, sub), name, check, call, error, message)
    w_bad_ch = (3, 2, 3, 3) if not t else (3, 2, 3, 3)
    return (
        _param(0, f"{op}: kernel rank 2", _RANK, lambda s: _cv(s, (2, 5), (3, 2), None, t),
               ShapeError, r"the kernel has shape \(3, 2\) \(spatial rank 0\)"),
        _param(1, f"{op}: kernel rank 11", _RANK,
               lambda s: _cv(s, (1,) * 10, (1,) * 11, None, t), ShapeError,
               r"spatial rank 9\); wants rank 3..10"),
        _param(2, f"{op}: x rank for the kernel", _RANK,
               lambda s: _cv(s, (1, 2, 5, 5), (2, 2, 3), None, t), ShapeError,
               r"x has shape \(1, 2, 5, 5\) but a kernel of spatial rank 1 wants x of rank 2"),
        _param(3, f"{op}: kernel extent 0", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 0, 3), None, t), ShapeError,
               r"kernel extent 0 in kernel shape \(2, 2, 0, 3\)"),
        _param(4, f"{op}: channel mismatch", _DIMS,
               lambda s: _cv(s, (4, 5, 5), w_bad_ch, None, t), ShapeError,
               r"x has 4 channels but the kernel \(3, 2, 3, 3\)"),
        _param(5, f"{op}: groups do not divide", _DIMS,
               lambda s: _cv(s, (3, 5, 5), (3, 1, 3, 3), None, t, groups=2), ParameterValueError,
               r"groups=2 must divide both channel counts"),
        _param(6, f"{op}: groups 0", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, groups=0), ParameterValueError,
               r"groups must be at least 1, got 0"),
        _param(7, f"{op}: stride 0", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, stride=0), ParameterValueError,
               r"stride \(0, 0\) must be positive on every axis"),
        _param(8, f"{op}: dilation 0", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, dilation=(1, 0)),
               ParameterValueError, r"dilation \(1, 0\) must be positive"),
        _param(9, f"{op}: negative padding", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, padding=(-1, 0)),
               ParameterValueError, r"padding \(-1, 0\) must be non-negative"),
        _param(10, f"{op}: stride of 3 entries for rank 2", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, stride=(1, 1, 1)),
               ParameterValueError, r"stride \(1, 1, 1\) has 3 entries, the kernel has spatial "
                                    r"rank 2"),
        _param(11, f"{op}: float padding", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), None, t, padding=0.5),
               ParameterTypeError, r"padding must be an int or a sequence of 2 ints, got float"),
        _param(12, f"{op}: bias shape", _DIMS,
               lambda s: _cv(s, (2, 5, 5), (2, 2, 3, 3), (3,), t), ShapeError,
               r"bias has shape \(3,\), expected \(2,\)"),
        _param(13, f"{op}: stride 2^32", _EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, stride=BIG), UInt32OverflowError,
               r"stride 4294967296 is over the UInt32 limit"),
        _param(14, f"{op}: padding 2^32", _EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, padding=BIG), UInt32OverflowError,
               r"padding 4294967296 is over the UInt32 limit"),
        _param(15, f"{op}: dilation 2^32", _EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, dilation=BIG), UInt32OverflowError,
               r"dilation 4294967296 is over the UInt32 limit"),
        # no channels: the element count is 0, the spatial product alone overflows
        _param(16, f"{op}: spatial product 2^32 behind 0 channels", _COUNT,
               lambda s: _cv(s, (0, 2**16, 2**16), (2, 0, 1, 1) if not t else (0, 2, 1, 1), None,
                             t), UInt32OverflowError,
               r"the spatial product of x \(65536, 65536\) is 4294967296"),
        _param(17, f"{op}: padded extent over UInt32", _EXTENT,
               lambda s: _cv(s, (2, 5), (2, 2, 3), None, t, padding=2**31), UInt32OverflowError,
               r"the padded extent 5 \+ 2\*2147483648 is 4294967301"),
    )


SPECS = SPECS + (
    # focus None: a failing output reads a window of x across channels, none of FOCI; shrinking
    # keeps the case whole
    OpSpec(Op.conv, L.conv_layout, ("params",), near_overflow=2.0 ** 63, products=True,
           focus=None, determinism=AuditCase(9, _conv_audit(False)),
           error_inputs=_conv_errors(52, "conv", False),
           edges="conv", family="convolution and pooling"),
    OpSpec(Op.conv_transpose, L.conv_transpose_layout, ("params",), near_overflow=2.0 ** 63,
           products=True, focus=None, determinism=AuditCase(10, _conv_audit(True)),
           error_inputs=_conv_errors(53, "conv_transpose", True),
           edges="conv", family="convolution and pooling"),
)

# --- the fused cross-entropy loss (a RuntimeEntry record) ----------------------------------------

def _xent(s, logits=(2, 3), targets=(0, 2), fill=1.0):
    return ops.cross_entropy(filled(s, logits, fill), targets)


def _xent_audit(rng, idx):
    # gpt2's shape: 4096 rows of 256 classes, a warp per row, the rows' sum in one block
    return (_n(rng, 4096, 256),), {"targets": rng.integers(0, 256, 4096).astype(np.int64)}, ()


SPECS = SPECS + (
    OpSpec(Entry.cross_entropy, L.cross_entropy_layout, ("indices",), allows_empty=False,
           cancellation="none", focus=LOSS, determinism=AuditCase(18, _xent_audit),
           param_values=S.confident_logits,
           error_inputs=(
               *_spectral_inputs(28, "cross_entropy", lambda s, a: ops.cross_entropy(a, [0, 1]),
                                 (2, 3)),
               _param(138, "cross_entropy: target = classes", _INDICES,
                      lambda s: _xent(s, targets=[0, 3]), IndexOutOfRangeError,
                      r"target 3 is outside \[0, 3\) for logits with 3 classes"),
               _param(139, "cross_entropy: negative target", _INDICES,
                      lambda s: _xent(s, targets=[-1, 0]), IndexOutOfRangeError,
                      r"target -1 is outside \[0, 3\)"),
               _param(140, "cross_entropy: float targets", _DIMS,
                      lambda s: _xent(s, targets=[0.0, 1.0]), ParameterTypeError,
                      r"targets must be integer class indices, got dtype float64"),
               _param(141, "cross_entropy: one target for two rows", _DIMS,
                      lambda s: _xent(s, targets=[0]), ShapeError,
                      r"1 targets for 2 rows of logits"),
               _param(142, "cross_entropy: 2-D targets", _RANK,
                      lambda s: _xent(s, targets=[[0], [1]]), ShapeError,
                      r"targets must be 1-D \(one class per row\), got shape \(2, 1\)"),
               _param(143, "cross_entropy: rank-3 logits", _RANK,
                      lambda s: _xent(s, logits=(1, 2, 3), targets=[0]), ShapeError,
                      r"takes logits \[N, C\] \(rank 2\), got shape \(1, 2, 3\)"),
               _param(144, "cross_entropy: no classes", _DIMS,
                      lambda s: _xent(s, logits=(2, 0), targets=[0, 0]), ShapeError,
                      r"needs at least one row and one class, got logits shape \(2, 0\)")),
           edges="cross_entropy", family="reductions",
           order_repeat_only=ELEMENTARY_ORDER),
)

# --- bias_gelu (a RuntimeEntry record) -------------------------------------------------------------

def _bias_gelu_audit(rng, idx):
    # gpt2-124m's MLP width over 4096 rows: db's 64 row chunks and their fixed-order sum
    return (_n(rng, 4096, 512), _n(rng, 512)), {}, (4096, 512)


SPECS = SPECS + (
    OpSpec(Entry.bias_gelu, L.bias_gelu_layout, near_overflow=_EXP_EDGE / 2, cancellation="none",
           determinism=AuditCase(19, _bias_gelu_audit), values=S.bias_gelu_values,
           error_inputs=(
               *_spectral_inputs(29, "bias_gelu", lambda s, a: ops.bias_gelu(a, filled(s, (3,))),
                                 (2, 3)),
               _param(145, "bias_gelu: b of the wrong length", _DIMS,
                      lambda s: ops.bias_gelu(_m(s), filled(s, (2,))), ShapeError,
                      r"b must have shape \(d,\) = \(3,\) for x of shape \(2, 3\), got "
                      r"\(2,\)"),
               _param(146, "bias_gelu: rank-0 x", _RANK,
                      lambda s: ops.bias_gelu(filled(s, ()), filled(s, (1,))), ShapeError,
                      r"x must have rank >= 1"),
               _param(147, "bias_gelu: b on the other device", "session targets the device",
                      lambda s: ops.bias_gelu(_m(s), foreign(s, (3,))), DeviceMismatchError,
                      r"input 1 lives on `\w+` but the session runs on `\w+`")),
           edges="bias_gelu", family="elementwise",
           order_repeat_only=ELEMENTARY_ORDER),
)

# --- attention_heads (a RuntimeEntry record) ------------------------------------------------------

def _heads_audit(rng, idx):
    # gpt2-124m's heads (12 of 64) over 4 x 128 tokens: 96 (sequence, head) pairs of two 64-row
    # tiles each, enough blocks for any unfixed order to show, at an eighth of the CPU reference's
    # time of 8 x 256 tokens (84 of the CPU suite's 134 s)
    qkv = tuple(_n(rng, 4, 128, 768) for _ in range(3))
    return qkv, {"heads": 12, "causal": True, "scale": float(np.float32(64 ** -0.5))}, \
        (4, 128, 768)


def _heads(s, q=(1, 2, 4), k=None, heads=2, causal=True):
    return ops.attention_heads(filled(s, q), filled(s, k or q), filled(s, q), heads,
                               causal=causal)


SPECS = SPECS + (
    OpSpec(Entry.attention_heads, L.attention_heads_layout, ("masks", "params"),
           near_overflow=2.0 ** 62, cancellation="attention", wide_max_exp=57,
           determinism=AuditCase(20, _heads_audit),
           error_inputs=(
               *_spectral_inputs(30, "attention_heads",
                                 lambda s, a: ops.attention_heads(a, a, a, 2), (1, 2, 4)),
               _param(148, "attention_heads: k of another shape", _DIMS,
                      lambda s: _heads(s, k=(1, 3, 4)), ShapeError,
                      r"q, k, v must be equal rank-3 shapes \[batch, tokens, heads \* head_dim\]; "
                      r"got \(1, 2, 4\), \(1, 3, 4\), \(1, 2, 4\)"),
               _param(149, "attention_heads: heads not dividing the width", _DIMS,
                      lambda s: _heads(s, heads=3), ShapeError,
                      r"heads = 3 must be a positive int dividing the width 4"),
               _param(150, "attention_heads: rank-2 q", _RANK,
                      lambda s: _heads(s, q=(2, 4)), ShapeError,
                      r"must be equal rank-3 shapes"),
               _param(151, "attention_heads: causal not a bool", _DIMS,
                      lambda s: _heads(s, causal="yes"), ParameterTypeError,
                      r"causal must be True or False, got 'yes'"),
               _param(152, "attention_heads: float heads", _DIMS,
                      lambda s: _heads(s, heads=2.0), ParameterTypeError,
                      r"heads must be an int, got float 2.0")),
           edges="attention_heads", family="norms and attention",
           order_repeat_only=ELEMENTARY_ORDER),
)

# --- add_layer_norm (a RuntimeEntry record) -------------------------------------------------------

def _add_layer_norm_audit(rng, idx):
    # gpt2-124m's residual width over 256 rows: dgamma and dbeta sum 256 rows per column
    return (_n(rng, 256, 768), _n(rng, 256, 768), _n(rng, 768), _n(rng, 768)), {"eps": 1e-5}, \
        (2, 256, 768)


def _add_ln(s, r=(2, 3), gamma=(3,), **kw):
    return ops.add_layer_norm(_m(s), filled(s, r), filled(s, gamma), filled(s, (3,)), **kw)


SPECS = SPECS + (
    # layer_norm's record for the sum s = x + r: the same overflow edge and wide exponents (s at
    # most doubles them)
    OpSpec(Entry.add_layer_norm, L.add_layer_norm_layout, ("params",), near_overflow=2.0 ** 60,
           cancellation="norm", wide_max_exp=57, focus=group(_add_layer_norm_group), values=L.add_layer_norm_values,
           determinism=AuditCase(21, _add_layer_norm_audit),
           error_inputs=(
               *_spectral_inputs(31, "add_layer_norm",
                                 lambda s, a: ops.add_layer_norm(a, a, filled(s, (3,)),
                                                                 filled(s, (3,))), (2, 3)),
               _param(153, "add_layer_norm: r of another shape", _DIMS,
                      lambda s: _add_ln(s, r=(3, 2)), ShapeError,
                      r"r of x's shape, gamma \[d\], beta \[d\]; got \(2, 3\), \(3, 2\), "
                      r"\(3,\), \(3,\)"),
               _param(154, "add_layer_norm: gamma of the wrong length", _DIMS,
                      lambda s: _add_ln(s, gamma=(2,)), ShapeError,
                      r"gamma \[d\], beta \[d\]; got \(2, 3\), \(2, 3\), \(2,\), \(3,\)"),
               _param(155, "add_layer_norm: eps 0", _DIMS, lambda s: _add_ln(s, eps=0.0),
                      ParameterValueError,
                      r"add_layer_norm: eps must be a positive finite number that float32 can "
                      r"hold, got 0.0"),
               _param(156, "add_layer_norm: r on the other device", "session targets the device",
                      lambda s: ops.add_layer_norm(_m(s), foreign(s, (2, 3)), filled(s, (3,)),
                                                   filled(s, (3,))), DeviceMismatchError,
                      r"input 1 lives on `\w+` but the session runs on `\w+`")),
           edges="add_layer_norm", family="norms and attention"),
)

OP_SPECS: dict[Op, OpSpec] = {s.op: s for s in SPECS}
