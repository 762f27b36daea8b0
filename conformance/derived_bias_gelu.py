"""Derived error bounds of bias_gelu (RuntimeEntry), forward and VJP, for s = float32(x + b) (one
rounding that the reference shares: not an error) and gelu evaluated in float64 and rounded once
(native_cuda.bias_gelu's bias_gelu.cu and reference.bias_gelu's NumPy). derived.py's gelu rules
are the model, with float64's u64 = 2^-53 inside and the policy's float32 unit at the end.

Assumption (as derived_loss.py): float64 exp and tanh within 2 float64 ulps (relative 2^-51).

Forward: y = s / (1 + exp(-z)), z = 2 C (s + K s^3): z carries 6 roundings (|dz| <= 6 u64 |z|,
all terms one sign, plus the constants' 2 u64), which moves sigmoid(z) by (1 - sigmoid(z)) |dz|
relatively; exp (2^-51), 1 + e and the division (2 u64):
  |got - y| <= (u + rho (1 + u)) (1 + 4u) |y|,  rho = (1 - sigmoid(z)) 8 u64 |z| + 2^-51 + 2 u64.
VJP dx = g d(s), d = 0.5 (1 + t) + 0.5 s (1 - t^2) P, P = C (1 + 3 K s^2), t = tanh(w),
w = C (s + K s^3): twelve roundings over the terms' magnitude M_d = 0.5 (1 + |t|) + 0.5 |s|
(1 + t^2) P, and t's error dt = (1 - t^2) 6 u64 |w| + 2^-51 |t| moved by |dd/dt| <= 0.5 + |s t| P
(the derivative cancels near s = -0.7518: the bound is absolute there, as derived.py's gelu VJP):
  |got - dx| <= (|g| (12 u64 M_d + (0.5 + |s t| P) dt) + (u + u64) |dx|) (1 + 4u).
db = sum over the rows of g d(s) in float64, any order: the terms' errors above (without the
float32 rounding), gamma64_rows sum |terms|, the reference's own REFERENCE_REL (sum |terms| +
|db|) (references/bias_gelu.py sums float64-nearest terms), and one float32 rounding u |db|.
"""
from __future__ import annotations

import math

import numpy as np

from conformance.error_terms import DerivedRule, clean as _clean, gamma as _gamma
from engine.types import RuntimeEntry as Entry

U64 = 2.0 ** -53
FN64_REL = 2.0 ** -51          # float64 exp / tanh within 2 ulps (the module docstring)
REFERENCE_REL = 2.0 ** -52     # references/bias_gelu.py's fsum of float64-nearest terms
C, K = math.sqrt(2.0 / math.pi), 0.044715


def _s(ctx):
    x, b = (np.asarray(a, np.float32) for a in ctx.inputs[:2])
    with np.errstate(all="ignore"):
        return (x + b).astype(np.float64)


def forward_bound(ref, ctx, unit):
    s = _s(ctx)
    with np.errstate(all="ignore"):
        z = 2 * C * (s + K * s ** 3)
        one_minus = _clean(1.0 / (1.0 + np.exp(z)))
        rho = _clean(one_minus * 8 * U64 * np.abs(z)) + FN64_REL + 2 * U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


def _term_error(ctx):
    """|g| (12 u64 M_d + |dd/dt| dt) per element: the float64 error of g d(s) before rounding."""
    s = _s(ctx)
    g = np.abs(np.asarray(ctx.g, np.float64))
    with np.errstate(all="ignore"):
        w = C * (s + K * s ** 3)
        t = np.tanh(w)
        p = C * (1 + 3 * K * s * s)
        m_d = 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(s) * (1 + t * t) * p
        dt = (1 - t * t) * 6 * U64 * np.abs(w) + FN64_REL * np.abs(t)
        e = g * (12 * U64 * m_d + (0.5 + np.abs(s * t) * p) * dt)
    return _clean(e)


def vjp_bound(ref, ctx, unit):
    exact = _clean(np.abs(ref.exact))
    if getattr(ctx, "input_index", 0) == 0:
        return (_term_error(ctx) + (unit + U64) * exact) * (1 + 4 * unit)
    x_shape = np.shape(ctx.inputs[0])
    rows = math.prod(x_shape[:-1])
    terms_err = _term_error(ctx).reshape(rows, x_shape[-1]).sum(axis=0)
    mag = _clean(np.asarray(ref.magnitude, np.float64))
    b = (terms_err + (U64 + float(_gamma(max(rows, 1), U64))) * mag + REFERENCE_REL * (mag + exact)
         + unit * exact)
    return b * (1 + 4 * unit)


FORWARD_RULES = {
    Entry.bias_gelu: DerivedRule(
        "derived: (u + (1 - sigmoid(z)) 8u64|z| + 2^-51 + 2u64) |y|",
        "the float32 sum x + b (shared with the reference), then gelu in float64, rounded once",
        forward_bound),
}
VJP_RULES = {
    Entry.bias_gelu: DerivedRule(
        "derived: dx |g| (12u64 M_d + |dd/dt| dt) + u|dx|; db their sum + gamma64_rows M + u|db|",
        "g gelu'(s) in float64 rounded once, and its float64 sum over the rows rounded once",
        vjp_bound),
}
