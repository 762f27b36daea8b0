"""Exact float32 <-> mpmath conversion, correct rounding to float32 (ties to even, gradual underflow,
overflow to infinity), the float32 ulp, a Ziv loop over mpmath interval arithmetic, and exact paths.

Every rounding here is done on integers (a dyadic m * 2^e or a ratio num/den), never by a float cast
that could round twice. The vectorised float64 -> float32 rounding works on IEEE bit patterns and is
checked against NumPy's (correctly rounded) conversion and against mpmath by tests/test_rounding.py.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import mpmath
import numpy as np
from mpmath import iv
from mpmath.libmp import from_float

from engine.float32 import FLT_TRUE_MIN

__all__ = [
    "F32", "F64", "ZivError", "f32_to_mpf", "sign_bit", "round_mpf_to_f32", "round_mpf_to_f64",
    "round_ratio_to_f32", "round_ratio_to_f64", "round_dyadic_to_f32", "round_dyadic_to_f64", "ulp",
    "ulp_array", "correctly_rounded", "ziv", "ziv_many", "iv_precision", "decide_interval", "round_f64_to_f32",
    "round_f64_pair_to_f32", "add_f32", "sub_f32", "mul_f32", "div_f32", "is_f32_tie", "f32_to_scaled_ints",
    "exact_sum_mpf",
]


@dataclass(frozen=True)
class BinaryFormat:
    """An IEEE binary format as the rounding code needs it."""

    prec: int  # significand bits, hidden bit included
    qmin: int  # exponent of the smallest subnormal (the quantum of the subnormal grid)
    emax: int  # every value >= 2^emax after rounding overflows


F32 = BinaryFormat(prec=24, qmin=-149, emax=128)
F64 = BinaryFormat(prec=53, qmin=-1074, emax=1024)


class ZivError(ArithmeticError):
    """The Ziv loop could not bound the result (an unbounded or NaN interval at the largest precision)."""


def f32_to_mpf(x) -> mpmath.mpf:
    """The exact value of a float32 as an mpf (float32 -> float64 is exact, mpf(float) is exact).

    +-inf and nan map to mpf('+-inf') and mpf('nan'); -0.0 maps to mpf(0): read the sign with sign_bit.
    """
    return mpmath.mpf(float(np.float32(x)))


def sign_bit(x) -> bool:
    """True when the sign bit of x is set (so -0.0 and negative NaNs count as negative)."""
    return bool(np.signbit(x))


def _signed(neg: bool, value: float) -> float:
    return -value if neg else value


def _round_dyadic(neg: bool, man: int, exp: int, fmt: BinaryFormat) -> float:
    """Round (-1)^neg * man * 2^exp (man > 0) to fmt, nearest-even; returned as a Python float.

    The result m * 2^q has m <= 2^prec and q >= qmin, which a float64 holds exactly for F32 and F64.
    """
    bc = man.bit_length()
    top = exp + bc - 1  # floor(log2 |v|)
    if top >= fmt.emax:
        return _signed(neg, math.inf)
    if top < fmt.qmin - 1:  # |v| < 2^(qmin-1): below half the smallest subnormal
        return _signed(neg, 0.0)
    q = max(top - fmt.prec + 1, fmt.qmin)
    shift = q - exp
    if shift <= 0:
        m = man << -shift
    else:
        m = man >> shift
        rem = man - (m << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and m & 1):
            m += 1
    if m.bit_length() + q - 1 >= fmt.emax:  # rounded up to 2^emax
        return _signed(neg, math.inf)
    return _signed(neg, math.ldexp(m, q))


def _round_ratio(num: int, den: int, fmt: BinaryFormat, negative_zero: bool = False) -> float:
    """Round num/den (den > 0) to fmt, nearest-even; zero results keep the sign of num/den."""
    if den <= 0:
        raise ValueError(f"denominator must be positive, got {den}")
    neg = num < 0
    num = abs(num)
    if num == 0:
        return -0.0 if negative_zero else 0.0
    e = num.bit_length() - den.bit_length()  # 2^(e-1) < num/den < 2^(e+1)
    if (num >= (den << e)) if e >= 0 else ((num << -e) >= den):
        pass
    else:
        e -= 1  # now 2^e <= num/den < 2^(e+1)
    if e >= fmt.emax:
        return _signed(neg, math.inf)
    if e < fmt.qmin - 1:
        return _signed(neg, 0.0)
    q = max(e - fmt.prec + 1, fmt.qmin)
    if q >= 0:
        d = den << q
        m, r = divmod(num, d)
    else:
        d = den
        m, r = divmod(num << -q, den)
    twice = 2 * r
    if twice > d or (twice == d and m & 1):
        m += 1
    if m.bit_length() + q - 1 >= fmt.emax:
        return _signed(neg, math.inf)
    return _signed(neg, math.ldexp(m, q))


def _round_raw(raw: tuple, fmt: BinaryFormat, negative_zero: bool = False) -> float:
    """Round an mpmath raw mpf tuple (sign, man, exp, bc) to fmt."""
    sign, man, exp, bc = raw
    if man == 0:
        if bc == 0 and exp == 0:
            return -0.0 if negative_zero else 0.0
        if exp == -123:  # fnan
            return math.nan
        return -math.inf if sign else math.inf
    return _round_dyadic(bool(sign), man, exp, fmt)


def _raw(v) -> tuple:
    """The exact raw mpf of v: mpmath.mpf(int) would round to the working precision, from_int does not."""
    if isinstance(v, mpmath.mpf):
        return v._mpf_
    if isinstance(v, (int, np.integer)):
        return mpmath.libmp.from_int(int(v))
    return from_float(float(v))


def round_mpf_to_f32(v, negative_zero: bool = False) -> np.float32:
    """Correctly round v (mpf, int or float: its exact value) to float32, ties to even.

    Gradual underflow down to 2^-149; values whose rounding reaches 2^128, i.e. |v| >= 2^128 (1 - 2^-25),
    become +-inf. A nonzero v that rounds to zero keeps its sign (IEEE); an exact zero is +0.0, or -0.0
    when negative_zero is set (mpf has no signed zero).
    """
    return np.float32(_round_raw(_raw(v), F32, negative_zero))


def round_mpf_to_f64(v, negative_zero: bool = False) -> float:
    """Correctly round v (mpf, int or float) to float64, ties to even, with the same conventions."""
    return _round_raw(_raw(v), F64, negative_zero)


def round_ratio_to_f32(num: int, den: int, negative_zero: bool = False) -> np.float32:
    """Correctly round the rational num/den (den > 0) to float32; exact zero gets negative_zero's sign."""
    return np.float32(_round_ratio(num, den, F32, negative_zero))


