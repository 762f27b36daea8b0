"""The fixed edge set: per op the same 19 to 25 cases for every seed and every capsule, drawn first
by every campaign as generator class "edges" (issue 20: block boundaries are not left to chance).
Each op's record holds its builder (OpSpec.edges, in conformance/families/<family>.py, which says
what the op's cases are); this module holds what they share: the extents, the fill kinds, the
`Edge` record, and the masks and indices drawn per case.

Extents. B = 31 32 33 255 256 257 1023 1024 1025 4095 4096 4097 65535 65536 65537 (the warp, block
and grid boundaries of our kernels: 32-thread warps, 256-thread blocks, 1024-element tiles, 4096 and
65536 grid strides); P = 7 251 4099 (odd and prime); E = B + P (18 extents); X = 2^20 + 1 = 1048577
(one case past 2^20 input elements). Every op also gets empty axes, a length-1 axis, and rank 0
where OPS.md allows it. Cases are sorted by input elements (the random ops: by requested
elements), smallest first, so a campaign meets the cheap ones first.

Values (generators.py fills them): `mixed` = per element one of the campaign's value classes
(normals, wide exponents, subnormals, signed zeros, +-inf/NaN, values at the op's overflow edge;
samplers.MIXED_SHARES); `sums` = standard normals with boundary markers (samplers.mark_terms) on
the first, the last and the first post-power-of-two term of every summed row, large enough that
dropping or doubling one fails the loosest sum bound; `softmax` = normals with markers of
log(n) + 1 at those positions (each holds a quarter to a half of the row's mass); `normal` =
normals. NaNs carry payloads of samplers.NAN_PAYLOADS (signalling and negative ones too); the
reductions' and the softmax family's cases with two or more rows put one NaN, and no infinity, in
their middle row (samplers.nan_row), where a kernel that skips NaNs must show.

The random ops take no inputs: build sorts their cases by requested elements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOUNDARY_EXTENTS = (31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536,
                    65537)
ODD_EXTENTS = (7, 251, 4099)
EXTENTS = tuple(sorted(BOUNDARY_EXTENTS + ODD_EXTENTS))
PAST_2_20 = 2 ** 20 + 1
LARGE = 65535                      # from here on, the other axes stay short (inputs <= ~200k)

# how generators.py fills the arrays of an edge case (see the module docstring; TIES below)
MIXED, SUMS, SOFTMAX, NORMAL = "mixed", "sums", "softmax", "normal"
# mask kinds (hard_masked_softmax, attention) and index kinds (gather, scatter_add,
# cross_entropy's targets)
NO_MASK, OPEN, RANDOM, BLOCKED_ROW = "none", "open", "random", "blocked-row"
CAUSAL = "causal"          # the causal triangle over the mask's last two axes (key j <= row i)
# input 0 cycles NaN, +inf, -inf, a normal through its elements (the others normal): special
# values in rows of one entry, where a length-1 fast path never looks at its input (issue 35)
SPECIALS = "specials"
BOUNDARIES, REVERSED = "boundaries", "reversed"


class EdgeIndexError(IndexError):
    """An edge-case index past the op's fixed edge set."""


@dataclass(frozen=True)
class Edge:
    """One fixed edge case: array shapes and fixed params; masks and indices are drawn per case
    from the edge stream (the same for every seed)."""
    # the shapes of the array inputs, in the op's order
    shapes: tuple
    # fixed parameters as (name, value) pairs
    params: tuple = ()
    # how the arrays are filled: MIXED, SUMS, SOFTMAX, NORMAL, SPECIALS or TIES
    fill: str = MIXED
    # the axes of input 0 (non-negative) whose rows carry boundary markers (SUMS, SOFTMAX)
    marked: tuple = ()
    # mask kind and the mask's shape and row axis (hard_masked_softmax, attention)
    mask: str = ""
    mask_shape: tuple = ()
    mask_axis: int = -1
    # index kind and count, and the param axis they index (gather, scatter_add)
    indices: str = ""
    n_indices: int = 0
    # the param the indices fill: "indices" along params["axis"], or "targets" (cross_entropy:
    # one class per row, into the last axis of input 0)
    index_param: str = "indices"
    # whether one row of input 0 over `marked` carries a NaN and no infinity (samplers.nan_row):
    # reductions and rows a NaN-skipping kernel (nansum, nanmax) would otherwise pass
    nan_row: bool = False

    @property
    def elements(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def flat_shapes() -> list[tuple[int, ...]]:
    """(n,) for n in E and X, then (0,), (3, 0, 2), (1, 1, 1) and (): the elementwise shapes."""
    return [(n,) for n in EXTENTS + (PAST_2_20,)] + [(0,), (3, 0, 2), (1, 1, 1), ()]


def cycle(values, i):
    """The i-th of `values`, cycling."""
    return values[i % len(values)]


def norm_axis(ax: int, rank: int) -> int:
    return ax % rank


INDEX_KINDS = (RANDOM, BOUNDARIES, REVERSED)
SHORT_LEADS = ((), (1,), (2,))     # the lead axes of rows of LARGE and more (linear, layer_norm)
TIES = "ties"                      # small integers: repeated values and all-equal windows


def draw_ties(rng, shape) -> np.ndarray:
    """Values from {-2, -1, -0, 0, 1, 2}: most max-pool windows hold a tie, many are all equal."""
    v = rng.integers(-2, 3, size=shape).astype(np.float32)
    return np.where((v == 0) & (rng.random(shape) < 0.5), np.float32(-0.0), v)


def build(builder, takes_inputs: bool = True) -> tuple[Edge, ...]:
    """The fixed edge cases of an op's builder (OpSpec.edges), smallest first (a stable sort: ties
    keep the builder's order); the random ops by requested size, since they take no inputs."""
    edges = builder()
    if not takes_inputs:
        return tuple(sorted(edges, key=lambda e: math.prod(dict(e.params)["shape"])))
    return tuple(sorted(edges, key=lambda e: e.elements))


def draw_mask(kind: str, shape: tuple, axis: int, rng) -> np.ndarray | None:
    """A hard mask of `kind`: None (attention without a mask), all open, random (70% open), or
    random with the first row along `axis` fully blocked."""
    if kind == NO_MASK:
        return None
    if kind == OPEN:
        return np.ones(shape, dtype=bool)
    if kind == CAUSAL:
        tri = np.tril(np.ones(shape[-2:], dtype=bool))
        return np.ascontiguousarray(np.broadcast_to(tri, shape))
    mask = rng.random(shape) < 0.7
    if kind == BLOCKED_ROW and mask.size:
        rows = np.moveaxis(mask, axis, -1)          # a view: writing it writes the mask
        rows[(0,) * (rows.ndim - 1)] = False
    return mask


def draw_indices(kind: str, count: int, extent: int, rng) -> np.ndarray:
    """`count` indices into an axis of `extent`: random (duplicates; both boundaries always
    present), boundaries only (0 and extent - 1), or reversed (extent - 1 down to 0, repeating)."""
    if count == 0 or extent == 0:
        return np.zeros(0, dtype=np.int64)
    if kind == BOUNDARIES:
        return rng.choice(np.array([0, extent - 1], dtype=np.int64), size=count)
    if kind == REVERSED:
        return (extent - 1 - np.arange(count, dtype=np.int64) % extent).astype(np.int64)
    idx = rng.integers(0, extent, size=count).astype(np.int64)
    idx[: min(count, 2)] = [0, extent - 1][: min(count, 2)]
    return idx
