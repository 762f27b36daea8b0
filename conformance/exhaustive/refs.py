"""The exhaustive sweep's fast references: each unary op's docs/OPS.md formula evaluated in float64
on the sweep's device (CuPy on the GPU, NumPy on the CPU) with a stated relative error bound, and
the certification rule that decides an input's correctly rounded float32 result from it.

Bounds, in D = 2^-53 (one float64 rounding) and LIB = 2^-44 (one float64 library function):
- +, -, *, /, sqrt of float64 are correctly rounded: D each (IEEE 754).
- exp, log, log1p, sin, cos, tanh, cosh: NVIDIA documents its double functions within 1 or 2
  ulps (CUDA C++ Programming Guide, "Double-Precision Floating-Point Functions"; NumPy's own are
  at least as accurate), that is 2^-51 relative. Those figures come from tests, not proofs, so
  LIB takes 128 times as much. Every input the certificate leaves undecided goes to mpmath, and
  there the float64 value is checked against the exact one: a bound found false is a harness
  error of the sweep (the driver, __init__.py), never a verdict.
- A composite's bound is the sum of its steps' bounds (first order; one extra D covers the
  products of the terms), with the amplification of an argument's error stated beside it.

The certification rule (certify): with r = RN32(v) and m_lo < |r| < m_hi the float32 rounding
boundaries around it (midpoints to its neighbours; 0 below zero; the overflow threshold
2^128 (1 - 2^-25) below infinity), every value of [v (1 - b), v (1 + b)] rounds to r when
|v| - m_lo > b |v| and m_hi - |v| > b |v|, strictly (a value on a midpoint would be a tie). Both
tests are made on rounded float64 quantities; each side is scaled by (1 -+ 2^-51), which covers
the one rounding of the difference and of the product b |v|. Outside float64's normal range the
relative bound says nothing, so:
- |v| < 2^-1000 (0 included): each formula below reaches such a value only through an underflow
  or an overflowed denominator, where the exact value is below 2^-990 (far below float32's
  2^-150): the result is a float32 zero whose sign is the op's sign there (`tiny_sign`, stated
  per formula); where it gives no sign the input is undecided.
- v = +-inf from a finite input: decided (+-inf) only for formulas that overflow exactly where
  the exact value exceeds float64's range (`overflow_exact`: exp); undecided otherwise.
- v NaN: decided (NaN) where the exact result is NaN (`nan_domain`: sqrt, log of a < 0).
Inputs that are not finite, and the zeros, always go to mpmath (the special values are the
references' business: docs/OPS.md's limits, signed zeros).

FUNCTIONS holds the same for unary functions the engine has no op for (rsqrt, erf, gelu_erf: the
ulp table's, docs/EXHAUSTIVE.md), forward only; a plugin names them as
conformance.plugins.UserOp(label, needs_vjp=False), and `formulas(label)` finds either table's.
NumPy has no erf: on the CPU the C library's (math.erf, math.erfc), element by element; on the GPU
cupyx.scipy.special's float64 erf and erfc (CUDA's, documented within 2 and 5 ulps: LIB covers
them 50 times over).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.exhaustive import fused as _fused
from engine.float32 import FLT_MAX_BITS, FLT_MIN, FLT_TRUE_MIN, OVERFLOW_THRESHOLD

D = 2.0 ** -53
LIB = 2.0 ** -44
TINY64 = 2.0 ** -1000
_SAFETY = 2.0 ** -51
C_GELU = float(np.sqrt(2.0 / np.pi))
KAPPA = 0.044715


# --- float32 <-> float64 without float32 arithmetic -------------------------------------------
# CuPy compiles every kernel of its own with -ftz=true (cupy/cuda/compiler.py appends it), and
# there every float32 instruction flushes subnormals, the conversions to and from float64
# included. The sweep's own device code therefore never does float32 arithmetic: it converts
# through the bit patterns (integer arithmetic and float64, which -ftz leaves alone) and compares
# float32 values as bits or as exact float64.

def f32_bits(xp, x32):
    return xp.ascontiguousarray(x32).view(np.uint32)


def f32_to_f64(xp, x32):
    """The exact float64 value of each float32 (subnormals, signed zeros, inf and NaN kept)."""
    if _fused.enabled(xp):       # the same, in one kernel (fused.py)
        return _fused.f32_to_f64(xp, x32)
    b = f32_bits(xp, x32)
    e = ((b >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    m = (b & np.uint32(0x7FFFFF)).astype(np.float64)
    mag = xp.where(e == 0, m * FLT_TRUE_MIN, xp.ldexp(m + 2.0 ** 23, e - 150))
    mag = xp.where(e == 255, xp.where(m == 0, np.inf, np.nan), mag)
    return xp.where((b >> np.uint32(31)) == 1, -mag, mag)


def f64_to_f32(xp, v64):
    """RN32 (ties to even, gradual underflow, overflow to inf) of each float64, exactly."""
    if _fused.enabled(xp):
        return _fused.f64_to_f32(xp, v64)
    v64 = xp.asarray(v64, dtype=np.float64)
    mag = xp.abs(v64)
    with np.errstate(all="ignore"):   # NumPy warns on overflow to inf, which is meant
        normal = v64.astype(np.float32).view(np.uint32)   # right wherever the result is normal
    q = xp.rint(xp.where(mag < FLT_MIN, mag, 0.0) * 2.0 ** 149)   # exact scaling, RN-even
    sign = xp.where(xp.signbit(v64), np.uint32(0x80000000), np.uint32(0))
    sub = q.astype(np.uint32) | sign                    # q = 2^23 is the smallest normal's bits
    return xp.where(mag < FLT_MIN, sub, normal).view(np.float32)


def subnormal32(xp, x32):
    if _fused.enabled(xp):
        return _fused.subnormal32(xp, x32)
    b = f32_bits(xp, x32) & np.uint32(0x7FFFFFFF)
    return (b > 0) & (b < np.uint32(0x00800000))


@dataclass(frozen=True)
class Formula:
    """One output (forward value, or the VJP with g = 1) of an op on the sweep's device.

    exact: `evaluate(xp, x64)` returns the exact result (data movement, sign logic) as float64.
    Otherwise `evaluate(xp, x64)` returns (v64, bound): the float64 value and its relative bound
    (a float or an array), certified by `certify`. x64 holds the float32 inputs exactly."""
    evaluate: Callable
    reason: str
    exact: bool = False
    tiny_sign: Callable | None = None      # (xp, x64) -> int8 array: +1, -1, 0 (not known)
    nan_domain: Callable | None = None     # (xp, x64) -> bool array: the exact result is NaN
    overflow_exact: bool = False
    analytic: Callable | None = None       # (xp, x64) -> (mask, v32, v64): decided by a proof


@dataclass(frozen=True)
class OpRef:
    forward: Formula
    vjp: Formula | None


def _positive(xp, x):
    return xp.ones(x.shape, np.int8)


def _sign_of_x(xp, x):
    return xp.where(x < 0, -1, 1).astype(np.int8)


def _sigmoid(xp, t):
    return 1.0 / (1.0 + xp.exp(-t))


# --- forward and VJP formulas (g = 1) --------------------------------------------------------

def _abs(xp, x):
    return xp.abs(x)


def _abs_vjp(xp, x):
    return xp.where(x > 0, 1.0, -1.0)


def _relu(xp, x):
    return xp.where(x > 0, x, 0.0)


def _relu_vjp(xp, x):
    return xp.where(x > 0, 1.0, 0.0)


def _sqrt(xp, x):
    return xp.sqrt(x), D


def _sqrt_vjp(xp, x):
    return 0.5 / xp.sqrt(x), 3 * D


def _inv(xp, x):
    return 1.0 / x, D


def _inv_vjp(xp, x):
    return -1.0 / (x * x), 3 * D


def _exp(xp, x):
    return xp.exp(x), LIB


def _log(xp, x):
    return xp.log(x), LIB


def _sin(xp, x):
    return xp.sin(x), LIB


def _cos(xp, x):
    return xp.cos(x), LIB


def _neg_sin(xp, x):
    return -xp.sin(x), LIB


def _tanh(xp, x):
    return xp.tanh(x), LIB


def _tanh_vjp(xp, x):
    c = xp.cosh(x)
    return 1.0 / (c * c), 2 * LIB + 3 * D


def _sigmoid_fwd(xp, x):
    return _sigmoid(xp, x), LIB + 3 * D


def _sigmoid_vjp(xp, x):
    e = xp.exp(-xp.abs(x))
    one = 1.0 + e
    return e / (one * one), 3 * LIB + 6 * D


def _softplus(xp, x):
    return xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x))), 2 * LIB + 3 * D


def _gelu_parts(xp, x):
    t = 2.0 * (C_GELU * (x + KAPPA * (x * x * x)))
    s_pos, s_neg = _sigmoid(xp, t), _sigmoid(xp, -t)
    return t, s_pos, s_neg


def _gelu(xp, x):
    if _fused.references_enabled(xp):    # the code below in one kernel, bit for bit
        return _fused.gelu(xp, x, False, C_GELU, KAPPA, D, LIB)
    t, s_pos, s_neg = _gelu_parts(xp, x)
    # t carries 8D |t| (seven roundings and two float64 constants); sigmoid(t) moves by
    # sigmoid(-t) |dt| relatively. 1.01 covers the second-order terms.
    bound = 1.01 * (8 * D * xp.abs(t) * s_neg + LIB + 5 * D)
    return x * s_pos, bound


def _gelu_small(xp, x64):
    """|a| < 2^-30: gelu(a) = a/2 + d with 0 < d < 2^-30 |a/2|, since gelu(a) - a/2 =
    a tanh(t/4)/2 (t/4 = c (a + kappa a^3) has a's sign) and |tanh(t/4)| < 0.8 |a| (1 + 2^-60).
    a/2 is a float32 or, below 2^-125, a float32 midpoint; either way every value in
    (a/2, a/2 + 2^-30 |a/2|] rounds as a/2 pushed up by 2^-40 |a/2| does (float64, exact).
    gelu_erf(a) = a/2 + d too, d = (a/2) erf(a / sqrt 2): positive (both factors have a's sign)
    and below 0.8 |a| |a/2| < 2^-30 |a/2| (|erf(z)| <= 2 |z| / sqrt(pi)): the same rule decides
    it."""
    h = x64 * 0.5
    return xp.abs(x64) < 2.0 ** -30, f64_to_f32(xp, h + xp.abs(h) * 2.0 ** -40), h


def _gelu_vjp(xp, x):
    if _fused.references_enabled(xp):    # the code below in one kernel, bit for bit
        return _fused.gelu(xp, x, True, C_GELU, KAPPA, D, LIB)
    t, s_pos, s_neg = _gelu_parts(xp, x)
    du = C_GELU * (1.0 + 3.0 * KAPPA * (x * x))
    q = 2.0 * x * s_neg * du
    e_pos = 8 * D * xp.abs(t) * s_neg + LIB + 2 * D
    e_neg = 8 * D * xp.abs(t) * s_pos + LIB + 2 * D
    e_q = e_neg + 9 * D
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = 1.01 * (e_pos + xp.abs(q) * e_q / xp.abs(1.0 + q) + 3 * D)
    return s_pos * (1.0 + q), bound


def _gelu_vjp_sign(xp, x):
    # d = sigmoid(t) (1 + q) with q = 2x sigmoid(-t) u' <= 2 x (1/2) c < -2.39 for x < -3
    return xp.where(x < -3, -1, 0).astype(np.int8)


def _negative(xp, x):
    return x < 0


REFS: dict[str, OpRef] = {
    "abs": OpRef(Formula(_abs, "|a|: exact", exact=True),
                 Formula(_abs_vjp, "sign(a) for a != 0: exact", exact=True)),
    "relu": OpRef(Formula(_relu, "a or +0: exact", exact=True),
                  Formula(_relu_vjp, "1 or +0: exact", exact=True)),
    "sqrt": OpRef(Formula(_sqrt, "sqrt(a): one IEEE operation, D", nan_domain=_negative),
                  Formula(_sqrt_vjp, "0.5 / sqrt(a): two IEEE operations and their product, 3D",
                          nan_domain=_negative)),
    "inv": OpRef(Formula(_inv, "1 / a: one IEEE operation, D"),
                 Formula(_inv_vjp, "-1 / (a a): two IEEE operations, 3D")),
    "exp": OpRef(Formula(_exp, "exp(a): LIB; below 2^-1000 an underflow of a positive value",
                         tiny_sign=_positive, overflow_exact=True),
                 Formula(_exp, "exp(a) (g = 1): as the forward", tiny_sign=_positive,
                         overflow_exact=True)),
    "log": OpRef(Formula(_log, "log(a): LIB", nan_domain=_negative),
                 Formula(_inv, "1 / a: one IEEE operation, D")),
    "sin": OpRef(Formula(_sin, "sin(a): LIB"), Formula(_cos, "cos(a): LIB")),
    "cos": OpRef(Formula(_cos, "cos(a): LIB"), Formula(_neg_sin, "-sin(a): LIB")),
    "tanh": OpRef(Formula(_tanh, "tanh(a): LIB"),
                  Formula(_tanh_vjp, "1 / cosh(a)^2: cosh LIB, squared 2 LIB + D, divided D; "
                          "no cancellation (1 - t^2 would cancel); below 2^-1000 cosh overflowed: "
                          "positive", tiny_sign=_positive)),
    "sigmoid": OpRef(Formula(_sigmoid_fwd, "1 / (1 + exp(-a)): exp LIB (damped by e/(1+e) <= 1), "
                             "the sum and the division 2D; below 2^-1000 exp overflowed: positive",
                             tiny_sign=_positive),
                     Formula(_sigmoid_vjp, "e / (1 + e)^2 with e = exp(-|a|): 3 LIB + 6D; "
                             "below 2^-1000 e underflowed: positive", tiny_sign=_positive)),
    "softplus": OpRef(Formula(_softplus, "max(a, 0) + log1p(exp(-|a|)): two nonnegative terms, "
                              "exp's error damped by log1p (2 LIB), the sum D; below 2^-1000 "
                              "exp underflowed: positive", tiny_sign=_positive),
                      Formula(_sigmoid_fwd, "sigmoid(a) (g = 1): as sigmoid's forward",
                              tiny_sign=_positive)),
    "gelu": OpRef(Formula(_gelu, "a sigmoid(t), t = 2 c (a + kappa a^3): t's 8D |t| amplified by "
                          "sigmoid(-t), sigmoid LIB + 2D, the product D; below 2^-1000 sigmoid "
                          "underflowed: the sign of a; |a| < 2^-30 decided as a/2 + d, "
                          "0 < d < 2^-30 |a/2| (a proof: _gelu_small)", tiny_sign=_sign_of_x,
                          analytic=_gelu_small),
                  Formula(_gelu_vjp, "sigmoid(t) (1 + q), q = 2 a sigmoid(-t) u': both sigmoids "
                          "as the forward, q's relative error e_q amplified by |q| / |1 + q| "
                          "(large near the root: undecided there); below 2^-1000 negative for "
                          "a < -3", tiny_sign=_gelu_vjp_sign)),
}

# --- unary functions the engine has no op for (the ulp table's) ------------------------------

SQRT1_2 = math.sqrt(0.5)
_HOST_SPECIAL = {"erf": np.vectorize(math.erf, otypes=[np.float64]),
                 "erfc": np.vectorize(math.erfc, otypes=[np.float64])}


def _special(xp, name: str):
    """erf or erfc over float64 arrays of xp: cupyx.scipy.special's on CuPy, the C library's
    element by element on NumPy (and on the tests' stand-ins for CuPy, NumPy underneath)."""
    if getattr(xp, "__name__", "") == "cupy":
        import cupyx.scipy.special as special
        return getattr(special, name)
    return _HOST_SPECIAL[name]


def _rsqrt(xp, x):
    # sqrt(x) (1 + d1), then its reciprocal (1 + d2): (1 + d2) / (1 + d1), 2D and one D more
    return 1.0 / xp.sqrt(x), 3 * D


def _erf(xp, x):
    return _special(xp, "erf")(x), LIB


def _gelu_erf(xp, x):
    # z = x sqrt(1/2) carries 2D (the constant and the product). erfc(w) moves by
    # |w (log erfc)'(w)| 2D relatively; for w > 0 (x < 0) that is below w (w + sqrt(w^2 + 2)) 2D
    # <= (2w^2 + 1) 2D = (x^2 + 1) 2D (Abramowitz and Stegun 7.1.13: erfc(w) >
    # 2 e^-w^2 / (sqrt(pi) (w + sqrt(w^2 + 2)))); for w <= 0, erfc(w) >= 1 and the move is below
    # 1.13 |w| e^-w^2 2D <= D. erfc itself LIB, x/2 exact, the product D; 1.01 and one D more
    # cover the second-order terms.
    amp = xp.where(x < 0, x * x + 1.0, 1.0)
    v = (0.5 * x) * _special(xp, "erfc")(-(x * SQRT1_2))
    return v, 1.01 * (LIB + 2 * D * amp + 2 * D)


FUNCTIONS: dict[str, OpRef] = {
    "rsqrt": OpRef(Formula(_rsqrt, "1 / sqrt(a): two IEEE operations, 3D", nan_domain=_negative),
                   None),
    "erf": OpRef(Formula(_erf, "erf(a): LIB (erf is never below 2^-1000 for a float32 a != 0)"),
                 None),
    "gelu_erf": OpRef(Formula(_gelu_erf, "(a/2) erfc(-a sqrt(1/2)) (no cancellation of 1 + erf "
                              "for a < 0): erfc LIB, its argument's 2D amplified up to x^2 + 1 "
                              "times for a < 0, the product D; below 2^-1000 erfc underflowed: "
                              "the sign of a; |a| < 2^-30 decided as a/2 + d, 0 < d < 2^-30 |a/2| "
                              "(gelu's proof: _gelu_small)", tiny_sign=_sign_of_x,
                              analytic=_gelu_small), None),
}


def formulas(label: str) -> OpRef | None:
    """The formulas of an engine op (REFS) or of a function the engine has none for
    (FUNCTIONS), by the capsule op's label; None for neither."""
    return REFS.get(label) or FUNCTIONS.get(label)


SKIPPED = {
    "clamp": "parameterised (lo, hi): a sweep holds one parameter value, so it would verify "
             "that value only; not swept",
    "scale": "parameterised (factor): as clamp; not swept",
    "safe_log": "parameterised (eps): as clamp; not swept",
}


# --- certification ---------------------------------------------------------------------------

def f32_boundaries(xp, r32):
    """(m_lo, m_hi), float64: the rounding boundaries around the float32 magnitudes |r32|."""
    bits = f32_bits(xp, r32) & np.uint32(0x7FFFFFFF)
    finite = bits < np.uint32(0x7F800000)
    top = bits == np.uint32(FLT_MAX_BITS)
    up_bits = xp.where(finite & ~top, bits + np.uint32(1), bits)
    up = xp.where(top, 2.0 ** 128, f32_to_f64(xp, up_bits.view(np.float32)))
    down_bits = xp.where(bits > 0, bits - np.uint32(1), np.uint32(0))
    down = f32_to_f64(xp, down_bits.view(np.float32))
    a64 = f32_to_f64(xp, bits.view(np.float32))
    m_hi = xp.where(finite, (a64 + up) / 2, np.inf)   # sums of adjacent float32 are exact
    m_lo = xp.where(finite, xp.where(bits > 0, (a64 + down) / 2, 0.0), OVERFLOW_THRESHOLD)
    return m_lo, m_hi


def certify(xp, v64, bound, x64, formula: Formula):
    """(v32, decided): the correctly rounded float32 results the certificate decides (module
    docstring); v32 is meaningless where decided is False."""
    if _fused.enabled(xp):       # the rule below (f32_boundaries inlined) in one kernel
        sign = None if formula.tiny_sign is None else formula.tiny_sign(xp, x64)
        dom = None if formula.nan_domain is None else formula.nan_domain(xp, x64)
        return _fused.certify(xp, v64, bound, sign, dom, formula.overflow_exact)
    with np.errstate(all="ignore"):
        v64 = xp.asarray(v64, dtype=np.float64)
        mag = xp.abs(v64)
        v32 = f64_to_f32(xp, v64)
        m_lo, m_hi = f32_boundaries(xp, v32)
        r = mag * bound * (1 + _SAFETY)
        normal = xp.isfinite(v64) & (mag >= TINY64)
        decided = normal & ((mag - m_lo) * (1 - _SAFETY) > r) & ((m_hi - mag) * (1 - _SAFETY) > r)
        tiny = mag < TINY64
        if formula.tiny_sign is not None:
            sign = formula.tiny_sign(xp, x64)
            known = tiny & (sign != 0)
            zero = xp.where(sign < 0, np.float32(-0.0), np.float32(0.0))
            v32 = xp.where(known, zero, v32)
            decided = decided | known
        if formula.overflow_exact:
            decided = decided | xp.isinf(v64)
        if formula.nan_domain is not None:
            dom = formula.nan_domain(xp, x64)
            v32 = xp.where(dom, np.float32(np.nan), v32)
            decided = (decided & ~xp.isnan(v64)) | dom
        else:
            decided = decided & ~xp.isnan(v64)
    return v32, decided


def evaluate(xp, formula: Formula, x32):
    """(v32, v64, decided) of one formula over float32 inputs (finite and nonzero: the caller
    routes the others to mpmath)."""
    x64 = f32_to_f64(xp, x32)
    if formula.exact:
        v64 = formula.evaluate(xp, x64)
        return f64_to_f32(xp, v64), v64, xp.ones(x32.shape, bool)
    with np.errstate(all="ignore"):
        v64, bound = formula.evaluate(xp, x64)
    v32, decided = certify(xp, v64, bound, x64, formula)
    if formula.analytic is not None:
        mask, a32, a64 = formula.analytic(xp, x64)
        v32, decided = xp.where(mask, a32, v32), decided | mask
        v64 = xp.where(mask, a64, v64)
    return v32, v64, decided
