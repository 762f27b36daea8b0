"""The random family (engine/ops/random.py): rand_uniform and bernoulli_mask. They take no array
inputs: only their shapes, seeds and parameters vary.

Edge set (23 cases per op): the elementwise shapes as the requested shape, sorted by requested
elements; seeds cycle RANDOM_SEEDS (the key's high word included); bernoulli p cycles
BERNOULLI_P."""
from __future__ import annotations

import math

from conformance.edges import NORMAL, Edge, cycle, flat_shapes
from conformance.families.spec import COUNT, DIMS, OpSpec, one_term_of, param
from conformance.layouts import base_shape
from conformance.samplers import small_shape
from engine import ops
from engine.errors import ParameterTypeError, ParameterValueError, UInt32OverflowError
from engine.types import BackendOp as Op

GROUP = "random"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

def rand_layout(rng, cls):
    shape = (base_shape(rng, cls) if cls in ("shapes", "empty")
             else small_shape(rng, int(rng.integers(0, 4)), 1, 40))
    return [], {"shape": shape, "seed": int(rng.integers(0, 2 ** 63))}


def bernoulli_layout(rng, cls):
    shapes, params = rand_layout(rng, cls)
    params["p"] = float(rng.choice([0.0, 1.0, 0.5, float(rng.random())]))
    return shapes, params


# --- the fixed edge set ---------------------------------------------------------------------------

RANDOM_SEEDS = (0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 2 ** 64 - 1, 0x9E3779B97F4A7C15)
BERNOULLI_P = (0.0, 1.0, 0.5, 2.0 ** -24, 1.0 - 2.0 ** -24, 0.3)


def _edges(bernoulli: bool):
    def build() -> list[Edge]:
        out = []
        for i, s in enumerate(flat_shapes()):
            params = [("shape", s), ("seed", cycle(RANDOM_SEEDS, i))]
            if bernoulli:
                params.append(("p", cycle(BERNOULLI_P, i)))
            out.append(Edge((), tuple(params), NORMAL))
        return out
    return build


def _requested(case) -> int:
    return math.prod(case.params["shape"])


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    OpSpec(Op.rand_uniform, rand_layout, _edges(False), catalogue=20,
        cancellation=None,
        error_inputs=(
            param(44, "rand_uniform: count 2^32", COUNT,
                  lambda s: ops.rand_uniform((2**16, 2**16), seed=1), UInt32OverflowError,
                  r"holds 4294967296 elements"),
            param(45, "rand_uniform: negative seed", DIMS,
                  lambda s: ops.rand_uniform((2,), seed=-1), ParameterValueError,
                  r"seed must be a whole number in \[0, 2\^64\), got -1"),
            param(46, "rand_uniform: bool seed", DIMS,
                  lambda s: ops.rand_uniform((2,), seed=True), ParameterTypeError,
                  r"seed must be a whole number in \[0, 2\^64\), got bool True")),
        summary_group=GROUP, takes_inputs=False, terms=one_term_of(_requested)),
    OpSpec(Op.bernoulli_mask, bernoulli_layout, _edges(True), catalogue=21,
        extra_classes=("params",), cancellation=None,
        error_inputs=(
            param(47, "bernoulli_mask: p = 1.5", DIMS,
                  lambda s: ops.bernoulli_mask((2,), 1.5, seed=1), ParameterValueError,
                  r"got 1.5"),),
        summary_group=GROUP, takes_inputs=False, terms=one_term_of(_requested)),
)