def round_ratio_to_f64(num: int, den: int, negative_zero: bool = False) -> float:
    """Correctly round the rational num/den (den > 0) to float64."""
    return _round_ratio(num, den, F64, negative_zero)


def round_dyadic_to_f32(man: int, exp: int, negative_zero: bool = False) -> np.float32:
    """Correctly round the exact value man * 2^exp (any int man) to float32."""
    if man == 0:
        return np.float32(-0.0 if negative_zero else 0.0)
    return np.float32(_round_dyadic(man < 0, abs(man), exp, F32))


def round_dyadic_to_f64(man: int, exp: int, negative_zero: bool = False) -> float:
    """Correctly round the exact value man * 2^exp (any int man) to float64."""
    if man == 0:
        return -0.0 if negative_zero else 0.0
    return _round_dyadic(man < 0, abs(man), exp, F64)


def ulp(x) -> float:
    """The float32 ulp at x: the spacing of the float32 grid in the binade holding |x|.

    Precisely: 2^(max(floor(log2|x|), -126) - 23) for finite nonzero |x| < 2^127; 2^-149 for 0 and for
    subnormal |x| (below 2^-126); 2^104 for |x| >= 2^127 (the largest binade, and beyond: an exact value
    that overflows float32 is measured on the largest binade's grid); inf for +-inf; nan for nan.
    x may be any real (float32, float64, int), so it serves exact references as well as results.
    """
    return float(ulp_array(np.asarray([float(x)], dtype=np.float64))[0])


def ulp_array(x) -> np.ndarray:
    """ulp applied elementwise; returns float64 of x's shape."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    _, e = np.frexp(x)  # x = m 2^e, m in [0.5, 1): floor(log2 x) = e - 1
    binade = np.clip(e.astype(np.int64) - 1, -126, 127)
    out = np.ldexp(1.0, binade - 23)
    out = np.where(x == 0, FLT_TRUE_MIN, out)   # the subnormal spacing
    out = np.where(np.isinf(x), np.inf, out)
    return np.where(np.isnan(x), np.nan, out)


# ---------------------------------------------------------------- Ziv loop over interval arithmetic


@contextlib.contextmanager
def iv_precision(prec: int) -> Iterator[None]:
    """Set mpmath.iv's working precision for a block and restore it (iv has no workprec)."""
    saved = iv.prec
    iv.prec = prec
    try:
        yield
    finally:
        iv.prec = saved


