"""bfloat16 and float16: bit patterns, values, correct rounding from float64, ulp distances.

Both are IEEE-style binary formats: float16 (binary16: 11 significand bits, exponents -14..15)
and bfloat16 (the top half of a float32: 8 significand bits, float32's exponents -126..127),
each with subnormals, signed zeros, infinities and NaN. The harness computes in float64 on values
decoded from bits (no NumPy bfloat16 needed); a kernel receives arrays of the format's NumPy dtype
(`numpy_dtype`: float16, or ml_dtypes' bfloat16)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class FormatUnavailableError(RuntimeError):
    """A format's NumPy dtype is missing (bfloat16 needs the ml_dtypes package)."""


@dataclass(frozen=True)
class Format:
    name: str
    precision: int          # significand bits, the implicit one included
    emin: int               # exponent of the smallest normal
    emax: int               # exponent of the largest finite

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-p: half an ulp of 1, the relative error of one rounding to nearest."""
        return math.ldexp(1.0, -self.precision)

    @property
    def max_finite(self) -> float:
        return math.ldexp(2.0 - math.ldexp(1.0, 1 - self.precision), self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.precision + 1)

    def all_bits(self) -> np.ndarray:
        """Every bit pattern of the format, 0 .. 2^16 - 1."""
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)

    def decode(self, bits) -> np.ndarray:
        """float64 values of bit patterns (exact: every value of both formats is a float64)."""
        bits = np.asarray(bits, dtype=np.uint16)
        with np.errstate(invalid="ignore"):   # signalling NaN patterns widen to quiet NaNs
            if self is BFLOAT16:
                return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            return bits.view(np.float16).astype(np.float64)

    def round(self, x) -> np.ndarray:
        """float64 values rounded to the nearest value of the format, ties to even; past the
        largest finite by half an ulp or more: infinity; signs of zeros and NaN kept."""
        x = np.asarray(x, dtype=np.float64)
        a = np.abs(x)
        finite = np.isfinite(a) & (a > 0)
        _, e = np.frexp(np.where(finite, a, 1.0))           # a = m 2^e, m in [0.5, 1)
        quantum = np.exp2(np.maximum(e - 1, self.emin) - (self.precision - 1))
        with np.errstate(over="ignore", invalid="ignore"):
            r = np.rint(np.where(finite, a, 0.0) / quantum) * quantum   # exact scaling, RNE
        r = np.where(r > self.max_finite, np.inf, r)
        r = np.where(finite, r, a)                           # 0, inf and NaN as they are
        return np.copysign(r, x)

    def encode(self, values) -> np.ndarray:
        """Bit patterns of values of the format (round first: the value must be one)."""
        v = np.asarray(values, dtype=np.float64)
        if self is BFLOAT16:
            f32 = v.astype(np.float32)
            return (f32.view(np.uint32) >> 16).astype(np.uint16)
        return v.astype(np.float16).view(np.uint16)

    def ulp(self, x) -> np.ndarray:
        """The spacing of the format at |x| (the gap above a power of two: x's binade)."""
        a = np.abs(np.asarray(x, dtype=np.float64))
        _, e = np.frexp(np.where(np.isfinite(a) & (a > 0), a, 1.0))
        return np.exp2(np.maximum(e - 1, self.emin) - (self.precision - 1))

    def numpy_dtype(self):
        if self is FLOAT16:
            return np.dtype(np.float16)
        try:
            import ml_dtypes
        except ImportError as exc:
            raise FormatUnavailableError(
                f"bfloat16 kernels take ml_dtypes' bfloat16 arrays, but ml_dtypes is not "
                f"importable ({exc}); pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)

    def to_numpy(self, bits) -> np.ndarray:
        """Bit patterns as an array of the format's NumPy dtype (what a kernel receives)."""
        return np.asarray(bits, dtype=np.uint16).view(self.numpy_dtype())

    def bits_of(self, array) -> np.ndarray:
        """The bit patterns of a kernel's result (an array of the format's dtype)."""
        array = np.asarray(array)
        if array.dtype != self.numpy_dtype():
            raise TypeError(f"a {self.name} kernel returned a {array.dtype} array; expected "
                            f"{self.name}")
        return np.ascontiguousarray(array).view(np.uint16)


BFLOAT16 = Format("bfloat16", precision=8, emin=-126, emax=127)
FLOAT16 = Format("float16", precision=11, emin=-14, emax=15)
FORMATS = {f.name: f for f in (BFLOAT16, FLOAT16)}
