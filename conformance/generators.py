"""Seeded input generators: shape/parameter layouts per op over the samplers of samplers.py, the
fixed edge set of edges.py (class "edges", drawn first), and the `Case` every campaign runs. A case
is reproducible from (op, seed, class, case index): never from the capsule's name, so every capsule
of an op (reference.X, native_cuda.X, a plugin's) meets the same cases; edge cases ignore the seed.

Axis parameters: wherever the op takes an axis, about a third of the drawn axes are negative and
about a third of the multi-axis reduce tuples are unsorted (OPS.md allows both; never a repeated
axis, never a bare int where OPS.md asks for a tuple)."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.types import BackendOp as Op

from conformance import edges
from conformance.samplers import (  # noqa: F401  (re-exported: the samplers are part of this API)
    EDGE_EXTENTS, F32, FLT_MAX, SUB_MIN, TINY, edge_shape, empty_shape, mark_terms, rand_mixed,
    rand_near, rand_normal, rand_positive, rand_signed_zero, rand_special, rand_subnormal,
    rand_wide, small_shape, softmax_markers, sum_markers)

EDGES = "edges"                 # the fixed edge set's class: the same cases for every seed
EDGE_SEED = 0                   # the seed every edge stream uses, whatever the campaign's seed
INPUTS, COTANGENT, IDENTITY = "inputs", "cotangent", "identity"    # the streams of one case


@dataclass
class Case:
    """One input of a campaign: array inputs and params as `engine.ops.<op>` takes them."""
    op: Op
    cls: str                                   # generator class that drew it
    inputs: tuple[np.ndarray, ...]
    params: dict
    cotangent: np.ndarray | None = None        # drawn per case, for the VJP check
    seed: int = 0
    index: int = 0
    note: str = ""                             # e.g. "shrunk from case 3"

    @property
    def elements(self) -> int:
        """Total elements of the array inputs; for the random ops, which take none, the elements
        of the requested shape."""
        if self.op in (Op.rand_uniform, Op.bernoulli_mask):
            return math.prod(self.params["shape"])
        return sum(int(np.size(x)) for x in self.inputs)

    @property
    def terms(self) -> int:
        """The largest number of terms one output element sums (0 when the output is empty)."""
        return case_terms(self)

    def summary(self) -> str:
        """Short form for reports: `Tensor[size=..]` per input, params without arrays."""
        ins = ", ".join(f"f32{list(x.shape)}" for x in self.inputs)
        ps = {k: (f"{type(v).__name__}[{getattr(v, 'size', '?')}]" if hasattr(v, "shape") else v)
              for k, v in self.params.items()}
        return f"{self.op.label}({ins}; {ps})"


VALUE_CLASSES = ("normal", "wide", "subnormal", "signed-zero", "special", "near-overflow",
                 "cancellation")
SHAPE_CLASSES = ("shapes", "empty")


@dataclass(frozen=True)
class OpSpec:
    """How to draw cases for one op (cf. PyTorch's OpInfo, kept small)."""
    # the op this spec draws for
    op: Op
    # (rng, cls) -> (input shapes, params); cls decides edge/empty shapes
    layout: Callable
    # extra generator classes beyond the value and shape classes (masks, indices, params)
    extra_classes: tuple[str, ...] = ()
    # whether an empty axis is a valid input for this op
    allows_empty: bool = True
    # the near-overflow centre for this op's inputs (exp overflows near 88.72, not FLT_MAX)
    near_overflow: float = FLT_MAX
    # the input domain: "real", or "positive" (mostly positive values; negatives still appear)
    domain: str = "real"
    # how a cancellation case is built: "pair" (b ~ -a for add, b ~ a for sub), "sum", "none",
    # "norm" (nearly constant groups, beta ~ -xhat gamma), "attention" (near-equal v rows, or
    # near-equal scores over v of both signs)
    cancellation: str = "sum"
    # the wide class's largest exponent: composites whose float32 evaluation squares or multiplies
    # two inputs (sums of squares, scores) overflow beyond 2^64; their wide values stay where the
    # evaluation cannot, and the near-overflow class probes that edge instead
    wide_max_exp: int = 127

    @property
    def classes(self) -> tuple[str, ...]:
        base = VALUE_CLASSES + ("shapes",) + (("empty",) if self.allows_empty else ())
        return base + self.extra_classes


# --- layouts: (rng, cls) -> (shapes, params) ----------------------------------------------------

def _base_shape(rng, cls, rank_lo=0):
    if cls == "shapes":
        return edge_shape(rng, rank_lo)
    if cls == "empty":
        return empty_shape(rng, max(rank_lo, 1))
    if cls in ("normal", "cancellation"):
        return small_shape(rng, int(rng.integers(rank_lo, 5)), 1, 9)
    return small_shape(rng, int(rng.integers(max(rank_lo, 1), 3)), 4, 12)


def unary(rng, cls):
    return [_base_shape(rng, cls)], {}


def binary(rng, cls):
    s = _base_shape(rng, cls)
    return [s, s], {}


def _scale(rng, cls):
    alphas = [0.5, -1.0, 3.0, 0.1, 2.0 ** -100, 1e30, 0.0, -0.0]
    alpha = float(rng.choice(alphas)) if cls == "params" or rng.integers(0, 2) else float(
        F32(rng.standard_normal()))
    return [_base_shape(rng, cls)], {"alpha": alpha}


def _clamp(rng, cls):
    lo, hi = sorted(float(F32(x)) for x in rng.standard_normal(2))
    if cls == "params" and rng.integers(0, 2):
        hi = lo
    return [_base_shape(rng, cls)], {"lo": lo, "hi": hi}


def _safe_log(rng, cls):
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
    return shape, _signed(rng, int(rng.integers(0, len(shape))), len(shape))


def softmax_layout(rng, cls):
    shape, axis = _row_layout(rng, cls)
    return [shape], {"axis": axis}


def masked_softmax_layout(rng, cls):
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
    with fully blocked rows, all open, or None; scale 1/sqrt(d) unless the class is `params`."""
    batch = (int(rng.integers(1, 3)),) if rng.integers(0, 2) else ()
    lq, lk, d, dv = (int(rng.choice(ATTENTION_EXTENTS)) for _ in range(4))
    if cls == "empty":
        which = int(rng.integers(0, 5 if batch else 4))
        if which == 4:
            batch = (0,)
        else:
            lq, lk, d, dv = [0 if i == which else x for i, x in enumerate((lq, lk, d, dv))]
    scores = batch + (lq, lk)
    kind = int(rng.integers(0, 4)) if cls == "masks" else int(rng.integers(0, 2)) * 3
    if kind == 0:
        mask = None
    elif kind == 1:
        mask = np.ones(scores, dtype=bool)                          # all open
    else:
        mask = rng.random(scores) < 0.6
        if kind == 2 and mask.size:                                 # some fully blocked rows
            mask[rng.random(scores[:-1]) < 0.5] = False
    scale = 1.0 / math.sqrt(d) if d else 1.0
    if cls == "params":
        scale = float(rng.choice([1.0, -0.5, 2.0 ** -10, 30.0, 0.0, float(F32(rng.standard_normal()))]))
    return [batch + (lq, d), batch + (lk, d), batch + (lk, dv)], {"mask": mask, "scale": scale}


def _cancel_norm(spec: OpSpec, arrays, rng):
    """Groups nearly constant and far from zero (the mean is most of every value: a one-pass
    variance cancels catastrophically), and beta ~ -xhat gamma for one group so y nearly cancels."""
    x, gamma, beta = arrays
    if x.size == 0:
        return arrays
    if spec.op is Op.layer_norm:
        moved, rows = None, x.reshape(-1, x.shape[-1])
    else:
        moved = np.moveaxis(x, 1, 0)
        rows = moved.reshape(moved.shape[0], -1)
    n_groups = rows.shape[0]
    centre = rng.choice([-1.0, 1.0], size=(n_groups, 1)) * np.exp2(rng.integers(2, 17, (n_groups, 1)))
    spread = centre * np.exp2(-rng.integers(4, 15, (n_groups, 1)).astype(np.float64))
    new_rows = (centre + spread * rng.standard_normal(rows.shape)).astype(F32)
    r64 = new_rows.astype(np.float64)
    dev = r64 - r64.mean(axis=1, keepdims=True)
    xhat = dev / np.sqrt((dev * dev).mean(axis=1, keepdims=True) + float(F32(1e-5)))
    g64 = gamma.astype(np.float64)
    if spec.op is Op.layer_norm:
        x = new_rows.reshape(x.shape)
        pick = int(rng.integers(0, n_groups))
        beta = (-(xhat[pick] * g64)).astype(F32)
    else:
        x = np.moveaxis(new_rows.reshape(moved.shape), 0, 1)
        pick = rng.integers(0, rows.shape[1], size=n_groups)
        beta = (-(xhat[np.arange(n_groups), pick] * g64)).astype(F32)
    return [x, gamma, beta]


def _cancel_attention(spec: OpSpec, arrays, rng):
    """Either v's rows nearly equal (dP_ij ~ c_i: dS cancels), or near-equal scores (q small) over v
    rows of both signs (out cancels)."""
    q, k, v = arrays
    if v.size == 0:
        return arrays
    if rng.integers(0, 2):
        base = v[..., :1, :].astype(np.float64)
        v = (base * (1 + 2.0 ** -18 * rng.standard_normal(v.shape))).astype(F32)
    else:
        q = (q * F32(2.0 ** -12)).astype(F32)
        sign = np.where(np.arange(v.shape[-2]) % 2 == 0, 1.0, -1.0)[:, None]
        base = v[..., :1, :].astype(np.float64)
        v = (sign * base * (1 + 2.0 ** -10 * rng.standard_normal(v.shape))).astype(F32)
    return [q, k, v]


_EXP_EDGE = 88.72283935546875     # exp overflows just above, and underflows below -103.97
_SPECS = [
    OpSpec(Op.add, binary, cancellation="pair"), OpSpec(Op.sub, binary, cancellation="pair"),
    OpSpec(Op.mul, binary, cancellation="none"), OpSpec(Op.max, binary, cancellation="pair"),
    OpSpec(Op.min, binary, cancellation="pair"),
    OpSpec(Op.scale, _scale, ("params",), cancellation="none"),
    OpSpec(Op.abs, unary, cancellation="none"),
    OpSpec(Op.sqrt, unary, domain="positive", cancellation="none"),
    OpSpec(Op.clamp, _clamp, ("params",), cancellation="none"),
    OpSpec(Op.relu, unary, cancellation="none"),
    OpSpec(Op.gelu, unary, near_overflow=_EXP_EDGE / 2, cancellation="none"),
    OpSpec(Op.sigmoid, unary, near_overflow=_EXP_EDGE, cancellation="none"),
    OpSpec(Op.tanh, unary, near_overflow=_EXP_EDGE / 2, cancellation="none"),
    OpSpec(Op.softplus, unary, near_overflow=_EXP_EDGE, cancellation="none"),
    OpSpec(Op.exp, unary, near_overflow=_EXP_EDGE, cancellation="none"),
    OpSpec(Op.log, unary, domain="positive", cancellation="none"),
    OpSpec(Op.sin, unary, cancellation="none"), OpSpec(Op.cos, unary, cancellation="none"),
    OpSpec(Op.inv, unary, near_overflow=2.0 ** 126, cancellation="none"),
    OpSpec(Op.safe_log, _safe_log, ("params",), domain="positive", cancellation="none"),
    OpSpec(Op.softmax, softmax_layout), OpSpec(Op.log_softmax, softmax_layout),
    OpSpec(Op.hard_masked_softmax, masked_softmax_layout, ("masks",)),
    OpSpec(Op.reduce_sum, reduce_layout), OpSpec(Op.reduce_mean, reduce_layout),
    OpSpec(Op.mse_loss, mse_layout, cancellation="pair"),
    OpSpec(Op.reshape, reshape_layout, cancellation="none"),
    OpSpec(Op.permute, permute_layout, cancellation="none"),
    OpSpec(Op.broadcast, broadcast_layout, cancellation="none"),
    OpSpec(Op.concat, concat_layout, cancellation="none"),
    OpSpec(Op.slice, slice_layout, cancellation="none"),
    OpSpec(Op.gather, gather_layout, ("indices",), cancellation="none"),
    OpSpec(Op.scatter_add, scatter_layout, ("indices",)),
    OpSpec(Op.matmul, matmul_layout), OpSpec(Op.linear, linear_layout),
    # the float32 two-pass statistics overflow when n (x - mu)^2 reaches 2^128: 2^60 is that edge for
    # groups of about 256; scores overflow when d |q||k| does: 2^62 is the edge for d of 16
    OpSpec(Op.layer_norm, layer_norm_layout, ("params",), near_overflow=2.0 ** 60,
           cancellation="norm", wide_max_exp=57),
    OpSpec(Op.batch_norm, batch_norm_layout, ("params",), near_overflow=2.0 ** 60,
           cancellation="norm", wide_max_exp=57),
    OpSpec(Op.scaled_dot_product_attention, attention_layout, ("masks", "params"),
           near_overflow=2.0 ** 62, cancellation="attention", wide_max_exp=57),
]
OP_SPECS: dict[Op, OpSpec] = {s.op: s for s in _SPECS}
# Random ops take no array inputs: only their shapes and parameters vary.
OP_SPECS[Op.rand_uniform] = OpSpec(Op.rand_uniform, rand_layout, cancellation="none")
OP_SPECS[Op.bernoulli_mask] = OpSpec(Op.bernoulli_mask, bernoulli_layout, ("params",),
                                     cancellation="none")


def classes_for(op: Op) -> tuple[str, ...]:
    """The op's generator classes in campaign order: the fixed edge set first, then the seeded
    classes."""
    spec = OP_SPECS[op]
    if op in (Op.rand_uniform, Op.bernoulli_mask):
        return (EDGES, "normal", "shapes", "empty") + spec.extra_classes
    return (EDGES,) + spec.classes


def class_size(op: Op, cls: str, cases_per_class: int) -> int:
    """Cases a campaign draws from `cls`: the whole fixed edge set for "edges" (whatever
    --cases says), `cases_per_class` for every seeded class."""
    return len(edges.edge_set(op)) if cls == EDGES else int(cases_per_class)


def _sampler(spec: OpSpec, cls: str, rng):
    if cls == "wide":
        draw = rand_wide(rng, spec.wide_max_exp)
    elif cls == "subnormal":
        draw = rand_subnormal(rng)
    elif cls == "signed-zero":
        draw = rand_signed_zero(rng)
    elif cls == "special":
        return rand_special(rng)          # negatives stay: the domain's NaNs are part of it
    elif cls == "near-overflow":
        draw = rand_near(rng, spec.near_overflow)
    else:
        draw = rand_normal(rng)
    return rand_positive(draw) if spec.domain == "positive" and rng.random() < 0.85 else draw


def _cancel(spec: OpSpec, arrays: list[np.ndarray], rng) -> list[np.ndarray]:
    """Cancellation-prone values: pairs that nearly cancel, or sums of large opposite terms."""
    if spec.cancellation == "pair" and len(arrays) >= 2:
        a = arrays[0]
        ulps = rng.integers(-4, 5, size=a.shape).astype(np.float64)
        near = (a.astype(np.float64) * (1 + ulps * 2.0 ** -23)).astype(F32)
        sign = F32(-1) if spec.op is Op.add else F32(1)
        arrays[1] = (sign * near).astype(F32)
        return arrays
    if spec.cancellation == "norm":
        return _cancel_norm(spec, arrays, rng)
    if spec.cancellation == "attention":
        return _cancel_attention(spec, arrays, rng)
    if spec.cancellation == "sum":
        out = []
        for a in arrays:
            flat = a.reshape(-1).astype(np.float64)
            big = rng.standard_normal(flat.size) * 2.0 ** 20
            half = flat.size // 2
            big[half: 2 * half] = -big[:half]       # exact opposites: the big terms cancel
            out.append((big + flat).astype(F32).reshape(a.shape))
        return out
    return arrays


def case_rng(op: Op, seed: int, cls: str, index: int, stream: str = INPUTS) -> np.random.Generator:
    """The generator of one stream of case (op, seed, cls, index): stable across processes and
    Python versions (crc32, never hash()). Edge cases use EDGE_SEED whatever `seed` is. Streams:
    INPUTS (layout and values), COTANGENT (the VJP's cotangent), IDENTITY (the inner-product
    identity's perturbation), so drawing one never shifts another."""
    seed = EDGE_SEED if cls == EDGES else int(seed)
    key = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(op.label.encode()),
           zlib.crc32(cls.encode()), int(index), zlib.crc32(stream.encode())]
    return np.random.default_rng(key)


def identity_rng(op: Op, seed: int, cls: str, index: int) -> np.random.Generator:
    """The stream of the inner-product identity's perturbation for case (op, seed, cls, index)."""
    return case_rng(op, seed, cls, index, IDENTITY)


def draw_case(op: Op, seed: int, cls: str, index: int) -> Case:
    """The inputs and params of case (op, seed, cls, index); the cotangent comes from
    `cotangent_for` once the output shape is known."""
    spec = OP_SPECS[op]
    rng = case_rng(op, seed, cls, index)
    if cls == EDGES:
        arrays, params = _draw_edge(spec, edges.edge(op, index), rng)
    else:
        shapes, params = spec.layout(rng, cls)
        draw = _sampler(spec, cls, rng)
        arrays = [draw(s) for s in shapes]
        if cls == "cancellation":
            arrays = _cancel(spec, arrays, rng)
    # np.array, not ascontiguousarray: the latter turns rank-0 inputs into rank 1
    return Case(op, cls, tuple(np.array(a, dtype=F32, order="C") for a in arrays), params,
                seed=seed, index=index)


def _draw_edge(spec: OpSpec, edge: edges.Edge, rng) -> tuple[list[np.ndarray], dict]:
    """Arrays and params of one fixed edge case (see edges.py for the fill kinds)."""
    params = dict(edge.params)
    if edge.mask:
        params["mask"] = edges.draw_mask(edge.mask, edge.mask_shape, edge.mask_axis, rng)
    if edge.indices:
        axis = params["axis"] % len(edge.shapes[0])
        params["indices"] = edges.draw_indices(edge.indices, edge.n_indices,
                                               edge.shapes[0][axis], rng)
    if edge.fill == edges.MIXED:
        draw = rand_mixed(rng, spec.near_overflow, spec.wide_max_exp,
                          0.85 if spec.domain == "positive" else 0.0)
    else:
        draw = rand_normal(rng)
    arrays = [draw(s) for s in edge.shapes]
    if edge.fill in (edges.SUMS, edges.SOFTMAX) and arrays and edge.marked:
        n = math.prod(edge.shapes[0][a] for a in edge.marked)
        marker = sum_markers(rng, n) if edge.fill == edges.SUMS else softmax_markers(n)
        arrays[0] = mark_terms(arrays[0], edge.marked, marker)
    return arrays, params


def draw_cotangent(rng, shape) -> np.ndarray:
    """Cotangents are well-scaled normals with some exact zeros: underflow inside a VJP is
    exercised through the inputs, not through denormal cotangents."""
    g = rng.standard_normal(shape).astype(F32)
    return np.where(rng.random(shape) < 0.05, F32(0.0), g).astype(F32)


def cotangent_for(op: Op, seed: int, cls: str, index: int, shape) -> np.ndarray:
    """The cotangent of case (op, seed, cls, index): its own stream, so drawing it never changes
    the inputs."""
    return draw_cotangent(case_rng(op, seed, cls, index, COTANGENT), tuple(shape))


# --- case sizes: what the campaign records as its size distribution ------------------------------

def _output_size(case: Case) -> int:
    op, xs, p = case.op, case.inputs, case.params
    if op in (Op.rand_uniform, Op.bernoulli_mask, Op.broadcast, Op.reshape):
        return math.prod(p["shape"])
    if op is Op.concat:
        return sum(x.size for x in xs)
    if op is Op.slice:
        a = xs[0]
        ax = p["axis"] % a.ndim
        return a.size // a.shape[ax] * (p["stop"] - p["start"]) if a.shape[ax] else 0
    if op is Op.gather:
        a = xs[0]
        ax = p["axis"] % a.ndim
        return math.prod(a.shape[:ax] + a.shape[ax + 1:]) * len(p["indices"])
    return xs[0].size if xs else 0


def _reduced_axes(a: np.ndarray, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(a.ndim))
    return tuple(sorted({int(x) % a.ndim for x in ((axes,) if isinstance(axes, int) else axes)}))


def case_terms(case: Case) -> int:
    """The largest number of terms one output element of `case` sums: the reduced extent
    (reductions; the participating entries of the fullest row for hard_masked_softmax), the row
    or group length (softmax family, norms), K (matmul), in + 1 (linear, the bias included),
    max(d, keys) (attention: the longer of the score sums and the output sum over the
    participating keys of the fullest query row), every element (mse_loss), 1 plus the largest
    index multiplicity (scatter_add), and 1 for elementwise and data movement. 0 when the output
    is empty or no term takes part."""
    op, xs, p = case.op, case.inputs, case.params
    if op in (Op.reduce_sum, Op.reduce_mean):
        a = xs[0]
        red = _reduced_axes(a, p.get("axes"))
        kept = math.prod(a.shape[d] for d in range(a.ndim) if d not in red)
        return math.prod(a.shape[d] for d in red) if kept else 0
    if op in (Op.softmax, Op.log_softmax, Op.hard_masked_softmax):
        a = xs[0]
        if a.size == 0:
            return 0
        if op is Op.hard_masked_softmax:
            return int(np.asarray(p["mask"]).sum(axis=p.get("axis", -1)).max())
        return a.shape[p.get("axis", -1) % a.ndim]
    if op is Op.mse_loss:
        return xs[0].size
    if op is Op.matmul:
        a, b = xs
        k, m = (a.shape[-2], a.shape[-1]) if p.get("trans_a") else (a.shape[-1], a.shape[-2])
        n = b.shape[-2] if p.get("trans_b") else b.shape[-1]
        return k if math.prod(a.shape[:-2]) * m * n else 0
    if op is Op.linear:
        x, w, _ = xs
        return w.shape[1] + 1 if math.prod(x.shape[:-1]) * w.shape[0] else 0
    if op is Op.layer_norm:
        return xs[0].shape[-1] if xs[0].size else 0
    if op is Op.batch_norm:
        x = xs[0]
        return x.size // x.shape[1] if x.size else 0
    if op is Op.scaled_dot_product_attention:
        q, k, v = xs
        mask = p.get("mask")
        keys = k.shape[-2] if mask is None or not np.size(mask) else \
            int(np.asarray(mask).sum(axis=-1).max())
        out = math.prod(q.shape[:-1]) * v.shape[-1]
        return max(q.shape[-1], keys) if out and keys else 0
    if op is Op.scatter_add:
        base, idx = xs[0], np.asarray(p["indices"])
        if base.size == 0:
            return 0
        return 1 + (int(np.bincount(idx).max()) if idx.size else 0)
    return 1 if _output_size(case) else 0
