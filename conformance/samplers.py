"""Small seeded samplers (JAX style): value factories rand_x(rng) -> (shape -> float32 array)
and shape makers (small, edge extents around 31/32/33, 255/256/257, 1023/1025, empty axes)."""
from __future__ import annotations


import numpy as np

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)
TINY = 2.0 ** -126          # smallest normal float32
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


def rand_special(rng):
    """+-inf and NaN mixed with normals (about half specials)."""
    def draw(shape):
        v = rng.standard_normal(shape).astype(F32)
        pick = rng.integers(0, 6, size=shape)
        sp = np.choose(np.minimum(pick, 3), [F32(np.inf), F32(-np.inf), F32(np.nan), F32(0.0)])
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


def empty_shape(rng, rank_lo: int = 1) -> tuple[int, ...]:
    rank = int(rng.integers(max(rank_lo, 1), 4))
    shape = [int(x) for x in rng.integers(1, 4, size=rank)]
    shape[int(rng.integers(0, rank))] = 0
    return tuple(shape)
