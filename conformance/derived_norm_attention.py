"""Derived error bounds for layer_norm, batch_norm and scaled_dot_product_attention, forward and VJP,
merged into conformance/derived.py's FORWARD_RULES and VJP_RULES (same method, same u, same E_REL:
error_terms.e_rel()).

The rules below bound a float32 evaluation of the docs/OPS.md formulas as a kernel would write them,
first order in u, with the second-order terms kept wherever an inherited error can be large
(cancelling rows, large scores). What each assumes of the kernel is stated beside it; a kernel that
evaluates differently (one-pass or Welford variance, online softmax with running rescaling, P
rebuilt from a saved log-sum-exp) declares its own bound instead.

Underflow: Higham's model fails below 2^-126. `ua` is what one rounding may lose there: 2^-150
(half the subnormal spacing) under gradual underflow, 2^-126 when the policy lets subnormals be
flushed; a dot product of n terms loses at most n 2^-150, or 2 n 2^-126 flushing (as error_models.py).
Overflow: where an intermediate of the float32 evaluation can reach the overflow threshold though
the exact result is finite, the bound is +inf and error_models.compare admits any result there (counted
as overflow-admissible), as it does for reductions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.error_terms import HALF_SUB, OVERFLOW, TINY, DerivedRule, e_rel, \
    elementary_ulps, flush_allowed
from conformance.error_terms import clean as _clean, fwd_err as _fwd_err, gamma as _gamma, \
    k_of as _k
from engine.types import BackendOp as Op


def _ua(ctx):
    return TINY if flush_allowed(ctx.policy) else HALF_SUB


def _dot_under(ctx, n):
    return np.asarray(n, np.float64) * (2 * TINY if flush_allowed(ctx.policy) else HALF_SUB)


def _risky(*magnitudes):
    """Where any magnitude (a bound on an intermediate of the float32 evaluation) can overflow."""
    out = False
    with np.errstate(invalid="ignore", over="ignore"):
        for m in magnitudes:
            m = np.asarray(m, np.float64)
            out = out | (m * (1 + 2.0 ** -20) >= OVERFLOW)   # NaN compares False: specials decide
    return out


def _finish(bound, risky):
    """Clean a bound (0 where it is NaN: special values decide) and put +inf where it may overflow."""
    b = np.nan_to_num(np.asarray(bound, np.float64), nan=0.0, posinf=np.inf, neginf=0.0)
    return np.where(risky, np.inf, b)


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


# normalisation: x arranged as groups [G, n] (layer_norm: the rows over the last axis; batch_norm:
# each channel's N x spatial values), each element with its affine parameters and their index.

@dataclass
class _Norm:
    rows: np.ndarray        # [G, n] float64
    gam: np.ndarray         # [G, n] each element's gamma
    bet: np.ndarray         # [G, n] each element's beta
    labels: np.ndarray      # [G, n] index of the affine parameter
    nparams: int
    back: Callable          # [G, n] -> x's shape


def _norm_layout(ctx) -> _Norm:
    x, gamma, beta = (np.asarray(a, np.float64) for a in ctx.inputs[:3])
    if ctx.op is Op.layer_norm:
        d = x.shape[-1]
        g_count = int(np.prod(x.shape[:-1]))
        rows = x.reshape(g_count, d)
        labels = np.broadcast_to(np.arange(d), rows.shape)
        return _Norm(rows, np.broadcast_to(gamma, rows.shape), np.broadcast_to(beta, rows.shape),
                     labels, d, lambda r: np.asarray(r).reshape(x.shape))
    c = x.shape[1]
    moved = np.moveaxis(x, 1, 0)
    rows = moved.reshape(c, int(np.prod(moved.shape[1:])))
    col = lambda a: np.broadcast_to(a[:, None], rows.shape)
    return _Norm(rows, col(gamma), col(beta), col(np.arange(c)), c,
                 lambda r: np.moveaxis(np.asarray(r).reshape(moved.shape), 0, 1))


@dataclass
class _NormStats:
    n: int
    r: np.ndarray           # [G, 1] exact 1 / sqrt(v + eps)
    dev: np.ndarray         # [G, n] x - mu
    xhat: np.ndarray        # [G, n]
    e: np.ndarray           # [G, 1] bound on the float32 mean's error (with underflow)
    rel_r: np.ndarray       # [G, 1] relative error of the float32 rstd
    err_xhat: np.ndarray    # [G, n] absolute error of the float32 xhat
    risky: np.ndarray       # [G, 1] the float32 statistics may overflow


def _norm_stats(lay: _Norm, ctx, unit) -> _NormStats:
    # Two passes in float32: mu = sum(x) / n, then v = sum((x - mu)^2) / n (biased), r = 1/sqrt(v+eps),
    # xhat = (x - mu) r.
    # - mu: the sum (gamma_{k(n)} of sum|x|) and the scaling by 1/n, a division or a product with
    #   the rounded reciprocal (2 roundings): err_mu <= gamma_{k(n)+2} mean|x|, plus 2 ua for the
    #   scaling and 1 ua for the subtraction x - mu below 2^-126: e.
    # - v: with mu' = fl(mu), mean((x - mu')^2) = v + (mu - mu')^2 exactly (sum(x - mu) = 0), so the
    #   mean's error enters v squared, not at first order; the float32 sum of squares of the rounded
    #   deviations is relative (every term >= 0): the deviation's rounding counts twice (squared),
    #   the squares and their sum gamma_{k_p(n)} (k_p: the policy's k for a dot product, as the
    #   products' rounding belongs to it), the scaling 2: gamma_{k_p(n)+4} v, plus 3 ua of underflow.
    #   Adding eps rounds once more (u). With w the relative perturbation of v + eps,
    #   |r'/r - 1| <= |1/sqrt(1 + w) - 1|: at most w_lo/2 below (first order), at most
    #   min(1, w_hi/2) above, where w_hi carries e^2 / (v + eps) (large when x is nearly constant
    #   and far from zero). sqrt and the division (2u), or rsqrtf (2 ulps in the CUDA guide: E_REL),
    #   add at most E_REL + u.
    # - xhat = fl(fl(x - mu') r'): (dev + e)(1 + d1)(1 + rho)(1 + d2) - dev, so
    #   err_xhat <= r (e (1 + rel_r) + |dev| (rel_r + 2u (1 + rel_r))) + ua.
    n = lay.rows.shape[1]
    eps = float(np.float32(ctx.params.get("eps", 1e-5)))
    ua = _ua(ctx)
    with np.errstate(all="ignore"):
        x = lay.rows
        mu = x.mean(axis=1, keepdims=True) if n else np.zeros((x.shape[0], 1))
        dev = x - mu
        v = (dev * dev).mean(axis=1, keepdims=True) if n else np.zeros((x.shape[0], 1))
        r = 1.0 / np.sqrt(v + eps)
        xhat = dev * r
        mean_abs = np.abs(x).mean(axis=1, keepdims=True) if n else np.zeros((x.shape[0], 1))
        e = _gamma(_k(ctx, n) + 2, unit) * mean_abs + 3 * ua
        g_v = _gamma(_k(ctx, n, products=True) + 4, unit)
        w_lo = (g_v * v + 3 * ua) / (v + eps) + unit
        w_hi = (g_v * v + e * e * (1 + g_v) + 3 * ua) / (v + eps) + unit
        rel_r = np.maximum(0.5 * w_lo, np.minimum(1.0, 0.5 * w_hi)) + e_rel() + unit
        err_xhat = r * (e * (1 + rel_r) + np.abs(dev) * (rel_r + 2 * unit * (1 + rel_r))) + ua
        err_xhat = err_xhat * (1 + 4 * unit)
        # float32 intermediates: the sum of x, and the sum of squared deviations (each deviation
        # off by up to e)
        sq = ((np.abs(dev) + e) ** 2).sum(axis=1, keepdims=True)
        risky = _risky(np.abs(x).sum(axis=1, keepdims=True) * (1 + _gamma(n, unit)),
                       sq * (1 + g_v))
    return _NormStats(n, r, dev, xhat, e, rel_r, err_xhat, risky)


def _norm_forward_bound(ref, ctx, unit):
    # y = xhat gamma + beta (or (x - mu)(r gamma) + beta, or an FMA): xhat's error times |gamma|, the
    # product's rounding u|xhat gamma| and the addition's u|y|; second order through (1 + 2u).
    # Folding r gamma into one float32 factor (a per-channel scale) lets that factor underflow:
    # ua |x - mu| more (x large, gamma tiny).
    lay = _norm_layout(ctx)
    st = _norm_stats(lay, ctx, unit)
    y = np.abs(np.asarray(ref.exact, np.float64))
    y_rows = _norm_rows_like(lay, y)
    with np.errstate(all="ignore"):
        b = (np.abs(lay.gam) * st.err_xhat * (1 + 2 * unit)
             + unit * (np.abs(st.xhat * lay.gam) + y_rows)
             + _ua(ctx) * (np.abs(st.dev) + st.e) * (1 + unit)) \
            * (1 + 4 * unit)
        risky = st.risky | _risky((np.abs(st.xhat) + st.err_xhat) * np.abs(lay.gam),
                                  (np.abs(st.xhat) + st.err_xhat) * np.abs(lay.gam)
                                  + np.abs(lay.bet))
    return lay.back(_finish(b, np.broadcast_to(risky, b.shape)))


def _norm_rows_like(lay: _Norm, a):
    """An x-shaped array in the [G, n] layout."""
    probe = lay.back(np.arange(lay.rows.size, dtype=np.int64).reshape(lay.rows.shape))
    flat = np.empty(lay.rows.size, np.float64)
    flat[np.asarray(probe).reshape(-1)] = np.asarray(a, np.float64).reshape(-1)
    return flat.reshape(lay.rows.shape)


def _norm_vjp_bound(ref, ctx, unit):
    # dx = r (h - A - xhat B), h = g gamma, A = mean(h), B = mean(h xhat); the means scaled by 1/n
    # (2 roundings with a rounded reciprocal). Rounding, counted along the longest path (the B term:
    # h, the dot product of h and xhat gamma_{k_p(n)}, the scaling 2, xhat_i B, two subtractions,
    # the product by r): gamma_{k_p(n)+7} of the reference's magnitude M_dx = r (|h_i| + mean|h| +
    # |xhat_i| mean|h xhat|); the r/n (n h - sum h - xhat sum h xhat) arrangement counts the same.
    # Inherited from the float32 statistics: xhat_i's error moves xhat_i B by |B| err_xhat_i, B by
    # mean(|h| err_xhat) (times |xhat_i|, and times err_xhat_i at second order), r's error rel_r
    # scales the whole: I (1 + rel_r) + |dx| rel_r. Underflow: ten roundings before the product by r.
    # dgamma = sum g xhat over each parameter's m elements: gamma_{k_p(m)} sum|g xhat| + sum |g|
    # err_xhat (each product's xhat carries its error); dbeta = sum g: gamma_{k(m)} sum|g|.
    lay = _norm_layout(ctx)
    st = _norm_stats(lay, ctx, unit)
    ua = _ua(ctx)
    g = _norm_rows_like(lay, np.asarray(ctx.g, np.float64))
    with np.errstate(all="ignore"):
        h = np.abs(g * lay.gam)
        n = st.n
        idx = ctx.input_index
        if idx == 0:
            mean = (lambda a: a.mean(axis=1, keepdims=True)) if n else (lambda a: np.zeros_like(a))
            big_b = np.abs(mean(g * lay.gam * st.xhat))
            h_err = mean(h * st.err_xhat)
            g_r = _gamma(_k(ctx, n, products=True) + 7, unit)
            m_dx = _norm_rows_like(lay, _clean(ref.magnitude))
            dx = _norm_rows_like(lay, np.abs(np.asarray(ref.exact, np.float64)))
            inherited = st.r * (big_b * st.err_xhat + (np.abs(st.xhat) + st.err_xhat) * h_err)
            b = ((g_r * m_dx + inherited * (1 + g_r)) * (1 + st.rel_r) + dx * st.rel_r
                 + st.r * 10 * ua + ua) * (1 + 4 * unit)
            risky = st.risky | _risky(h, h.sum(axis=1, keepdims=True),
                                      (h * (np.abs(st.xhat) + st.err_xhat)).sum(axis=1,
                                                                                keepdims=True),
                                      m_dx + inherited)
            return lay.back(_finish(b, np.broadcast_to(risky, b.shape)))
        labels = lay.labels.reshape(-1)
        count = np.bincount(labels, minlength=lay.nparams) if labels.size else \
            np.zeros(lay.nparams, int)
        per = lambda a: (np.bincount(labels, np.asarray(a, np.float64).reshape(-1), lay.nparams)
                         if labels.size else np.zeros(lay.nparams))
        ag = np.abs(g)
        if idx == 1:
            mag = per(ag * np.abs(st.xhat))
            inh = per(ag * st.err_xhat)
            b = (_gamma(_k(ctx, count, products=True), unit) * (mag + inh) + inh
                 + _dot_under(ctx, count)) * (1 + 4 * unit)
            risky_rows = np.broadcast_to(st.risky, lay.rows.shape)
            risky = per(risky_rows) > 0
            risky = risky | _risky(mag + inh)
        else:
            mag = per(ag)
            b = _gamma(_k(ctx, count), unit) * mag * (1 + 4 * unit) + \
                (count * TINY if _ua(ctx) == TINY else 0.0)
            risky = _risky(mag)
    return _finish(np.asarray(b).reshape(np.shape(ref.exact)),
                   np.asarray(risky).reshape(np.shape(ref.exact)))


# attention: rank 2 inputs get a batch axis of 1; data no participating term uses is ignored (the
# reference's hard-mask semantics), so a NaN there changes nothing.

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
    that evaluates differently states its own (conformance/derived_flash.py: online softmax).
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


# derived.py merges these into its FORWARD_RULES and VJP_RULES, the tables error_models.py reads
FORWARD_RULES = {
    Op.layer_norm: DerivedRule(
        "derived: |gamma| err_xhat + u (|xhat gamma| + |y|), two-pass float32 statistics",
        "float32 mean, then mean of squared deviations (biased), rstd = 1/sqrt(v + eps); the mean's "
        "error, rstd's relative error and the roundings of xhat, the product and the sum",
        _norm_forward_bound),
    Op.batch_norm: DerivedRule(
        "derived: as layer_norm over each channel's N x spatial group",
        "layer_norm's two-pass derivation with the statistics of each channel", _norm_forward_bound),
    Op.scaled_dot_product_attention: DerivedRule(
        "derived: sum_j |P'_ij - P_ij| |v_jk| + gamma_{k_p(Lk)} sum_j P'_ij |v_jk|",
        "float32 scores (gamma_{k_p(d)+1}), hard-masked softmax (exp argument, expf, sum, division) "
        "and the product with v; blocked entries and fully blocked rows are exact zeros",
        _attention_forward_bound),
}

VJP_RULES = {
    Op.layer_norm: DerivedRule(
        "derived: dx gamma_{k_p(d)+7} M_dx + inherited (xhat, rstd); dgamma gamma_{k_p(m)} "
        "sum|g xhat| + sum|g| err_xhat; dbeta gamma_{k(m)} sum|g|",
        "rstd (h - mean h - xhat mean(h xhat)) in float32 with float32 statistics",
        _norm_vjp_bound),
    Op.batch_norm: DerivedRule(
        "derived: as layer_norm over each channel's N x spatial group",
        "layer_norm's VJP derivation with the statistics of each channel", _norm_vjp_bound),
    Op.scaled_dot_product_attention: DerivedRule(
        "derived: dv |P'-P|^T|g| + gamma_{k_p(Lq)} M; dq, dk from dS = P (dP - c) with P's "
        "per-element error, gamma_{k_p(dv)+2k_p(Lk)+4} (dq), gamma_{k_p(dv)+k_p(Lk)+k_p(Lq)+4} (dk)",
        "float32 P recomputed as in the forward, dP = g v^T, c by dot product or g . out, "
        "dS = P (dP - c), dq = scale dS k, dk = scale dS^T q, dv = P^T g", _attention_vjp_bound),
}
