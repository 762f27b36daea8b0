"""Small seeded samplers (JAX style): value factories rand_x(rng) -> (shape -> float32 array), the
mixed sampler, boundary markers and special-value rows of the fixed edge set, shape makers (small,
edge extents around 31/32/33, 255/256/257, 1023/1025, empty axes, 64k + r rows past the first
tile), off-grid attention scales, the cancellation builders of the ops' records (cancel_pair,
cancel_sums), and far tails, the value shaping that drives elementwise composites to their small
outputs (issue 35)."""
from __future__ import annotations

import math

import numpy as np

from conformance.error_terms import TINY   # smallest normal float32

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)
SUB_MIN = 2.0 ** -149       # smallest subnormal float32


# --- value samplers: rand_x(rng) -> (shape -> float32 array) -------------------------------------

def rand_normal(rng):
    return lambda shape: rng.standard_normal(shape).astype(F32)


def rand_wide(rng, max_exp: int = 127):
    """Sign, a random 24-bit significand and an exponent spread over the whole normal range (up to
    2^max_exp)."""
    def draw(shape):
        e = rng.integers(-125, max_exp, size=shape)
        m = rng.uniform(1.0, 2.0, size=shape)
        s = rng.choice([-1.0, 1.0], size=shape)
        return (s * np.ldexp(m, e)).astype(F32)
    return draw


def rand_subnormal(rng):
    """Subnormals (all significand widths), the normal/subnormal boundary, and some normals."""
    def draw(shape):
        n = int(np.prod(shape, dtype=np.int64))
        bits = rng.integers(1, 1 << 23, size=n).astype(np.uint32)
        sub = bits.view(F32).astype(np.float64)
        edge = rng.choice([TINY, TINY * (1 - 2.0 ** -23), SUB_MIN, 2 * SUB_MIN, 2.0 ** -127], size=n)
        normal = rng.standard_normal(n) * 2.0 ** rng.integers(-130, 4, size=n)
        pick = rng.integers(0, 3, size=n)
        v = np.where(pick == 0, sub, np.where(pick == 1, edge, normal))
        v = v * rng.choice([-1.0, 1.0], size=n)
        return v.astype(F32).reshape(shape)
    return draw


def rand_signed_zero(rng):
    def draw(shape):
        v = rng.standard_normal(shape).astype(F32)
        pick = rng.integers(0, 3, size=shape)
        return np.where(pick == 0, F32(0.0), np.where(pick == 1, F32(-0.0), v)).astype(F32)
    return draw


# The NaNs the generators draw, as float32 bit patterns: the canonical quiet NaN, x86's default
# NaN (sign set), quiet NaNs with payloads, and signalling NaNs of both signs. A kernel that
# rewrites the NaNs inside its input changes bits the input check sees only when the NaN it
# rewrites is not the one it writes. Never engine.runtime.poison's POISON_BITS (0x7fa00001): a
# copied input NaN would read as an unwritten output element.
NAN_PAYLOADS = (0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FC0DEAD, 0xFFBFFFFF,
                0x7FFFFFFF)


def nans(rng, shape) -> np.ndarray:
    """A float32 array of NaNs, each with a payload drawn from NAN_PAYLOADS."""
    bits = np.array(NAN_PAYLOADS, dtype=np.uint32)[rng.integers(0, len(NAN_PAYLOADS), size=shape)]
    return np.asarray(bits).view(F32)


def rand_special(rng):
    """+-inf and NaN (every payload of NAN_PAYLOADS) mixed with normals (about half specials).
    Built with np.where on float32 arrays only: a trip through float64 would quiet the
    signalling NaNs."""
    def draw(shape):
        v = rng.standard_normal(shape).astype(F32)
        pick = rng.integers(0, 6, size=shape)
        sp = np.choose(np.minimum(pick, 3), [F32(np.inf), F32(-np.inf), F32(np.nan), F32(0.0)])
        sp = np.where(pick == 2, nans(rng, shape), sp)
        return np.where(pick < 3, sp, v).astype(F32)
    return draw


