"""The terms every error bound is built from, in one home: float32's unit roundoff and its
underflow and overflow thresholds, Higham's gamma_k with the k a reduction policy gives, which
policies may flush subnormals, and the record and shared pieces of a derived bound.

error_models.py (the error models) and the derived bounds of the op records
(conformance/families/) import these from here and import none of each other for them.

How the derived bounds are derived (an op's record holds its rules, OpSpec.forward_rule and
vjp_rule, in conformance/families/<family>.py): the docs/OPS.md formula
evaluated in float32, each basic operation rounded once (relative error <= u, or, under
implementation-defined rounding, 4u: CUDA's approximate division under -prec-div=false is within
2 ulp), each elementary function (exp, log, tanh, sin, cos) within E ulps, to first order in u.

E is elementary_ulps() below: ELEMENTARY_ULPS = 2, an assumption stated here once, the largest
maximum error the CUDA C Programming Guide lists for expf, logf, tanhf, sinf and cosf outside
fast-math; for native-cuda capsules whose build declares --use_fast_math, the bound of __expf (the
only elementary function a float32 composite kernel calls; tests/test_kernel_declarations.py
checks the sources), error_models.elementary_ulps_for. A capsule whose elementary functions are
looser still declares its own bound in its value contract instead.

An E-ulp result has relative error at most E * 2^-23 (an ulp of x is at most 2u |x|): e_rel().
VJP bounds also inherit the error of the forward output the rule consumes (the `output` argument of
the calling convention): that term is computed from the capsule's actual forward error, first order.

The norms and attention (conformance/families/normalization.py, attention.py): the rules below bound a float32 evaluation of the docs/OPS.md formulas as a kernel would write them,
first order in u, with the second-order terms kept wherever an inherited error can be large
(cancelling rows, large scores). What each assumes of the kernel is stated beside it; a kernel that
evaluates differently (one-pass or Welford variance, online softmax with running rescaling, P
rebuilt from a saved log-sum-exp) declares its own bound instead.

Underflow: Higham's model fails below 2^-126. `ua` is what one rounding may lose there: 2^-150
(half the subnormal spacing) under gradual underflow, 2^-126 when the policy lets subnormals be
flushed; a dot product of n terms loses at most n 2^-150, or 2 n 2^-126 flushing (as error_models.py).
Overflow: where an intermediate of the float32 evaluation can reach the overflow threshold though
the exact result is finite, the bound is +inf and error_models.compare admits any result there (counted
as overflow-admissible), as it does for reductions.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.float32 import FLT_MIN, FLT_TRUE_MIN, OVERFLOW_THRESHOLD, UNIT_ROUNDOFF
from engine.types import Reduction, Rounding, Subnormals

# engine/float32.py's facts under the names the bounds are written in (Higham's u)
U = UNIT_ROUNDOFF                             # float32 unit roundoff (round to nearest)
TINY = FLT_MIN                                # smallest normal float32: Higham's model fails below
HALF_SUB = FLT_TRUE_MIN / 2                   # half the subnormal spacing: a rounding's loss
OVERFLOW = OVERFLOW_THRESHOLD                 # exact values at or above this round to inf
# The largest maximum error the CUDA C Programming Guide lists for expf, logf, tanhf, sinf, cosf
# outside fast-math (the module docstring states the assumption); E_REL is that error relative
# to the result (an ulp of x is at most 2u |x|). A derived model may replace it for the duration of
# its bound (error_models.bound_array: a fast-math build's __expf), so the rules read e_rel().
ELEMENTARY_ULPS = 2.0
E_REL = ELEMENTARY_ULPS * 2 * U
_ELEMENTARY = ContextVar("elementary_ulps", default=ELEMENTARY_ULPS)


def elementary_ulps() -> float:
    """The ulps within which the elementary functions of the bound being evaluated are taken."""
    return _ELEMENTARY.get()


def e_rel() -> float:
    """elementary_ulps() relative to the result: E * 2^-23."""
    return _ELEMENTARY.get() * 2 * U


@contextmanager
def elementary(ulps: float):
    """Evaluate bounds with the elementary functions within `ulps` (restored after)."""
    token = _ELEMENTARY.set(float(ulps))
    try:
        yield
    finally:
        _ELEMENTARY.reset(token)


def gamma(k, unit: float = U):
    """Higham's gamma_k = k u / (1 - k u), elementwise for an array k."""
    k = np.asarray(k, dtype=np.float64)
    return k * unit / (1.0 - k * unit)


