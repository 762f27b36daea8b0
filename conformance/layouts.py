"""Shape and parameter layouts, one per op family: layout(rng, cls) -> (input shapes, params) as
`engine.ops.<op>` takes them, for generator class `cls` ("shapes" asks for edge extents, "empty"
for an empty axis, "params", "masks" and "indices" for the op's own extra classes). Each op's
record in op_db.py names its layout; generators.py draws the values into the shapes.

Axis parameters: wherever the op takes an axis, about a third of the drawn axes are negative and
about a third of the multi-axis reduce tuples are unsorted (OPS.md allows both; never a repeated
axis, never a bare int where OPS.md asks for a tuple)."""
from __future__ import annotations

import math

import numpy as np

from conformance.samplers import (EDGE_EXTENTS, F32, attention_scale, edge_shape, empty_shape,
                                  past_first_tile, small_shape)


def _base_shape(rng, cls, rank_lo=0):
    if cls == "shapes":
        return edge_shape(rng, rank_lo)
    if cls == "empty":
        return empty_shape(rng, max(rank_lo, 1))
    if cls in ("normal", "cancellation"):
        return small_shape(rng, int(rng.integers(rank_lo, 5)), 1, 9)
    return small_shape(rng, int(rng.integers(max(rank_lo, 1), 3)), 4, 12)


def unary_layout(rng, cls):
    return [_base_shape(rng, cls)], {}


def binary_layout(rng, cls):
    s = _base_shape(rng, cls)
    return [s, s], {}


def scale_layout(rng, cls):
    alphas = [0.5, -1.0, 3.0, 0.1, 2.0 ** -100, 1e30, 0.0, -0.0]
    alpha = float(rng.choice(alphas)) if cls == "params" or rng.integers(0, 2) else float(
        F32(rng.standard_normal()))
    return [_base_shape(rng, cls)], {"alpha": alpha}


def clamp_layout(rng, cls):
    lo, hi = sorted(float(F32(x)) for x in rng.standard_normal(2))
    if cls == "params" and rng.integers(0, 2):
        hi = lo
    return [_base_shape(rng, cls)], {"lo": lo, "hi": hi}


def safe_log_layout(rng, cls):
    eps = float(rng.choice([1e-12, 1e-3, 0.5, 1e-30]))
    return [_base_shape(rng, cls)], {"eps": eps}


NEGATIVE_SHARE = 1 / 3          # of drawn axes written as negative (OPS.md allows them)
UNSORTED_SHARE = 1 / 3          # of drawn multi-axis tuples given out of ascending order


def _signed(rng, ax: int, nd: int) -> int:
    """Axis `ax` (in range(nd)) written as ax - nd a third of the time."""
    return int(ax) - nd if rng.random() < NEGATIVE_SHARE else int(ax)


def _axes_params(rng, shape):
    nd = len(shape)
    if nd == 0 or rng.integers(0, 4) == 0:
        axes = None
    else:
        k = int(rng.integers(1, nd + 1))
        picked = [int(a) for a in rng.choice(nd, size=k, replace=False)]
        if k < 2 or rng.random() >= UNSORTED_SHARE:
            picked.sort()
        elif picked == sorted(picked):
            picked.reverse()                 # a shuffle that came out sorted: unsorted by force
        axes = tuple(_signed(rng, a, nd) for a in picked)
    return {"axes": axes, "keepdims": bool(rng.integers(0, 2))}


def reduce_layout(rng, cls):
    if cls == "shapes":
        rank = int(rng.integers(1, 4))
        shape = [int(x) for x in rng.choice([1, 2, 3], size=rank)]
        ax = int(rng.integers(0, rank))
        shape[ax] = int(rng.choice(EDGE_EXTENTS))
        return [tuple(shape)], {"axes": (_signed(rng, ax, rank),),
                                "keepdims": bool(rng.integers(0, 2))}
    if cls == "empty":
        shape = empty_shape(rng)
        zero_ax = shape.index(0)
        return [shape], {"axes": (_signed(rng, zero_ax, len(shape)),),
                         "keepdims": bool(rng.integers(0, 2))}
    shape = small_shape(rng, int(rng.integers(0, 5)), 1, 9) if cls == "normal" else \
        small_shape(rng, int(rng.integers(1, 3)), 3, 17)
    return [shape], _axes_params(rng, shape)


