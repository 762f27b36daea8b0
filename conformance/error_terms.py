"""The terms every error bound is built from, in one home: float32's unit roundoff and its
underflow and overflow thresholds, Higham's gamma_k with the k a reduction policy gives, which
policies may flush subnormals, and the record and shared pieces of a derived bound.

error_models.py (the error models), derived.py and derived_norm_attention.py (the derived bounds) all
import these from here and import none of each other for them: the three used to define them two or
three times over and reach into one another for the rest, an import circle."""
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
# outside fast-math (derived.py's docstring states the assumption); E_REL is that error relative
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
