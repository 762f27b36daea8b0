"""The capsules of a peer library's unary float32 functions for the ulp table
(conformance/ulp_table/): one per function of conformance.ulp_table.FUNCTIONS the library has,
named <prefix>.<function>, forward only (no VJP is claimed), each declaring what the library
documents and nothing more: its subnormal handling (flushed, or unspecified where it says
nothing) and, where the function behind it is one of CUDA's, NVIDIA's documented bound; where
the library documents no accuracy the capsule declares none, and the sweep measures it against
the correctly rounded value. unary_torch.py, unary_cupy.py and unary_jax.py use it."""
from __future__ import annotations

from typing import Callable

from conformance.plugins import PluginEntry
from conformance.ulp_table import BY_NAME, CUDA_GUIDE
from engine.capsule import standard_capsule
from engine.types import (Contraction, DeclaredBound, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)


def policy(subnormals: Subnormals) -> NumericalPolicy:
    return NumericalPolicy(Rounding.nearest_even, subnormals, Contraction.not_applicable,
                           Reduction.not_applicable)


def cuda_bound(function: str, calls: str) -> DeclaredBound | None:
    """NVIDIA's figure for the CUDA float32 function behind `function` (conformance.ulp_table),
    for a kernel whose source shows it calling that function (`calls`); None where CUDA has
    none."""
    row = BY_NAME[function]
    if row.cuda_function is None:
        return None
    what = "IEEE correctly rounded" if row.cuda_ulps == 0 else f"within {row.cuda_ulps:g} ulp"
    return DeclaredBound(float(row.cuda_ulps), f"{row.cuda_function}: {what} ({CUDA_GUIDE}); "
                                               f"the kernel calls it: {calls}")


def entry(prefix: str, function: str, forward: Callable, provider: Provider,
          subnormals: Subnormals, bound: DeclaredBound | None, source: str, symbol: str,
          summary: str) -> PluginEntry:
    """The plugin entry of one function of a library (forward only, on cuda)."""
    row = BY_NAME[function]
    capsule = standard_capsule(
        row.op, provider, Device.cuda, trust=TrustLevel.fuzzed, vjp_mode=VJPMode.none,
        policy=policy(subnormals), source_file=source, native_symbol=symbol,
        declared_bound=bound, name=f"{prefix}.{function}", value_summary=summary,
        notes=f"the ulp table's {function}: {row.formula}")
    forward.__name__ = f"{prefix}_{function}"
    return PluginEntry(capsule, forward)