def _row_layout(rng, cls):
    if cls == "shapes":
        rank = int(rng.integers(1, 4))
        shape = [int(x) for x in rng.choice([1, 2, 3], size=rank)]
        ax = int(rng.integers(0, rank))
        shape[ax] = int(rng.choice(EDGE_EXTENTS))
        return tuple(shape), _signed(rng, ax, rank)
    shape = empty_shape(rng) if cls == "empty" else small_shape(rng, int(rng.integers(1, 5)), 1, 9)
    ax = int(rng.integers(0, len(shape)))
    if cls == "cancellation" and shape[ax] < 2:    # a row that one entry can dominate
        shape = shape[:ax] + (2,) + shape[ax + 1:]
    return shape, _signed(rng, ax, len(shape))


def softmax_layout(rng, cls):
    shape, axis = _row_layout(rng, cls)
    return [shape], {"axis": axis}


def masked_softmax_layout(rng, cls):
    if cls == "masks" and rng.integers(0, 2):     # half the masks: 64k + r rows, causal or random
        t = past_first_tile(rng)
        shape = (t, t) if rng.integers(0, 2) else (t, int(rng.integers(2, 10)))
        causal = shape[0] == shape[1]
        mask = np.tril(np.ones(shape, bool)) if causal else rng.random(shape) < 0.6
        return [shape], {"mask": mask, "axis": -1 if rng.integers(0, 2) else 1}   # both spellings
    shape, axis = _row_layout(rng, cls)
    if cls == "masks":
        kind = rng.integers(0, 3)
        if kind == 0:
            mask = np.ones(shape, dtype=bool)                      # all open
        else:
            mask = rng.random(shape) < 0.5
            if kind == 2 and mask.size:                            # some fully blocked rows
                rows = np.moveaxis(mask, axis, -1)
                rows[rng.random(rows.shape[:-1]) < 0.5] = False
    else:
        mask = rng.random(shape) < 0.7
    return [shape], {"mask": mask, "axis": axis}


def mse_layout(rng, cls):
    s = _base_shape(rng, cls)
    return [s, s], {}


def _factor(rng, n: int, rank: int) -> tuple[int, ...]:
    dims = []
    for _ in range(max(rank - 1, 0)):
        divs = [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1, 2]
        d = int(rng.choice(divs))
        dims.append(d)
        n = n // d if d else n
    return tuple(dims + [n]) if rank else ()


