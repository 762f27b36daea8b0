"""Derived error bounds of the fused cross-entropy loss (RuntimeEntry cross_entropy), forward and
VJP, for a float64 evaluation rounded once to float32 (native_cuda.cross_entropy's tl_xent_* and
reference.cross_entropy's NumPy both evaluate so). log_softmax's rule (derived.py) is the model:
each operation's rounding, each elementary function's error and the sums' gamma_k, first order,
here with float64's u64 = 2^-53 and the float32 rounding u of the policy at the end.

Assumption (stated once, as derived.py's ELEMENTARY_ULPS): float64 exp and log1p are within
EXP64_ULPS = 2 float64 ulps, relative 2^-51 (libdevice lists 1 ulp for both, CUDA C Programming
Guide, double-precision table; glibc's x86_64 tables 1 ulp).

Forward, per row (m the max, d_j = fl64(x_j - m), relative error u64 since x_j and m are float32):
- e_j = exp(d_j): relative |d_j| u64 + 2^-51 <= 746 u64 + 2^-51 where e_j is a normal float64
  (d_j >= -745; below, e_j is under 2^-1074 and its absolute loss stays below every float32
  rounding of a result: error_models' floor covers it);
- T = sum of C - 1 positive terms in any order: rho_T = 746 u64 + 2^-51 + gamma64_C;
- log1p(T): T/(1 + T) <= log1p(T), so T's relative error moves it by at most rho_T log1p(T),
  plus log1p's own 2^-51;
- l = log1p(T) + fl64(m - x_t): two non-negative terms, two roundings: rho_l = rho_T + 2^-51 + 2 u64.
Mean: N non-negative terms summed in any order (gamma64_N) and one division (u64): rho_L = rho_l +
gamma64_N + u64, a relative bound since every term has one sign. The float32 rounding adds u |L|:
  |got - L| <= (u + rho_L (1 + u)) (1 + 4u) |L|     (rho_L < 2^-42 for C, N below 2^20).
VJP, per element (c = fl64(g / N), relative u64; S = 1 + T, rho_S = rho_T + u64):
- off the target c (e_j / S): rho = rho_e + rho_S + 2 u64;
- at the target: -c T / S (first max) or -c (S - e_t) / S, S - e_t >= 1 >= e_t so S <= 2(S - e_t)
  and the subtraction's error stays relative: rho = 2 rho_S + 2 rho_e + 3 u64 covers both.
  |got - dA| <= (u + rho_V (1 + u)) (1 + 4u) |dA|,  rho_V = 2 rho_S + 2 rho_e + 4 u64.
"""
from __future__ import annotations

import numpy as np

from conformance.error_terms import DerivedRule, clean as _clean, gamma as _gamma
from engine.types import RuntimeEntry as Entry

U64 = 2.0 ** -53
EXP64_REL = 2.0 ** -51     # EXP64_ULPS = 2 float64 ulps, relative (the module docstring)
D_MAX = 746.0              # |d| beyond which exp(d) is below every normal float64


def _rho_e() -> float:
    return D_MAX * U64 + EXP64_REL


def _rho_t(classes: int) -> float:
    return _rho_e() + float(_gamma(max(classes, 1), U64))


def _shape(ctx):
    return np.shape(np.asarray(ctx.inputs[0]))


def forward_bound(ref, ctx, unit):
    rows, classes = _shape(ctx)
    rho_l = _rho_t(classes) + EXP64_REL + 2 * U64
    rho = rho_l + float(_gamma(max(rows, 1), U64)) + U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


def vjp_bound(ref, ctx, unit):
    _, classes = _shape(ctx)
    rho_s = _rho_t(classes) + U64
    rho = 2 * rho_s + 2 * _rho_e() + 4 * U64
    return (unit + rho * (1 + unit)) * (1 + 4 * unit) * _clean(np.abs(ref.exact))


FORWARD_RULES = {
    Entry.cross_entropy: DerivedRule(
        "derived: (u + rho_L) |L|, rho_L = 746u64 + gamma64_C + gamma64_N + ...",
        "per row log1p(T) + (max - x_t) in float64 (non-negative terms), the rows' mean in "
        "float64, rounded once to float32", forward_bound),
}
VJP_RULES = {
    Entry.cross_entropy: DerivedRule(
        "derived: (u + rho_V) |dA|, rho_V = 2 rho_S + 2 rho_e + 4u64",
        "(g / N)(e_j / S) and, at the target, -(g / N) T / S or -(g / N)(S - e_t) / S in float64 "
        "(no cancellation), rounded once to float32", vjp_bound),
}