def k_for(reduction: Reduction, n, products: bool):
    """The k of gamma_k for n terms under a reduction policy (error_models.py's docstring): fixed-left
    n - 1, fixed-tree ceil(log2 n), any other order n; fixed orders add 1 for rounded products."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    if reduction is Reduction.fixed_left:
        return n - 1 + (1 if products else 0)
    if reduction is Reduction.fixed_tree:
        return np.ceil(np.log2(n)) + (1 if products else 0)
    return n   # implementation-defined, unspecified, n/a: any order, FMA or not


def k_of(ctx, n, products: bool = False):
    """k_for under the policy of a bound's context (policy.BoundContext)."""
    return k_for(ctx.policy.reduction, n, products)


def flush_allowed(policy) -> bool:
    """Whether the numerical policy lets subnormals be flushed to zero."""
    return policy.subnormals is not Subnormals.gradual_underflow


def correctly_rounding(policy) -> bool:
    """Whether one operation under the policy's rounding is correctly rounded (nearest-even)."""
    return policy.rounding in (Rounding.nearest_even, Rounding.scalar_context)


# What one basic operation may be off by where rounding is neither nearest nor directed: the
# largest error the CUDA C Programming Guide lists for a float32 basic operation, x / y under
# -prec-div=false (what --use_fast_math sets): 2 ulp (1/x 1 ulp, sqrtf 1 ulp under
# -prec-sqrt=false), i.e. 4u relative. Directed rounding is within 1 ulp: 2u.
LOOSE_OP_ULPS = 2.0


def op_ulps(policy) -> float:
    """The ulps of one basic operation's result, from the rounded reference: 0 when correctly
    rounded, 1 under directed rounding (either neighbour), LOOSE_OP_ULPS otherwise."""
    if correctly_rounding(policy):
        return 0.0
    return 1.0 if policy.rounding is Rounding.directed else LOOSE_OP_ULPS


def unit_roundoff(policy) -> float:
    """The relative error of one basic operation under the policy: u, 2u (directed) or 4u."""
    return U if correctly_rounding(policy) else 2 * U * op_ulps(policy)


@dataclass(frozen=True)
class DerivedRule:
    """A derived bound for one op's value or gradient: what error_models.py reports and evaluates."""
    label: str
    reason: str
    bound: Callable      # (ref, ctx, unit) -> absolute bound per element


def clean(x):
    """float64 with NaN and infinities replaced by 0: the special values decide there."""
    return np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)


def fwd_err(ctx):
    """|out - exact forward| per element, 0 where either is not finite (specials decide there).
    The exact value is known to float64 precision only: half a float64 ulp is added (2^-53 |x|),
    so an out of 1.0 for sigmoid(40) still carries its true error 1 - sigmoid(40)."""
    x = np.asarray(ctx.fwd_ref.exact, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return clean(np.abs(np.asarray(ctx.out, np.float64) - x) + 2.0 ** -53 * np.abs(x))


# --- underflow and overflow in a derived bound ----------------------------------------------------

def underflow_unit(ctx):
    """What one rounding may lose below 2^-126: half the subnormal spacing under gradual
    underflow, 2^-126 where the policy lets subnormals be flushed."""
    return TINY if flush_allowed(ctx.policy) else HALF_SUB


def dot_underflow(ctx, n):
    """What a dot product of n terms may lose below 2^-126 (twice 2^-126 a term flushing)."""
    return np.asarray(n, np.float64) * (2 * TINY if flush_allowed(ctx.policy) else HALF_SUB)


def overflows(*magnitudes):
    """Where any magnitude (a bound on an intermediate of the float32 evaluation) can overflow."""
    out = False
    with np.errstate(invalid="ignore", over="ignore"):
        for m in magnitudes:
            m = np.asarray(m, np.float64)
            out = out | (m * (1 + 2.0 ** -20) >= OVERFLOW)   # NaN compares False: specials decide
    return out


def finish_bound(bound, risky):
    """Clean a bound (0 where it is NaN: special values decide) and put +inf where it may overflow."""
    b = np.nan_to_num(np.asarray(bound, np.float64), nan=0.0, posinf=np.inf, neginf=0.0)
    return np.where(risky, np.inf, b)