def reshape_layout(rng, cls):
    s = _base_shape(rng, cls)
    n = math.prod(s)
    if n == 1 and rng.integers(0, 2):
        new = ()
    elif n == 0:
        new = (0,) + tuple(int(x) for x in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    else:
        new = _factor(rng, n, int(rng.integers(1, 5)))
    return [s], {"shape": new}


def permute_layout(rng, cls):
    s = _base_shape(rng, cls)
    return [s], {"perm": tuple(int(p) for p in rng.permutation(len(s)))}


def broadcast_layout(rng, cls):
    dst = list(_base_shape(rng, cls, rank_lo=1))
    if cls != "empty":
        dst = [d if d else 1 for d in dst]
    drop = int(rng.integers(0, len(dst) + 1))
    src = [1 if rng.integers(0, 2) else d for d in dst[drop:]]
    if cls == "empty":
        src = [d if d == 0 else s for s, d in zip(src, dst[drop:])]
    return [tuple(src)], {"shape": tuple(dst)}


def concat_layout(rng, cls):
    base = list(_base_shape(rng, cls, rank_lo=1))
    axis = int(rng.integers(0, len(base)))
    k = int(rng.integers(1, 5))
    shapes = []
    for _ in range(k):
        s = list(base)
        s[axis] = int(rng.integers(0 if cls == "empty" else 1, 5)) if cls != "shapes" else \
            int(rng.choice((1, 31, 33, 256)))
        shapes.append(tuple(s))
    return shapes, {"axis": _signed(rng, axis, len(base))}


def slice_layout(rng, cls):
    s = _base_shape(rng, cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    n = s[axis]
    start = int(rng.integers(0, n + 1))
    stop = int(rng.integers(start, n + 1))
    return [s], {"axis": _signed(rng, axis, len(s)), "start": start, "stop": stop}


def _indices(rng, extent: int, cls: str) -> np.ndarray:
    if extent == 0:
        return np.zeros(0, dtype=np.int64)
    n = int(rng.integers(0, 2 * extent + 3))
    if cls == "indices":
        kind = rng.integers(0, 3)
        if kind == 0:                       # every index the same: maximal duplication
            return np.full(max(n, 2), int(rng.integers(0, extent)), dtype=np.int64)
        if kind == 1:                       # boundaries only
            return rng.choice([0, extent - 1], size=max(n, 2)).astype(np.int64)
    return rng.integers(0, extent, size=n).astype(np.int64)


def gather_layout(rng, cls):
    s = _base_shape(rng, "normal" if cls == "indices" else cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    idx = _indices(rng, s[axis], cls)
    return [s], {"axis": _signed(rng, axis, len(s)), "indices": idx}


def scatter_layout(rng, cls):
    s = _base_shape(rng, "normal" if cls == "indices" else cls, rank_lo=1)
    axis = int(rng.integers(0, len(s)))
    idx = _indices(rng, s[axis], cls)
    src = list(s)
    src[axis] = idx.size
    return [s, tuple(src)], {"axis": _signed(rng, axis, len(s)), "indices": idx}


def matmul_layout(rng, cls):
    batch = (int(rng.integers(1, 4)),) if rng.integers(0, 2) else ()
    m, n = (int(x) for x in rng.integers(1, 6, size=2))
    k = int(rng.integers(1, 9))
    if cls == "shapes":
        k = int(rng.choice(EDGE_EXTENTS))
        m, n = (int(x) for x in rng.integers(1, 4, size=2))
    elif cls == "empty":
        m, k, n = [int(rng.integers(1, 4)) if i != int(rng.integers(0, 3)) else 0 for i in range(3)]
    ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    sa = batch + ((k, m) if ta else (m, k))
    sb = batch + ((n, k) if tb else (k, n))
    return [sa, sb], {"trans_a": ta, "trans_b": tb}


def linear_layout(rng, cls):
    lead = small_shape(rng, int(rng.integers(0, 3)), 1, 4)
    fin, fout = (int(x) for x in rng.integers(1, 7, size=2))
    if cls == "shapes":
        fin = int(rng.choice(EDGE_EXTENTS))
    elif cls == "empty":
        lead = lead + (0,)
    return [lead + (fin,), (fout, fin), (fout,)], {}


def rand_layout(rng, cls):
    shape = (_base_shape(rng, cls) if cls in ("shapes", "empty")
             else small_shape(rng, int(rng.integers(0, 4)), 1, 40))
    return [], {"shape": shape, "seed": int(rng.integers(0, 2 ** 63))}


def bernoulli_layout(rng, cls):
    shapes, params = rand_layout(rng, cls)
    params["p"] = float(rng.choice([0.0, 1.0, 0.5, float(rng.random())]))
    return shapes, params


# --- normalisation and attention ------------------------------------------------------------------

NORM_GROUPS = (1, 31, 33, 257)        # odd group sizes: no power-of-two tree is balanced
ATTENTION_EXTENTS = (1, 3, 16, 33)


def _norm_group(rng, cls) -> int:
    if cls == "shapes" or rng.integers(0, 2):
        return int(rng.choice(NORM_GROUPS))
    return int(rng.integers(1, 10))


def _norm_eps(rng, cls) -> float:
    return float(rng.choice([1e-5, 1e-12, 0.5, 1.0, 1e-30])) if cls == "params" else 1e-5


def layer_norm_layout(rng, cls):
    """x [..., d] (rank 1-4, a few groups), gamma [d], beta [d]."""
    rank = int(rng.integers(1, 5))
    lead = [int(x) for x in rng.integers(1, 3, size=rank - 1)]
    d = _norm_group(rng, cls)
    if cls == "empty":
        axis = int(rng.integers(0, rank))
        if axis == rank - 1:
            d = 0
        else:
            lead[axis] = 0
    return [tuple(lead) + (d,), (d,), (d,)], {"eps": _norm_eps(rng, cls)}


def batch_norm_layout(rng, cls):
    """x [N, C, ...] (rank 2-4) with N x spatial a group size of NORM_GROUPS (or small), gamma and
    beta [C]."""
    rank = int(rng.integers(2, 5))
    c = int(rng.integers(1, 4))
    dims = list(_factor(rng, _norm_group(rng, cls), rank - 1))   # N and the spatial extents
    if cls == "empty":
        if rng.integers(0, 3) == 0:
            c = 0
        else:
            dims[int(rng.integers(0, len(dims)))] = 0
    shape = (dims[0], c) + tuple(dims[1:])
    return [shape, (c,), (c,)], {"eps": _norm_eps(rng, cls)}


def attention_layout(rng, cls):
    """q [B?, Lq, d], k [B?, Lk, d], v [B?, Lk, dv] with extents from ATTENTION_EXTENTS; masks random,
    with fully blocked rows, all open, or None; half the `masks` cases Lq = Lk = 64k + r (past the
    first 64-row tile) under the causal triangle or a random mask; scale 1/sqrt(d) (unrounded)
    unless the class is `params` (samplers.attention_scale: off the float32 grid half the time)."""
    batch = (int(rng.integers(1, 3)),) if rng.integers(0, 2) else ()
    lq, lk, d, dv = (int(rng.choice(ATTENTION_EXTENTS)) for _ in range(4))
    if cls == "empty":
        which = int(rng.integers(0, 5 if batch else 4))
        if which == 4:
            batch = (0,)
        else:
            lq, lk, d, dv = [0 if i == which else x for i, x in enumerate((lq, lk, d, dv))]
    long = cls == "masks" and bool(rng.integers(0, 2))
    if long:            # half the masks: 64k + r query rows and keys, small d and dv
        lq = lk = past_first_tile(rng)
        d, dv = (int(rng.choice(ATTENTION_EXTENTS[:3])) for _ in range(2))
    scores = batch + (lq, lk)
    kind = int(rng.integers(0, 4)) if cls == "masks" else int(rng.integers(0, 2)) * 3
    if long:
        kind = (4, 2, 3)[int(rng.integers(0, 3))]                   # causal, or random
    if kind == 4:
        mask = np.ascontiguousarray(np.broadcast_to(np.tril(np.ones((lq, lk), bool)), scores))
    elif kind == 0:
        mask = None
    elif kind == 1:
        mask = np.ones(scores, dtype=bool)                          # all open
    else:
        mask = rng.random(scores) < 0.6
        if kind == 2 and mask.size:                                 # some fully blocked rows
            mask[rng.random(scores[:-1]) < 0.5] = False
    scale = 1.0 / math.sqrt(d) if d else 1.0
    if cls == "params":
        scale = attention_scale(rng)
    return [batch + (lq, d), batch + (lk, d), batch + (lk, dv)], {"mask": mask, "scale": scale}


# --- the spectral family: packed rfft / irfft and fft_fno -------------------------------------------

# powers of two and odd / prime lengths (cuFFT runs radix kernels on the first, mixed radix or
# Bluestein on the others), 1 and 2 (no interior bin), odd and even (with and without a Nyquist bin)
FFT_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 32, 64)


def _fft_length(rng, cls) -> int:
    return int(rng.choice(FFT_LENGTHS)) if cls != "shapes" else int(rng.choice((1, 2, 97, 128,
                                                                                 251, 256)))


def _fft_batch(rng, cls) -> int:
    return 0 if cls == "empty" else int(rng.integers(1, 4))


def rfft_layout(rng, cls):
    """x (batch, n)."""
    return [(_fft_batch(rng, cls), _fft_length(rng, cls))], {}


def irfft_layout(rng, cls):
    """z (batch, n // 2 + 1, 2) and n."""
    n = _fft_length(rng, cls)
    return [(_fft_batch(rng, cls), n // 2 + 1, 2)], {"n": n}


def fft_fno_layout(rng, cls):
    """x (grid, width) or (batch, grid, width), w_re and w_im (modes, width, width) with modes 1,
    grid // 2 + 1 or between (the first and the last spectral bin kept)."""
    grid = _fft_length(rng, cls)
    width = int(rng.integers(1, 5))
    m = grid // 2 + 1
    modes = int(rng.choice((1, m, int(rng.integers(1, m + 1)))))
    batch = _fft_batch(rng, cls)
    lead = (batch,) if batch != 1 or rng.integers(0, 2) else ()
    return [lead + (grid, width), (modes, width, width), (modes, width, width)], {}


# --- selective_scan -------------------------------------------------------------------------------

def scan_layout(rng, cls):
    """[A, B, X, h0] for X (seq, state): A and B (state,) or, half the time, (seq, state)."""
    seq, state = int(rng.integers(1, 25)), int(rng.integers(1, 7))
    if cls == "shapes":
        if rng.integers(0, 2):
            seq = int(rng.choice(EDGE_EXTENTS))
        else:
            seq, state = int(rng.integers(1, 4)), int(rng.choice(EDGE_EXTENTS))
    elif cls == "empty":
        seq, state = (0, state) if rng.integers(0, 2) else (seq, 0)
    coef = (seq, state) if rng.integers(0, 2) else (state,)
    return [coef, coef, (seq, state), (state,)], {}


# The A regimes the scan's values cycle through (by case index): as drawn, |A| just below 1, just
# above 1 (slow growth: (1 + 2^-8)^4097 < 2^24), negative near -1, a third exact zeros, decay
# (uniform in (-1, 1)), and fast growth (|A| in [1, 1.5]: overflow within a few hundred steps).
SCAN_A_REGIMES = ("drawn", "below-one", "above-one", "negative", "zeros", "decay", "growth")


def scan_values(arrays, cls, index, rng):
    """A finite (the op refuses any other) and shaped by the case's regime; the signed-zero and
    subnormal classes keep their A as drawn (finite already)."""
    a = np.asarray(arrays[0], np.float64)
    a = np.where(np.isfinite(a), a, rng.standard_normal(a.shape))
    regime = "drawn" if cls in ("signed-zero", "subnormal") else \
        SCAN_A_REGIMES[index % len(SCAN_A_REGIMES)]
    unit = rng.random(a.shape)
    sign = np.where(rng.random(a.shape) < 0.5, -1.0, 1.0)
    if regime == "below-one":
        a = 1 - unit * np.exp2(-rng.integers(6, 21, a.shape).astype(np.float64))
    elif regime == "above-one":
        a = 1 + unit * 2.0 ** -8
    elif regime == "negative":
        a = -(1 - unit * 2.0 ** -6)
    elif regime == "zeros":
        a = np.where(unit < 1 / 3, sign * 0.0, a)
    elif regime == "decay":
        a = 2 * unit - 1
    elif regime == "growth":
        a = sign * (1 + 0.5 * unit)
    arrays[0] = a.astype(F32)
    return _scan_in_range(arrays)


SCAN_ADJOINT_MAX = 2.0 ** 400     # largest sum of |A| products the adjoint may carry (float64)
SCAN_STATE_MAX = 2.0 ** 120       # largest sum of |terms| a state may reach (float32 holds 2^128)


def _scan_in_range(arrays):
    """Keep every exact state below 2^120 and the adjoint's coefficient sums below 2^400, so that
    only intermediates can overflow (the derived bound admits any result there), never an exact
    value or a float64 VJP step: a channel whose |A| products grow past that gets |A| clipped to 1,
    and one whose states still grow past 2^120 gets X and h0 scaled by a power of two. Non-finite
    B, X and h0 entries are left alone (they count as 0 here)."""
    a, b, x, h0 = (np.asarray(v, np.float64) for v in arrays)
    seq, state = x.shape
    if x.size == 0:
        return arrays
    rows = a.reshape(seq if a.ndim == 2 else 1, state)
    at = (lambda t: np.abs(rows[t])) if a.ndim == 2 else (lambda t: np.abs(rows[0]))
    with np.errstate(all="ignore"):
        sums, worst = np.ones(state), np.ones(state)
        for t in range(seq - 2, -1, -1):          # S_t = 1 + |A_{t+1}| S_{t+1}
            sums = 1 + at(t + 1) * sums
            worst = np.maximum(worst, sums)
        clip = ~(worst <= SCAN_ADJOINT_MAX)
        rows = np.where(clip, np.clip(rows, -1.0, 1.0), rows)
        fin = lambda v: np.where(np.isfinite(v), np.abs(v), 0.0)
        brows = fin(b).reshape(rows.shape)
        c, top = fin(h0), fin(h0)
        for t in range(seq):
            r = t if a.ndim == 2 else 0
            c = np.abs(rows[r]) * c + brows[r] * fin(x[t])
            top = np.maximum(top, c)
        k = np.where(top >= SCAN_STATE_MAX, np.ceil(np.log2(np.maximum(top, 1.0))) - 119, 0)
    scale = np.exp2(-k)
    return [rows.reshape(a.shape).astype(F32), arrays[1], (x * scale).astype(F32),
            (h0 * scale).astype(F32)]


# --- pooling (max_pool, avg_pool, smooth_max_pool) -----------------------------------------------

POOL_EDGE_EXTENTS = (31, 33, 57, 65)   # odd spatial extents for the "shapes" class
SMOOTH_BETAS = (0.5, -0.5, 1.0, -3.0, 30.0, 1e-3, -2.0 ** -20, 1e4)
SMOOTH_PARAM_BETAS = (0.5, 1e30, -1e30, 2.0 ** -126, 3e38, -7.0)


def _pool_axis(rng, cls, big: bool):
    """(in, k, s, p, d) of one spatial axis: strides up to past the kernel, padding up to k/2,
    dilation 1-3; extents that leave at least one window unless the class asks for none."""
    k = int(rng.integers(1, 5))
    s = int(rng.integers(1, k + 3))
    d = int(rng.choice([1, 1, 2, 3]))
    p = int(rng.integers(0, k // 2 + 1))
    if rng.integers(0, 4) == 0:
        p = k // 2                                           # padding at the limit k/2
    span = d * (k - 1) + 1
    n = int(rng.choice(POOL_EDGE_EXTENTS)) if big else int(rng.integers(max(1, span - 2 * p), 13))
    return n, k, s, p, d


def pool_layout(rng, cls):
    """x ([N,] C, *spatial) with spatial rank 1-3 (now and then 4-8 with extents of 1-3), N absent,
    0, 1 or 2, C 1-3; per-axis kernel, stride, padding and dilation (_pool_axis). "empty" empties
    one of N, C, a spatial extent, or the output (padding past k/2, or a window longer than the
    padded input)."""
    r = int(rng.choice([1, 2, 2, 3])) if rng.integers(0, 8) else int(rng.integers(4, 9))
    big = cls == "shapes" and r <= 2
    axes = [_pool_axis(rng, cls, big and j == r - 1) for j in range(r)]
    if r >= 4:   # small high-rank cases: at most a few thousand cells
        axes = [(min(n, 3), min(k, 2), min(s, 2), min(p, min(k, 2) // 2), 1)
                for n, k, s, p, d in axes]
        axes = [(max(n, k), k, s, p, d) for n, k, s, p, d in axes]
    spatial, k, s, p, d = (list(t) for t in zip(*axes))
    lead = [int(rng.integers(1, 4))]
    batch = int(rng.integers(0, 3))
    if batch:
        lead = [int(rng.integers(1, 3))] + lead
    if cls == "empty":
        which = int(rng.integers(0, 5))
        j = int(rng.integers(0, r))
        if which == 0:
            lead[0] = 0
        elif which == 1:
            lead[-1] = 0
        elif which == 2:
            spatial[j] = 0
        elif which == 3:
            p[j] = k[j] // 2 + 1                             # p > k/2: an empty output
        else:
            spatial[j] = max(d[j] * (k[j] - 1) - 2 * p[j], 0)   # one cell short of a window
    params = {"kernel_size": tuple(k), "stride": tuple(s), "padding": tuple(p),
              "dilation": tuple(d)}
    return [tuple(lead) + tuple(spatial)], params


def smooth_pool_layout(rng, cls):
    """pool_layout with beta: SMOOTH_BETAS, or the extremes of SMOOTH_PARAM_BETAS for "params"."""
    shapes, params = pool_layout(rng, cls)
    betas = SMOOTH_PARAM_BETAS if cls == "params" else SMOOTH_BETAS
    params["beta"] = float(F32(rng.choice(betas)))
    return shapes, params


# --- convolution (conv, conv_transpose) -----------------------------------------------------------

CONV_HIGH_RANKS = (4, 5, 8)          # drawn now and then, with extents of 1 or 2


def _conv_geometry(rng, cls):
    """(rank, batch or None, C_in, C_out, groups, spatial, kernel, stride, padding, dilation)."""
    rank = int(rng.choice((1, 2, 3))) if rng.random() > 0.08 else int(rng.choice(CONV_HIGH_RANKS))
    small = rank > 3
    groups = int(rng.choice((1, 1, 2, 3)))
    c_in, c_out = (groups * int(rng.integers(1, 3)) for _ in range(2))
    if rng.random() < 0.2:                                    # depthwise
        c_in = c_out = groups
    batch = [None, 1, int(rng.integers(2, 4))][int(rng.integers(0, 3))]
    k = tuple(int(rng.integers(1, 3 if small else 4)) for _ in range(rank))
    stride = tuple(int(rng.integers(1, 3 if small else 5)) for _ in range(rank))  # may exceed k
    dilation = tuple(int(rng.integers(1, 3)) for _ in range(rank))
    # padding from 0 up to the limit d (k - 1) (one window of pure padding taps at each edge)
    padding = tuple(int(rng.integers(0, d * (kk - 1) + 1)) for kk, d in zip(k, dilation))
    hi = 3 if small else (9 if rank < 3 else 6)
    spatial = tuple(int(rng.integers(1, hi + 1)) for _ in range(rank))
    if cls == "shapes" and rank == 1:
        spatial = (int(rng.choice(EDGE_EXTENTS[:4])),)
    elif cls == "empty":
        which = int(rng.integers(0, 3))
        if which == 0:
            batch = 0
        elif which == 1:
            c_in, c_out = 0, groups
        else:                                                 # an empty output window
            spatial = tuple(max(1, (d * (kk - 1)) // 2) if kk > 1 else 0
                            for kk, d in zip(k, dilation))
            padding = (0,) * rank
    return rank, batch, c_in, c_out, groups, spatial, k, stride, padding, dilation


def _conv_shapes(rng, cls, transpose: bool):
    rank, batch, c_in, c_out, groups, spatial, k, s, p, d = _conv_geometry(rng, cls)
    lead = () if batch is None else (batch,)
    w = (c_in, c_out // groups) + k if transpose else (c_out, c_in // groups) + k
    shapes = [lead + (c_in,) + spatial, w]
    if rng.random() < 0.75:
        shapes.append((c_out,))
    return shapes, {"stride": s, "padding": p, "dilation": d, "groups": groups}


def conv_layout(rng, cls):
    return _conv_shapes(rng, cls, False)


def conv_transpose_layout(rng, cls):
    return _conv_shapes(rng, cls, True)


# --- the fused cross-entropy loss ------------------------------------------------------------------

def cross_entropy_layout(rng, cls):
    """logits (N, C) with N, C >= 1 and N targets in [0, C): one edge extent on N or on C for
    "shapes"; the "indices" class draws every target the same class, or only 0 and C - 1."""
    if cls == "shapes":
        edge, small = int(rng.choice(EDGE_EXTENTS)), int(rng.integers(1, 4))
        rows, classes = (edge, small) if rng.integers(0, 2) else (small, edge)
    elif cls in ("normal", "cancellation"):
        rows, classes = (int(x) for x in rng.integers(1, 10, size=2))
        if cls == "cancellation":        # a target that can dominate (samplers.confident_logits)
            classes = max(classes, 2)
    else:
        rows, classes = (int(x) for x in rng.integers(1, 13, size=2))
    targets = rng.integers(0, classes, size=rows).astype(np.int64)
    if cls == "indices":
        kind = rng.integers(0, 2)
        targets = (np.full(rows, int(rng.integers(0, classes)), np.int64) if kind == 0 else
                   rng.choice(np.array([0, classes - 1], np.int64), size=rows))
    return [(rows, classes)], {"targets": targets}


# --- bias_gelu ------------------------------------------------------------------------------------

def bias_gelu_layout(rng, cls):
    """x [..., d] (rank 1 to 3) and b [d]: an edge extent on d or on the leading axis for
    "shapes", an empty leading axis or d = 0 for "empty"."""
    if cls == "shapes":
        edge, small = int(rng.choice(EDGE_EXTENTS)), int(rng.integers(1, 4))
        x = (edge, small) if rng.integers(0, 2) else (small, edge)
    elif cls == "empty":
        x = (0, int(rng.integers(1, 5))) if rng.integers(0, 2) else (int(rng.integers(1, 4)), 0)
    else:
        x = small_shape(rng, int(rng.integers(1, 4)), 1, 9 if cls == "normal" else 12)
    return [x, (x[-1],)], {}


# --- attention_heads ------------------------------------------------------------------------------

HEAD_DIMS = (1, 2, 3, 5, 8)


def attention_heads_layout(rng, cls):
    """q, k, v [B, T, H*D]: B 1..2, T from ATTENTION_EXTENTS, H 1..3, D from HEAD_DIMS; causal
    unless the class is `masks` (then either, and half the time T = 64k + r past the first tile);
    an empty B, T or D for "empty"; scale 1/sqrt(D) (unrounded) unless the class is `params`
    (samplers.attention_scale)."""
    b, t = int(rng.integers(1, 3)), int(rng.choice(ATTENTION_EXTENTS))
    h, d = int(rng.integers(1, 4)), int(rng.choice(HEAD_DIMS))
    if cls == "empty":
        which = int(rng.integers(0, 3))
        b, t, d = [0 if i == which else x for i, x in enumerate((b, t, d))]
    causal = bool(rng.integers(0, 2)) if cls == "masks" else True
    if cls == "masks" and rng.integers(0, 2):    # half the masks: 64k + r tokens, small heads
        t, h, d = past_first_tile(rng), int(rng.integers(1, 3)), int(rng.choice(HEAD_DIMS[:3]))
    scale = 1.0 / math.sqrt(d) if d else 1.0
    if cls == "params":
        scale = attention_scale(rng)
    shape = (b, t, h * d)
    return [shape, shape, shape], {"heads": h, "causal": causal, "scale": scale}


# --- add_layer_norm -------------------------------------------------------------------------------

def add_layer_norm_layout(rng, cls):
    """x [..., d], r of x's shape, gamma [d], beta [d]: layer_norm's layout with r as input 1."""
    (x, gamma, beta), params = layer_norm_layout(rng, cls)
    return [x, x, gamma, beta], params


def add_layer_norm_values(arrays, cls, index, rng):
    """normal and shapes, the classes the campaign runs the inner-product identity on
    (conformance/vjp.py): |r| kept within 2^-4 .. 2^4 of |x| elementwise (r's sign kept), so each
    input's step of 2^7 ulps moves the float32 sum x + r exactly. Against a much larger addend the
    step of the smaller one is lost in the sum's rounding, and the central differences see the
    float32 add's staircase (a zero derivative), not the composition's. The other classes and
    the edge set keep addends of any ratio."""
    if cls not in ("normal", "shapes"):
        return arrays
    x, r = (np.asarray(a, np.float64) for a in arrays[:2])
    bound = np.abs(x)
    r = np.copysign(np.clip(np.abs(r), bound / 16, bound * 16), r).astype(F32)
    return [arrays[0], r] + list(arrays[2:])
