"""Sums that are exact in every order: when the terms of an output are all multiples of one power
of two and small enough on that grid, no evaluation order, blocking or contraction can round, and
the allowed error of the sum is 0 (the input-aware bound error_models.py applies to the forward
value of every op whose record carries `ExactSums` facts).

The theorem (the proof the bound rests on). Let every term t_i of an output be an integer multiple
of 2^e, and S = sum |t_i| <= 2^24 * 2^e, with S <= 2^127. Any evaluation of the sum, in any order
and association, with or without fused multiply-adds, adds terms and partial sums; every partial
sum is sum_{i in I} t_i for some subset I, so it is an integer multiple of 2^e of magnitude at most
S <= 2^24 * 2^e: an integer k * 2^e with |k| <= 2^24, which float32 represents exactly provided
e >= -149 (k has at most 24 significant bits, the exponent is at least float32's lowest, and
|k| 2^e <= 2^127 is in range). For terms that are float32 values e >= -149 always holds (every
float32 is a multiple of 2^-149); a product's grain can be lower, and then nothing is claimed.
Rounding an exactly representable result is the identity in every rounding mode, so each
addition (and each fused acc + a * b, one rounding of a representable value) is exact, and the
result is the exact sum. Products: a dot product's terms are a_i b_i. If a is a multiple of 2^ea
and b of 2^eb, a_i b_i is a multiple of 2^(ea + eb) (odd times odd is odd: the lowest set bit of
a product sits at the sum of the factors' lowest bits), and |a_i b_i| <= S, so the separately
rounded product is exact by the same argument. Subnormals: under gradual underflow every multiple
of 2^-149 below 2^-126 is a float32, so nothing changes; under a policy that may flush, a flushed
intermediate would not be exact, so the bound applies there only when every input value and
every term is a multiple of 2^-126 at least (then no nonzero input, product or partial sum lies
below 2^-126, the smallest normal). Ops that divide the exact sum once afterwards (reduce_mean,
avg_pool) keep that one rounding: their allowed error is the division's, gamma_1 |quotient| plus
half a subnormal spacing (TINY when flushing).

The boundary is sharp: one grid step past it, S = (2^24 + 1) 2^e, an order can already round
((2^23 + 2^23) + 1 is 2^24 in float32); tests/test_exact_sums.py checks both sides of it, and
that wherever the bound is 0 many evaluation orders all give the exact sum.

The grain used here is global per input (the lowest set bit over all of an input's values, and
for products the sum of the factors'): a lower bound of every output's own grain, so the test is
sound and cheap. S per output is the Reference's magnitude (sum |terms|, computed in float64 or
exactly): either way it exceeds 2^24 * 2^e exactly when the true sum does, because up to there
every partial sum of |terms| is a multiple of 2^e far inside float64's precision, and a sum of
non-negative terms never rounds downwards across a float64 value."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

GRID_BITS = 24                  # float32's significand: 2^24 grid units are exact
EXACT_TOTAL_MAX = 2.0 ** 127    # S at most this: no partial sum comes near float32's overflow
FLUSH_GRAIN_MIN = -126          # multiples of 2^-126: no nonzero value below the smallest normal
GRAIN_MIN = -149                # float32's finest grid: coarser grids' multiples are representable
NO_TERM = 1 << 14               # the grain of an input of zeros only (or of none): no constraint
NOT_FINITE = -(1 << 14)         # the grain of an input holding an inf or a NaN: never exact


@dataclass(frozen=True)
class ExactSums:
    """An op's term structure, for the input-aware bound and the "exact-sums" generator class."""
    # the term families of an output: each term is the product of one element of each listed
    # input (reduce_sum ((0,),); matmul ((0, 1),); linear ((0, 1), (2,)): x w products and the bias)
    factors: tuple[tuple[int, ...], ...]
    # (rng, n, index) -> (input shapes, params) whose outputs sum about n terms each
    layout: Callable
    # the longest reduction the class draws, as log2 of its term count (the time budget: a left
    # fold or a fused dot product of 2^20 terms costs about a second in the order programs)
    max_log2: int = 20


def lowbit_exponents(x) -> np.ndarray:
    """Per element of a float32 array, e with x = odd * 2^e; NO_TERM for zeros, NOT_FINITE for
    infinities and NaNs."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    field = (bits >> 23) & 0xFF
    significand = np.where(field > 0, (bits & 0x7FFFFF) | 0x800000, bits & 0x7FFFFF)
    low = significand & -significand                          # the lowest set bit (0 for zero)
    shift = np.log2(np.where(low > 0, low, 1)).astype(np.int64)   # exact: a power of two
    e = np.where(field > 0, field - 150, -149) + shift
    e = np.where(significand == 0, NO_TERM, e)
    return np.where(field == 0xFF, NOT_FINITE, e)


def grain(x) -> int:
    """The largest e such that every value of x is a multiple of 2^e (NO_TERM when x holds only
    zeros or nothing, NOT_FINITE when it holds an inf or a NaN)."""
    x = np.asarray(x, dtype=np.float32)
    return int(lowbit_exponents(x).min()) if x.size else NO_TERM


def term_grains(facts: ExactSums, inputs) -> tuple[int, int]:
    """(the grain every term of every output is a multiple of, the lowest grain of any input value
    feeding the terms): a family's terms are multiples of the sum of its factors' grains."""
    per_input = {i: grain(inputs[i]) for fam in facts.factors for i in fam if i < len(inputs)}
    if len(per_input) != len({i for fam in facts.factors for i in fam}):
        return NOT_FINITE, NOT_FINITE          # inputs missing: nothing can be claimed
    if NOT_FINITE in per_input.values():
        return NOT_FINITE, NOT_FINITE
    family = []
    for fam in facts.factors:
        gs = [per_input[i] for i in fam]
        family.append(NO_TERM if NO_TERM in gs else sum(gs))   # a zero factor: zero terms only
    return min(family), min(per_input.values())


def exact_in_every_order(term_grain: int, lowest: int, total, flush: bool) -> np.ndarray:
    """Where a sum of terms that are multiples of 2^term_grain, with sum |terms| = total, is exact
    in every order (the module docstring's theorem); `lowest` is the lowest grain of any input
    value, which matters when the policy may flush subnormals."""
    total = np.asarray(total, dtype=np.float64)
    floor = FLUSH_GRAIN_MIN if flush else GRAIN_MIN
    if term_grain < floor or (flush and lowest < FLUSH_GRAIN_MIN):
        return np.zeros(total.shape, bool)
    limit = np.inf if term_grain >= NO_TERM else np.ldexp(1.0, min(term_grain + GRID_BITS, 1023))
    with np.errstate(invalid="ignore"):
        return np.isfinite(total) & (total <= limit) & (total <= EXACT_TOTAL_MAX)
