"""Seeded cases: the `Case` every campaign runs, drawn from each op's record (conformance/families/:
its layout, value domain, cancellation and value shaping) over the samplers of samplers.py, and
the fixed edge set its record builds (edges.py; class "edges", drawn first). A case is
reproducible from (op, seed, class, case index): never from the capsule's name, so every capsule
of an op (reference.X, native_cuda.X, a plugin's) meets the same cases; edge cases ignore the
seed."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from conformance import edges, exact_cases
from conformance.families import OP_SPECS
from conformance.families.spec import OpSpec
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
    op: object                                 # the op (engine.types.BackendOp, RuntimeEntry)
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


@lru_cache(maxsize=None)
def edge_set(op) -> tuple[edges.Edge, ...]:
    """The op's fixed edge cases (its record's builder), smallest first."""
    spec = OP_SPECS[op]
    return edges.build(spec.edges, spec.takes_inputs)


def edge(op, index: int) -> edges.Edge:
    cases = edge_set(op)
    if not 0 <= index < len(cases):
        raise edges.EdgeIndexError(
            f"edge case {index} of op `{op.label}` does not exist: its fixed edge set has "
            f"{len(cases)} cases; ask generators.class_size(op, 'edges', ...) for the count")
    return cases[index]


def edge_elements(op, index: int) -> int:
    """Case.elements of edge case `index` without drawing it: the inputs' elements, or for the
    random ops the requested shape's."""
    e = edge(op, index)
    return e.elements if OP_SPECS[op].takes_inputs else math.prod(dict(e.params)["shape"])


def classes_for(op) -> tuple[str, ...]:
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


def class_size(op, cls: str, cases_per_class: int) -> int:
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
    """Cancellation-prone values, as the op's record builds them (OpSpec.cancellation: pairs that
    nearly cancel, sums of large opposite terms, nearly constant groups, ...), or the drawn
    values where it builds none."""
    return arrays if spec.cancellation is None else spec.cancellation(arrays, rng)


def case_rng(op, seed: int, cls: str, index: int, stream: str = INPUTS) -> np.random.Generator:
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


def identity_rng(op, seed: int, cls: str, index: int) -> np.random.Generator:
    """The stream of the inner-product identity's perturbation for case (op, seed, cls, index)."""
    return case_rng(op, seed, cls, index, IDENTITY)


def draw_case(op, seed: int, cls: str, index: int) -> Case:
    """The inputs and params of case (op, seed, cls, index); the cotangent comes from
    `cotangent_for` once the output shape is known."""
    return _draw(op, seed, cls, index, sibling=False)


def draw_sibling(op, seed: int, cls: str, index: int) -> Case:
    """The sibling of case (op, seed, cls, index): its shapes, params and input offsets, values
    drawn the same way from the SIBLING stream (the random ops, which take no values: another
    seed). The campaign calls the kernel on it right after the case itself, or right before
    (campaign.campaign_plan), so a kernel that keeps part of an earlier call's result (an output
    cached by shape, a workspace only partly rewritten) meets new values at a shape it has just
    seen; the repeat with identical inputs cannot tell such a kernel from a correct one."""
    return _draw(op, seed, cls, index, sibling=True)


def sibling_cotangent(op, seed: int, cls: str, index: int, shape) -> np.ndarray:
    """The sibling's cotangent: its own stream, so a VJP cached by shape meets a new one too."""
    return draw_cotangent(case_rng(op, seed, cls, index, SIBLING_COTANGENT), tuple(shape))


def misaligned_offsets(index: int, count: int) -> tuple[int, ...]:
    """The byte offsets of a misaligned case's inputs: OFFSETS in turn, starting at the case's
    index, so every offset meets every input position within three cases."""
    return tuple(OFFSETS[(index + j) % len(OFFSETS)] for j in range(count))


def _draw(op, seed: int, cls: str, index: int, sibling: bool) -> Case:
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


def cotangent_for(op, seed: int, cls: str, index: int, shape) -> np.ndarray:
    """The cotangent of case (op, seed, cls, index): its own stream, so drawing it never changes
    the inputs."""
    return draw_cotangent(case_rng(op, seed, cls, index, COTANGENT), tuple(shape))


def case_terms(case: Case) -> int:
    """The largest number of terms one output element of `case` sums, as the op's record counts
    them (OpSpec.terms): 0 when the output is empty or no term takes part."""
    return OP_SPECS[case.op].terms(case)
