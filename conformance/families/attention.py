"""The attention family (engine/ops/attention.py): scaled_dot_product_attention, with hard masks
(true: the key participates; a fully blocked row is zero).

Edge set (23 cases): Lk in ATTENTION_LK with Lq in {2, 3}, d in 2..4, dv in 1..3; d in ATTENTION_D
with small Lq, Lk; Lq = 1025 with Lk = 3; Lk = X with Lq = d = dv = 1; Lq = 0; Lk = 0; rank 3
(batch 2) on four of them; masks cycle none / all open / random / random with the first query row
fully blocked; scale 1/sqrt(d); values normal. ATTENTION_TILE_FORMS: Lq = Lk = 66, 100, 190 under
the causal triangle or a random mask; one key for 4 query rows with `specials` in q (NaN, +inf and
-inf scores).

Derived bounds, forward and VJP: conformance/error_terms.py states the method, E, and what the
rules of the norms and attention assume (second-order terms, underflow, overflow)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.bad_inputs import filled
from conformance.edges import (BLOCKED_ROW, CAUSAL, NO_MASK, NORMAL, OPEN, PAST_2_20, RANDOM,
                               SPECIALS, Edge, cycle)
from conformance.error_terms import HALF_SUB, DerivedRule, e_rel, elementary_ulps
from conformance.error_terms import clean as _clean, fwd_err as _fwd_err, gamma as _gamma, \
    k_of as _k
from conformance.error_terms import dot_underflow as _dot_under, finish_bound as _finish, \
    overflows as _risky, underflow_unit as _ua
from conformance.families.spec import (DIMS, ELEMENTARY_ORDER, RANK, AuditCase, CapsuleRules,
                                       OpSpec, m23, normal, param)
from conformance.focus import group, smaller_case
from conformance.layouts import ATTENTION_EXTENTS
from conformance.samplers import F32, attention_scale, past_first_tile
from engine import ops
from engine.errors import ShapeError
from engine.types import BackendOp as Op

GROUP = "norms and attention"


# --- layout: (rng, cls) -> (input shapes, params) -------------------------------------------------

def attention_layout(rng, cls):
    """q [B?, Lq, d], k [B?, Lk, d], v [B?, Lk, dv] with extents from ATTENTION_EXTENTS; masks random,
    with fully blocked rows, all open, or None; half the `masks` cases Lq = Lk = 64k + r (past the
    first 64-row tile) under the causal triangle or a random mask; scale 1/sqrt(d) (unrounded)
    unless the class is `params` (samplers.attention_scale: off the float32 grid half the time)."""
    batch = (int(rng.integers(1, 3)),) if rng.integers(0, 2) else ()
    lq, lk, d, dv = (int(rng.choice(ATTENTION_EXTENTS)) for _ in range(4))
    if cls == "empty":
        which = int(rng.integers(0, 5 if batch else 4))
        if which == 4:
            batch = (0,)
        else:
            lq, lk, d, dv = [0 if i == which else x for i, x in enumerate((lq, lk, d, dv))]
    long = cls == "masks" and bool(rng.integers(0, 2))
    if long:            # half the masks: 64k + r query rows and keys, small d and dv
        lq = lk = past_first_tile(rng)
        d, dv = (int(rng.choice(ATTENTION_EXTENTS[:3])) for _ in range(2))
    scores = batch + (lq, lk)
    kind = int(rng.integers(0, 4)) if cls == "masks" else int(rng.integers(0, 2)) * 3
    if long:
        kind = (4, 2, 3)[int(rng.integers(0, 3))]                   # causal, or random
    if kind == 4:
        mask = np.ascontiguousarray(np.broadcast_to(np.tril(np.ones((lq, lk), bool)), scores))
    elif kind == 0:
        mask = None
    elif kind == 1:
        mask = np.ones(scores, dtype=bool)                          # all open
    else:
        mask = rng.random(scores) < 0.6
        if kind == 2 and mask.size:                                 # some fully blocked rows
            mask[rng.random(scores[:-1]) < 0.5] = False
    scale = 1.0 / math.sqrt(d) if d else 1.0
    if cls == "params":
        scale = attention_scale(rng)
    return [batch + (lq, d), batch + (lk, d), batch + (lk, dv)], {"mask": mask, "scale": scale}


# --- the fixed edge set ---------------------------------------------------------------------------

ATTENTION_LK = (1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4097)
ATTENTION_D = (31, 32, 33, 257)
ATTENTION_MASKS = (NO_MASK, OPEN, RANDOM, BLOCKED_ROW)
# (batch, Lq = Lk, d, mask): 64k + r query rows, k >= 1, r > 1
ATTENTION_TILE_FORMS = (((), 66, 2, CAUSAL), ((2,), 100, 3, RANDOM), ((), 190, 2, CAUSAL))


def _attention_edge(batch, lq, lk, d, dv, mask) -> Edge:
    scale = float(np.float32(1.0 / math.sqrt(d))) if d else 1.0
    scores = batch + (lq, lk)
    return Edge((batch + (lq, d), batch + (lk, d), batch + (lk, dv)), (("scale", scale),), NORMAL,
                mask=mask, mask_shape=scores, mask_axis=len(scores) - 1)


def _attention_edges() -> list[Edge]:
    out = []
    for i, lk in enumerate(ATTENTION_LK):
        batch = (2,) if i % 4 == 3 else ()
        out.append(_attention_edge(batch, 2 + i % 2, lk, 2 + i % 3, 1 + (i + 1) % 3,
                                   cycle(ATTENTION_MASKS, i)))
    for i, d in enumerate(ATTENTION_D):
        out.append(_attention_edge((2,) if i % 2 else (), 2, 3 + i, d, 2,
                                   cycle(ATTENTION_MASKS, i + 1)))
    # issue 35: query rows past the first 64-row tile with a partial last one, causal and random
    for batch, t, d, mask in ATTENTION_TILE_FORMS:
        out.append(_attention_edge(batch, t, t, d, 2, mask))
    # one key per query row, the scores NaN, +inf or -inf (SPECIALS in q)
    out.append(dataclasses.replace(_attention_edge((), 4, 1, 2, 2, NO_MASK), fill=SPECIALS))
    out += [_attention_edge((), 1025, 3, 2, 2, RANDOM),
            _attention_edge((), 1, PAST_2_20, 1, 1, RANDOM),
            _attention_edge((), 0, 3, 2, 2, OPEN), _attention_edge((), 2, 0, 2, 2, RANDOM)]
    return out


def _attention_terms(case) -> int:
    """max(d, keys): the longer of the score sums and the output sum over the participating keys
    of the fullest query row (0 when the output is empty or no key takes part)."""
    (q, k, v), mask = case.inputs, case.params.get("mask")
    keys = k.shape[-2] if mask is None or not np.size(mask) else \
        int(np.asarray(mask).sum(axis=-1).max())
    out = math.prod(q.shape[:-1]) * v.shape[-1]
    return max(q.shape[-1], keys) if out and keys else 0


# --- the cancellation class, shrinking, the determinism case --------------------------------------

def cancel_attention(arrays, rng):
    """Either v's rows nearly equal (dP_ij ~ c_i: dS cancels), or near-equal scores (q small) over v
    rows of both signs (out cancels)."""
    q, k, v = arrays
    if v.size == 0:
        return arrays
    if rng.integers(0, 2):
        base = v[..., :1, :].astype(np.float64)
        v = (base * (1 + 2.0 ** -18 * rng.standard_normal(v.shape))).astype(F32)
    else:
        q = (q * F32(2.0 ** -12)).astype(F32)
        sign = np.where(np.arange(v.shape[-2]) % 2 == 0, 1.0, -1.0)[:, None]
        base = v[..., :1, :].astype(np.float64)
        v = (sign * base * (1 + 2.0 ** -10 * rng.standard_normal(v.shape))).astype(F32)
    return [q, k, v]


def _attention_group(case, idx: tuple, output: str):
    """The failing element's query row (value, dq) or its batch entry (dk, dv)."""
    p, g = dict(case.params), case.cotangent
    if not idx:
        return None
    per_element = output in ("value", "grad[0]")
    q, k, v = case.inputs
    mask = p.get("mask")
    if q.ndim == 3:
        b = slice(idx[0], idx[0] + 1)
        sel_q = (b, slice(idx[1], idx[1] + 1)) if per_element else (b,)
        sel_kv = (b,)
    elif per_element:
        sel_q, sel_kv = (slice(idx[0], idx[0] + 1),), ()
    else:
        return None
    if mask is not None:
        p["mask"] = np.array(np.asarray(mask)[sel_q], dtype=bool)
    return smaller_case(case, (np.array(q[sel_q], F32), np.array(k[sel_kv], F32),
                               np.array(v[sel_kv], F32)), p,
                        None if g is None else np.array(g[sel_q], F32))


