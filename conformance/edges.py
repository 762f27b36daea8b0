"""The fixed edge set: per op the same 19 to 25 cases for every seed and every capsule, drawn first
by every campaign as generator class "edges" (issue 20: block boundaries are not left to chance).

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

Per op family (count, layouts):
- elementwise unary, binary and params ops (23): (n,) for n in E and X; (0,), (3, 0, 2), (1, 1, 1),
  (); values mixed (85% of the elements non-negative for sqrt, log, safe_log); params cycle:
  scale alpha over SCALE_ALPHAS, clamp (lo, hi) over CLAMP_BOUNDS, safe_log eps over SAFE_LOG_EPS.
- mse_loss (23): the elementwise shapes for pred and target; values sums (pred marked).
- reduce_sum, reduce_mean (22): REDUCE_TABLE: n terms for n in E and X over the last axis, over a
  leading axis (axes (0,) and (-2,)), over two axes in unsorted order ((2, 0), (-1, -3)), over all
  axes (None), keepdims both ways; an empty reduced axis (3, 0), an empty kept axis (0, 4), rank 0.
- softmax, log_softmax, hard_masked_softmax (25): SOFTMAX_TABLE: rows of n entries for n in E and
  X, along the last axis and along a leading one (axis 0, 1, -1, -2); empty rows (3, 0), no rows
  (0, 5), length-1 rows (4, 1); masks (hard_masked_softmax) cycle all open / random / random with
  the first row fully blocked; values softmax. SOFTMAX_TILE_ROWS: 66 and 191 rows (a partial 64-row
  tile after whole ones) under the causal triangle and a random mask; SOFTMAX_SINGLE_ENTRY: 8 rows
  of one entry, values `specials` (NaN, +inf, -inf, a normal in turn).
- matmul (24): K (the summed extent) for K in E with (M, N) in 1..3 and the four transpose-flag
  pairs, rank 3 (batch 2) at K = 33 and K = 4099; M = 1025 and N = 1025 with small K; K = X with
  M = N = 1; empty M, K and N; values sums (a marked along K).
- linear (22): in-features for n in E (lead axes (), (2,), (3,), (2, 2), (1,), (2, 1, 3); only
  (), (1,), (2,) for n >= 65535), out 1..3; in = X (lead ()); empty lead, in = 0, out = 0;
  values sums (x marked along in).
- layer_norm (22): d in E (lead (2,), (3,), (), (2, 1), (1, 2); only (), (1,), (2,) for
  d >= 65535), d = X as one row; empty lead (0, 5), d = 0 (3, 0), d = 1 (4, 1); values normal.
- batch_norm (23): BATCH_NORM_SHAPES: groups of N x spatial = n for n in E and X, C in 1..3; N = 0,
  C = 0, spatial 0; a group of one (1, 3); values normal.
- scaled_dot_product_attention (23): Lk in ATTENTION_LK with Lq in {2, 3}, d in 2..4, dv in 1..3;
  d in ATTENTION_D with small Lq, Lk; Lq = 1025 with Lk = 3; Lk = X with Lq = d = dv = 1; Lq = 0;
  Lk = 0; rank 3 (batch 2) on four of them; masks cycle none / all open / random / random with
  the first query row fully blocked; scale 1/sqrt(d); values normal. ATTENTION_TILE_FORMS:
  Lq = Lk = 66, 100, 190 under the causal triangle or a random mask; one key for 4 query rows
  with `specials` in q (NaN, +inf and -inf scores).
- reshape (22), permute (22), broadcast (22), concat (21), slice (22): the extent n in E on the
  reshaped, moved, broadcast, concatenated or sliced axis (broadcast alternates long copies with a
  length-1 source repeated n times, whose VJP sums n terms), X on one case; empty and rank-0
  forms; values mixed.
- gather (22), scatter_add (22): the indexed axis of extent n in E with index arrays of length n
  (cycling random with duplicates and both boundaries / boundaries only / reversed), 65537 indices
  into an axis of 3 (scatter_add: about 21845 accumulations per element), X on one case; empty
  axes and empty index arrays; values mixed (gather) and normal (scatter_add).
- rand_uniform, bernoulli_mask (23): the elementwise shapes; seeds cycle RANDOM_SEEDS (the key's
  high word included); bernoulli p cycles BERNOULLI_P.
- cross_entropy (25): CROSS_ENTROPY_FORMS: C in E and X over 1..3 rows, rows 1025 / 4097 /
  65537 with few classes, (128, 256), one class; targets cycle random / boundaries / reversed;
  values softmax (markers along the classes).
- bias_gelu (25): BIAS_GELU_FORMS: d in E over 1..3 rows, rows 4097 / 65537 over 3 / 2
  columns, X as one row and as one column, rows 0, d 0, (1, 1); values mixed.
- attention_heads (25): ATTENTION_HEADS_FORMS: T across the 64-row tiles (1 .. 129), H 1 to 12,
  D 1 to 257, T = 1 with D = X / 6 over 2 heads, causal alternating with no mask, B, T or D
  empty; scale 1/sqrt(D); values normal. ATTENTION_HEADS_CAUSAL_TILES: causal T = 66, 100, 190;
  ATTENTION_HEADS_SINGLE_KEY: the causal first row (T = 3) and T = 1 with `specials` in q.
- add_layer_norm (22): layer_norm's shapes, r of x's shape; values normal.
- selective_scan (23): SCAN_FORMS: seq across the 32-step chunk and the 256-step switch point up
  to 4097 steps, state across warp and block boundaries, state 2^18 + 1 (past 2^20 inputs), seq 0
  and state 0, both variants; values mixed below 256 steps, normal above; A's regime cycles
  (layouts.scan_values).
- max_pool, avg_pool, smooth_max_pool (23): POOL_EDGES: odd extents, strides past the kernel,
  padding at k/2, dilation, ranks 1-3 and 8, batch absent/0/1/2, TorchLean's 17x17 k3 s1 p1, the
  benchmark's 56x56 planes, 1025x1025 (past 2^20), a window of padding only, and five empty
  forms (C = 0, N = 0, spatial 0, padding past k/2, a window longer than the input); values mixed,
  normal or `ties` (integers in [-2, 2] with both zeros: repeated maxima, all-equal windows);
  smooth_max_pool's beta cycles POOL_BETAS.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from engine.types import BackendOp as Op

BOUNDARY_EXTENTS = (31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536,
                    65537)
ODD_EXTENTS = (7, 251, 4099)
EXTENTS = tuple(sorted(BOUNDARY_EXTENTS + ODD_EXTENTS))
PAST_2_20 = 2 ** 20 + 1
LARGE = 65535                      # from here on, the other axes stay short (inputs <= ~200k)
ATTENTION_LK = (1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4097)
ATTENTION_D = (31, 32, 33, 257)

# how generators.py fills the arrays of an edge case (see the module docstring)
MIXED, SUMS, SOFTMAX, NORMAL = "mixed", "sums", "softmax", "normal"
# mask kinds (hard_masked_softmax, attention) and index kinds (gather, scatter_add)
NO_MASK, OPEN, RANDOM, BLOCKED_ROW = "none", "open", "random", "blocked-row"
CAUSAL = "causal"          # the causal triangle over the mask's last two axes (key j <= row i)
# input 0 cycles NaN, +inf, -inf, a normal through its elements (the others normal): special
# values in rows of one entry, where a length-1 fast path never looks at its input (issue 35)
SPECIALS = "specials"
BOUNDARIES, REVERSED = "boundaries", "reversed"

SCALE_ALPHAS = (0.5, -1.0, 3.0, 0.1, 2.0 ** -100, 1e30, 0.0, -0.0, -2.0 ** -149)
CLAMP_BOUNDS = ((-1.0, 1.0), (0.0, 0.0), (-0.0, 0.0), (-2.5, -0.5), (0.25, 3.0), (-1e30, 1e-30))
SAFE_LOG_EPS = (1e-12, 1e-3, 0.5, 1e-30)
RANDOM_SEEDS = (0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 2 ** 64 - 1, 0x9E3779B97F4A7C15)
BERNOULLI_P = (0.0, 1.0, 0.5, 2.0 ** -24, 1.0 - 2.0 ** -24, 0.3)


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
    # how the arrays are filled: MIXED, SUMS, SOFTMAX or NORMAL
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


def _flat_shapes() -> list[tuple[int, ...]]:
    return [(n,) for n in EXTENTS + (PAST_2_20,)] + [(0,), (3, 0, 2), (1, 1, 1), ()]


def _cycle(values, i):
    return values[i % len(values)]


def _norm_axis(ax: int, rank: int) -> int:
    return ax % rank


# --- elementwise, mse_loss, random --------------------------------------------------------------

def _elementwise(op: Op) -> list[Edge]:
    arity = 2 if op in (Op.add, Op.sub, Op.mul, Op.max, Op.min) else 1
    out = []
    for i, s in enumerate(_flat_shapes()):
        if op is Op.scale:
            params = (("alpha", _cycle(SCALE_ALPHAS, i)),)
        elif op is Op.clamp:
            lo, hi = _cycle(CLAMP_BOUNDS, i)
            params = (("lo", lo), ("hi", hi))
        elif op is Op.safe_log:
            params = (("eps", _cycle(SAFE_LOG_EPS, i)),)
        else:
            params = ()
        out.append(Edge((s,) * arity, params, MIXED))
    return out


def _mse_loss() -> list[Edge]:
    return [Edge((s, s), (), SUMS, marked=tuple(range(len(s)))) for s in _flat_shapes()]


def _random(op: Op) -> list[Edge]:
    out = []
    for i, s in enumerate(_flat_shapes()):
        params = [("shape", s), ("seed", _cycle(RANDOM_SEEDS, i))]
        if op is Op.bernoulli_mask:
            params.append(("p", _cycle(BERNOULLI_P, i)))
        out.append(Edge((), tuple(params), NORMAL))
    return out


# --- reductions and the softmax family ------------------------------------------------------------

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
            _norm_axis(a, len(shape)) for a in axes)
        out.append(Edge((shape,), (("axes", axes), ("keepdims", keepdims)), SUMS, marked=red,
                        nan_row=True))
    return out


# (shape, axis, mask kind): rows of each n of E and X along the last or a leading axis
SOFTMAX_TABLE = (
    ((2, 7), -1, OPEN), ((31, 3), 0, RANDOM), ((2, 32), 1, BLOCKED_ROW), ((33, 2), -2, OPEN),
    ((3, 251), -1, RANDOM), ((255, 2), 0, BLOCKED_ROW), ((2, 256), -1, OPEN),
    ((257, 3), -2, RANDOM), ((2, 1023), 1, BLOCKED_ROW), ((1024, 2), 0, OPEN),
    ((3, 1025), -1, RANDOM), ((4095, 2), -2, BLOCKED_ROW), ((2, 4096), -1, OPEN),
    ((4097, 1), 0, RANDOM), ((2, 4099), -1, BLOCKED_ROW), ((2, 65535), -1, BLOCKED_ROW),
    ((65536, 2), -2, OPEN), ((1, 65537), -1, RANDOM), ((PAST_2_20,), 0, RANDOM),
    ((3, 0), -1, OPEN), ((0, 5), -1, RANDOM), ((4, 1), -1, BLOCKED_ROW),
)


# issue 35: rows past the first 64-row tile with a partial last tile (64k + r rows, r > 1) under a
# causal and a random mask, and rows of one entry holding each special value (SPECIALS)
SOFTMAX_TILE_ROWS = (((66, 66), -1, CAUSAL), ((191, 9), 1, RANDOM))
SOFTMAX_SINGLE_ENTRY = ((8, 1), -1, OPEN)


def _softmax(op: Op) -> list[Edge]:
    out = [_softmax_special_rows(op)]
    for shape, axis, mask in SOFTMAX_TABLE + SOFTMAX_TILE_ROWS:
        ax = _norm_axis(axis, len(shape))
        masked = op is Op.hard_masked_softmax
        out.append(Edge((shape,), (("axis", axis),), SOFTMAX, marked=(ax,),
                        mask=mask if masked else "", mask_shape=shape if masked else (),
                        mask_axis=ax, nan_row=True))
    return out


def _softmax_special_rows(op: Op) -> Edge:
    shape, axis, mask = SOFTMAX_SINGLE_ENTRY
    masked = op is Op.hard_masked_softmax
    return Edge((shape,), (("axis", axis),), SPECIALS, mask=mask if masked else "",
                mask_shape=shape if masked else (), mask_axis=_norm_axis(axis, len(shape)))


# --- matrix products --------------------------------------------------------------------------

MATMUL_MN = ((1, 1), (2, 3), (3, 1), (1, 2), (3, 3), (2, 2))


def _matmul_edge(batch, m, k, n, ta, tb) -> Edge:
    sa = batch + ((k, m) if ta else (m, k))
    sb = batch + ((n, k) if tb else (k, n))
    k_axis = len(batch) + (0 if ta else 1)
    return Edge((sa, sb), (("trans_a", ta), ("trans_b", tb)), SUMS, marked=(k_axis,))


def _matmul() -> list[Edge]:
    out = []
    for i, k in enumerate(EXTENTS):
        m, n = _cycle(MATMUL_MN, i)
        batch = (2,) if k in (33, 4099) else ()
        out.append(_matmul_edge(batch, m, k, n, bool(i & 1), bool(i & 2)))
    out += [_matmul_edge((), 1025, 3, 2, True, False), _matmul_edge((), 2, 5, 1025, False, True),
            _matmul_edge((), 1, PAST_2_20, 1, False, True),
            _matmul_edge((), 0, 4, 3, False, False), _matmul_edge((), 2, 0, 3, True, False),
            _matmul_edge((), 2, 4, 0, False, True)]
    return out


LINEAR_LEADS = ((), (2,), (3,), (2, 2), (1,), (2, 1, 3))
SHORT_LEADS = ((), (1,), (2,))


def _linear_edge(lead, fin, fout) -> Edge:
    return Edge((lead + (fin,), (fout, fin), (fout,)), (), SUMS, marked=(len(lead),))


def _linear() -> list[Edge]:
    out = [_linear_edge(_cycle(LINEAR_LEADS if fin < LARGE else SHORT_LEADS, i), fin, 1 + i % 3)
           for i, fin in enumerate(EXTENTS)]
    out += [_linear_edge((), PAST_2_20, 1), _linear_edge((0,), 5, 3), _linear_edge((2,), 0, 3),
            _linear_edge((2,), 4, 0)]
    return out


# --- normalisation and attention ------------------------------------------------------------------

NORM_LEADS = ((2,), (3,), (), (2, 1), (1, 2))


def _layer_norm() -> list[Edge]:
    shapes = [_cycle(NORM_LEADS if d < LARGE else SHORT_LEADS, i) + (d,)
              for i, d in enumerate(EXTENTS)]
    shapes += [(PAST_2_20,), (0, 5), (3, 0), (4, 1)]
    return [Edge((s, s[-1:], s[-1:]), (("eps", 1e-5),), NORMAL) for s in shapes]


# x [N, C, ...]: N x spatial is each n of E and X; then N = 0, C = 0, spatial 0, a group of one
BATCH_NORM_SHAPES = (
    (7, 2), (31, 3), (2, 2, 16), (3, 1, 11), (251, 2), (15, 2, 17), (4, 3, 8, 8), (1, 2, 257),
    (31, 1, 33), (16, 2, 64), (25, 2, 41), (63, 1, 65), (1, 2, 64, 64), (4097, 2), (1, 1, 4099),
    (255, 1, 257), (256, 2, 256), (65537, 1), (1, 1, PAST_2_20),
    (0, 3, 4), (5, 0, 2), (2, 3, 0), (1, 3),
)


def _batch_norm() -> list[Edge]:
    return [Edge((s, s[1:2], s[1:2]), (("eps", 1e-5),), NORMAL) for s in BATCH_NORM_SHAPES]


ATTENTION_MASKS = (NO_MASK, OPEN, RANDOM, BLOCKED_ROW)
# (batch, Lq = Lk, d, mask): 64k + r query rows, k >= 1, r > 1
ATTENTION_TILE_FORMS = (((), 66, 2, CAUSAL), ((2,), 100, 3, RANDOM), ((), 190, 2, CAUSAL))


def _attention_edge(batch, lq, lk, d, dv, mask) -> Edge:
    scale = float(np.float32(1.0 / math.sqrt(d))) if d else 1.0
    scores = batch + (lq, lk)
    return Edge((batch + (lq, d), batch + (lk, d), batch + (lk, dv)), (("scale", scale),), NORMAL,
                mask=mask, mask_shape=scores, mask_axis=len(scores) - 1)


def _attention() -> list[Edge]:
    out = []
    for i, lk in enumerate(ATTENTION_LK):
        batch = (2,) if i % 4 == 3 else ()
        out.append(_attention_edge(batch, 2 + i % 2, lk, 2 + i % 3, 1 + (i + 1) % 3,
                                   _cycle(ATTENTION_MASKS, i)))
    for i, d in enumerate(ATTENTION_D):
        out.append(_attention_edge((2,) if i % 2 else (), 2, 3 + i, d, 2,
                                   _cycle(ATTENTION_MASKS, i + 1)))
    # issue 35: query rows past the first 64-row tile with a partial last one, causal and random
    for batch, t, d, mask in ATTENTION_TILE_FORMS:
        out.append(_attention_edge(batch, t, t, d, 2, mask))
    # one key per query row, the scores NaN, +inf or -inf (SPECIALS in q)
    out.append(dataclasses.replace(_attention_edge((), 4, 1, 2, 2, NO_MASK), fill=SPECIALS))
    out += [_attention_edge((), 1025, 3, 2, 2, RANDOM),
            _attention_edge((), 1, PAST_2_20, 1, 1, RANDOM),
            _attention_edge((), 0, 3, 2, 2, OPEN), _attention_edge((), 2, 0, 2, 2, RANDOM)]
    return out


# --- data movement and indexing -------------------------------------------------------------------

def _split(n: int) -> tuple[int, int]:
    """(a, n // a) with a the largest divisor of n up to sqrt(n): (1, n) for a prime."""
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return a, n // a


def _reshape() -> list[Edge]:
    pairs = []
    for i, n in enumerate(EXTENTS):
        a, b = _split(n)
        pairs.append(((n,), (a, b)) if i % 2 == 0 else ((a, b), (b, 1, a)))
    pairs += [((PAST_2_20,), _split(PAST_2_20)), ((0, 3), (3, 0, 1)), ((), (1, 1)),
              ((1, 1, 1), ())]
    return [Edge((src,), (("shape", new),), MIXED) for src, new in pairs]


PERMUTE_FORMS = (lambda n: ((n, 3), (1, 0)), lambda n: ((2, n, 3), (2, 0, 1)),
                 lambda n: ((3, 1, n), (2, 1, 0)), lambda n: ((n, 2, 1, 2), (3, 1, 0, 2)))


def _permute() -> list[Edge]:
    pairs = [_cycle(PERMUTE_FORMS, i)(n) if n < LARGE else ((n, 2), (1, 0))
             for i, n in enumerate(EXTENTS)]
    pairs += [((PAST_2_20, 2), (1, 0)), ((0, 3, 2), (2, 0, 1)), ((), ()), ((1, 1, 1), (2, 0, 1))]
    return [Edge((s,), (("perm", p),), MIXED) for s, p in pairs]


# (source, target): long copies, and a length-1 source repeated n times (its VJP sums n terms)
BROADCAST_FORMS = (lambda n: ((n,), (2, n)), lambda n: ((1,), (n,)),
                   lambda n: ((n, 1), (n, 3)), lambda n: ((1, n), (2, 1, n)))


def _broadcast() -> list[Edge]:
    pairs = [_cycle(BROADCAST_FORMS, i)(n) for i, n in enumerate(EXTENTS)]
    pairs += [((1, PAST_2_20), (2, PAST_2_20)), ((0,), (3, 0)), ((1,), (0,)), ((), (3,))]
    return [Edge((s,), (("shape", t),), MIXED) for s, t in pairs]


CONCAT_FORMS = (lambda n: (((2, n), (2, 1)), -1), lambda n: (((n, 3), (1, 3), (2, 3)), 0),
                lambda n: (((n,),), 0), lambda n: (((1, 2), (n, 2)), -2))


def _concat() -> list[Edge]:
    forms = [_cycle(CONCAT_FORMS, i)(n) for i, n in enumerate(EXTENTS)]
    forms += [(((PAST_2_20,), (1,)), -1), (((2, 0), (2, 3)), 1), (((0, 3), (0, 3)), -2)]
    return [Edge(shapes, (("axis", axis),), MIXED) for shapes, axis in forms]


def _slice() -> list[Edge]:
    out = []
    for i, n in enumerate(EXTENTS):
        shape, axis = ((n, 2), (0, -2)[i % 2]) if i % 4 < 2 else ((2, n), (1, -1)[i % 2])
        start, stop = _cycle(((1, n), (0, n - 1), (0, n), (n // 2, n)), i // 2)
        out.append(Edge((shape,), (("axis", axis), ("start", start), ("stop", stop)), MIXED))
    for shape, axis, start, stop in (((PAST_2_20,), -1, 1, PAST_2_20), ((0, 3), 0, 0, 0),
                                     ((4, 3), -1, 2, 2), ((1, 5), 0, 0, 1)):
        out.append(Edge((shape,), (("axis", axis), ("start", start), ("stop", stop)), MIXED))
    return out


INDEX_KINDS = (RANDOM, BOUNDARIES, REVERSED)


def _indexed_forms() -> list[tuple]:
    """(shape, axis, index kind, index count) for gather and the base of scatter_add."""
    forms = []
    for i, n in enumerate(EXTENTS):
        shape, axis = ((n, 2), (0, -2)[i // 2 % 2]) if i % 2 == 0 else ((2, n), (1, -1)[i // 2 % 2])
        forms.append((shape, axis, _cycle(INDEX_KINDS, i), n))
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
        src[_norm_axis(ax, len(s))] = m
        out.append(Edge((s, tuple(src)), (("axis", ax),), NORMAL, indices=kind, n_indices=m))
    return out


# --- the spectral family: packed rfft / irfft and fft_fno ------------------------------------------

# transform lengths: powers of two, their neighbours (odd, prime: mixed radix and Bluestein in
# cuFFT), 1 and 2 (no interior bin), X = 2^20 + 1 on its own row
FFT_EDGE_LENGTHS = (1, 2, 3, 7, 31, 32, 33, 64, 251, 255, 256, 257, 1023, 1024, 1025, 4096, 4099,
                    65536, 65537)
FNO_EDGE_GRIDS = (1, 2, 3, 7, 8, 31, 32, 33, 64, 251, 256, 257, 1024, 1025, 4096, 4099, 65536,
                  65537)


def _fno_edge(batch, grid, width, modes) -> Edge:
    lead = (batch,) if batch != 1 else ()
    return Edge((lead + (grid, width), (modes, width, width), (modes, width, width)), (), NORMAL)


def _spectral(op: Op) -> list[Edge]:
    """rfft: (batch, n), batch cycling 1..3; irfft: (batch, n // 2 + 1, 2) with n; fft_fno: grids
    of FNO_EDGE_GRIDS with width 1..4 and modes cycling 1, grid // 2 + 1 and one between; each
    with a case past 2^20 input elements and an empty batch. Values normal: non-finite inputs
    are outside these ops' domain (the wrappers reject them)."""
    if op.label == "fft_fno":
        out = []
        for i, grid in enumerate(FNO_EDGE_GRIDS):
            m = grid // 2 + 1
            modes = (1, m, max(1, m // 2))[i % 3]
            out.append(_fno_edge(1 + i % 3, grid, 1 + i % 4, modes))
        return out + [_fno_edge(1, 262145, 4, 3), _fno_edge(0, 8, 2, 5)]
    rows = [(1 + i % 3, n) for i, n in enumerate(FFT_EDGE_LENGTHS)] + [(1, PAST_2_20), (0, 8)]
    if op.label == "rfft":
        return [Edge(((b, n),), (), NORMAL) for b, n in rows]
    return [Edge(((b, n // 2 + 1, 2),), (("n", n),), NORMAL) for b, n in rows]


# --- pooling --------------------------------------------------------------------------------------

TIES = "ties"                      # small integers: repeated values and all-equal windows
POOL_BETAS = (0.5, -0.5, 2.0, -1e-3, 30.0, 1.0)


def draw_ties(rng, shape) -> np.ndarray:
    """Values from {-2, -1, -0, 0, 1, 2}: most max-pool windows hold a tie, many are all equal."""
    v = rng.integers(-2, 3, size=shape).astype(np.float32)
    return np.where((v == 0) & (rng.random(shape) < 0.5), np.float32(-0.0), v)


# (x shape, kernel_size, stride, padding, dilation, fill): odd extents, strides past the kernel,
# padding at k/2, dilation, ranks 1-3 and 8, batch absent/0/1/2, TorchLean's 17x17 k3 s1 p1 case,
# the benchmark's 56x56 planes, one case past 2^20 elements, and empty outputs of every kind.
POOL_EDGES = (
    ((1, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), TIES),
    ((2, 3, 17, 17), (3, 3), (1, 1), (1, 1), (1, 1), MIXED),
    ((1, 1, 33), (3,), (2,), (1,), (1,), MIXED),
    ((1, 257), (4,), (4,), (0,), (1,), TIES),
    ((3, 7, 5, 6), (2, 2, 2), (1, 2, 3), (1, 1, 0), (1, 1, 2), MIXED),
    ((2, 2, 4, 5, 3), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), TIES),
    ((1, 64, 56, 56), (3, 3), (2, 2), (1, 1), (1, 1), MIXED),
    ((32, 4, 56, 56), (2, 2), (2, 2), (0, 0), (1, 1), NORMAL),
    ((1, 1, 1025, 1025), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),
    ((2, 1, 65537), (3,), (1,), (1,), (1,), MIXED),
    ((1,) + (2,) * 8, (2,) * 8, (1,) * 8, (0,) * 8, (1,) * 8, TIES),
    ((2, 3, 2, 3, 2, 1, 2, 2, 3), (2, 1, 2, 1, 1, 2, 1, 2), (1,) * 8, (1, 0, 1, 0, 0, 1, 0, 1),
     (1,) * 8, MIXED),
    ((1, 31, 31), (3, 3), (1, 1), (0, 0), (7, 7), MIXED),
    ((2, 30, 30), (2, 2), (5, 5), (0, 0), (1, 1), MIXED),
    ((1, 9, 9), (2, 2), (1, 1), (1, 1), (1, 1), TIES),
    ((1, 1), (2,), (1,), (1,), (2,), MIXED),             # the one window is all padding
    ((1, 4099), (7,), (3,), (3,), (1,), MIXED),
    ((3, 251, 7), (5, 2), (3, 1), (2, 1), (1, 3), MIXED),
    ((0, 4, 4), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),  # C = 0
    ((0, 2, 5, 5), (2, 2), (1, 1), (1, 1), (1, 1), MIXED),   # N = 0
    ((1, 0, 4), (2, 2), (2, 2), (0, 0), (1, 1), MIXED),  # an empty spatial extent
    ((2, 3, 3), (3, 3), (1, 1), (2, 2), (1, 1), MIXED),  # padding past k/2: an empty output
    ((1, 2, 2), (3, 3), (1, 1), (0, 0), (1, 1), MIXED),  # a window longer than the input
)


def _pooling(op: Op) -> list[Edge]:
    out = []
    for i, (x, k, s, p, d, fill) in enumerate(POOL_EDGES):
        params = (("kernel_size", k), ("stride", s), ("padding", p), ("dilation", d))
        if op is Op.smooth_max_pool:
            params += (("beta", _cycle(POOL_BETAS, i)),)
        out.append(Edge((x,), params, fill))
    return out


# --- convolution ----------------------------------------------------------------------------------

# (batch, C_in, C_out, groups, spatial, kernel, stride, padding, dilation, bias, fill), from the
# forward conv's side: conv_transpose takes the same rows with its kernel [C_in, C_out / groups, *k]
CONV_TABLE = (
    (None, 1, 1, 1, (7,), (3,), (1,), (0,), (1,), True, NORMAL),
    (1, 2, 3, 1, (31,), (2,), (4,), (0,), (1,), True, MIXED),         # stride above the kernel
    (None, 1, 2, 1, (33,), (3,), (1,), (2,), (1,), False, MIXED),     # padding at the limit
    (2, 2, 2, 1, (32,), (3,), (2,), (1,), (3,), True, NORMAL),        # dilation
    (1, 1, 1, 1, (1025,), (3,), (1,), (1,), (1,), True, SUMS),
    (None, 1, 1, 1, (PAST_2_20,), (3,), (1,), (1,), (1,), True, NORMAL),   # past 2^20 elements
    (2, 3, 5, 1, (33, 9), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),
    (1, 4, 4, 4, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), True, MIXED),   # depthwise
    (1, 4, 6, 2, (17, 15), (3, 2), (2, 3), (1, 0), (1, 2), True, NORMAL),
    (None, 64, 2, 1, (4, 4), (3, 3), (1, 1), (1, 1), (1, 1), True, SUMS),  # 577 terms
    (1, 3, 65, 1, (17, 33), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),  # tiles' edges
    (1, 1, 1, 1, (65, 65), (3, 3), (1, 1), (1, 1), (1, 1), False, MIXED),
    (1, 2, 2, 1, (5, 4, 3), (2, 2, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), True, NORMAL),
    (1, 2, 2, 2, (3, 2, 2, 3), (2, 1, 2, 2), (1, 1, 2, 1), (1, 0, 0, 1), (1, 1, 1, 1), True,
     MIXED),
    (None, 1, 2, 1, (2, 2, 1, 2, 2), (2, 1, 1, 2, 1), (1,) * 5, (0, 1, 0, 1, 0), (1,) * 5, True,
     NORMAL),
    (1, 1, 1, 1, (2,) * 8, (2,) * 8, (1,) * 8, (0,) * 8, (1,) * 8, True, NORMAL),   # rank 8
    (0, 2, 3, 1, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), True, NORMAL),   # batch 0
    (1, 0, 3, 1, (5,), (3,), (1,), (1,), (1,), True, NORMAL),             # no input channels
    (1, 2, 2, 1, (2,), (5,), (1,), (0,), (1,), True, NORMAL),             # an empty output
    (2, 3, 2, 1, (4, 0), (1, 2), (1, 1), (0, 1), (1, 1), True, NORMAL),   # an empty spatial axis
)


def _conv(op: Op) -> list[Edge]:
    transpose = op is Op.conv_transpose
    out = []
    for batch, ci, co, g, spatial, k, s, p, d, bias, fill in CONV_TABLE:
        lead = () if batch is None else (batch,)
        if transpose:   # the transposed op reads the rows backwards: C_out channels in, C_in out
            ci, co = co, ci
        w = (ci, co // g) + k if transpose else (co, ci // g) + k
        shapes = (lead + (ci,) + spatial, w) + (((co,),) if bias else ())
        params = (("stride", s), ("padding", p), ("dilation", d), ("groups", g))
        out.append(Edge(shapes, params, NORMAL if fill == SUMS else fill))
    return out


# --- the fused cross-entropy loss ----------------------------------------------------------------

# (rows, classes): classes C in E and X over one to three rows, rows across the same boundaries
# with few classes, gpt2's byte vocabulary (256) over 128 rows, one class (the loss is +0)
CROSS_ENTROPY_FORMS = tuple((1 + i % 3, c) for i, c in enumerate(EXTENTS)) + (
    (1, PAST_2_20), (1025, 3), (4097, 2), (65537, 1), (128, 256), (1, 1), (4, 1))


def _cross_entropy() -> list[Edge]:
    return [Edge(((rows, classes),), (), SOFTMAX, marked=(1,), indices=_cycle(INDEX_KINDS, i),
                 n_indices=rows, index_param="targets")
            for i, (rows, classes) in enumerate(CROSS_ENTROPY_FORMS)]


# --- bias_gelu --------------------------------------------------------------------------------------

# x (rows, d): d in E over 1..3 rows (db sums a few terms per column), rows in E over a few
# columns (db sums long columns: the VJP's row chunks), X both ways, and the empty forms
BIAS_GELU_FORMS = tuple((1 + i % 3, d) for i, d in enumerate(EXTENTS)) + (
    (4097, 3), (65537, 2), (1, PAST_2_20), (PAST_2_20, 1), (0, 4), (3, 0), (1, 1))


def _bias_gelu() -> list[Edge]:
    return [Edge(((rows, d), (d,)), (), MIXED) for rows, d in BIAS_GELU_FORMS]


# --- attention_heads ------------------------------------------------------------------------------

# (B, T, H, D): T across the flash kernels' 64-row tiles (a diagonal tile partial or whole, one to
# three tiles), H 1 to 12, D across the kernel widths and past them (257: the native capsule
# declines it), one case past 2^20 input elements (T = 1, D = X / 6: the reference's cost grows
# with T^2 H, not with D); causal alternating with no mask; then the empty forms.
ATTENTION_HEADS_FORMS = ((1, 1, 1, 1), (2, 2, 3, 2), (1, 31, 2, 3), (1, 32, 1, 5), (1, 33, 2, 2),
                         (1, 63, 1, 4), (1, 64, 2, 2), (1, 65, 1, 33), (2, 33, 12, 2),
                         (1, 127, 1, 2), (1, 128, 1, 1), (1, 129, 1, 2), (1, 17, 3, 64),
                         (2, 5, 4, 32), (1, 3, 1, 128), (1, 2, 1, 257),
                         (1, 1, 2, PAST_2_20 // 6 + 1), (0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 2, 0))


# issue 35: causal T = 64k + r (k >= 1, r > 1: a partial last tile after a whole one), and the
# causal first query row (one key) and T = 1 with SPECIALS in q: NaN, +inf and -inf scores
ATTENTION_HEADS_CAUSAL_TILES = ((1, 66, 2, 2), (2, 100, 1, 3), (1, 190, 1, 2))
ATTENTION_HEADS_SINGLE_KEY = ((1, 3, 2, 2), (2, 1, 2, 2))


def _heads_edge(b, t, h, d, causal, fill=NORMAL) -> Edge:
    scale = float(np.float32(1.0 / math.sqrt(d))) if d else 1.0
    return Edge(((b, t, h * d),) * 3, (("heads", h), ("causal", causal), ("scale", scale)), fill)


def _attention_heads() -> list[Edge]:
    out = [_heads_edge(b, t, h, d, i % 2 == 0) for i, (b, t, h, d) in
           enumerate(ATTENTION_HEADS_FORMS)]
    out += [_heads_edge(*form, True) for form in ATTENTION_HEADS_CAUSAL_TILES]
    return out + [_heads_edge(*form, True, SPECIALS) for form in ATTENTION_HEADS_SINGLE_KEY]


# --- add_layer_norm -------------------------------------------------------------------------------

def _add_layer_norm() -> list[Edge]:
    return [Edge((e.shapes[0],) + e.shapes, e.params, e.fill) for e in _layer_norm()]


# --- the table and the per-case draws -----------------------------------------------------------

# The edge-set families: name -> (op -> edges). Each op's record (conformance/op_db.py, `edges`)
# names its family; generators.edge_set builds and caches the set.
FAMILIES = {
    "elementwise": _elementwise, "random": _random, "softmax": _softmax,
    "reduce": lambda op: _reduce(), "mse_loss": lambda op: _mse_loss(),
    "matmul": lambda op: _matmul(), "linear": lambda op: _linear(),
    "layer_norm": lambda op: _layer_norm(), "batch_norm": lambda op: _batch_norm(),
    "attention": lambda op: _attention(), "reshape": lambda op: _reshape(),
    "permute": lambda op: _permute(), "broadcast": lambda op: _broadcast(),
    "concat": lambda op: _concat(), "slice": lambda op: _slice(), "gather": lambda op: _gather(),
    "scatter_add": lambda op: _scatter_add(),
    "spectral": _spectral,
    "pooling": lambda op: _pooling(op),
    "conv": _conv,
}
FAMILIES["scan"] = lambda op: _scan()
FAMILIES["cross_entropy"] = lambda op: _cross_entropy()
FAMILIES["bias_gelu"] = lambda op: _bias_gelu()
FAMILIES["attention_heads"] = lambda op: _attention_heads()
FAMILIES["add_layer_norm"] = lambda op: _add_layer_norm()


# --- selective_scan ---------------------------------------------------------------------------

# (seq, state, token-dependent): seq across the chunk (32) and switch-point (256) boundaries up to a
# few thousand steps with one or two channels, state across the warp and block boundaries with few
# steps, seq 1, state 1, one case past 2^20 input elements (state 2^18 + 1: four inputs), and the
# empty forms (seq 0, state 0) of both variants.
SCAN_FORMS = (
    (1, 1, False), (1, 3, True), (7, 1, True), (31, 2, False), (32, 1, True), (33, 2, True),
    (255, 1, False), (256, 2, True), (257, 1, True), (1000, 1, False), (1023, 2, True),
    (4095, 1, True), (4096, 1, False), (4097, 1, True), (3, 31, True), (2, 1025, False),
    (1, 4099, True), (2, 65537, False), (1, 2 ** 18 + 1, False), (0, 3, False), (0, 3, True), (4, 0, False), (4, 0, True),
)


def _scan() -> list[Edge]:
    """Values: mixed below 256 steps, normal from there (the exact reference's cost grows with the
    spread of exponents over the sequence); A's regime cycles (layouts.scan_values)."""
    edges = []
    for seq, state, token in SCAN_FORMS:
        coef = (seq, state) if token else (state,)
        edges.append(Edge((coef, coef, (seq, state), (state,)), (),
                          MIXED if seq < 256 else NORMAL))
    return edges


def build(family: str, op: Op) -> tuple[Edge, ...]:
    """The fixed edge cases of `op` from its family, smallest first (a stable sort: ties keep the
    family's order); the random ops by requested size, since they take no inputs."""
    if family not in FAMILIES:
        raise KeyError(f"op `{op.label}` names edge family `{family}`; known families: "
                       f"{', '.join(FAMILIES)} (conformance/edges.py)")
    edges = FAMILIES[family](op)
    if family == "random":
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
