"""What a plugin declares for a 16-bit unary kernel (imported in the kernel process too: it holds
no reference, bound rule or verdict, only the declaration)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from conformance.lowp.formats import Format


@dataclass(frozen=True)
class LowpKernel:
    """A unary kernel in one 16-bit format: `fn(x)` takes and returns arrays of the format's
    NumPy dtype (numpy.float16, or ml_dtypes.bfloat16); `op` is a function of
    conformance/lowp/refs.py; `bound_ulps` the declared error bound in ulps of the format at the
    exact value (0.5: correctly rounded)."""
    name: str
    op: str
    fmt: Format
    fn: Callable
    bound_ulps: float = 0.5

    def call_bits(self, bits):
        """The kernel on bit patterns, in this process: its result's bit patterns."""
        return self.fmt.bits_of(self.fn(self.fmt.to_numpy(bits.copy())))