def _attention_audit(rng, idx):
    qkv = (normal(rng, 8, 64, 32), normal(rng, 8, 64, 32), normal(rng, 8, 64, 32))
    causal = np.broadcast_to(np.tril(np.ones((64, 64), bool)), (8, 64, 64)).copy()
    return qkv, {"mask": causal, "scale": float(np.float32(32 ** -0.5))}, (8, 64, 32)


# --- derived bounds: the composed evaluation ------------------------------------------------------

def _read(w, x):
    """w @ x for weights w >= 0 and magnitudes x >= 0 where a zero weight reads nothing: an
    unread entry's inf or NaN (a key a query does not attend, a query that does not attend the
    key) adds 0, not 0 * inf = NaN, so a row's bound never depends on data the row does not
    read. A read inf gives inf and a read NaN NaN, as the plain product does."""
    x = np.asarray(x, np.float64)
    finite = np.isfinite(x)
    if finite.all():
        return w @ x
    reads = (np.asarray(w) != 0).astype(np.float64)
    out = w @ np.where(finite, x, 0.0)
    out = np.where(reads @ np.isinf(x).astype(np.float64) > 0, np.inf, out)
    return np.where(reads @ np.isnan(x).astype(np.float64) > 0, np.nan, out)


@dataclass
class _Att:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    part: np.ndarray        # [B, Lq, Lk] participating (mask and finite score)
    scale: float
    p: np.ndarray           # [B, Lq, Lk] exact probabilities (0 where blocked)
    dp_err: np.ndarray      # [B, Lq, Lk] bound on |P' - P|
    risky_rows: np.ndarray  # [B, Lq, 1] the float32 scores of the row may overflow
    batched: bool


