"""The "exact-sums" generator class: inputs whose float32 sums are exact in every order (integers
on one power-of-two grid, every output's sum |terms| within 2^24 grid units: exact_sums.py's
theorem), at long and boundary reduction extents, for every op whose record carries `ExactSums`
facts. There the allowed error is 0 (the division's rounding for means), so a kernel that loses
one term, or a block of terms, anywhere in a reduction of a million terms fails; with ordinary
values the a-priori bound gamma_n * sum|terms| (about 2.5e5 at 2^20 unit terms) hides such a loss.

Why a class of its own rather than value shaping inside the existing ones: the exact inputs need
their own extents (the longest reductions the time budget allows, in every case, where the value
classes draw short ones) and values that are never zero (a dropped zero is invisible); a class
leaves every other stream as it was and its cases are counted apart in the evidence record.

Extents, by case index: even indices draw a long reduction, 2^k + 1 or 2^k - 1 terms with k from
LONG_LOG2 to the op's max_log2 (the seed picks); odd indices draw from BOUNDARY_TERMS (the edge
set's warp, block and grid boundaries and 2^k - 1, 2^k, 2^k + 1 for k = 5 .. 16). Values: per
term family (exact_sums.ExactSums.factors) integers k * 2^e, |k| >= 1, three quarters of them
positive (a dropped block of them cannot cancel to zero), the grid 2^e drawn per case (e = 0:
small integers; e in [-40, 40]; on boundary extents now and then the subnormal grid 2^-149), and
|k| sized so that the terms of the fullest output sum to at most 2^24 grid units; one case in
three fills them to about half of that (partial sums that use every significand bit)."""
from __future__ import annotations

import math

import numpy as np

from conformance.edges import BOUNDARY_EXTENTS, ODD_EXTENTS
from conformance.exact_sums import GRID_BITS, ExactSums

F32 = np.float32
EXACT_SUMS = "exact-sums"        # the generator class
LONG_LOG2 = 14                   # long reductions: 2^14 +- 1 terms and more
BOUNDARY_TERMS = tuple(sorted(set(BOUNDARY_EXTENTS + ODD_EXTENTS) |
                              {2 ** k + d for k in range(5, 17) for d in (-1, 0, 1)}))
SHORT_ROWS = (1, 2, 3)           # the other axes stay short: inputs stay near n elements


def term_count(rng, index: int, max_log2: int) -> int:
    """The reduction extent of case `index` (module docstring)."""
    if index % 2 == 0:
        k = int(rng.integers(LONG_LOG2, max_log2 + 1))
        return 2 ** k + int(rng.choice([-1, 1]))
    return int(rng.choice(BOUNDARY_TERMS))


def _split(n: int) -> tuple[int, int]:
    """(a, n // a), a the largest divisor of n up to sqrt(n): (1, n) for a prime."""
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return a, n // a


def _short(rng, n: int) -> int:
    return 1 if n > 65537 else int(rng.choice(SHORT_ROWS))


# --- layouts: (rng, n, index) -> (shapes, params, terms of the fullest output) ------------------

def reduce_layout(rng, n: int, index: int):
    """n terms over the whole array, the last axis, a leading axis, or two axes out of order."""
    form, r = int(rng.integers(0, 4)), _short(rng, n)
    keepdims = bool(rng.integers(0, 2))
    if form == 0:
        shape, axes = (n,), [None, (0,), (-1,)][int(rng.integers(0, 3))]
    elif form == 1:
        shape, axes = (r, n), [(-1,), (1,)][int(rng.integers(0, 2))]
    elif form == 2:
        shape, axes = (n, r), [(0,), (-2,)][int(rng.integers(0, 2))]
    else:
        a, b = _split(n)
        shape, axes = (a, r, b), [(2, 0), (0, 2), (-1, -3)][int(rng.integers(0, 3))]
    return [shape], {"axes": axes, "keepdims": keepdims}, n


def matmul_layout(rng, n: int, index: int):
    """K = n, M and N short (1 past 65537), the four transpose-flag pairs, batch 2 up to
    K = 4097."""
    m, k_out = _short(rng, n), _short(rng, n)
    batch = (2,) if n <= 4097 and rng.integers(0, 3) == 0 else ()
    ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    sa = batch + ((n, m) if ta else (m, n))
    sb = batch + ((k_out, n) if tb else (n, k_out))
    return [sa, sb], {"trans_a": ta, "trans_b": tb}, n


def linear_layout(rng, n: int, index: int):
    """in = n features (n + 1 terms with the bias), out and the leading axes short."""
    leads = ((), (2,), (1, 3)) if n <= 65537 else ((),)
    lead = leads[int(rng.integers(0, len(leads)))]
    fout = _short(rng, n)
    return [lead + (n,), (fout, n), (fout,)], {}, n + 1


