"""The derived bound of native_cuda.flash_attention (engine/csrc/cuda/flash_attention.cu), forward
and VJP: derived_norm_attention.py's attention rules under the flash kernel's schedule. derived.py
looks it up by capsule name (CAPSULE_FORWARD_RULES / CAPSULE_VJP_RULES), so the op's other capsules
keep the composed rule.

What the kernel does (64-key tiles, nt = ceil(Lk / 64) of them, u = 2^-24, E_REL = libdevice
expf's 2 ulp relative to its result, every fused multiply-add an explicit fmaf: one rounding):

Scores s' = fl(fl(q . k) scale): a left fold of d fmaf (padding features are exact zeros), then the
scale: gamma_{d+1} |scale| |q| . |k| (the composed rule's term under the capsule's reduce=
fixed-left policy, k_p(d) = d).

Forward, online softmax. A participating key's weight is w_ij = expf(fl(s'_ij - m_t)) times the
alpha = expf(fl(m_a - m_b)) of every later tile whose max grew (m_t the running max when its tile
was read). Exactly, the product of the alphas telescopes to exp(m_t - m'), so w_ij is
exp(s'_ij - m') perturbed in its logarithm by (i) the rounded arguments: u |s'_ij - m_t| +
u sum |m_a - m_b| <= 2 u |s'_ij - m'| (both are at most |s'_ij - m'| since s'_ij <= m_t <= m'),
twice the composed rule's one rounding, and (ii) at most nt expf calls: nt (-log1p(-E_REL)). O's
accumulator and l are multiplied by the same alpha, so an alpha's error is a weight's error, never
a mismatch between numerator and denominator: P'' = w / sum w is the composed rule's P' with
a_ij = es_ij + 2u (|d_ij| + es_ij + es_max) + nt e_log and no per-element expf or division term
(c0's E_REL and 2u parts are 0 here). The sum l: each thread keeps its part of it; a term passes
3 serial adds (the thread's 4 columns of its tile), one fmaf(l_part, alpha, tile part) per tile
from its own on (at most nt) and, after the last tile, a 16-lane xor tree over the row's threads
(4): gamma_{nt + 7} (the same depth as when the tree ran on each tile's sum).
O = fl(fl(sum_j w_ij v_j) / l): per term at most (participants) fmaf plus nt rescalings plus the
division: gamma_{Lk + nt + 1} of sum P'' |v|, and as many roundings' underflow.

VJP. P = fl(expf(fl(s' - m')) fl(1 / l')) with m', l' the forward's own bits (the statistics pass
runs the forward's code): the numerator is the composed rule's (one argument rounding, one expf
in c0), the denominator is the forward's sum l' (weights with the online perturbation above,
gamma_{nt + 7}), the reciprocal and the product 2u. c = D = g . out, a left fold of dv fmaf of
the capsule's own forward output (the composed rule's c2: out's actual error inherited, gamma_dv);
dS = fl(P fl(dP - D)): 2 roundings; dq, dk, dv: left folds of fmaf over participants, dq and dk
times scale: gamma_{Lk+1}, gamma_{Lq+1}, gamma_{Lq} (the composed rule's under fixed-left).
"""
from __future__ import annotations

import math

from conformance.derived_norm_attention import (AttSchedule, _attention_forward_bound,
                                                _attention_vjp_bound)
from conformance.error_terms import DerivedRule

CAPSULE = "native_cuda.flash_attention"
TILE = 64          # flash_attention.cu's FL_T
SUM_DEPTH = 7      # 3 serial adds of a thread's 4 columns + a 16-lane xor tree (4) at the end


def key_tiles(lk: int) -> int:
    """nt: the key tiles of a row (each may rescale once and calls expf at most once per weight)."""
    return max(1, math.ceil(lk / TILE))


def sum_k(lk: int) -> int:
    """k of gamma_k for the running sum l: SUM_DEPTH within a tile + one fmaf per tile."""
    return key_tiles(lk) + SUM_DEPTH


def out_k(lk: int) -> int:
    """k of gamma_k for O: a fmaf per participant, a rescaling per tile, the division by l."""
    return lk + key_tiles(lk) + 1


FORWARD = AttSchedule(arg_units=2.0, num_exps=key_tiles, c_exp=0.0, c_div=0.0,
                      k_sum=lambda ctx, lk: sum_k(lk), k_out=lambda ctx, lk: out_k(lk),
                      k_out_under=out_k)
VJP = AttSchedule(arg_units=1.0, num_exps=None, den_arg_units=2.0, den_exps=key_tiles,
                  c_exp=1.0, c_div=2.0, k_sum=lambda ctx, lk: sum_k(lk), c_from_out=True,
                  ds_roundings=2)


def forward_bound(ref, ctx, unit):
    return _attention_forward_bound(ref, ctx, unit, FORWARD)


def vjp_bound(ref, ctx, unit):
    return _attention_vjp_bound(ref, ctx, unit, VJP)


FORWARD_RULES = {CAPSULE: DerivedRule(
    "derived (flash): sum_j |P''_ij - P_ij| |v_jk| + gamma_{Lk+nt+1} sum_j P''_ij |v_jk|, "
    "weights off by es + 2u|d'| + nt e_log, l by gamma_{nt+7}",
    "float32 online softmax over 64-key tiles (nt = ceil(Lk/64)): scores gamma_{d+1}, each "
    "weight's two argument roundings and nt expf calls, the running sum and O's fmaf folds with "
    "a rescaling per tile, O / l; blocked entries and fully blocked rows are exact zeros",
    forward_bound)}
VJP_RULES = {CAPSULE: DerivedRule(
    "derived (flash): the composed VJP rule with P = expf(s - m) (1/l) from the forward's "
    "statistics (l off by the online weights and gamma_{nt+7}), c = g . out, dS in 2 roundings",
    "P recomputed from the forward's m and 1/l (one argument rounding, one expf, reciprocal and "
    "product), D = g . out (fmaf over dv), dS = P (dP - D), dq, dk, dv fmaf folds over "
    "participants (dq, dk times scale)", vjp_bound)}
