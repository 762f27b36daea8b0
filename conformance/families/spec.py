"""The record of one op, `OpSpec` (PyTorch's OpInfo, kept small): everything the harness knows
about testing that op, as data and callables, never as a key into a table kept elsewhere. Each
family module of this package holds the records of its ops (named as engine/ops/<family>.py);
conformance/families/__init__.py collects them.

Also here: the pieces the family modules build their records from (the error-input helpers of
the guard suite, the determinism audit's case record, the skip record)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.bad_inputs import (PARAMETERS, UNARY_INPUTS, ErrorInput, binary_operand_errors,
                                    filled, foreign, short, strided, unary_input_errors)
from conformance.error_terms import DerivedRule
from conformance.exact_sums import ExactSums
from conformance.focus import Focus
from conformance.orders import OrderProgram
from conformance.samplers import FLT_MAX, cancel_sums
from engine import ops
from engine.errors import DeviceMismatchError, LayoutError, LengthMismatchError


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
    # what is skipped, e.g. "vjp" or "class:special"
    scope: str
    # why, in words a report can show
    reason: str


@dataclass(frozen=True)
class CapsuleRules:
    """The derived bounds of one capsule whose evaluation differs from what its op's rules assume
    (native_cuda.flash_attention's online softmax): they replace the op's rules for that capsule
    alone."""
    # the capsule's name, e.g. "native_cuda.flash_attention"
    capsule: str
    # its value's bound, or None: the op's
    forward: DerivedRule | None = None
    # its gradients' bound, or None: the op's
    vjp: DerivedRule | None = None


def one_term(case) -> int:
    """Case.terms of an op whose output elements each read one element per input (elementwise,
    data movement): 1, or 0 when the output (input 0's shape) is empty."""
    return 1 if case.inputs and case.inputs[0].size else 0


def one_term_of(size: Callable) -> Callable:
    """Case.terms of a data-movement op whose output has size(case) elements."""
    return lambda case: 1 if size(case) else 0


@dataclass(frozen=True)
class OpSpec:
    """How the harness tests one op."""
    # the op
    op: object
    # (rng, cls) -> (input shapes, params); cls decides edge/empty shapes
    layout: Callable
    # () -> the fixed edge cases (edges.Edge) in the family's order; edges.build sorts them
    edges: Callable
    # its place in the catalogue order (SPECS, references.OPS): a new op takes the next free
    # number; None: after every numbered record
    catalogue: int | None = None
    # extra generator classes beyond the value and shape classes (masks, indices, params)
    extra_classes: tuple[str, ...] = ()
    # whether an empty axis is a valid input for this op
    allows_empty: bool = True
    # the near-overflow centre for this op's inputs (exp overflows near 88.72, not FLT_MAX)
    near_overflow: float = FLT_MAX
    # the input domain: "real", or "positive" (mostly positive values; negatives still appear)
    domain: str = "real"
    # (arrays, rng) -> arrays: the cancellation class's values (samplers.cancel_pair,
    # cancel_sums, or the op's own), or None: the class keeps the drawn values
    cancellation: Callable | None = cancel_sums
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
    # case -> the largest number of terms one output element sums (Case.terms)
    terms: Callable = one_term
    # what a failing element reads (conformance/focus.py), or None: shrinking keeps the case whole
    focus: Focus | None = None
    # whether shrinking may drop half of the terms (the focus's `halves`)
    halvable: bool = False
    # the float32 program of a declared fixed order (orders.OrderProgram), or None
    fixed_order: OrderProgram | None = None
    # why a fixed order declared for this op is held to bitwise repeatability alone (no program
    # can replay it), or "": a fixed order without a program is refused (orders.unchecked_claim)
    order_repeat_only: str = ""
    # the determinism audit's case, or None: the audit then has none for this op
    determinism: AuditCase | None = None
    # checks skipped for this op, each with its scope and reason
    skips: tuple[Skip, ...] = ()
    # the group the run summary's throughput lines put it in
    summary_group: str = "other"
    # whether it takes array inputs (the random ops draw from a shape and a seed: no value classes)
    takes_inputs: bool = True
    # (arrays, cls, index, rng) -> arrays: the op's own shaping of the drawn values, applied last
    # (selective_scan keeps A finite and cycles |A| regimes), or None
    values: Callable | None = None
    # (arrays, params, cls, index, rng) -> arrays: shaping that reads the params, applied after
    # `values` (cross_entropy's confident rows need the targets, a softmax row its axis), or None
    param_values: Callable | None = None
    # how its outputs sum their terms (exact_sums.ExactSums): the input-aware bound (0 where the
    # sum is exact in every order) and the "exact-sums" generator class; None: neither
    exact_sums: ExactSums | None = None
    # the derived bound of its value, for capsules that declare none (error_terms.DerivedRule)
    forward_rule: DerivedRule | None = None
    # the derived bound of its gradients
    vjp_rule: DerivedRule | None = None
    # capsules of the op with bounds of their own (CapsuleRules)
    capsule_rules: tuple[CapsuleRules, ...] = ()

    def __post_init__(self) -> None:
        if not self.reference:
            object.__setattr__(self, "reference", self.op.label)


# --- error inputs: the pieces the records' guard cases are built from -----------------------------

DIMS, RANK, AXES, INDICES = ("supported op dimensions", "supported rank", "axes in range",
                             "indices in range")
FLAT, EXTENT, COUNT = ("flat lengths match logical shapes", "every axis fits UInt32",
                       "element count fits UInt32")
FINITE = "inputs finite"


def param(position: int, name: str, check: str, call, error: type, message: str) -> ErrorInput:
    """A parameter check's case, at `position` among the guard suite's parameter cases."""
    return ErrorInput((PARAMETERS, position), name, check, call, error, message)


def m23(s):
    """A good 2 x 3 tensor on the session's device."""
    return filled(s, (2, 3))


def unary(position: int, op, fn=None):
    """The input checks of one tensor, for `fn(a)` (default: the op with no parameters)."""
    return unary_input_errors(position, op.label, fn or (lambda a: getattr(ops, op.label)(a)))


def binary(position: int, op):
    return binary_operand_errors(position, op.label, getattr(ops, op.label))


def shaped_inputs(position: int, name: str, fn, shape) -> tuple[ErrorInput, ...]:
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


# --- shared facts ---------------------------------------------------------------------------------

def normal(rng, *shape):
    """Standard normal float32 values: what the determinism audit's cases draw."""
    return rng.standard_normal(shape).astype(np.float32)


EXP_EDGE = 88.72283935546875     # exp overflows just above, and underflows below -103.97
# why a fixed order declared for these ops is held to bitwise repeatability alone (OpSpec
# .order_repeat_only; orders.unchecked_claim refuses a fixed order without a program elsewhere)
ELEMENTARY_ORDER = ("its value passes through elementary functions (exp, log, tanh) whose float32 "
                    "bits no numerical policy fixes, so no program can replay a fixed order bit "
                    "for bit; the order's other promise, bitwise repeatability, is checked")