def scatter_layout(rng, n: int, index: int):
    """n sources into 1, 2 or 3 targets (1 to 7 on the boundary extents): at least n / 3
    colliding updates each on the long ones; both boundary targets present; 1-D, or 2-D along
    either axis."""
    targets = int(rng.choice([1, 2, 3] if index % 2 == 0 else [1, 2, 3, 7]))
    idx = rng.integers(0, targets, size=n).astype(np.int64)
    idx[: min(n, 2)] = [0, targets - 1][: min(n, 2)]
    form, c = int(rng.integers(0, 3)), int(rng.choice([1, 2]))
    if form == 0:
        shapes, axis = [(targets,), (n,)], [0, -1][int(rng.integers(0, 2))]
    elif form == 1:
        shapes, axis = [(targets, c), (n, c)], [0, -2][int(rng.integers(0, 2))]
    else:
        shapes, axis = [(c, targets), (c, n)], [1, -1][int(rng.integers(0, 2))]
    return shapes, {"axis": axis, "indices": idx}, 1 + int(np.bincount(idx).max())


def pool_layout(rng, n: int, index: int):
    """Windows of n cells: 1-D (n,) or 2-D (a, b) with a b = n, strides of 1, 2 or the window, a
    few outputs per plane, C 1-2, now and then a batch axis; on the boundary extents (odd indices)
    padding 0 or 1 too (padding cells count as zeros and are divided by), while the long windows
    hold input cells only."""
    two_d = bool(rng.integers(0, 2)) and _split(n)[0] > 1
    kernel = _split(n) if two_d else (n,)
    pad = tuple(int(rng.integers(0, 2)) if k >= 2 and index % 2 else 0 for k in kernel)
    stride = tuple(int(rng.choice([1, 2, k])) for k in kernel)
    spatial = tuple(max(k - 2 * p, 1) + int(rng.integers(0, 2)) for k, p in zip(kernel, pad))
    lead = (int(rng.choice([1, 2])),)
    if n <= 4097 and rng.integers(0, 3) == 0:
        lead = (2,) + lead
    params = {"kernel_size": kernel, "stride": stride, "padding": pad,
              "dilation": (1,) * len(kernel)}
    return [lead + spatial], params, n


REDUCE = ExactSums(((0,),), reduce_layout)
MATMUL = ExactSums(((0, 1),), matmul_layout)
LINEAR = ExactSums(((0, 1), (2,)), linear_layout)
SCATTER = ExactSums(((0,), (1,)), scatter_layout)
POOL = ExactSums(((0,),), pool_layout)


# --- values ------------------------------------------------------------------------------------

def _grid_exponent(rng, index: int) -> int:
    """The case's grid: small integers, a grid within 2^+-40, or (boundary extents only: a mean's
    quotient on that grid falls below the subnormal spacing, where a lost term cannot show) the
    subnormal grid 2^-149."""
    pick = rng.random()
    if pick < 0.4:
        return 0
    if pick < 0.85 or index % 2 == 0:
        return int(rng.integers(-40, 41))
    return -149


def _integers(rng, shape, bits: int) -> np.ndarray:
    """Integers k with 1 <= |k| <= 2^bits, three quarters positive."""
    k = rng.integers(1, 2 ** max(bits, 0) + 1, size=shape).astype(np.float64)
    return np.where(rng.random(shape) < 0.75, k, -k)


def draw(facts: ExactSums, rng, index: int, vrng=None) -> tuple[list[np.ndarray], dict]:
    """The arrays and params of one exact-sums case (module docstring): the layout from `rng`,
    the values from `vrng` (a sibling's stream: same shapes, new values) or `rng` too."""
    n = term_count(rng, index, facts.max_log2)
    shapes, params, terms = facts.layout(rng, n, index)
    rng = rng if vrng is None else vrng
    bits = GRID_BITS - math.ceil(math.log2(max(terms, 1)))    # every term <= 2^bits grid units
    bits -= int(rng.choice([0, 2, 6]))                         # 0: partial sums near 2^23 units
    e = _grid_exponent(rng, index)
    arrays: list[np.ndarray | None] = [None] * len(shapes)
    first = facts.factors[0]
    # the first family's factors share the grid and the bits; the others take the product's grid
    split_e = [e // len(first)] * len(first)
    split_e[-1] += e - sum(split_e)
    split_bits = [bits // len(first)] * len(first)
    for i, ei, bi in zip(first, split_e, split_bits):
        arrays[i] = np.ldexp(_integers(rng, shapes[i], bi), ei).astype(F32)
    for family in facts.factors[1:]:
        for i in family:
            arrays[i] = np.ldexp(_integers(rng, shapes[i], sum(split_bits)), e).astype(F32)
    return [a if a is not None else np.zeros(s, F32) for a, s in zip(arrays, shapes)], params