def _iv_point(x: float):
    raw = from_float(float(x))  # exact: every float64 is an mpf of 53 bits
    return iv.make_mpf((raw, raw))


def _decided(interval, fmt: BinaryFormat, negative_zero: bool) -> float | None:
    """The fmt rounding shared by both interval endpoints, or None when they differ."""
    lo, hi = interval._mpi_
    r_lo = _round_raw(lo, fmt, negative_zero)
    r_hi = _round_raw(hi, fmt, negative_zero)
    if r_lo == r_hi and math.copysign(1.0, r_lo) == math.copysign(1.0, r_hi):
        return r_lo
    return None


def decide_interval(interval, negative_zero: bool = False) -> tuple[np.float32, float] | None:
    """(float32, float64) roundings shared by both endpoints of an mpmath.iv interval, or None."""
    v32 = _decided(interval, F32, negative_zero)
    v64 = _decided(interval, F64, negative_zero)
    if v32 is None or v64 is None:
        return None
    return np.float32(v32), v64


def _midpoint(interval, fmt: BinaryFormat, negative_zero: bool) -> float:
    lo, hi = interval._mpi_
    if (lo[1] == 0 and lo[2] != 0) or (hi[1] == 0 and hi[2] != 0):  # an inf or nan endpoint
        raise ZivError(f"interval {interval} is unbounded or NaN at the largest precision")
    mid = mpmath.libmp.mpf_shift(mpmath.libmp.mpf_add(lo, hi, 0), -1)  # exact (lo + hi) / 2
    out = _round_raw(mid, fmt, negative_zero)
    if out == 0 and lo[0] == 1 and lo[1] != 0 and hi[0] == 0 and hi[1] != 0:
        # still straddling 0 itself: the result is taken to be an exact zero, whose sign is the caller's
        # (the midpoint of [-a, b] has the sign of b - a, which is noise)
        return -0.0 if negative_zero else 0.0
    return out


def ziv_many(fn: Callable[..., Sequence], *args, start_prec: int = 80, max_prec: int = 2560,
             negative_zero: Sequence[bool] | bool = False) -> tuple[list[np.float32], list[float]]:
    """Correctly rounded float32 (and the nearest float64) of every interval fn returns.

    fn(ctx, *xs) is called with ctx = mpmath.iv and each arg as an exact point interval; it returns a
    sequence of intervals enclosing the exact results (interval arithmetic bounds every evaluation error,
    so cancellation inside fn only costs precision, never correctness; mpmath.iv rounds every endpoint
    outward, except that its exp can return a point that misses the value: use references._common.iv_exp
    where an exp enters a cancellation). Precision starts at start_prec
    bits and doubles until both endpoints of every interval round to the same float32 (signed zero
    included) and the same float64. Past max_prec, an interval still straddling a rounding boundary is
    taken to be exactly on it (an exact midpoint, or an exact zero) and its midpoint is rounded, ties to
    even (an interval straddling 0 gives a zero of negative_zero's sign); an unbounded interval raises
    ZivError. negative_zero gives the sign of exact zero results.
    """
    prec = start_prec
    while True:
        with iv_precision(prec):
            out = fn(iv, *[_iv_point(a) for a in args])
        nz = [bool(negative_zero)] * len(out) if np.ndim(negative_zero) == 0 else list(negative_zero)
        v32 = [_decided(y, F32, z) for y, z in zip(out, nz)]
        v64 = [_decided(y, F64, z) for y, z in zip(out, nz)]
        if all(v is not None for v in v32) and all(v is not None for v in v64):
            return [np.float32(v) for v in v32], v64
        if prec >= max_prec:
            v32 = [v if v is not None else _midpoint(y, F32, z) for v, y, z in zip(v32, out, nz)]
            v64 = [v if v is not None else _midpoint(y, F64, z) for v, y, z in zip(v64, out, nz)]
            return [np.float32(v) for v in v32], v64
        prec = min(2 * prec, max_prec)


def ziv(fn: Callable, *args, **kwargs) -> tuple[np.float32, float]:
    """ziv_many for an fn returning one interval: (correctly rounded float32, nearest float64)."""
    (v32,), (v64,) = ziv_many(lambda ctx, *xs: (fn(ctx, *xs),), *args, **kwargs)
    return v32, v64


