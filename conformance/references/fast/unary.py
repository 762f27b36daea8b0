"""Certified formulas for the elementwise transcendental ops and their VJPs, in double-double.

Each takes the float32 inputs (as float64 arrays, finite, not routed) and returns a `Fast`. Where a
float64 evaluation of the op's formula would overflow, underflow or cancel, the formula here is
rewritten (the exact path's rewritings: tanh = -expm1(-2|a|) / (2 + expm1(-2|a|)), sigmoid and its
derivative through e^-|a|, softplus through log1p) or scaled (exp returns 2^n m: a product is formed
on m and scaled last, see elementwise.scaled_finish), and the elements beyond the dd domain are
decided from monotone bounds stated next to each rule, or left to the exact path. The constants of
gelu (sqrt(2/pi) and the decimal 0.044715) are dd constants, exact to 2^-105.

Saturation rules (proved where they are used): tanh(a) rounds to +-1 in float64 (and float32) for
|a| >= 19.1, since 1 - tanh|a| < 2 e^-2|a| < 2^-54; sigmoid(a) rounds to 1 for a >= 37.5 (1 - s <
e^-a < 2^-54); softplus(a) rounds to a for a >= 37.5 (0 < softplus(a) - a < e^-a < 2^-54 < ulp(a)/2);
gelu(a) rounds to a and its derivative factor to 1 (so the VJP to g) for a >= 8 (both within
2^-64 relative, see _gelu_vjp).
"""

from __future__ import annotations

import numpy as np

from conformance.references.fast import ddmath
from conformance.references.fast.dd import DD, const, where
from conformance.references.fast.elementwise import Fast, decided_values, scaled_finish


def _signed(x, like):
    return np.where(np.signbit(like), -x, x)


def _exp_scaled(x: DD):
    """(n, m) of exp(x) with x clipped into exp_parts' range (callers decide beyond it)."""
    return ddmath.exp_parts(x)


def _one_plus(m: DD, n: np.ndarray) -> DD:
    """1 + 2^n m for 2^n m in [0, 1]; below 2^-900 the term is dropped and charged (relative to 1)."""
    tiny = n < -900
    e = where(tiny, DD(np.zeros_like(m.hi)), m.ldexp(np.where(tiny, 0, n)))
    out = e.add_fp(1.0)
    out.rad = out.rad + np.where(tiny, 2.0 ** -898, 0.0)  # 2^n m < 2^-899
    return out


def _finish_scaled(v: DD, n: np.ndarray, extra=None) -> Fast:
    dd, decided, v32, v64 = scaled_finish(v, n)
    if extra is not None:
        mask, e32, e64 = decided_values(dd.hi.shape, [(decided, v32, v64)] + extra)
        return Fast(dd, mask, e32, e64)
    return Fast(dd, decided, v32, v64)


# ---------------------------------------------------------------- exp, log, sin, cos


def exp_forward(a):
    n, m = _exp_scaled(DD(np.clip(a, -4096, 4096)))
    far = np.abs(a) > 4096  # e^a beyond 2^5900: inf; below 2^-5900: +0
    big = np.where(a > 0, np.inf, 0.0)
    return _finish_scaled(m, n, [(far, big, big)])


def exp_vjp(a, g):
    n, m = _exp_scaled(DD(np.clip(a, -4096, 4096)))
    far = np.abs(a) > 4096
    big = np.where(a > 0, _signed(np.inf, g), _signed(0.0, g))
    out = _finish_scaled(m.mul_fp(g), n, [(far & (g != 0), big, big)])
    out.zero = g == 0
    return out


def log_forward(a):
    return Fast(ddmath.log(DD(a)), zero=a == 1)


def sin_forward(a):
    s, _ = ddmath.sincos_f32(a)
    return Fast(s, zero=a == 0)


def sin_vjp(a, g):
    _, c = ddmath.sincos_f32(a)
    return Fast(c.mul_fp(g), zero=g == 0)


def cos_forward(a):
    _, c = ddmath.sincos_f32(a)
    return Fast(c)


def cos_vjp(a, g):
    s, _ = ddmath.sincos_f32(a)
    return Fast(s.mul_fp(-g), zero=(g == 0) | (a == 0))


# ---------------------------------------------------------------- tanh, sigmoid, softplus


def tanh_forward(a):
    sat = np.abs(a) >= 19.1
    y = np.where(sat, 0.0, -2 * np.abs(a))
    em = ddmath.expm1(DD(y))
    t = (-em) / em.add_fp(2.0)
    sgn = np.where(np.signbit(a), -1.0, 1.0)
    one = _signed(1.0, a)
    decided, v32, v64 = decided_values(a.shape, [(sat, one, one)])
    return Fast(DD(t.hi * sgn, t.lo * sgn, t.rad, t.bad), decided, v32, v64, zero=a == 0)