@dataclass(frozen=True)
class AttSchedule:
    """How a kernel evaluates P, O and the VJP's c and dS: the knobs of the attention rules below.
    The defaults are the composed evaluation (the derivation in _attention's comment); a kernel
    that evaluates differently states its own (FLASH below: online softmax).
    Functions of Lk take the key count; None means the composed choice from the policy's k."""
    arg_units: float = 1.0              # u |d'| lost in the exp arguments of a P numerator
    num_exps: Callable | None = None    # (Lk) -> expf calls folded into a numerator's weight
    den_arg_units: float | None = None  # as arg_units for the denominator's weights (None: same)
    den_exps: Callable | None = None    # as num_exps for the denominator's weights
    c_exp: float = 2.0                  # expf errors (E_REL each) not folded into weights
    c_div: float = 2.0                  # u of the normalisation (division, or 1 / l and product)
    k_sum: Callable | None = None       # (ctx, Lk) -> k of the denominator's sum of weights
    k_out: Callable | None = None       # (ctx, Lk) -> k of O = P v (the normalisation included)
    k_out_under: Callable | None = None  # (Lk) -> roundings of O that may underflow
    c_from_out: bool = False            # c = g . out only (else the larger of the two ways)
    ds_roundings: int = 3               # roundings of dS = P (dP - c)


COMPOSED = AttSchedule()


def _log_expm1(a):
    with np.errstate(all="ignore"):
        return np.where(a > 30, a, np.log(np.expm1(np.minimum(a, 30))))