def correctly_rounded(fn: Callable, *args, **kwargs) -> np.float32:
    """The float32 correct rounding of fn(mpmath.iv, *args); see ziv_many for fn and the loop.

    Exact results need no special care: an exactly representable result is a point interval that
    rounds to itself, and an exact midpoint is resolved by the fallback at max_prec. For exact
    rational operations (sums, products, quotients) use the exact paths below instead.
    """
    return ziv(fn, *args, **kwargs)[0]


# ---------------------------------------------------------------- vectorised float64 -> float32

_M52 = np.uint64((1 << 52) - 1)
_ONE = np.uint64(1)


def round_f64_pair_to_f32(hi, lo=None) -> np.ndarray:
    """Correctly round hi + lo to float32, elementwise, on IEEE bit patterns.

    hi must be the float64 nearest to hi + lo (|lo| <= half an ulp of hi, as TwoSum or fsum residuals
    give). Then only the sign of lo matters, and only when hi lies exactly on a float32 midpoint: every
    midpoint is itself a float64, so an exact value off a midpoint rounds on the same side as hi (a
    float64 other than hi is at least one float64 spacing away, more than |lo|). lo=None means lo = 0,
    i.e. plain correct rounding of float64 values (what NumPy's astype(float32) also does).
    NaN stays NaN (sign kept), +-inf stays; float64 subnormals round to signed zero.
    """
    shape = np.shape(hi)
    hi = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)  # 0-d comes back 1-d: restore shape below
    bits = hi.view(np.uint64)
    sign = bits >> np.uint64(63)
    bexp = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    mant = (bits & _M52) | (_ONE << np.uint64(52))
    e = bexp - 1023  # floor(log2 |hi|) for normal doubles
    # quantum of the float32 result: 2^(e-23) in the normal range, 2^-149 below it. Shifts past 55
    # leave a value under a quarter quantum, so capping at 63 keeps the shift defined and the result.
    shift = np.minimum(np.maximum(e - 23, -149) - (e - 52), 63).astype(np.uint64)
    m = mant >> shift
    rem = mant & ((_ONE << shift) - _ONE)
    half = _ONE << (shift - _ONE)
    odd = (m & _ONE) == _ONE
    if lo is None:
        tie_up = odd
    else:
        lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), shape).reshape(-1)
        tie_up = np.where(lo == 0, odd, np.signbit(lo) == np.signbit(hi))
    m = m + ((rem > half) | ((rem == half) & tie_up)).astype(np.uint64)
    # bits of m * 2^q: subnormal grid -> m itself; normal -> (biased exponent - 1) << 23 plus m, whose
    # hidden bit adds the missing 1; a carry to 2^24 moves into the exponent field on its own.
    ebits = np.maximum(e + 126, 0).astype(np.uint64)
    out = np.where(e > 127, np.uint64(0x7F800000), (ebits << np.uint64(23)) + m)
    out = np.minimum(out, np.uint64(0x7F800000))  # rounding up past the largest finite: inf
    out = np.where(bexp == 0, np.uint64(0), out)
    is_nan = np.isnan(hi)
    out = np.where(bexp == 0x7FF, np.uint64(0x7F800000), out)
    out = np.where(is_nan, np.uint64(0x7FC00000), out)
    out = out | (sign << np.uint64(31))
    return out.astype(np.uint32).view(np.float32).reshape(shape)


def round_f64_to_f32(x) -> np.ndarray:
    """Correctly round float64 values to float32 (ties to even, gradual underflow, overflow to inf)."""
    return round_f64_pair_to_f32(x, None)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Knuth's TwoSum: s = fl(a + b) and a + b = s + err exactly, for any finite float64 a, b whose sum
    # does not overflow (float32 inputs cannot overflow float64).
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bb = s - a
        err = (a - (s - bb)) + (b - bb)
    return s, err