def rand_near(rng, centre: float, rel: float = 2.0 ** -10):
    """Values within a relative `rel` of +-centre, plus centre itself and its float32 neighbours."""
    def draw(shape):
        c = F32(centre)
        with np.errstate(over="ignore"):   # past FLT_MAX is +-inf: part of the class
            v = (np.float64(c) * (1 + rng.uniform(-rel, rel, size=shape))).astype(F32)
            nb = np.choose(rng.integers(0, 3, size=shape), [c, np.nextafter(c, F32(0)),
                                                            np.nextafter(c, F32(np.inf))])
        v = np.where(rng.integers(0, 3, size=shape) == 0, nb, v)
        return (v * rng.choice([F32(-1), F32(1)], size=shape)).astype(F32)
    return draw


def rand_positive(draw):
    return lambda shape: np.abs(draw(shape)).astype(F32)


# Shares of the mixed sampler, per element: every value class of the seeded campaign in one array,
# so the large edge cases carry subnormals, signed zeros, infinities, NaNs and values at the op's
# overflow edge as well as ordinary normals.
MIXED_SHARES = (("normal", 0.35), ("wide", 0.15), ("subnormal", 0.10), ("signed-zero", 0.10),
                ("special", 0.10), ("near-overflow", 0.20))


def rand_mixed(rng, near_overflow: float = FLT_MAX, wide_max_exp: int = 127,
               positive_share: float = 0.0):
    """Per element one of the value classes of MIXED_SHARES; `positive_share` of the elements
    (drawn independently) have their sign cleared, for ops whose domain is mostly positive."""
    samplers = (rand_normal(rng), rand_wide(rng, wide_max_exp), rand_subnormal(rng),
                rand_signed_zero(rng), rand_special(rng), rand_near(rng, near_overflow))
    bounds = np.cumsum([w for _, w in MIXED_SHARES])

    def draw(shape):
        n = int(np.prod(shape, dtype=np.int64))
        # one class per element, then each class drawn only for its own elements (cheap at 2^20)
        pick = np.searchsorted(bounds / bounds[-1], rng.random(n), side="right")
        v = np.empty(n, dtype=F32)
        for k, sample in enumerate(samplers):
            where = np.flatnonzero(pick == k)
            if where.size:
                v[where] = sample((where.size,))
        if positive_share:
            v = np.where(rng.random(n) < positive_share, np.abs(v), v)
        return v.astype(F32).reshape(shape)
    return draw


# --- boundary markers: terms whose loss no error bound can hide ---------------------------------

def boundary_positions(n: int) -> list[int]:
    """The term positions a blocked or strided reduction of n terms is most likely to drop or
    double: the first, the last, and p, the largest power of two below n - 1: the first term
    after a full power-of-two block, where a warp, block or grid stride hands over."""
    if n <= 0:
        return []
    pos = {0, n - 1}
    if n >= 3:
        pos.add(1 << ((n - 2).bit_length() - 1))
    return sorted(pos)


def marker_magnitude(n: int) -> float:
    """A power of two M whose loss from a sum of n terms exceeds the loosest sum bound the
    harness applies, gamma_n * sum |terms| with gamma_n ~ n 2^-24: the other n terms are standard
    normals (sum |a| ~ 0.8 n) and at most three markers join them, so M must exceed
    n 2^-24 (0.8 n + 3 M) / (1 - n 2^-24); M = 8 n^2 2^-24 rounded up to a power of two (at
    least 8) is M / bound = c (1 - n u) / (0.8 + 3 c n u) with c in [8, 16), u = 2^-24: three or
    more for every n up to 2^20 + 1 (there M = 2^20 against a bound of about 2e5)."""
    return 2.0 ** max(3, math.ceil(math.log2(max(8.0 * n * n * 2.0 ** -24, 1.0))))