def _bell(abs_a, g, factor):
    """factor g E / (1 + E)^2 with E = e^-abs_a (the derivative of sigmoid, and of tanh with 2|a|)."""
    far = abs_a > 4096
    n, m = _exp_scaled(DD(-np.minimum(abs_a, 4096)))
    den = _one_plus(m, n).square()
    v = m.mul_fp(factor * g) / den
    z = _signed(0.0, g)
    return _finish_scaled(v, n, [(far & (g != 0), z, z)])


def tanh_vjp(a, g):
    out = _bell(2 * np.abs(a), g, 4.0)
    out.zero = g == 0
    return out


def _sigmoid_parts(a):
    """(n, v): sigmoid(a) = 2^n v (v a DD), for |a| <= 4096."""
    e_n, e_m = _exp_scaled(DD(-np.abs(np.clip(a, -4096, 4096))))
    den = _one_plus(e_m, e_n)
    pos = a >= 0
    num = where(pos, DD(np.ones_like(a)), e_m)
    return np.where(pos, 0, e_n), num / den


def sigmoid_forward(a):
    n, v = _sigmoid_parts(a)
    sat = a >= 37.5
    ones = np.ones_like(a)
    return _finish_scaled(v, n, [(a < -4096, 0.0 * ones, 0.0 * ones), (sat, ones, ones)])


_TINY = 2.0 ** -40  # below this |a| the derivative factors are their Taylor series (exact leading terms)


def _tiny_factor(a, lead: float, second: DD, tail_coef: float, power: int) -> DD:
    """lead + second (a DD of a's first-order or second-order term, exact or to 2^-105) with the series
    tail bounded by tail_coef |a|^power: the form that keeps a factor like 1/4 - a^2/16 distinct from
    1/4 when g times it sits on a float32 midpoint."""
    out = second.add_fp(np.full(a.shape, lead))
    out.rad = out.rad + tail_coef * np.abs(a) ** power
    return out


def _with_tiny(out: Fast, a, g, factor: DD) -> Fast:
    """Replace the elements with |a| < _TINY by g times the series factor."""
    tiny = np.abs(a) < _TINY
    if not tiny.any():
        return out
    prod = factor.mul_fp(g)
    out.dd = where(tiny, prod, out.dd)
    if out.decided is not None:
        out.decided = out.decided & ~tiny
    return out


def sigmoid_vjp(a, g):
    """g E / (1 + E)^2, E = e^-|a|; for |a| < 2^-40, g (1/4 - a^2/16) with a tail below a^4/90
    (sigmoid'(a) = 1/4 - a^2/16 + a^4/96 - ...; a^2 is exact)."""
    out = _bell(np.abs(a), g, 1.0)
    out.zero = g == 0
    ac = np.where(np.abs(a) < _TINY, a, 0.0)
    return _with_tiny(out, a, g, _tiny_factor(ac, 0.25, DD(-(ac * ac) / 16), 1 / 90, 4))


def softplus_forward(a):
    """a + log1p(e^-a) for a > 0, log1p(e^a) for a <= 0; for a < -600, log1p(E) = E (1 - d) with
    0 <= d <= E/2 < 2^-865 (charged relative), scaled like exp."""
    ac = np.clip(a, -4096, 4096)
    n, m = _exp_scaled(DD(-np.abs(ac)))
    deep = n < -860
    e = m.ldexp(np.where(deep, 0, n))
    lp = ddmath.log1p(where(deep, DD(np.full(a.shape, 0.5)), e))
    pos = DD(np.where(a > 0, a, 0.0)) + lp
    value = where(a > 0, pos, lp)
    tail = DD(m.hi, m.lo, m.rad + np.abs(m.hi) * 2.0 ** -860, m.bad)
    dd_val, decided, v32, v64 = scaled_finish(where(deep, tail, value), np.where(deep, n, 0))
    sat = a >= 37.5
    zeros = np.zeros_like(a)  # softplus > 0: +0
    mask, w32, w64 = decided_values(a.shape, [(decided, v32, v64), (a < -4096, zeros, zeros), (sat, a, a)])
    return Fast(dd_val, mask, w32, w64)


def softplus_vjp(a, g):
    """g sigmoid(a); for |a| < 2^-40, g (1/2 + a/4) with a tail below |a|^3/40 (a/4 is exact)."""
    n, v = _sigmoid_parts(a)
    sat = a >= 37.5  # g sigmoid(a) = g (1 - e), e < 2^-54: rounds to g in both formats
    z = _signed(0.0, g)
    out = _finish_scaled(v.mul_fp(g), n, [(a < -4096, z, z), (sat, g, g)])
    out.zero = g == 0
    ac = np.where(np.abs(a) < _TINY, a, 0.0)
    return _with_tiny(out, a, g, _tiny_factor(ac, 0.5, DD(ac / 4), 1 / 40, 3))


# ---------------------------------------------------------------- gelu


def _c(mp):
    return mp.sqrt(2 / mp.pi)  # sqrt(2/pi)


def _kappa(mp):
    return mp.mpf("0.044715")  # the decimal, exactly as the op defines it


def _three_kappa(mp):
    return 3 * mp.mpf("0.044715")