def add_f32(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded float32 a + b and the nearest float64 of the exact sum, elementwise.

    float64 addition is correctly rounded, so s = fl64(a + b) is the nearest float64 to the exact sum,
    and TwoSum's err is the exact remainder: round_f64_pair_to_f32(s, err) is the single correct
    rounding. The sum of two float32 is a multiple of 2^-149 below 2^129, so s is zero only when the
    exact sum is, and IEEE's zero sign (+0 unless both are -0) carries over from float64.
    """
    a64 = np.asarray(a, dtype=np.float32).astype(np.float64)
    b64 = np.asarray(b, dtype=np.float32).astype(np.float64)
    s, err = _two_sum(a64, b64)
    return round_f64_pair_to_f32(s, err), s


def sub_f32(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded float32 a - b (as a + (-b), which IEEE defines it to be) and its float64."""
    return add_f32(a, -np.asarray(b, dtype=np.float32))


def mul_f32(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded float32 a * b and the exact product as float64, elementwise.

    The product of two float32 is exact in float64: 24 + 24 = 48 significand bits <= 53, magnitude at
    most (2^128)^2 = 2^256 < 2^1024, and at least 2^-149 * 2^-149 = 2^-298 > 2^-1022 (normal float64,
    so no float64 underflow). Its single rounding to float32 is then the correct one. Signs of zero and
    inf * 0 = NaN follow IEEE as float64 does.
    """
    with np.errstate(invalid="ignore"):
        p = np.asarray(a, dtype=np.float32).astype(np.float64) * np.asarray(b, dtype=np.float32).astype(np.float64)
    return round_f64_to_f32(p), p


def div_f32(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded float32 a / b and the nearest float64 of the exact quotient, elementwise.

    q = fl64(a / b) is the float64 nearest a / b (IEEE division), and rounding it to float32 is the
    correct rounding of a / b (Figueroa 1995: double rounding of /, sqrt is innocuous when the wider
    format has p' >= 2p + 2 bits; 53 >= 50). The argument, with float32 subnormal results included:
    rounding a / b twice differs from once only if q is exactly a float32 rounding boundary m (a
    midpoint, or the overflow threshold) with a / b != m, so 0 < |a/b - m| <= 2^-53 |m|. Write a = A 2^x,
    b = B 2^y, m = M 2^z with integers |A|, |B| < 2^24 and |M| < 2^25 (every boundary, subnormal or not,
    has at most 25 significant bits). Then a - m b = A 2^x - M B 2^(y+z) != 0 is at least
    2^min(x, y+z), while |a - m b| = |b| |a/b - m| <= 2^-53 |a| (1 + 2^-52): for x <= y + z that is
    below 2^-29 2^x, and for y + z < x, with |a| ~ |M B| 2^(y+z) < 2^49 2^(y+z), below 2^-3 2^(y+z);
    a contradiction either way. Quotients of finite nonzero float32 lie in [2^-277, 2^277]: no float64
    underflow or overflow. Zeros, infinities and NaN follow IEEE, as float64 division gives them.
    """
    with np.errstate(all="ignore"):
        q = np.asarray(a, dtype=np.float32).astype(np.float64) / np.asarray(b, dtype=np.float32).astype(np.float64)
    return round_f64_to_f32(q), q


def is_f32_tie(x) -> np.ndarray:
    """Whether each float64 x lies exactly on a float32 rounding boundary (a midpoint between two
    float32 values, including the subnormal ones and the overflow threshold 2^128 (1 - 2^-25))."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        up = round_f64_pair_to_f32(x, np.ones_like(x)).astype(np.float64)
        down = round_f64_pair_to_f32(x, -np.ones_like(x)).astype(np.float64)
    # a residual of either sign decides a tie and nothing else: the two roundings differ exactly there
    return np.isfinite(x) & (up != down)


# ---------------------------------------------------------------- exact integer paths


def f32_to_scaled_ints(x) -> tuple[np.ndarray, int]:
    """Finite float32 values as exact Python ints sharing one scale: x == ints * 2^-scale.

    scale = 24 - (binade exponent of the smallest nonzero |x|), capped to [0, 149]: enough to make every
    element integral, and usually far below 149, which keeps exact integer arithmetic on them fast.
    Non-finite elements raise ValueError.
    """
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    if not np.all(np.isfinite(x64)):
        raise ValueError("f32_to_scaled_ints needs finite values; route inf/nan through IEEE rules first")
    nz = x64[x64 != 0]
    # x = m 2^e, m in [0.5, 1) with 24 bits: x * 2^(24 - e) is an integer; subnormals need at most 149
    scale = 0 if nz.size == 0 else int(min(149, max(0, int((24 - np.frexp(nz)[1]).max()))))
    scaled = np.ldexp(x64, scale)  # exact: a power-of-two scaling that stays below 2^277
    ints = np.empty(x64.shape, dtype=object)
    ints.reshape(-1)[:] = [int(v) for v in scaled.reshape(-1).tolist()]
    return ints, scale


def exact_sum_mpf(values) -> mpmath.mpf:
    """The exact sum of finite float32/float64 values as an mpf (mpmath exact addition, prec=0)."""
    raw = mpmath.libmp.fzero
    for v in np.asarray(values, dtype=np.float64).reshape(-1).tolist():
        raw = mpmath.libmp.mpf_add(raw, from_float(v), 0)
    return mpmath.mpf(raw)
