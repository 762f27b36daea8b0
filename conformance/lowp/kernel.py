"""What a plugin declares for a 16-bit unary kernel (imported in the kernel process too: it holds
no reference, bound rule or verdict, only the declaration)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from conformance.lowp.formats import Format


ACCUMULATING = ("sum", "softmax", "matmul")    # conformance/lowp/accumulate.py


@dataclass(frozen=True)
class LowpKernel:
    """A kernel in one 16-bit format: `fn` takes and returns arrays of the format's NumPy dtype
    (numpy.float16, or ml_dtypes.bfloat16). `op` is a unary function of conformance/lowp/refs.py
    (fn(x), elementwise; `bound_ulps` is its declared bound in ulps of the format at the exact
    value, 0.5: correctly rounded), or an accumulating op: `sum` (fn(x) of shape (m, n) -> (m,),
    over the last axis), `softmax` (fn(x), (m, n) -> (m, n), over the last axis) or `matmul`
    (fn(a, b), (m, k) @ (k, n)), declared to compute in float32 and round once to the format at
    the output (`accumulation`, the only one audited today). A unary kernel may bring its VJP
    (`vjp`), swept at a unit cotangent over all inputs against f'(x) rounded to the format."""
    name: str
    op: str
    fmt: Format
    fn: Callable
    bound_ulps: float = 0.5
    accumulation: str = "float32"
    vjp: Callable | None = None     # a unary op's vjp(x, g) -> g f'(x), arrays of the format
    vjp_bound_ulps: float | None = None     # its declared bound (default: bound_ulps)

    def call_bits(self, *bits, part: str = "forward"):
        """The kernel (or its VJP) on bit patterns, in this process: its result's bit patterns."""
        fn = self.fn if part == "forward" else self.vjp
        return self.fmt.bits_of(fn(*(self.fmt.to_numpy(b.copy()) for b in bits)))
