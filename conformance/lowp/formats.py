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

    def decode(self, bits, xp=np):
        """float64 values of bit patterns (exact: every value of both formats is a float64).
        `xp` is NumPy or CuPy; on CuPy the value is assembled from the bit fields in integers and
        float64 (CuPy's kernels flush float32 subnormals, which a bfloat16 widened through
        float32 would be)."""
        if xp is not np:
            return self._decode_fields(xp.asarray(bits, dtype=xp.uint16), xp)
        bits = np.asarray(bits, dtype=np.uint16)
        with np.errstate(invalid="ignore"):   # signalling NaN patterns widen to quiet NaNs
            if self is BFLOAT16:
                return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            return bits.view(np.float16).astype(np.float64)

    def _decode_fields(self, bits, xp):
        fraction_bits = self.precision - 1
        b = bits.astype(xp.int32)
        biased = (b >> fraction_bits) & ((1 << (15 - fraction_bits)) - 1)
        fraction = (b & ((1 << fraction_bits) - 1)).astype(xp.float64)
        top = (1 << (15 - fraction_bits)) - 1            # the all-ones exponent: inf and NaN
        significand = xp.where(biased > 0, fraction + (1 << fraction_bits), fraction)
        exponent = xp.maximum(biased, 1) + (self.emin - 1) - fraction_bits
        v = xp.ldexp(significand, exponent.astype(xp.int32))
        v = xp.where(biased == top, xp.where(fraction == 0, xp.inf, xp.nan), v)
        return xp.where((b >> 15) == 1, -v, v)

    def round(self, x, xp=np):
        """float64 values rounded to the nearest value of the format, ties to even; past the
        largest finite by half an ulp or more: infinity; signs of zeros and NaN kept. `xp`:
        NumPy or CuPy (float64 throughout, which no GPU flushes)."""
        x = xp.asarray(x, dtype=xp.float64)
        a = xp.abs(x)
        finite = xp.isfinite(a) & (a > 0)
        quantum = self.ulp(xp.where(finite, a, 1.0), xp)
        with np.errstate(over="ignore", invalid="ignore"):
            r = xp.rint(xp.where(finite, a, 0.0) / quantum) * quantum   # exact scaling, RNE
        r = xp.where(r > self.max_finite, xp.inf, r)
        r = xp.where(finite, r, a)                           # 0, inf and NaN as they are
        return xp.copysign(r, x)

    def encode(self, values) -> np.ndarray:
        """Bit patterns of values of the format (round first: the value must be one)."""
        v = np.asarray(values, dtype=np.float64)
        if self is BFLOAT16:
            f32 = v.astype(np.float32)
            return (f32.view(np.uint32) >> 16).astype(np.uint16)
        return v.astype(np.float16).view(np.uint16)

    def hex(self, value) -> str:
        """The bit pattern of one value of the format (round first), as 0x.... (NaN: the
        format's quiet NaN)."""
        return f"0x{int(self.encode(np.array([float(value)]))[0]):04x}"

    def ulp(self, x, xp=np):
        """The spacing of the format at |x| (the gap above a power of two: x's binade)."""
        a = xp.abs(xp.asarray(x, dtype=xp.float64))
        _, e = xp.frexp(xp.where(xp.isfinite(a) & (a > 0), a, 1.0))   # a = m 2^e, m in [0.5, 1)
        # ldexp, not exp2: CUDA's double exp2 is within an ulp, not exact, at integers
        quantum = xp.maximum(e - 1, self.emin) - (self.precision - 1)
        return xp.ldexp(xp.ones(quantum.shape, dtype=xp.float64), quantum.astype(xp.int32))

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

# Formats an accumulating kernel may declare its arithmetic in (LowpKernel.accumulation): the
# two 16-bit ones and these two, which serve only as arithmetic (unit roundoff, range, `round`);
# their values are never bit patterns of the harness.
FLOAT32 = Format("float32", precision=24, emin=-126, emax=127)
FLOAT64 = Format("float64", precision=53, emin=-1022, emax=1023)
ACCUMULATIONS = {f.name: f for f in (BFLOAT16, FLOAT16, FLOAT32, FLOAT64)}


class UnknownAccumulationError(ValueError):
    """An accumulation format the harness has no error model for."""


def accumulation_format(name) -> Format:
    """The arithmetic format an accumulating kernel declares by name, or UnknownAccumulationError
    saying what was given and what is known."""
    if isinstance(name, str) and name in ACCUMULATIONS:
        return ACCUMULATIONS[name]
    raise UnknownAccumulationError(
        f"accumulation {str(name)[:60]!r} is not a format the harness models; expected one of "
        f"{', '.join(ACCUMULATIONS)}: declare the format every intermediate of the kernel is "
        "rounded to (float32: computed in float32 and rounded once to the storage format)")


# bit patterns of both formats a binary sweep's sample always holds (binary.select_rows) and a
# binary VJP's special operand runs over: zeros, the least subnormals, 1, the largest finites,
# infinities, NaNs, in float16's and bfloat16's encodings
SPECIALS = (0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff,
            0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x0080, 0x007f, 0x3f80, 0xbf80, 0x7f7f, 0xff7f,
            0x7f80, 0xff80, 0x7fc0, 0xffc0)


def host(a):
    """A NumPy copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)
