"""Seeded random tensors from the counter-based generator; constants of the graph (no VJP)."""
from __future__ import annotations

import math

from engine.errors import ParameterValueError
from engine.ops import _checks
from engine.ops._dispatch import apply
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _seed(op: str, seed) -> int:
    return _checks.seed(op, seed)


def rand_uniform(shape, seed: int) -> Tensor:
    shp = _checks.shape("rand_uniform", shape)
    return apply(Op.rand_uniform, (), shp, {"shape": shp, "seed": _seed("rand_uniform", seed)})


def bernoulli_mask(shape, p: float, seed: int) -> Tensor:
    shp = _checks.shape("bernoulli_mask", shape)
    p = _checks.number("bernoulli_mask", "p", p)
    if math.isnan(p) or not 0.0 <= p <= 1.0:
        raise ParameterValueError(f"bernoulli_mask: p must be a probability in [0, 1], got {p!r}")
    return apply(Op.bernoulli_mask, (), shp,
                 {"shape": shp, "p": float(p), "seed": _seed("bernoulli_mask", seed)})
