"""One declaration per native kernel: what runs (the .cu file, the symbols of the forward and the
VJP, the handlers) and the facts its numerical policy follows from. Each family module
(elementwise.py, shape.py, ...) declares its ops next to their handlers; capsules.py turns the
declarations and the loader's compile flags into capsules, and engine/native_sources.py's map is a
view of them. Nothing here imports CuPy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.runtime.kernel_source import NativeSource
from engine.types import BackendOp as Op, Contraction, DeclaredBound, Reduction

__all__ = ["KernelDecl", "NativeSource", "F64_ONCE", "F64_ONCE_ROWS", "F64_ONCE_CANCELLING"]


@dataclass(frozen=True)
class KernelDecl:
    """A native-cuda op: its kernels, its handlers and the facts behind its capsule.

    The policy facts describe the kernels, not the compile flags: capsules.py combines them with
    engine/runtime/loader.py's OPTIONS, so a changed flag changes every policy it affects.
    """
    op: Op
    file: str                                   # .cu under engine/csrc/cuda/; "" for a view
    forward_symbols: tuple[str, ...]            # each "symbol" of `file` or "other.cu:symbol"
    vjp_symbols: tuple[str, ...] = ()
    forward: Callable | None = None             # forward(*arrays, **params)
    vjp: Callable | None = None                 # vjp(inputs, output, g, **params); None: no VJP
    # --- numerical-policy facts ---
    reduction: Reduction = Reduction.not_applicable   # order of float32 sums, forward or VJP
    atomics: bool = False       # default mode accumulates with float atomicAdd (forward or VJP)
    exact: bool = False         # every result is a copy, a selection or a bit pattern: no rounding
    f64_rows: bool = False      # row kernels in float64 with fixed-order sums, rounded once
    f64_vjp: bool = False       # the VJP is evaluated in float64 from the input, rounded once
    libdevice: tuple[str, float] | None = None  # (function, ulps) whose error bounds the value
    contraction: Contraction | None = None      # fused: the source writes explicit fmaf (None:
                                                # what --fmad lets the compiler do)
    # --- what the capsule says ---
    summary: str = ""                           # value summary ("" : the standard one)
    bound: DeclaredBound | None = None          # declared bound not derived from `libdevice`
    fast_math_bound: DeclaredBound | None = None   # `bound` re-derived for --use_fast_math's
                                                # intrinsics (where `bound` assumes libdevice)
    notes: tuple[str, ...] = ()                 # op-specific notes after the policy's own
    name: str | None = None                     # capsule name, when not native_cuda.<op>
    variant: str | None = None                  # a second kernel of the op: native_cuda.<op>.<variant>
                                                # (or `name`, when given)
    declines: Callable[[tuple, dict], str | None] | None = None   # declared support

    @property
    def capsule_name(self) -> str:
        if self.name:
            return self.name
        return f"native_cuda.{self.op.label}" + (f".{self.variant}" if self.variant else "")

    @property
    def source(self) -> NativeSource:
        python = f"{self.forward.__module__.replace('.', '/')}.py" if self.forward else ""
        return NativeSource(self.file, self.forward_symbols, self.vjp_symbols, python)


# Declared bounds shared by several families (the float64-once evaluations).
F64_ONCE = DeclaredBound(1.0, "evaluated in float64 with libdevice's double functions (a few "
                              "float64 ulps each, amplified at most |2u| <= 710 times through "
                              "exp) and rounded once to float32: under 0.5 + 2^-18 float32 ulp "
                              "of the exact value")
F64_ONCE_ROWS = DeclaredBound(1.0, "evaluated in float64 (libdevice exp/log1p within a few float64 "
                                   "ulps, the register forward's table exp tl_exp_nonpos within "
                                   "2^-50 relative, sums of positive terms) and rounded once to "
                                   "float32: under 0.5 + 2^-20 float32 ulp of the exact value")
F64_ONCE_CANCELLING = DeclaredBound(
    1.0, "evaluated in float64 and rounded once, as the reference provider; a cancelling sum "
         "carries float64 error relative to its sum of |terms|, far under one u = 2^-24 of it",
    magnitude_units=1.0)