def _attention(ctx, unit, sched: AttSchedule = COMPOSED) -> _Att:
    # Scores S = scale q k^T in float32: the dot product gamma_{k_p(d)} and the scaling (1), of
    # MS = |scale| |q| |k|^T: eS = gamma_{k_p(d)+1} MS, plus the underflow of the d products and of
    # the scaling (applied to q, to k or to the dot product: ua (sum|q_i| + sum|k_j| + 1)).
    # Softmax over participants, P = exp(S' - m') / sum exp(S' - m'), m' the float32 row max: softmax
    # is shift invariant, so m's error cancels between numerator and denominator except in the
    # rounded argument S' - m' (u|d'|, |d'| <= |d| + eS_ij + eS_max). Per term the exponent is off by
    # a_ij = eS_ij + u (|d_ij| + eS_ij + eS_max) and expf by E_REL; the sum of the positive e_il by
    # gamma_{k(Lk)}, the division by 2u (or a product with the rounded reciprocal). Exactly, with
    # rho_a = sum_l P_il expm1(a_il) (Jensen below, log(1 + rho_a) <= rho_a above):
    #   |P'_ij / P_ij - 1| <= expm1(A_ij) + c0 exp(A_ij),  A_ij = a_ij + rho_a,
    #   c0 = (2 E_REL + gamma_{k(Lk)} + 2u)(1 + gamma_{k(Lk)} + E_REL + 4u)  (the quotient of the
    #   numerator's and the denominator's (1 +- .) factors, second order kept),
    # which is the first-order rel_P = a_ij + rho_a + 2 E_REL + gamma + 2u when the scores' errors are
    # small, and stays an upper bound when they are not (large scores). |P' - P| is also at most
    # 1 + gamma_{k(Lk)+2} (0 <= P' <= that), and P' underflows by at most 2 E ulps of 2^-149 (expf's
    # subnormal result; the sum is >= 1: exp(0) = 1 for the max) plus 2 ua (the division).
    q, k, v = (np.asarray(a, np.float64) for a in ctx.inputs[:3])
    batched = q.ndim == 3
    if not batched:
        q, k, v = q[None], k[None], v[None]
    lq, lk, d = q.shape[1], k.shape[1], q.shape[2]
    mask = ctx.params.get("mask")
    part = np.ones((q.shape[0], lq, lk), bool) if mask is None else \
        np.asarray(mask, bool).reshape(q.shape[0], lq, lk)
    scale = ctx.params.get("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(d) if d else 1.0
    scale = float(np.float32(scale))
    ua = _ua(ctx)
    rows_used, cols_used = part.any(axis=2)[..., None], part.any(axis=1)[..., None]
    with np.errstate(all="ignore"):
        q = np.where(rows_used, q, 0.0)
        k = np.where(cols_used, k, 0.0)
        v = np.where(cols_used, v, 0.0)
        s = scale * (q @ np.swapaxes(k, 1, 2))
        mq = np.abs(q) @ np.swapaxes(np.abs(k), 1, 2)
        es = (_gamma(_k(ctx, d, products=True) + 1, unit) * abs(scale) * mq
              + _dot_under(ctx, d) * max(1.0, abs(scale))
              + ua * (np.abs(q).sum(axis=2)[:, :, None] + np.abs(k).sum(axis=2)[:, None, :] + 1))
        risky_rows = np.any(part & _risky(mq * (1 + _gamma(d, unit)),
                                          abs(scale) * mq * (1 + _gamma(d + 1, unit))),
                            axis=2, keepdims=True)
        live = part & np.isfinite(s)
        m = np.max(np.where(live, s, -np.inf), axis=2, keepdims=True, initial=-np.inf)
        dd = np.where(live, s - np.where(np.isfinite(m), m, 0.0), -np.inf)
        es_max = np.max(np.where(live, es, 0.0), axis=2, keepdims=True, initial=0.0)
        # a weight's log error: the score's, the rounded arguments' and the expf calls folded in
        # (each within a factor (1 +- E_REL): |log| <= -log1p(-E_REL))
        e_log = -np.log1p(-e_rel())
        arg = np.abs(dd) + es + es_max

        def weight_err(units, exps):
            n = exps(lk) if exps is not None else 0
            return np.where(live, es + units * unit * arg + n * e_log, 0.0)

        a = weight_err(sched.arg_units, sched.num_exps)
        den_units = sched.arg_units if sched.den_arg_units is None else sched.den_arg_units
        den_exps = sched.num_exps if sched.den_exps is None else sched.den_exps
        a_den = weight_err(den_units, den_exps)
        lse = np.log(np.sum(np.where(live, np.exp(dd), 0.0), axis=2, keepdims=True))
        logp = np.where(live, dd - lse, -np.inf)
        p = np.where(live, np.exp(logp), 0.0)
        rho_a = np.sum(np.where(live, np.exp(logp + _log_expm1(a_den)), 0.0), axis=2,
                       keepdims=True)
        big_a = a + rho_a
        k_sum = sched.k_sum(ctx, lk) if sched.k_sum is not None else _k(ctx, lk)
        sig = _gamma(k_sum, unit)
        c0 = (sched.c_exp * e_rel() + sig + sched.c_div * unit) * (1 + sig + e_rel() + 4 * unit)
        log_r = big_a + np.log(-np.expm1(-big_a) + c0)
        cap = 1 + _gamma(k_sum + 2, unit)
        dp_err = np.where(live, np.minimum(cap, np.exp(logp + log_r))
                          + 2 * elementary_ulps() * 2 * HALF_SUB + 2 * ua, 0.0)
        dp_err = np.nan_to_num(dp_err, nan=cap)
    return _Att(q, k, v, part, scale, p, dp_err, risky_rows, batched)


def _att_out(att: _Att, x, ref):
    x = x if att.batched else x[0]
    return np.asarray(x).reshape(np.shape(ref.exact))


def _attention_forward_bound(ref, ctx, unit, sched: AttSchedule = COMPOSED):
    # O = P' v: |P' - P| times |v|, the dot product gamma_{k_p(Lk)} of sum (P + |P' - P|)|v| (blocked
    # entries are exact zeros and add nothing), and Lk products' underflow.
    att = _attention(ctx, unit, sched)
    lk = att.k.shape[1]
    k_out = sched.k_out(ctx, lk) if sched.k_out is not None else _k(ctx, lk, products=True)
    n_under = sched.k_out_under(lk) if sched.k_out_under is not None else lk
    with np.errstate(all="ignore"):
        av = np.abs(att.v)
        pu = att.p + att.dp_err
        mag = _read(pu, av)
        b = (_read(att.dp_err, av) + _gamma(k_out, unit) * mag
             + _dot_under(ctx, n_under)) * (1 + 4 * unit)
        used = att.part.any(axis=2, keepdims=True)
        b = np.where(used, b, 0.0)          # a fully blocked row is exact zeros
        risky = att.risky_rows | _risky(mag)
    return _att_out(att, _finish(b, np.broadcast_to(risky, b.shape)), ref)


def _attention_vjp_bound(ref, ctx, unit, sched: AttSchedule = COMPOSED):
    # dv = P'^T g: |P' - P|^T |g| + gamma_{k_p(Lq)} (P + |P' - P|)^T |g|.
    # dP = g v^T: gamma_{k_p(dv)} mdp, mdp = |g| |v|^T. c_i = sum_l P_il dP_il, either as that dot
    # product (|P' - P| mdp, gamma_{k_p(dv)+k_p(Lk)} of sum P' mdp) or as g_i . out_i (the float32
    # forward output, as flash-attention kernels do: |g| . |out - O| inherited from the actual forward,
    # gamma_{k_p(dv)} |g| . |out|): the larger of the two. dS = P' (dP' - c'): 3 roundings (the
    # subtraction and the product, or P dP - P c), P's error times |dP - c| <= mb = mdp + sum P mdp +
    # err_c, and P' times dP's and c's errors. dq = scale dS k: gamma_{k_p(Lk)+1} of the dS magnitude
    # P' mb, plus |scale| err_dS |k|; dk = scale dS^T q likewise over Lq. Summed along the longest
    # path these are the gamma_{k(dv)+2k(Lk)+4} and gamma_{k(dv)+k(Lk)+k(Lq)+4} of the first-order
    # analysis, with 2 rel_P_max replaced by the per-element P errors.
    att = _attention(ctx, unit, sched)
    lq, lk, dv = att.q.shape[1], att.k.shape[1], att.v.shape[2]
    ua = _ua(ctx)
    g = np.asarray(ctx.g, np.float64)
    g = g if att.batched else g[None]
    with np.errstate(all="ignore"):
        g = np.where(att.part.any(axis=2)[..., None], g, 0.0)
        ag, av, aq, ak = np.abs(g), np.abs(att.v), np.abs(att.q), np.abs(att.k)
        pu = att.p + att.dp_err
        t = lambda a: np.swapaxes(a, 1, 2)
        col_risky = np.any(att.part & att.risky_rows, axis=1)[..., None]   # [B, Lk, 1]
        if ctx.input_index == 2:
            b = (_read(t(att.dp_err), ag)
                 + _gamma(_k(ctx, lq, products=True), unit) * _read(t(pu), ag)
                 + _dot_under(ctx, lq)) * (1 + 4 * unit)
            risky = col_risky | _risky(_read(t(pu), ag))
            return _att_out(att, _finish(b, np.broadcast_to(risky, b.shape)), ref)
        g_a = _gamma(_k(ctx, dv, products=True), unit)
        mdp = np.where(att.part, ag @ t(av), 0.0)
        c1 = (np.sum(att.dp_err * mdp, axis=2, keepdims=True)
              + _gamma(_k(ctx, dv, products=True) + _k(ctx, lk, products=True), unit)
              * np.sum(pu * mdp, axis=2, keepdims=True)
              + np.sum(pu, axis=2, keepdims=True) * _dot_under(ctx, dv) + _dot_under(ctx, lk))
        fe = _fwd_err(ctx)
        fe = fe if att.batched else fe[None]
        out = np.abs(np.asarray(ctx.fwd_ref.exact, np.float64))
        out = _clean(out if att.batched else out[None])
        c2 = (np.sum(ag * fe, axis=2, keepdims=True)
              + g_a * np.sum(ag * (out + fe), axis=2, keepdims=True) + _dot_under(ctx, dv))
        err_c = c2 if sched.c_from_out else np.maximum(c1, c2)
        mb = mdp + np.sum(att.p * mdp, axis=2, keepdims=True) + err_c
        e_ds = np.where(att.part, att.dp_err * mb * (1 + g_a)
                        + pu * (g_a * mdp + _dot_under(ctx, dv) + err_c)
                        + _gamma(sched.ds_roundings, unit) * pu * mb + ua, 0.0)
        mu = np.where(att.part, pu * mb * (1 + g_a), 0.0)   # bounds |dS'| (dP' carries gamma_a)
        sc = abs(att.scale)
        fwd_risky = att.risky_rows | np.any(_risky(_att_pad(ctx, att)), axis=2, keepdims=True)
        if ctx.input_index == 0:
            b = (sc * _read(e_ds + _gamma(_k(ctx, lk, products=True) + 1, unit) * mu, ak)
                 + sc * _dot_under(ctx, lk) + ua * (_read(att.part, ak) + 1)
                 + ua * mu.sum(axis=2, keepdims=True)) * (1 + 4 * unit)
            b = np.where(att.part.any(axis=2, keepdims=True), b, 0.0)
            risky = fwd_risky | np.any(_risky(mdp, mb), axis=2, keepdims=True) | \
                _risky(_read(mu, ak), sc * _read(mu, ak))
            return _att_out(att, _finish(b, np.broadcast_to(risky, b.shape)), ref)
        b = (sc * _read(t(e_ds) + _gamma(_k(ctx, lq, products=True) + 1, unit) * t(mu), aq)
             + sc * _dot_under(ctx, lq) + ua * (_read(t(att.part), aq) + 1)
             + ua * t(mu).sum(axis=2, keepdims=True)) * (1 + 4 * unit)
        b = np.where(att.part.any(axis=1)[..., None], b, 0.0)
        row_bad = fwd_risky | np.any(_risky(mdp, mb), axis=2, keepdims=True)
        risky = np.any(att.part & row_bad, axis=1)[..., None] | _risky(_read(t(mu), aq),
                                                                       sc * _read(t(mu), aq))
        return _att_out(att, _finish(b, np.broadcast_to(risky, b.shape)), ref)


def _att_pad(ctx, att: _Att):
    """The forward output's magnitude bound sum_j P' |v| per row: its overflow spoils c = g . out."""
    with np.errstate(all="ignore"):
        return _read(att.p + att.dp_err, np.abs(att.v))


ATTENTION_FORWARD = DerivedRule(
    "derived: sum_j |P'_ij - P_ij| |v_jk| + gamma_{k_p(Lk)} sum_j P'_ij |v_jk|",
    "float32 scores (gamma_{k_p(d)+1}), hard-masked softmax (exp argument, expf, sum, division) "
    "and the product with v; blocked entries and fully blocked rows are exact zeros",
    _attention_forward_bound)
ATTENTION_VJP = DerivedRule(
    "derived: dv |P'-P|^T|g| + gamma_{k_p(Lq)} M; dq, dk from dS = P (dP - c) with P's "
    "per-element error, gamma_{k_p(dv)+2k_p(Lk)+4} (dq), gamma_{k_p(dv)+k_p(Lk)+k_p(Lq)+4} (dk)",
    "float32 P recomputed as in the forward, dP = g v^T, c by dot product or g . out, "
    "dS = P (dP - c), dq = scale dS k, dk = scale dS^T q, dv = P^T g", _attention_vjp_bound)


# --- native_cuda.flash_attention's own bounds: online softmax -------------------------------------
# The derived bound of native_cuda.flash_attention (engine/csrc/cuda/flash_attention.cu), forward
# and VJP: the attention rules above under the flash kernel's schedule, held by the record as that
# capsule's own (OpSpec.capsule_rules), so the op's other capsules keep the composed rule.
#
# What the kernel does (64-key tiles, nt = ceil(Lk / 64) of them, u = 2^-24, E_REL = libdevice
# expf's 2 ulp relative to its result, every fused multiply-add an explicit fmaf: one rounding):
#
# Scores s' = fl(fl(q . k) scale): a left fold of d fmaf (padding features are exact zeros), then the
# scale: gamma_{d+1} |scale| |q| . |k| (the composed rule's term under the capsule's reduce=
# fixed-left policy, k_p(d) = d).
#
# Forward, online softmax. A participating key's weight is w_ij = expf(fl(s'_ij - m_t)) times the
# alpha = expf(fl(m_a - m_b)) of every later tile whose max grew (m_t the running max when its tile
# was read). Exactly, the product of the alphas telescopes to exp(m_t - m'), so w_ij is
# exp(s'_ij - m') perturbed in its logarithm by (i) the rounded arguments: u |s'_ij - m_t| +
# u sum |m_a - m_b| <= 2 u |s'_ij - m'| (both are at most |s'_ij - m'| since s'_ij <= m_t <= m'),
# twice the composed rule's one rounding, and (ii) at most nt expf calls: nt (-log1p(-E_REL)). O's
# accumulator and l are multiplied by the same alpha, so an alpha's error is a weight's error, never
# a mismatch between numerator and denominator: P'' = w / sum w is the composed rule's P' with
# a_ij = es_ij + 2u (|d_ij| + es_ij + es_max) + nt e_log and no per-element expf or division term
# (c0's E_REL and 2u parts are 0 here). The sum l: each thread keeps its part of it; a term passes
# 3 serial adds (the thread's 4 columns of its tile), one fmaf(l_part, alpha, tile part) per tile
# from its own on (at most nt) and, after the last tile, a 16-lane xor tree over the row's threads
# (4): gamma_{nt + 7} (the same depth as when the tree ran on each tile's sum).
# O = fl(fl(sum_j w_ij v_j) / l): per term at most (participants) fmaf plus nt rescalings plus the
# division: gamma_{Lk + nt + 1} of sum P'' |v|, and as many roundings' underflow.
#
# VJP. P = fl(expf(fl(s' - m')) fl(1 / l')) with m', l' the forward's own bits (the statistics pass
# runs the forward's code): the numerator is the composed rule's (one argument rounding, one expf
# in c0), the denominator is the forward's sum l' (weights with the online perturbation above,
# gamma_{nt + 7}), the reciprocal and the product 2u. c = D = g . out, a left fold of dv fmaf of
# the capsule's own forward output (the composed rule's c2: out's actual error inherited, gamma_dv);
# dS = fl(P fl(dP - D)): 2 roundings; dq, dk, dv: left folds of fmaf over participants, dq and dk
# times scale: gamma_{Lk+1}, gamma_{Lq+1}, gamma_{Lq} (the composed rule's under fixed-left).
FLASH_CAPSULE = "native_cuda.flash_attention"
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


FLASH_FORWARD = AttSchedule(arg_units=2.0, num_exps=key_tiles, c_exp=0.0, c_div=0.0,
                            k_sum=lambda ctx, lk: sum_k(lk), k_out=lambda ctx, lk: out_k(lk),
                            k_out_under=out_k)
FLASH_VJP = AttSchedule(arg_units=1.0, num_exps=None, den_arg_units=2.0, den_exps=key_tiles,
                        c_exp=1.0, c_div=2.0, k_sum=lambda ctx, lk: sum_k(lk), c_from_out=True,
                        ds_roundings=2)


def flash_forward_bound(ref, ctx, unit):
    return _attention_forward_bound(ref, ctx, unit, FLASH_FORWARD)


def flash_vjp_bound(ref, ctx, unit):
    return _attention_vjp_bound(ref, ctx, unit, FLASH_VJP)


FLASH = CapsuleRules(
    FLASH_CAPSULE,
    forward=DerivedRule(
        "derived (flash): sum_j |P''_ij - P_ij| |v_jk| + gamma_{Lk+nt+1} sum_j P''_ij |v_jk|, "
        "weights off by es + 2u|d'| + nt e_log, l by gamma_{nt+7}",
        "float32 online softmax over 64-key tiles (nt = ceil(Lk/64)): scores gamma_{d+1}, each "
        "weight's two argument roundings and nt expf calls, the running sum and O's fmaf folds with "
        "a rescaling per tile, O / l; blocked entries and fully blocked rows are exact zeros",
        flash_forward_bound),
    vjp=DerivedRule(
        "derived (flash): the composed VJP rule with P = expf(s - m) (1/l) from the forward's "
        "statistics (l off by the online weights and gamma_{nt+7}), c = g . out, dS in 2 roundings",
        "P recomputed from the forward's m and 1/l (one argument rounding, one expf, reciprocal and "
        "product), D = g . out (fmaf over dv), dS = P (dP - D), dq, dk, dv fmaf folds over "
        "participants (dq, dk times scale)", flash_vjp_bound))


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    # scores overflow when d |q||k| does: 2^62 is the edge for d of 16
    OpSpec(Op.scaled_dot_product_attention, attention_layout, _attention_edges, catalogue=39,
        extra_classes=("masks", "params"), near_overflow=2.0 ** 62, wide_max_exp=57,
        determinism=AuditCase(8, _attention_audit),
        error_inputs=(
            param(41, "attention: rank 4", RANK,
                  lambda s: ops.scaled_dot_product_attention(*(filled(s, (1, 1, 2, 2)),) * 3),
                  ShapeError, r"all be rank 2"),
            param(42, "attention: key width", DIMS,
                  lambda s: ops.scaled_dot_product_attention(m23(s), filled(s, (2, 4)), m23(s)),
                  ShapeError, r"disagree"),
            param(43, "attention: mask shape", DIMS,
                  lambda s: ops.scaled_dot_product_attention(m23(s), m23(s), m23(s),
                                                             mask=np.ones((3, 3), bool)),
                  ShapeError, r"mask must be boolean of shape \(2, 2\)")),
        summary_group=GROUP, order_repeat_only=ELEMENTARY_ORDER,
        cancellation=cancel_attention, focus=group(_attention_group),
        forward_rule=ATTENTION_FORWARD, vjp_rule=ATTENTION_VJP, capsule_rules=(FLASH,),
        terms=_attention_terms),
)
