"""The normalization family (engine/ops/normalization.py): layer_norm, batch_norm and the fused
add_layer_norm (y = layer_norm(x + r), returned with the sum).

Edge sets. layer_norm (22): d in E (lead (2,), (3,), (), (2, 1), (1, 2); only (), (1,), (2,) for
d >= 65535), d = X as one row; empty lead (0, 5), d = 0 (3, 0), d = 1 (4, 1); values normal.
batch_norm (23): BATCH_NORM_SHAPES: groups of N x spatial = n for n in E and X, C in 1..3; N = 0,
C = 0, spatial 0; a group of one (1, 3); values normal. add_layer_norm (22): layer_norm's shapes,
r of x's shape; values normal.

Derived bounds, forward and VJP: conformance/error_terms.py states the method, E, and what the
rules of the norms and attention assume (second-order terms, underflow, overflow)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.bad_inputs import filled, foreign
from conformance.edges import EXTENTS, LARGE, NORMAL, PAST_2_20, SHORT_LEADS, Edge, cycle
from conformance.error_terms import TINY, DerivedRule, e_rel
from conformance.error_terms import clean as _clean, gamma as _gamma, k_of as _k
from conformance.error_terms import dot_underflow as _dot_under, finish_bound as _finish, \
    overflows as _risky, underflow_unit as _ua
from conformance.families.spec import (DIMS, RANK, AuditCase, OpSpec, m23, normal, param,
                                       shaped_inputs)
from conformance.focus import group, smaller_case
from conformance.layouts import factor
from conformance.samplers import F32
from engine import ops
from engine.errors import DeviceMismatchError, ParameterValueError, ShapeError
from engine.types import BackendOp as Op, RuntimeEntry as Entry

GROUP = "norms and attention"


# --- layouts: (rng, cls) -> (input shapes, params) ------------------------------------------------

NORM_GROUPS = (1, 31, 33, 257)        # odd group sizes: no power-of-two tree is balanced


def _norm_group(rng, cls) -> int:
    if cls == "shapes" or rng.integers(0, 2):
        return int(rng.choice(NORM_GROUPS))
    return int(rng.integers(1, 10))


def _norm_eps(rng, cls) -> float:
    return float(rng.choice([1e-5, 1e-12, 0.5, 1.0, 1e-30])) if cls == "params" else 1e-5


def layer_norm_layout(rng, cls):
    """x [..., d] (rank 1-4, a few groups), gamma [d], beta [d]."""
    rank = int(rng.integers(1, 5))
    lead = [int(x) for x in rng.integers(1, 3, size=rank - 1)]
    d = _norm_group(rng, cls)
    if cls == "empty":
        axis = int(rng.integers(0, rank))
        if axis == rank - 1:
            d = 0
        else:
            lead[axis] = 0
    return [tuple(lead) + (d,), (d,), (d,)], {"eps": _norm_eps(rng, cls)}


def batch_norm_layout(rng, cls):
    """x [N, C, ...] (rank 2-4) with N x spatial a group size of NORM_GROUPS (or small), gamma and
    beta [C]."""
    rank = int(rng.integers(2, 5))
    c = int(rng.integers(1, 4))
    dims = list(factor(rng, _norm_group(rng, cls), rank - 1))   # N and the spatial extents
    if cls == "empty":
        if rng.integers(0, 3) == 0:
            c = 0
        else:
            dims[int(rng.integers(0, len(dims)))] = 0
    shape = (dims[0], c) + tuple(dims[1:])
    return [shape, (c,), (c,)], {"eps": _norm_eps(rng, cls)}


def add_layer_norm_layout(rng, cls):
    """x [..., d], r of x's shape, gamma [d], beta [d]: layer_norm's layout with r as input 1."""
    (x, gamma, beta), params = layer_norm_layout(rng, cls)
    return [x, x, gamma, beta], params


def add_layer_norm_values(arrays, cls, index, rng):
    """normal and shapes, the classes the campaign runs the inner-product identity on
    (conformance/vjp.py): |r| kept within 2^-4 .. 2^4 of |x| elementwise (r's sign kept), so each
    input's step of 2^7 ulps moves the float32 sum x + r exactly. Against a much larger addend the
    step of the smaller one is lost in the sum's rounding, and the central differences see the
    float32 add's staircase (a zero derivative), not the composition's. The other classes and
    the edge set keep addends of any ratio."""
    if cls not in ("normal", "shapes"):
        return arrays
    x, r = (np.asarray(a, np.float64) for a in arrays[:2])
    bound = np.abs(x)
    r = np.copysign(np.clip(np.abs(r), bound / 16, bound * 16), r).astype(F32)
    return [arrays[0], r] + list(arrays[2:])


# --- the fixed edge sets --------------------------------------------------------------------------

NORM_LEADS = ((2,), (3,), (), (2, 1), (1, 2))


def _layer_norm() -> list[Edge]:
    shapes = [cycle(NORM_LEADS if d < LARGE else SHORT_LEADS, i) + (d,)
              for i, d in enumerate(EXTENTS)]
    shapes += [(PAST_2_20,), (0, 5), (3, 0), (4, 1)]
    return [Edge((s, s[-1:], s[-1:]), (("eps", 1e-5),), NORMAL) for s in shapes]


# x [N, C, ...]: N x spatial is each n of E and X; then N = 0, C = 0, spatial 0, a group of one
BATCH_NORM_SHAPES = (
    (7, 2), (31, 3), (2, 2, 16), (3, 1, 11), (251, 2), (15, 2, 17), (4, 3, 8, 8), (1, 2, 257),
    (31, 1, 33), (16, 2, 64), (25, 2, 41), (63, 1, 65), (1, 2, 64, 64), (4097, 2), (1, 1, 4099),
    (255, 1, 257), (256, 2, 256), (65537, 1), (1, 1, PAST_2_20),
    (0, 3, 4), (5, 0, 2), (2, 3, 0), (1, 3),
)


def _batch_norm() -> list[Edge]:
    return [Edge((s, s[1:2], s[1:2]), (("eps", 1e-5),), NORMAL) for s in BATCH_NORM_SHAPES]


def _add_layer_norm() -> list[Edge]:
    return [Edge((e.shapes[0],) + e.shapes, e.params, e.fill) for e in _layer_norm()]


def _row_terms(case) -> int:
    """The group (row) length d (0 when the output is empty)."""
    return case.inputs[0].shape[-1] if case.inputs[0].size else 0


def _channel_terms(case) -> int:
    """N x spatial of each channel (0 when the output is empty)."""
    x = case.inputs[0]
    return x.size // x.shape[1] if x.size else 0


# --- the cancellation class: nearly constant groups -----------------------------------------------

def _cancel_groups(arrays, rng, rows_last: bool):
    """Groups nearly constant and far from zero (the mean is most of every value: a one-pass
    variance cancels catastrophically), and beta ~ -xhat gamma for one group so y nearly cancels.
    The groups are x's rows over the last axis (layer_norm), or each channel's values."""
    x, gamma, beta = arrays
    if x.size == 0:
        return arrays
    if rows_last:
        moved, rows = None, x.reshape(-1, x.shape[-1])
    else:
        moved = np.moveaxis(x, 1, 0)
        rows = moved.reshape(moved.shape[0], -1)
    n_groups = rows.shape[0]
    centre = rng.choice([-1.0, 1.0], size=(n_groups, 1)) * np.exp2(rng.integers(2, 17, (n_groups, 1)))
    spread = centre * np.exp2(-rng.integers(4, 15, (n_groups, 1)).astype(np.float64))
    new_rows = (centre + spread * rng.standard_normal(rows.shape)).astype(F32)
    r64 = new_rows.astype(np.float64)
    dev = r64 - r64.mean(axis=1, keepdims=True)
    xhat = dev / np.sqrt((dev * dev).mean(axis=1, keepdims=True) + float(F32(1e-5)))
    g64 = gamma.astype(np.float64)
    if rows_last:
        x = new_rows.reshape(x.shape)
        pick = int(rng.integers(0, n_groups))
        beta = (-(xhat[pick] * g64)).astype(F32)
    else:
        x = np.moveaxis(new_rows.reshape(moved.shape), 0, 1)
        pick = rng.integers(0, rows.shape[1], size=n_groups)
        beta = (-(xhat[np.arange(n_groups), pick] * g64)).astype(F32)
    return [x, gamma, beta]


def _cancel_add_layer_norm(arrays, rng):
    """add_layer_norm: layer_norm's cancelling groups for the sum s = x + r, split as a random r
    (up to 8 times the group's centre, so the add itself cancels too) and x = float32(s - r): the
    float32 sum moves by a few of the centre's ulps, far under the spread, and stays nearly
    constant per row; beta ~ -xhat gamma at that sum for one group."""
    x, r, gamma, beta = arrays
    if x.size == 0:
        return arrays
    target, gamma, _ = _cancel_groups([x, gamma, beta], rng, rows_last=True)
    rows = target.reshape(-1, x.shape[-1]).astype(np.float64)
    centre = np.abs(rows).max(axis=1, keepdims=True)
    scale = centre * np.exp2(rng.integers(-3, 4, (rows.shape[0], 1)).astype(np.float64))
    r_rows = (scale * rng.standard_normal(rows.shape)).astype(F32)
    x_rows = (rows - r_rows).astype(F32)
    s = (x_rows + r_rows).astype(np.float64)
    dev = s - s.mean(axis=1, keepdims=True)
    xhat = dev / np.sqrt((dev * dev).mean(axis=1, keepdims=True) + float(F32(1e-5)))
    pick = int(rng.integers(0, rows.shape[0]))
    beta = (-(xhat[pick] * gamma.astype(np.float64))).astype(F32)
    return [x_rows.reshape(x.shape), r_rows.reshape(x.shape), gamma, beta]


def _cancel_layer_norm(arrays, rng):
    return _cancel_groups(arrays, rng, rows_last=True)


def _cancel_batch_norm(arrays, rng):
    return _cancel_groups(arrays, rng, rows_last=False)


# --- shrinking: the failing element's group -------------------------------------------------------

def _layer_norm_group(case, idx: tuple, output: str):
    """The failing element's row (value, dx); dgamma and dbeta read every row: no smaller case."""
    x, gamma, beta = case.inputs
    g = case.cotangent
    if not idx or output not in ("value", "grad[0]") or x.ndim < 2:
        return None
    row = tuple(idx[:-1])
    return smaller_case(case, (np.array(x[row], F32), gamma, beta), dict(case.params),
                        None if g is None else np.array(g[row], F32))


def _add_layer_norm_group(case, idx: tuple, output: str):
    """The row of x and r (either half of the value, dx, dr)."""
    x, r, gamma, beta = case.inputs
    g = case.cotangent
    if not idx or output not in ("value", "grad[0]", "grad[1]") or x.ndim < 2:
        return None
    row = tuple(idx[1:-1]) if output == "value" else tuple(idx[:-1])   # value: [2, ..., d]
    return smaller_case(case, (np.array(x[row], F32), np.array(r[row], F32), gamma, beta),
                        dict(case.params),
                        None if g is None else np.array(g[(slice(None),) + row], F32))


def _batch_norm_group(case, idx: tuple, output: str):
    """The failing element's channel (any output)."""
    x, gamma, beta = case.inputs
    g = case.cotangent
    if not idx:
        return None
    c = idx[1] if output in ("value", "grad[0]") else idx[0]
    if x.shape[1] < 2:
        return None
    sl = slice(c, c + 1)
    return smaller_case(case, (np.array(x[:, sl], F32), np.array(gamma[sl], F32),
                               np.array(beta[sl], F32)), dict(case.params),
                        None if g is None else np.array(g[:, sl], F32))


# --- derived bounds: two-pass float32 statistics --------------------------------------------------

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


LAYER_NORM_FORWARD = DerivedRule(
    "derived: |gamma| err_xhat + u (|xhat gamma| + |y|), two-pass float32 statistics",
    "float32 mean, then mean of squared deviations (biased), rstd = 1/sqrt(v + eps); the mean's "
    "error, rstd's relative error and the roundings of xhat, the product and the sum",
    _norm_forward_bound)
BATCH_NORM_FORWARD = DerivedRule(
    "derived: as layer_norm over each channel's N x spatial group",
    "layer_norm's two-pass derivation with the statistics of each channel", _norm_forward_bound)
LAYER_NORM_VJP = DerivedRule(
    "derived: dx gamma_{k_p(d)+7} M_dx + inherited (xhat, rstd); dgamma gamma_{k_p(m)} "
    "sum|g xhat| + sum|g| err_xhat; dbeta gamma_{k(m)} sum|g|",
    "rstd (h - mean h - xhat mean(h xhat)) in float32 with float32 statistics",
    _norm_vjp_bound)
BATCH_NORM_VJP = DerivedRule(
    "derived: as layer_norm over each channel's N x spatial group",
    "layer_norm's VJP derivation with the statistics of each channel", _norm_vjp_bound)


# --- add_layer_norm (RuntimeEntry): its forward [s, y] has a declared bound in both capsules'
# value contracts; a gradient contract declares none, so the VJP takes layer_norm's rule at the
# float32 sum s for the cotangent g[1] of y --------------------------------------------------------
U64 = 2.0 ** -53


def _add_layer_norm_vjp_bound(ref, ctx, unit):
    """dgamma, dbeta: layer_norm's bounds at s for g[1]. dx = dr = g[0] + layer_norm's dx: that
    dx's bound (its exact value and magnitude are the reference's less g[0], to float64 rounding),
    the addition's rounding u |dx + g[0]|, and the reference's own float64 error (2 u64 of |dx| and
    of |dx + g[0]|: references/add_layer_norm.py adds float64 values)."""
    x, r, gamma, beta = (np.asarray(a, np.float32) for a in ctx.inputs[:4])
    with np.errstate(all="ignore"):
        s = (x + r).astype(np.float32)
    g = np.asarray(ctx.g, np.float32)
    index = getattr(ctx, "input_index", 0)
    ln_ctx = dataclasses.replace(
        ctx, op=Op.layer_norm, inputs=(s, gamma, beta), g=g[1], input_index=max(index - 1, 0),
        out=None if ctx.out is None else np.asarray(ctx.out)[1], fwd_ref=None)
    bound = _norm_vjp_bound
    if index >= 2:
        return bound(ref, ln_ctx, unit)
    g0 = g[0].astype(np.float64)
    total = np.asarray(ref.exact, np.float64)
    with np.errstate(all="ignore"):
        dx = total - g0
        ln_ref = dataclasses.replace(
            ref, value=np.asarray(dx, np.float32), exact=dx,
            magnitude=np.maximum(_clean(np.asarray(ref.magnitude, np.float64)) - np.abs(g0), 0.0))
        b = bound(ln_ref, ln_ctx, unit) + (unit + 2 * U64) * _clean(np.abs(total)) + \
            2 * U64 * _clean(np.abs(dx))
    return b * (1 + 4 * unit)


ADD_LAYER_NORM_VJP = DerivedRule(
    "derived: layer_norm's VJP bounds at s = float32(x + r) for g[1]; dx = dr adds g[0]: "
    "+ (u + 2u64) |dx + g[0]|",
    "g[0] + layer_norm's dx at the float32 sum (float32 statistics or better), one rounding more",
    _add_layer_norm_vjp_bound)


def _add_ln(s, r=(2, 3), gamma=(3,), **kw):
    return ops.add_layer_norm(m23(s), filled(s, r), filled(s, gamma), filled(s, (3,)), **kw)


def _add_layer_norm_audit(rng, idx):
    # gpt2-124m's residual width over 256 rows: dgamma and dbeta sum 256 rows per column
    return (normal(rng, 256, 768), normal(rng, 256, 768), normal(rng, 768), normal(rng, 768)), \
        {"eps": 1e-5}, (2, 256, 768)


# --- the records ----------------------------------------------------------------------------------

SPECS = (
    # the float32 two-pass statistics overflow when n (x - mu)^2 reaches 2^128: 2^60 is that edge
    # for groups of about 256
    OpSpec(Op.layer_norm, layer_norm_layout, _layer_norm, catalogue=37,
        extra_classes=("params",), near_overflow=2.0 ** 60, wide_max_exp=57,
        error_inputs=(
            param(38, "layer_norm: gamma shape", DIMS,
                  lambda s: ops.layer_norm(m23(s), filled(s, (2,)), filled(s, (3,))),
                  ShapeError, r"gamma \[d\], beta \[d\]; got \(2, 3\), \(2,\), \(3,\)"),
            param(39, "layer_norm: eps 0", DIMS,
                  lambda s: ops.layer_norm(m23(s), filled(s, (3,)), filled(s, (3,)), eps=0.0),
                  ParameterValueError,
                  r"eps must be a positive finite number that float32 can hold, got 0.0")),
        summary_group=GROUP, cancellation=_cancel_layer_norm,
        focus=group(_layer_norm_group), forward_rule=LAYER_NORM_FORWARD, vjp_rule=LAYER_NORM_VJP,
        terms=_row_terms),
    OpSpec(Op.batch_norm, batch_norm_layout, _batch_norm, catalogue=38,
        extra_classes=("params",), near_overflow=2.0 ** 60, wide_max_exp=57,
        error_inputs=(
            param(40, "batch_norm: rank 1", RANK,
                  lambda s: ops.batch_norm(filled(s, (3,)), filled(s, (3,)), filled(s, (3,))),
                  ShapeError, r"x \[N, C, ...\]"),),
        summary_group=GROUP, cancellation=_cancel_batch_norm,
        focus=group(_batch_norm_group), forward_rule=BATCH_NORM_FORWARD, vjp_rule=BATCH_NORM_VJP,
        terms=_channel_terms),
    # layer_norm's record for the sum s = x + r: the same overflow edge and wide exponents (s at
    # most doubles them); its forward has a declared bound in both capsules' value contracts
    OpSpec(Entry.add_layer_norm, add_layer_norm_layout, _add_layer_norm, catalogue=52,
        extra_classes=("params",), near_overflow=2.0 ** 60, wide_max_exp=57,
        values=add_layer_norm_values, determinism=AuditCase(21, _add_layer_norm_audit),
        error_inputs=(
            *shaped_inputs(31, "add_layer_norm",
                           lambda s, a: ops.add_layer_norm(a, a, filled(s, (3,)),
                                                           filled(s, (3,))), (2, 3)),
            param(153, "add_layer_norm: r of another shape", DIMS,
                  lambda s: _add_ln(s, r=(3, 2)), ShapeError,
                  r"r of x's shape, gamma \[d\], beta \[d\]; got \(2, 3\), \(3, 2\), "
                  r"\(3,\), \(3,\)"),
            param(154, "add_layer_norm: gamma of the wrong length", DIMS,
                  lambda s: _add_ln(s, gamma=(2,)), ShapeError,
                  r"gamma \[d\], beta \[d\]; got \(2, 3\), \(2, 3\), \(2,\), \(3,\)"),
            param(155, "add_layer_norm: eps 0", DIMS, lambda s: _add_ln(s, eps=0.0),
                  ParameterValueError,
                  r"add_layer_norm: eps must be a positive finite number that float32 can "
                  r"hold, got 0.0"),
            param(156, "add_layer_norm: r on the other device", "session targets the device",
                  lambda s: ops.add_layer_norm(m23(s), foreign(s, (2, 3)), filled(s, (3,)),
                                               filled(s, (3,))), DeviceMismatchError,
                  r"input 1 lives on `\w+` but the session runs on `\w+`")),
        summary_group=GROUP, cancellation=_cancel_add_layer_norm,
        focus=group(_add_layer_norm_group), vjp_rule=ADD_LAYER_NORM_VJP, terms=_row_terms),
)