def mark_terms(x: np.ndarray, axes, marker) -> np.ndarray:
    """x with the boundary_positions of every reduced row set by `marker(shape) -> array`: the
    reduced row runs over `axes` (non-negative, any order) in row-major order of the sorted axes,
    the order the references and the fixed orders use."""
    red = sorted(set(int(a) for a in axes))
    if x.size == 0 or not red:
        return x
    keep = [d for d in range(x.ndim) if d not in red]
    n = math.prod(x.shape[d] for d in red)
    moved = np.transpose(x, keep + red)
    rows = moved.reshape(tuple(x.shape[d] for d in keep) + (n,)).copy()
    pos = boundary_positions(n)
    rows[..., pos] = marker(rows[..., pos].shape)
    back = rows.reshape(moved.shape)
    return np.ascontiguousarray(np.transpose(back, np.argsort(keep + red))).astype(F32)


def nan_row(x: np.ndarray, axes, rng) -> np.ndarray:
    """x with one NaN (its payload from NAN_PAYLOADS) in the middle one of the rows reduced over
    `axes` (as mark_terms reads them), at its middle term that carries no boundary marker. The
    fills that call it hold no infinity, so a kernel that skips NaNs (nansum, nanmax) returns a
    number where that row's result is NaN, on every seed. x is left alone with fewer than two rows
    (the NaN would hide every marker) or fewer than four terms a row (no unmarked term)."""
    red = sorted(set(int(a) for a in axes))
    keep = [d for d in range(x.ndim) if d not in red]
    n = math.prod(x.shape[d] for d in red)
    rows = math.prod(x.shape[d] for d in keep)
    if rows < 2 or n < 4:
        return x
    pos = n // 2 if n // 2 not in boundary_positions(n) else n // 2 - 1
    moved = np.transpose(x, keep + red)
    flat = moved.reshape(rows, n).copy()
    flat[rows // 2, pos] = nans(rng, ())
    back = flat.reshape(moved.shape)
    return np.ascontiguousarray(np.transpose(back, np.argsort(keep + red))).astype(F32)


def sum_markers(rng, n: int):
    """Markers for sums (reductions, dot products): +-marker_magnitude(n), random signs."""
    m = marker_magnitude(n)
    return lambda shape: (rng.choice([-m, m], size=shape)).astype(F32)


def softmax_markers(n: int):
    """Markers for a softmax row of n standard normals: log(n) + 1, whose weight e n stands
    against about e^(1/2) n for all the normals together: each of the (at most three) markers
    holds a quarter to a half of the row's mass, so losing one moves every output."""
    v = F32(math.log(max(n, 1)) + 1.0)
    return lambda shape: np.full(shape, v, dtype=F32)


# --- shapes -----------------------------------------------------------------------------------

EDGE_EXTENTS = (31, 32, 33, 255, 256, 257, 1023, 1025)


def small_shape(rng, rank: int | None = None, lo: int = 1, hi: int = 6) -> tuple[int, ...]:
    rank = int(rng.integers(0, 5)) if rank is None else rank
    return tuple(int(x) for x in rng.integers(lo, hi + 1, size=rank))


def edge_shape(rng, rank_lo: int = 0) -> tuple[int, ...]:
    """One edge extent (31..1025) on one axis, small others; ranks 0-4 and size-1 axes included."""
    rank = int(rng.integers(max(rank_lo, 1), 5))
    shape = [int(x) for x in rng.choice([1, 1, 2, 3], size=rank)]
    shape[int(rng.integers(0, rank))] = int(rng.choice(EDGE_EXTENTS))
    if rank_lo == 0 and rng.integers(0, 6) == 0:
        return ()
    return tuple(shape)


TILE_ROWS = 64          # the row tile of the flash and softmax kernels


def past_first_tile(rng) -> int:
    """64k + r with k in {1, 2} and r in [2, 63]: a partial last tile of at least two rows after
    one or two whole ones (issue 35: a mask off by one only there is invisible below 65 rows)."""
    return TILE_ROWS * int(rng.integers(1, 3)) + int(rng.integers(2, TILE_ROWS))


def attention_scale(rng) -> float:
    """The attention params class's scale: float32 values (1, -1/2, 2^-10, 30, 0, a float32
    normal), half the time moved off the float32 grid by under half an ulp (docs/OPS.md rounds
    it to float32 before use: a kernel that does not sees another scale, and campaign.py's
    param-not-rounded check sees the kernel)."""
    scale = float(rng.choice([1.0, -0.5, 2.0 ** -10, 30.0, 0.0, float(F32(rng.standard_normal()))]))
    if scale and rng.integers(0, 2):
        scale *= 1.0 + float(rng.uniform(0.05, 0.45) * rng.choice([-1.0, 1.0])) * 2.0 ** -23
    return float(scale)


def empty_shape(rng, rank_lo: int = 1) -> tuple[int, ...]:
    rank = int(rng.integers(max(rank_lo, 1), 4))
    shape = [int(x) for x in rng.integers(1, 4, size=rank)]
    shape[int(rng.integers(0, rank))] = 0
    return tuple(shape)


# --- the cancellation class: values whose evaluation cancels (an op's record holds one) ----------

def cancel_pair(sign: float):
    """OpSpec.cancellation of a binary op: input 1 within a few ulps of sign * input 0 (b ~ -a for
    add, b ~ a for sub, max, min, mse_loss): the result cancels to a few ulps of the inputs."""
    def cancel(arrays, rng):
        if len(arrays) < 2:
            return arrays
        a = arrays[0]
        ulps = rng.integers(-4, 5, size=a.shape).astype(np.float64)
        near = (a.astype(np.float64) * (1 + ulps * 2.0 ** -23)).astype(F32)
        arrays[1] = (F32(sign) * near).astype(F32)
        return arrays
    return cancel


def cancel_sums(arrays, rng):
    """OpSpec.cancellation's default (sums and products): every input plus terms of +-2^20 in exact
    opposite pairs, so the large terms cancel and the result is the small ones' sum."""
    out = []
    for a in arrays:
        flat = a.reshape(-1).astype(np.float64)
        big = rng.standard_normal(flat.size) * 2.0 ** 20
        half = flat.size // 2
        big[half: 2 * half] = -big[:half]       # exact opposites: the big terms cancel
        out.append((big + flat).astype(F32).reshape(a.shape))
    return out


# --- small outputs of composites (issue 35): the cancellation class of a composite whose result
# is tiny, or 1 - tiny, in a regime its bulk never reaches (the ops' own shaping, OpSpec.values
# and param_values, sits beside their records: cross_entropy's confident rows, the softmax
# family's dominating entries, bias_gelu's tail) -------------------------------------------------

def far_tail(lo: float, hi: float, both_signs: bool = False):
    """A value hook (OpSpec.values) for an elementwise composite's cancellation class: three
    elements in four, the first always, drawn from -U(lo, hi) (or +-U(lo, hi)): the tail where
    the result is tiny (softplus and sigmoid below 0, gelu's negative tail) or 1 - tiny (sigmoid
    above 0). The other inputs (bias_gelu's b) are left as drawn."""
    def hook(arrays, cls, index, rng):
        if cls != "cancellation":
            return arrays
        a = np.asarray(arrays[0])
        flat = a.reshape(-1).astype(np.float64)
        tail = rng.uniform(lo, hi, size=flat.size)
        sign = rng.choice([-1.0, 1.0], size=flat.size) if both_signs else -1.0
        kept = np.arange(flat.size) % 4 == 3
        shaped = np.where(kept, flat, sign * tail).astype(F32).reshape(a.shape)
        return [shaped] + list(arrays[1:])
    return hook


SPECIAL_CYCLE = (np.nan, np.inf, -np.inf)


def cycle_specials(x: np.ndarray) -> np.ndarray:
    """x with its elements, in row-major order, cycling NaN, +inf, -inf and x's own value: every
    special value in the first rows, whatever the shape (edges.SPECIALS)."""
    flat = np.array(x, dtype=F32).reshape(-1)
    k = len(SPECIAL_CYCLE) + 1
    for i, v in enumerate(SPECIAL_CYCLE):
        flat[i::k] = F32(v)
    return flat.reshape(np.shape(x))
