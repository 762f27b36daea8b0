"""Seeded cases: the `Case` every campaign runs, drawn from each op's record in op_db.py (its
layout from layouts.py, its value domain and cancellation kind) over the samplers of samplers.py,
and the fixed edge set of edges.py (class "edges", drawn first). A case is reproducible from (op,
seed, class, case index): never from the capsule's name, so every capsule of an op (reference.X,
native_cuda.X, a plugin's) meets the same cases; edge cases ignore the seed."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.types import BackendOp as Op, RuntimeEntry as Entry

from conformance import edges, exact_cases
from conformance.op_db import OP_SPECS, OpSpec
from conformance.misalign import OFFSETS
from conformance.samplers import (F32, cycle_specials, mark_terms, nan_row, rand_mixed,
                                  rand_near, rand_normal, rand_positive, rand_signed_zero,
                                  rand_special, rand_subnormal, rand_wide, softmax_markers,
                                  sum_markers)

EDGES = "edges"                 # the fixed edge set's class: the same cases for every seed
EDGE_SEED = 0                   # the seed every edge stream uses, whatever the campaign's seed
INPUTS, COTANGENT, IDENTITY = "inputs", "cotangent", "identity"    # the streams of one case
SIBLING, SIBLING_COTANGENT = "sibling", "sibling-cotangent"       # its sibling's values
MISALIGNED = "misaligned"       # the class whose inputs sit at OFFSETS bytes past aligned memory


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
    # byte offset of each input from an aligned allocation (class "misaligned"; see
    # conformance/misalign.py), or None: each input a fresh aligned copy
    offsets: tuple[int, ...] | None = None

    @property
    def elements(self) -> int:
        """Total elements of the array inputs; for the random ops, which take none, the elements
        of the requested shape."""
        if not OP_SPECS[self.op].takes_inputs:
            return math.prod(self.params["shape"])
        return sum(int(np.size(x)) for x in self.inputs)

    @property
    def terms(self) -> int:
        """The largest number of terms one output element sums (0 when the output is empty)."""
        return case_terms(self)

    def summary(self) -> str:
        """Short form for reports: `Tensor[size=..]` per input, params without arrays."""
        ins = ", ".join(f"f32{list(x.shape)}" for x in self.inputs)
        if self.offsets is not None:
            ins = ", ".join(f"f32{list(x.shape)}@+{o}B" for x, o in zip(self.inputs, self.offsets))
        ps = {k: (f"{type(v).__name__}[{getattr(v, 'size', '?')}]" if hasattr(v, "shape") else v)
              for k, v in self.params.items()}
        return f"{self.op.label}({ins}; {ps})"


VALUE_CLASSES = ("normal", "wide", "subnormal", "signed-zero", "special", "near-overflow",
                 "cancellation")
SHAPE_CLASSES = ("shapes", "empty")


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


def _cancel_add_norm(arrays, rng):
    """add_layer_norm: layer_norm's cancelling groups for the sum s = x + r, split as a random r
    (up to 8 times the group's centre, so the add itself cancels too) and x = float32(s - r): the
    float32 sum moves by a few of the centre's ulps, far under the spread, and stays nearly
    constant per row; beta ~ -xhat gamma at that sum for one group."""
    x, r, gamma, beta = arrays
    if x.size == 0:
        return arrays
    target, gamma, _ = _cancel_norm(OP_SPECS[Op.layer_norm], [x, gamma, beta], rng)
    rows = target.reshape(-1, x.shape[-1]).astype(np.float64)
    centre = np.abs(rows).max(axis=1, keepdims=True)
    scale = centre * np.exp2(rng.integers(-3, 4, (rows.shape[0], 1)).astype(np.float64))
    r_rows = (scale * rng.standard_normal(rows.shape)).astype(F32)
    x_rows = (rows - r_rows).astype(F32)
    s = (x_rows + r_rows).astype(np.float64)
    dev = s - s.mean(axis=1, keepdims=True)
    xhat = dev / np.sqrt((dev * dev).mean(axis=1, keepdims=True) + float(F32(1e-5)))
    pick = int(rng.integers(0, rows.shape[0]))
    beta = (-(xhat[pick] * gamma.astype(np.float64))).astype(F32)
    return [x_rows.reshape(x.shape), r_rows.reshape(x.shape), gamma, beta]


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


@lru_cache(maxsize=None)
def edge_set(op: Op) -> tuple[edges.Edge, ...]:
    """The op's fixed edge cases (its record names their family), smallest first."""
    return edges.build(OP_SPECS[op].edges, op)


def edge(op: Op, index: int) -> edges.Edge:
    cases = edge_set(op)
    if not 0 <= index < len(cases):
        raise edges.EdgeIndexError(
            f"edge case {index} of op `{op.label}` does not exist: its fixed edge set has "
            f"{len(cases)} cases; ask generators.class_size(op, 'edges', ...) for the count")
    return cases[index]


def edge_elements(op: Op, index: int) -> int:
    """Case.elements of edge case `index` without drawing it: the inputs' elements, or for the
    random ops the requested shape's."""
    e = edge(op, index)
    return e.elements if OP_SPECS[op].takes_inputs else math.prod(dict(e.params)["shape"])


def classes_for(op: Op) -> tuple[str, ...]:
    """The op's generator classes in campaign order: the fixed edge set first, then the seeded
    classes."""
    spec = OP_SPECS[op]
    if not spec.takes_inputs:       # no values to draw: one value class, and the shapes
        return (EDGES, "normal", "shapes", "empty") + spec.extra_classes
    shapes = ("shapes",) + (("empty",) if spec.allows_empty else ())
    # a record may leave out a value class outside its op's domain, with the reason, as a Skip
    # of scope "class:<name>" (the FFT ops take finite values only: no "special" class)
    left_out = {s.scope.removeprefix("class:") for s in spec.skips if s.scope.startswith("class:")}
    # the exact-sums class (exact_cases.py) for ops whose records give their term structure
    exact = (exact_cases.EXACT_SUMS,) if spec.exact_sums is not None else ()
    return tuple(c for c in (EDGES,) + VALUE_CLASSES + shapes + spec.extra_classes + exact +
                 (MISALIGNED,)
                 if c not in left_out)


def class_size(op: Op, cls: str, cases_per_class: int) -> int:
    """Cases a campaign draws from `cls`: the whole fixed edge set for "edges" (whatever
    --cases says), `cases_per_class` for every seeded class."""
    return len(edge_set(op)) if cls == EDGES else int(cases_per_class)


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
        if spec.op is Entry.add_layer_norm:
            return _cancel_add_norm(arrays, rng)
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
    Python versions (crc32, never hash()). Edge cases use EDGE_SEED xor `seed` (EDGE_SEED at seed 0). Streams:
    INPUTS (layout and values), COTANGENT (the VJP's cotangent), IDENTITY (the inner-product
    identity's perturbation), so drawing one never shifts another."""
    # The edge set's shapes are fixed; its values come from the run's seed too (EDGE_SEED at seed
    # 0, the default), so a kernel cannot have met them before a run with a seed it never saw.
    seed = EDGE_SEED ^ int(seed) if cls == EDGES else int(seed)
    key = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(op.label.encode()),
           zlib.crc32(cls.encode()), int(index), zlib.crc32(stream.encode())]
    return np.random.default_rng(key)


def identity_rng(op: Op, seed: int, cls: str, index: int) -> np.random.Generator:
    """The stream of the inner-product identity's perturbation for case (op, seed, cls, index)."""
    return case_rng(op, seed, cls, index, IDENTITY)


def draw_case(op: Op, seed: int, cls: str, index: int) -> Case:
    """The inputs and params of case (op, seed, cls, index); the cotangent comes from
    `cotangent_for` once the output shape is known."""
    return _draw(op, seed, cls, index, sibling=False)


def draw_sibling(op: Op, seed: int, cls: str, index: int) -> Case:
    """The sibling of case (op, seed, cls, index): its shapes, params and input offsets, values
    drawn the same way from the SIBLING stream (the random ops, which take no values: another
    seed). The campaign calls the kernel on it right after the case itself, or right before
    (campaign.campaign_plan), so a kernel that keeps part of an earlier call's result (an output
    cached by shape, a workspace only partly rewritten) meets new values at a shape it has just
    seen; the repeat with identical inputs cannot tell such a kernel from a correct one."""
    return _draw(op, seed, cls, index, sibling=True)


def sibling_cotangent(op: Op, seed: int, cls: str, index: int, shape) -> np.ndarray:
    """The sibling's cotangent: its own stream, so a VJP cached by shape meets a new one too."""
    return draw_cotangent(case_rng(op, seed, cls, index, SIBLING_COTANGENT), tuple(shape))


def misaligned_offsets(index: int, count: int) -> tuple[int, ...]:
    """The byte offsets of a misaligned case's inputs: OFFSETS in turn, starting at the case's
    index, so every offset meets every input position within three cases."""
    return tuple(OFFSETS[(index + j) % len(OFFSETS)] for j in range(count))


def _draw(op: Op, seed: int, cls: str, index: int, sibling: bool) -> Case:
    spec = OP_SPECS[op]
    rng = case_rng(op, seed, cls, index)
    # the values' stream: the case's own (drawn after its layout, as always), or the sibling's
    vrng = case_rng(op, seed, cls, index, SIBLING) if sibling else rng
    offsets = None
    if cls == EDGES:
        arrays, params = _draw_edge(spec, edge(op, index), rng, vrng)
    elif cls == MISALIGNED:    # the shapes class's extents (vector paths and tails), normals
        shapes, params = spec.layout(rng, "shapes")
        arrays = [_sampler(spec, "normal", vrng)(s) for s in shapes]
        offsets = misaligned_offsets(index, len(arrays))
    elif cls == exact_cases.EXACT_SUMS:
        arrays, params = exact_cases.draw(spec.exact_sums, rng, index,
                                          vrng if sibling else None)
    else:
        shapes, params = spec.layout(rng, cls)
        draw = _sampler(spec, cls, vrng)
        arrays = [draw(s) for s in shapes]
        if cls == "cancellation":
            arrays = _cancel(spec, arrays, vrng)
    if sibling and not spec.takes_inputs:   # a random op's values are its seed
        params = {**params, "seed": int(vrng.integers(0, 2 ** 63))}
    if spec.values is not None:     # the op's own value shaping (OpSpec.values), drawn last
        arrays = spec.values(list(arrays), cls, index, vrng)
    if spec.param_values is not None:     # shaping that reads the params (OpSpec.param_values)
        arrays = spec.param_values(list(arrays), params, cls, index, vrng)
    note = f"sibling of {cls}[{index}]: its shapes and params, new values" if sibling else ""
    # np.array, not ascontiguousarray: the latter turns rank-0 inputs into rank 1
    return Case(op, cls, tuple(np.array(a, dtype=F32, order="C") for a in arrays), params,
                seed=seed, index=index, note=note, offsets=offsets)


def _draw_edge(spec: OpSpec, edge: edges.Edge, rng, vrng) -> tuple[list[np.ndarray], dict]:
    """Arrays and params of one fixed edge case (see edges.py for the fill kinds): masks and
    indices from `rng`, values from `vrng` (the same generator, but for a sibling)."""
    params = dict(edge.params)
    if edge.mask:
        params["mask"] = edges.draw_mask(edge.mask, edge.mask_shape, edge.mask_axis, rng)
    if edge.indices and edge.index_param == "targets":   # one class per row of input 0
        params["targets"] = edges.draw_indices(edge.indices, edge.n_indices,
                                               edge.shapes[0][-1], rng)
    elif edge.indices:
        axis = params["axis"] % len(edge.shapes[0])
        params["indices"] = edges.draw_indices(edge.indices, edge.n_indices,
                                               edge.shapes[0][axis], rng)
    if edge.fill == edges.MIXED:
        draw = rand_mixed(vrng, spec.near_overflow, spec.wide_max_exp,
                          0.85 if spec.domain == "positive" else 0.0)
    elif edge.fill == edges.TIES:
        def draw(shape):
            return edges.draw_ties(vrng, shape)
    else:
        draw = rand_normal(vrng)
    arrays = [draw(s) for s in edge.shapes]
    if edge.fill == edges.SPECIALS and arrays:
        arrays[0] = cycle_specials(arrays[0])
    if edge.fill in (edges.SUMS, edges.SOFTMAX) and arrays and edge.marked:
        n = math.prod(edge.shapes[0][a] for a in edge.marked)
        marker = sum_markers(vrng, n) if edge.fill == edges.SUMS else softmax_markers(n)
        arrays[0] = mark_terms(arrays[0], edge.marked, marker)
    if edge.nan_row and arrays:
        arrays[0] = nan_row(arrays[0], edge.marked, vrng)
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
    if op.label == "cross_entropy":
        return 1
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
    if op is Op.mse_loss or op.label == "cross_entropy":   # the loss reads every element
        return xs[0].size
    if op is Op.matmul:
        a, b = xs
        k, m = (a.shape[-2], a.shape[-1]) if p.get("trans_a") else (a.shape[-1], a.shape[-2])
        n = b.shape[-2] if p.get("trans_b") else b.shape[-1]
        return k if math.prod(a.shape[:-2]) * m * n else 0
    if op is Op.linear:
        x, w, _ = xs
        return w.shape[1] + 1 if math.prod(x.shape[:-1]) * w.shape[0] else 0
    if op in (Op.layer_norm, Entry.add_layer_norm):
        return xs[0].shape[-1] if xs[0].size else 0
    if op is Op.batch_norm:
        x = xs[0]
        return x.size // x.shape[1] if x.size else 0
    if op is Entry.attention_heads:   # causal: the last query row's T keys
        q = xs[0]
        d = q.shape[-1] // int(p["heads"]) if q.size else 0
        return max(d, q.shape[1]) if q.size and d else 0
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