def _gelu_u(a):
    """u = c (a + kappa a^3) as a DD (a^2 exact, a^3 = a^2 a by two_prod: exact)."""
    a2 = a * a
    a3 = DD(a2).mul_fp(a)
    inner = (a3 * const(_kappa, a.shape)).add_fp(a)
    return inner * const(_c, a.shape), a2


def gelu_forward(a):
    """a sigmoid(2u): a / (1 + e^-2u) for a > 0; a e^2u / (1 + e^2u) for a < 0 (scaled)."""
    sat = a >= 8  # a sigmoid(2u) = a (1 - e), e < e^-2u <= 2^-71
    a_c = np.where(sat, 1.0, a)
    u, _ = _gelu_u(a_c)
    two_u = u.mul_fp(2.0)
    deep = two_u.hi < -4096  # then |gelu(a)| < 2^128 e^-4096: a signed zero (a < 0: -0)
    x = DD(-np.abs(np.clip(two_u.hi, -4096, 4096)), -np.where(two_u.hi >= 0, 1, -1) * two_u.lo, two_u.rad,
           two_u.bad)
    n, m = _exp_scaled(x)  # e^-|2u|
    den = _one_plus(m, n)
    pos = a_c > 0
    num = where(pos, DD(a_c), m.mul_fp(a_c))
    dd_val, decided, v32, v64 = scaled_finish(num / den, np.where(pos, 0, n))
    neg0 = np.full(a.shape, -0.0)
    mask, w32, w64 = decided_values(a.shape, [(decided, v32, v64), (deep & ~sat, neg0, neg0), (sat, a, a)])
    return Fast(dd_val, mask, w32, w64, zero=a == 0)


def _gelu_vjp(a, g):
    """g D, D = sigmoid(2u) (1 + 2 a sigmoid(-2u) u'), u' = c (1 + 3 kappa a^2); with E = e^-|2u|:
    a >= 0: D = (1 + E + 2 a u' E) / (1 + E)^2 (no cancellation); a < 0: D = E (1 + E + 2 a u') / (1 + E)^2
    (scaled like exp; 1 + 2 a u' cancels near the minimum of gelu, a* ~ -0.7518, which the radius
    shows). Saturation for a >= 8: |D - 1| <= e^-2u (1 + 2 a u') <= 2^-71.1 * 123.4 < 2^-64 at a = 8
    and the bound decreases beyond (its log-derivative 1/a + 6 k a / (1 + 3 k a^2) - 2c (1 + 3 k a^2)
    is negative), so g D rounds to g. Deep negative (2u < -4096): |g D| < 2^128 e^-4096 (1 + 2|a| u'):
    a zero with the sign of -g (1 + 2 a u' < 0 there).
    """
    sat = a >= 8
    a_c = np.where(sat, 1.0, a)
    u, a2 = _gelu_u(a_c)
    two_u = u.mul_fp(2.0)
    deep = (two_u.hi < -4096) & ~sat
    x = DD(-np.abs(np.clip(two_u.hi, -4096, 4096)), -np.where(two_u.hi >= 0, 1, -1) * two_u.lo, two_u.rad,
           two_u.bad)
    n, m = _exp_scaled(x)
    one_e = _one_plus(m, n)
    du = (const(_three_kappa, a.shape).mul_fp(a2)).add_fp(1.0) * const(_c, a.shape)
    two_a_du = du.mul_fp(2 * a_c)
    pos = a_c >= 0
    e_small = m.ldexp(np.where(n < -900, 0, n))
    e_small = where(n < -900, DD(np.zeros_like(a)), e_small)
    num_pos = one_e + two_a_du * e_small
    num_neg = (one_e + two_a_du) * m
    v = where(pos, num_pos, num_neg) / one_e.square()
    dd_val, decided, v32, v64 = scaled_finish(v.mul_fp(g), np.where(pos, 0, n))
    z = _signed(0.0, -g)
    mask, w32, w64 = decided_values(a.shape, [(decided, v32, v64), (deep & (g != 0), z, z), (sat, g, g)])
    out = Fast(dd_val, mask, w32, w64, zero=g == 0)
    # |a| < 2^-40: D = 1/2 + c a + (2 c kappa - 2 c^3 / 3) a^3 + O(a^5), |tail| < |a|^3 (c ~ 0.798)
    ac = np.where(np.abs(a) < _TINY, a, 0.0)
    return _with_tiny(out, a, g, _tiny_factor(ac, 0.5, const(_c, a.shape).mul_fp(ac), 1.0, 3))


gelu_vjp = _gelu_vjp


# ---------------------------------------------------------------- compositions with rational parts


def inv_vjp(a, g):
    """-g / a^2: a^2 exact in float64 (48 bits, in [2^-298, 2^256])."""
    return Fast(DD(-g) / DD(a * a), zero=g == 0)


def sqrt_vjp(a, g):
    """g / (2 sqrt(a)) for a > 0."""
    return Fast(DD(g) / DD(a).sqrt().mul_fp(2.0), zero=g == 0)
