"""Tests for the layer_norm, batch_norm and scaled_dot_product_attention references: hand values and
hard-mask regressions, agreement with plain high-precision mpmath, VJPs against central differences
(<v, J u> = <J^T v, u>), the engine's reference provider within its declared bound (1 ulp + u *
magnitude), and the time the oracle takes on the sizes the harness uses."""

import math
import time
import zlib

import mpmath
import numpy as np
import pytest
from mpmath import mpf

import engine
from conformance import references
from conformance.references._common import ReferenceInputError
from conformance.rounding import round_mpf_to_f32, ulp_array
from engine import ops

f32 = np.float32
NAN, INF = np.nan, np.inf
U = 2.0 ** -24
EPS32 = float(f32(1e-5))


def arr(*values):
    return np.array(values, dtype=np.float32)


def fwd(op, *inputs, **params):
    return references.get(op).forward(tuple(inputs), **params)


def vjp(op, inputs, g, **params):
    return references.get(op).vjp(tuple(inputs), np.asarray(g, np.float32), **params)


def assert_bits(got, want):
    """Bitwise equality, signed zeros included; any NaN matches any NaN."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, (got.shape, want.shape)
    both_nan = np.isnan(got) & np.isnan(want)
    assert np.all(both_nan | (got.view(np.uint32) == want.view(np.uint32))), (got, want)


def M(x):
    return mpf(float(x))


# ---------------------------------------------------------------- plain mpmath models (no intervals)


def mp_layer_norm(x, gamma, beta, eps=EPS32, prec=400):
    """Forward and VJP pieces of one row in plain mpmath, rounded once: (y, xhat, rstd) as mpf lists."""
    with mpmath.workprec(prec):
        xs = [M(v) for v in x]
        n = len(xs)
        mu = mpmath.fsum(xs) / n
        var = mpmath.fsum((v - mu) ** 2 for v in xs) / n
        rstd = 1 / mpmath.sqrt(var + M(eps))
        xhat = [(v - mu) * rstd for v in xs]
        y = [h * M(gm) + M(bt) for h, gm, bt in zip(xhat, gamma, beta)]
        return y, xhat, rstd


def mp_layer_norm_dx(x, gamma, g, eps=EPS32, prec=400):
    with mpmath.workprec(prec):
        _, xhat, rstd = mp_layer_norm(x, gamma, np.zeros_like(gamma), eps, prec)
        h = [M(a) * M(b) for a, b in zip(g, gamma)]
        n = len(h)
        mh = mpmath.fsum(h) / n
        mhx = mpmath.fsum(a * b for a, b in zip(h, xhat)) / n
        return [round_mpf_to_f32(rstd * (hi - mh - xi * mhx)) for hi, xi in zip(h, xhat)]


def mp_attention(q, k, v, mask, scale, g=None, prec=400):
    """out (and dq, dk, dv when g is given) of one rank-2 attention in plain mpmath, rounded once."""
    lq, lk, dv, d = q.shape[0], k.shape[0], v.shape[1], q.shape[1]
    with mpmath.workprec(prec):
        sc = M(f32(scale))
        p = [[mpf(0)] * lk for _ in range(lq)]
        for i in range(lq):
            js = [j for j in range(lk) if mask[i, j]]
            if not js:
                continue
            s = {j: mpmath.fsum(M(q[i, c]) * M(k[j, c]) for c in range(d)) * sc for j in js}
            top = max(s.values())
            e = {j: mpmath.exp(s[j] - top) for j in js}
            total = mpmath.fsum(e.values())
            for j in js:
                p[i][j] = e[j] / total
        out = [[mpmath.fsum(p[i][j] * M(v[j, c]) for j in range(lk)) for c in range(dv)] for i in range(lq)]
        if g is None:
            return np.array([[round_mpf_to_f32(x) for x in row] for row in out], np.float32)
        dp = [[mpmath.fsum(M(g[i, c]) * M(v[j, c]) for c in range(dv)) for j in range(lk)] for i in range(lq)]
        ds = [[p[i][j] * (dp[i][j] - mpmath.fsum(p[i][l] * dp[i][l] for l in range(lk))) for j in range(lk)]
              for i in range(lq)]
        dq = [[sc * mpmath.fsum(ds[i][j] * M(k[j, c]) for j in range(lk)) for c in range(d)] for i in range(lq)]
        dk = [[sc * mpmath.fsum(ds[i][j] * M(q[i, c]) for i in range(lq)) for c in range(d)] for j in range(lk)]
        dvv = [[mpmath.fsum(p[i][j] * M(g[i, c]) for i in range(lq)) for c in range(dv)] for j in range(lk)]
        return tuple(np.array([[round_mpf_to_f32(x) for x in row] for row in a], np.float32) for a in (dq, dk, dvv))


# ---------------------------------------------------------------- registry


def test_registered_with_forward_and_vjp():
    for op in ("layer_norm", "batch_norm", "scaled_dot_product_attention"):
        assert op in references.OPS
        module = references.get(op)
        assert callable(module.forward) and callable(module.vjp)


# ---------------------------------------------------------------- layer_norm and batch_norm


def test_layer_norm_hand_values():
    r = fwd("layer_norm", arr(1, 2, 3), arr(1, 1, 1), arr(0, 0, 0))
    assert r.kind == "composite" and r.terms == 3
    with mpmath.workprec(300):
        y0 = round_mpf_to_f32(-1 / mpmath.sqrt(mpf(2) / 3 + M(EPS32)))  # (1 - 2) / sqrt(2/3 + eps)
    assert_bits(r.value, [y0, 0.0, -y0])
    assert abs(float(y0) + 1.2247357) < 1e-6
    np.testing.assert_allclose(r.magnitude, np.abs(r.exact))  # beta = 0: |xhat gamma|
    # eps is rounded to float32 first: 0.1 becomes float32(0.1)
    r = fwd("layer_norm", arr(0, 1), arr(1, 1), arr(0, 0), eps=0.1)
    with mpmath.workprec(300):
        assert_bits(r.value[1], round_mpf_to_f32(mpf(0.5) / mpmath.sqrt(mpf(0.25) + M(f32(0.1)))))
    # a constant row: xhat is exactly 0, y = beta exactly, with the -0 of -0 * ... + (-0)
    r = fwd("layer_norm", arr(5, 5), arr(-2, 3), arr(-0.0, 7))
    assert_bits(r.value, arr(-0.0, 7))
    # beta cancelling xhat gamma: the tiny remainder is found, not a rounding of 0
    y, _, _ = mp_layer_norm(arr(0, 1), arr(1, 1), arr(0, 0))
    beta = float(f32(-float(y[1])))
    r = fwd("layer_norm", arr(0, 1), arr(1, 1), arr(0, beta))
    with mpmath.workprec(400):
        assert_bits(r.value[1], round_mpf_to_f32(y[1] + M(beta)))
    assert r.value[1] != 0 and r.magnitude[1] == pytest.approx(2 * abs(beta))
    with pytest.raises(ReferenceInputError, match="eps"):
        fwd("layer_norm", arr(1, 2), arr(1, 1), arr(0, 0), eps=0.0)
    with pytest.raises(ReferenceInputError, match="gamma"):
        fwd("layer_norm", arr(1, 2), arr(1), arr(0, 0))


def test_layer_norm_vjp_hand_values():
    x, gamma = arr(1, 2, 3), arr(1, 1, 1)
    dx, dgamma, dbeta = vjp("layer_norm", (x, gamma, arr(0, 0, 0)), arr(1, 1, 1))
    assert_bits(dx.value, arr(0, 0, 0))  # a constant dxhat has no component left: exactly +0
    y = fwd("layer_norm", x, gamma, arr(0, 0, 0)).value
    assert_bits(dgamma.value, y)  # one row: dgamma = g xhat = xhat
    assert_bits(dbeta.value, arr(1, 1, 1))
    # g = x - mean = xhat / rstd: dx = rstd (g - xhat mean(g xhat)) = g rstd (1 - var / (var + eps)),
    # an eps-sized remainder of a cancellation
    dx, _, _ = vjp("layer_norm", (x, gamma, arr(0, 0, 0)), arr(-1, 0, 1))
    with mpmath.workprec(300):
        var, e = mpf(2) / 3, M(EPS32)
        want = round_mpf_to_f32(-(1 / mpmath.sqrt(var + e)) * (1 - var / (var + e)))
    assert_bits(dx.value, [want, 0.0, -want])
    assert dx.terms == 3 and np.all(dx.magnitude >= np.abs(dx.exact))


def test_layer_norm_matches_plain_mpmath():
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((3, 7)) * np.exp2(rng.integers(-8, 8, (3, 1)))).astype(np.float32)
    x[2] = x[2] * f32(1e-3) + f32(100)  # small variance under a large mean
    gamma, beta = rng.standard_normal(7).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    g = rng.standard_normal((3, 7)).astype(np.float32)
    r = fwd("layer_norm", x, gamma, beta)
    dx, dgamma, dbeta = vjp("layer_norm", (x, gamma, beta), g)
    xhats = []
    for i in range(3):
        y, xhat, _ = mp_layer_norm(x[i], gamma, beta)
        xhats.append(xhat)
        assert_bits(r.value[i], [round_mpf_to_f32(v) for v in y])
        assert_bits(dx.value[i], mp_layer_norm_dx(x[i], gamma, g[i]))
    with mpmath.workprec(400):
        assert_bits(dgamma.value, [round_mpf_to_f32(mpmath.fsum(M(g[i, c]) * xhats[i][c] for i in range(3)))
                                   for c in range(7)])
        assert_bits(dbeta.value, [round_mpf_to_f32(mpmath.fsum(M(g[i, c]) for i in range(3))) for c in range(7)])
    assert dgamma.terms == 3 and dx.terms == 7
    for ref in (r, dx, dgamma, dbeta):
        assert ref.kind == "composite" and np.all(ref.magnitude >= np.abs(ref.exact) * (1 - 1e-12))


def test_layer_norm_identical_rows_cancel_exactly_in_dgamma():
    x = np.array([[1, 2, 4], [1, 2, 4]], np.float32)
    g = np.array([[1, -3, 0.5], [-1, 3, -0.5]], np.float32)
    _, dgamma, dbeta = vjp("layer_norm", (x, arr(1, 1, 1), arr(0, 0, 0)), g)
    assert_bits(dgamma.value, arr(0, 0, 0)) and assert_bits(dbeta.value, arr(0, 0, 0))
    assert np.all(dgamma.exact == 0) and np.all(dgamma.magnitude > 0)


def test_layer_norm_special_values_follow_ieee():
    x = np.array([[1, INF, 3], [1, 2, 3]], np.float32)
    r = fwd("layer_norm", x, arr(1, 1, 1), arr(0, 0, INF))
    assert np.all(np.isnan(r.value[0]))
    assert r.value[1, 2] == INF and np.isfinite(r.value[1, :2]).all()


def test_batch_norm_hand_values_and_layout():
    r = fwd("batch_norm", arr(1, 3).reshape(2, 1), arr(2), arr(0.5))
    with mpmath.workprec(300):
        lo = round_mpf_to_f32(-2 / mpmath.sqrt(1 + M(EPS32)) + mpf(0.5))
        hi = round_mpf_to_f32(2 / mpmath.sqrt(1 + M(EPS32)) + mpf(0.5))
    assert_bits(r.value, np.array([[lo], [hi]], np.float32))
    assert r.terms == 2
    # per channel, batch_norm over [N, C, L] is layer_norm of the channel's N * L values
    rng = np.random.default_rng(22)
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    gamma, beta = arr(1.5, -0.5), arr(0.25, 2)
    g = rng.standard_normal((3, 2, 4)).astype(np.float32)
    r = fwd("batch_norm", x, gamma, beta)
    dx, dgamma, dbeta = vjp("batch_norm", (x, gamma, beta), g)
    assert r.terms == 12 and dgamma.terms == 12
    for c in range(2):
        row = x[:, c, :].reshape(-1)
        ln = fwd("layer_norm", row, np.full(12, gamma[c]), np.full(12, beta[c]))
        assert_bits(r.value[:, c, :].reshape(-1), ln.value)
        ldx = vjp("layer_norm", (row, np.full(12, gamma[c]), np.zeros(12, np.float32)), g[:, c, :].reshape(-1))[0]
        assert_bits(dx.value[:, c, :].reshape(-1), ldx.value)
        _, xhat, _ = mp_layer_norm(row, np.ones(12, np.float32), np.zeros(12, np.float32))
        with mpmath.workprec(400):
            gr = g[:, c, :].reshape(-1)
            assert_bits(dgamma.value[c], round_mpf_to_f32(mpmath.fsum(M(a) * b for a, b in zip(gr, xhat))))
            assert_bits(dbeta.value[c], round_mpf_to_f32(mpmath.fsum(M(a) for a in gr)))
    with pytest.raises(ReferenceInputError, match="batch_norm"):
        fwd("batch_norm", arr(1, 2), arr(1), arr(0))


# ---------------------------------------------------------------- attention: hard masks


def _scores_case(scores, mask, v):
    """q = [[1]], k = scores as one column, scale 1: the scores are exactly the given numbers."""
    q = np.ones((1, 1), np.float32)
    k = np.asarray(scores, np.float32).reshape(-1, 1)
    return q, k, np.asarray(v, np.float32), np.asarray(mask, bool).reshape(1, -1)


def test_attention_hard_mask_regressions():
    v = np.array([[1.5, -2], [3, 0.25], [-7, 8], [9, 10]], np.float32)
    # scores [1000, -1000, 3, 4], only key 1 participates: weights [0, 1, 0, 0], output = v row 1
    q, k, v_, mask = _scores_case([1000, -1000, 3, 4], [False, True, False, False], v)
    r = fwd("scaled_dot_product_attention", q, k, v_, mask=mask, scale=1.0)
    assert_bits(r.value, v[1:2])
    assert r.kind == "composite" and r.terms.tolist() == [[1, 1]]
    # fully blocked row: zeros (+0)
    r = fwd("scaled_dot_product_attention", q, k, v_, mask=np.zeros((1, 4), bool), scale=1.0)
    assert_bits(r.value, np.zeros((1, 2), np.float32))
    # an allowed -5000 beside a blocked 7: all the weight on the -5000 key
    q, k, v_, mask = _scores_case([-5000, 7], [True, False], v[:2])
    assert_bits(fwd("scaled_dot_product_attention", q, k, v_, mask=mask, scale=1.0).value, v[:1])
    # blocked data is ignored entirely, NaN and inf included
    vn = v.copy()
    vn[0] = NAN
    q, k, v_, mask = _scores_case([NAN, -1000, INF, 4], [False, True, False, False], vn)
    assert_bits(fwd("scaled_dot_product_attention", q, k, v_, mask=mask, scale=1.0).value, v[1:2])
    # an allowed -5000 beside an allowed 0: weight e^-5000 on v = -1 next to v = 0 gives -0
    q, k, v_, mask = _scores_case([-5000, 0], [True, True], [[-1], [0]])
    r = fwd("scaled_dot_product_attention", q, k, v_, mask=mask, scale=1.0)
    assert_bits(r.value, arr(-0.0).reshape(1, 1))
    assert r.exact[0, 0] == 0 and np.signbit(r.exact[0, 0])


def test_attention_vjp_blocked_rows_and_keys_get_zero_gradients():
    rng = np.random.default_rng(23)
    q, k = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    v, g = rng.standard_normal((5, 2)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    mask = np.ones((3, 5), bool)
    mask[:, 4] = False  # key 4 never participates
    mask[2, :] = False  # query 2 fully blocked
    k[4], v[4], g[2] = NAN, INF, NAN  # ...so their data takes no part
    out = fwd("scaled_dot_product_attention", q, k, v, mask=mask)
    assert np.all(np.isfinite(out.value)) and np.all(out.value[2] == 0)
    dq, dk, dv = vjp("scaled_dot_product_attention", (q, k, v), g, mask=mask)
    assert_bits(dk.value[4], np.zeros(4, np.float32)) and assert_bits(dv.value[4], np.zeros(2, np.float32))
    assert_bits(dq.value[2], np.zeros(4, np.float32))
    assert np.all(np.isfinite(dq.value)) and np.all(np.isfinite(dk.value)) and np.all(np.isfinite(dv.value))
    assert dk.terms[4].tolist() == [0] * 4 and dq.terms[0].tolist() == [4] * 4
    # the single-participant row: P = 1 exactly, so dS = 0 and dq = 0 exactly
    mask1 = np.zeros((1, 3), bool)
    mask1[0, 1] = True
    dq, dk, dv = vjp("scaled_dot_product_attention", (q[:1], k[:3], v[:3]), g[:1], mask=mask1)
    assert_bits(dq.value, np.zeros((1, 4), np.float32)) and assert_bits(dk.value, np.zeros((3, 4), np.float32))
    assert_bits(dv.value, np.stack([np.zeros(2, np.float32), g[0], np.zeros(2, np.float32)]))


def test_attention_exact_results_are_found_exactly():
    # equal scores: P = 1/2 each, the output 1 + 2^-24 is a float32 midpoint: ties to even gives 1
    q, k = np.zeros((1, 2), np.float32), np.ones((2, 2), np.float32)
    v = arr(1, 1 + 2 ** -23).reshape(2, 1)
    r = fwd("scaled_dot_product_attention", q, k, v)
    assert_bits(r.value, arr(1).reshape(1, 1)) and r.exact[0, 0] == 1 + 2 ** -24
    # three tied keys: the mean, rounded once
    v3 = arr(1, 2, 2 ** -20).reshape(3, 1)
    r = fwd("scaled_dot_product_attention", np.zeros((1, 2), np.float32), np.ones((3, 2), np.float32), v3)
    with mpmath.workprec(200):
        assert_bits(r.value, np.array([[round_mpf_to_f32((3 + mpf(2) ** -20) / 3)]], np.float32))
    # v rows all equal: the output is v exactly whatever the scores, and dS = 0, so dq = dk = +0
    rng = np.random.default_rng(24)
    q, k = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    v = np.tile(arr(0.1, -3), (4, 1))
    r = fwd("scaled_dot_product_attention", q, k, v)
    assert_bits(r.value, np.tile(arr(0.1, -3), (2, 1)))
    dq, dk, _ = vjp("scaled_dot_product_attention", (q, k, v), rng.standard_normal((2, 2)))
    assert_bits(dq.value, np.zeros((2, 3), np.float32)) and assert_bits(dk.value, np.zeros((4, 3), np.float32))
    # zeros by symmetry: duplicate query rows with opposite g cancel in dk and dv; a constant column of
    # k gets sum_j dS_ij = 0 in dq. Only the Ziv loop's last precision settles these (at +0)
    q2 = np.concatenate([q, q])
    v = rng.standard_normal((4, 2)).astype(np.float32)
    g = rng.standard_normal((2, 2)).astype(np.float32)
    dq, dk, dv = vjp("scaled_dot_product_attention", (q2, k, v), np.concatenate([g, -g]))
    assert_bits(dk.value, np.zeros((4, 3), np.float32)) and assert_bits(dv.value, np.zeros((4, 2), np.float32))
    assert_bits(dq.value[2:], -dq.value[:2]) and np.all(dq.value != 0)
    k[:, 1] = 1.5
    dq, _, _ = vjp("scaled_dot_product_attention", (q, k, v), g)
    assert_bits(dq.value[:, 1], np.zeros(2, np.float32)) and np.all(dq.value[:, [0, 2]] != 0)
    # an exact zero output is -0 when every participating v is -0
    r = fwd("scaled_dot_product_attention", q, k, np.full((4, 2), -0.0, np.float32))
    assert_bits(r.value, np.full((2, 2), -0.0, np.float32))


def test_attention_matches_plain_mpmath():
    rng = np.random.default_rng(25)
    q, k = (rng.standard_normal((3, 2)) * 3).astype(np.float32), (rng.standard_normal((4, 2)) * 3).astype(np.float32)
    v, g = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    mask = np.array([[True, True, False, True], [False, True, True, True], [True, False, False, False]])
    r = fwd("scaled_dot_product_attention", q, k, v, mask=mask, scale=0.7)
    assert_bits(r.value, mp_attention(q, k, v, mask, 0.7))
    grads = vjp("scaled_dot_product_attention", (q, k, v), g, mask=mask, scale=0.7)
    for got, want in zip(grads, mp_attention(q, k, v, mask, 0.7, g)):
        assert_bits(got.value, want)
        assert np.all(got.magnitude >= np.abs(got.exact) * (1 - 1e-12))
    # scale None is 1/sqrt(d), rounded to float32
    assert_bits(fwd("scaled_dot_product_attention", q, k, v).value,
                fwd("scaled_dot_product_attention", q, k, v, scale=float(f32(1 / math.sqrt(2)))).value)
    with pytest.raises(ReferenceInputError, match="mask"):
        fwd("scaled_dot_product_attention", q, k, v, mask=np.ones((3, 3), bool))
    with pytest.raises(ReferenceInputError, match="rank"):
        fwd("scaled_dot_product_attention", q[None], k, v)


# ---------------------------------------------------------------- VJPs against central differences


def _norm64(x, gamma, beta, axes, shape):
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS32) * gamma.reshape(shape) + beta.reshape(shape)


def _attention64(q, k, v, mask, scale):
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * float(f32(scale))
    z = np.where(mask, s, -np.inf)
    m = z.max(axis=-1, keepdims=True)
    e = np.where(mask, np.exp(z - np.where(np.isfinite(m), m, 0)), 0.0)
    t = e.sum(axis=-1, keepdims=True)
    return np.matmul(np.where(t > 0, e / np.where(t > 0, t, 1), 0.0), v)


_MASK3 = np.array([[True, False, True, True], [False, True, True, False], [False, False, False, False]])
_CASES = [
    ("layer_norm", [(3, 5), (5,), (5,)], {}, lambda x, g, b: _norm64(x, g, b, (1,), (1, 5))),
    ("batch_norm", [(2, 3, 4), (3,), (3,)], {}, lambda x, g, b: _norm64(x, g, b, (0, 2), (1, 3, 1))),
    ("scaled_dot_product_attention", [(3, 2), (4, 2), (4, 3)], {"mask": _MASK3, "scale": 0.8},
     lambda q, k, v: _attention64(q, k, v, _MASK3, 0.8)),
    ("scaled_dot_product_attention", [(2, 3, 4), (2, 5, 4), (2, 5, 2)], {},
     lambda q, k, v: _attention64(q, k, v, np.ones((2, 3, 5), bool), 0.5)),
]


@pytest.mark.parametrize("op, shapes, params, fn", _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_vjp_inner_product_matches_central_differences(op, shapes, params, fn):
    rng = np.random.default_rng(zlib.crc32(op.encode()) + len(shapes[0]))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    us = [rng.standard_normal(x.shape) for x in xs]
    out = references.get(op).forward(tuple(xs), **params)
    v = rng.standard_normal(out.value.shape).astype(np.float32)
    grads = references.get(op).vjp(tuple(xs), v, **params)
    h = 1e-6
    plus = fn(*[x.astype(np.float64) + h * u for x, u in zip(xs, us)])
    minus = fn(*[x.astype(np.float64) - h * u for x, u in zip(xs, us)])
    lhs = float(np.sum(v.astype(np.float64) * (plus - minus) / (2 * h)))
    rhs = sum(float(np.sum(gr.exact * u)) for gr, u in zip(grads, us))
    assert math.isclose(lhs, rhs, rel_tol=1e-6, abs_tol=1e-7), (lhs, rhs)
    np.testing.assert_allclose(out.exact, fn(*[x.astype(np.float64) for x in xs]), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the engine's reference provider


def _within_declared(got, ref, units=1.0):
    """|got - value| <= 1 ulp(value) + units * u * magnitude (F64_ONCE_CANCELLING)."""
    got = np.asarray(got, np.float64)
    bound = ulp_array(ref.value) + units * U * ref.magnitude
    err = np.abs(got - ref.value.astype(np.float64))
    assert np.all(err <= bound), (err / bound).max()
    return (err / bound).max()


def _tensors(*arrays, grad=False):
    return [engine.tensor(a, requires_grad=grad) for a in arrays]


def test_engine_norms_agree_with_the_references(cpu_session):
    rng = np.random.default_rng(26)
    for op, shape, pshape in (("layer_norm", (4, 64), (64,)), ("batch_norm", (3, 5, 6), (5,))):
        x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
        gamma, beta = rng.standard_normal(pshape).astype(np.float32), rng.standard_normal(pshape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        ts = _tensors(x, gamma, beta, grad=True)
        out = getattr(ops, op)(*ts)
        _within_declared(out.numpy(), fwd(op, x, gamma, beta))
        out.backward(g)
        for t, ref in zip(ts, vjp(op, (x, gamma, beta), g)):
            _within_declared(t.grad.numpy(), ref)  # the local VJP is float64 too


def test_engine_attention_agrees_with_the_reference(cpu_session):
    rng = np.random.default_rng(27)
    q, k = rng.standard_normal((2, 16, 16)).astype(np.float32), rng.standard_normal((2, 16, 16)).astype(np.float32)
    v, g = rng.standard_normal((2, 16, 32)).astype(np.float32), rng.standard_normal((2, 16, 32)).astype(np.float32)
    mask = rng.random((2, 16, 16)) < 0.7
    mask[0, 3] = False
    for m in (None, mask):
        ts = _tensors(q, k, v, grad=True)
        out = ops.scaled_dot_product_attention(*ts, mask=m)  # d = 16: scale 1/4 is exact in float32
        _within_declared(out.numpy(), fwd("scaled_dot_product_attention", q, k, v, mask=m))
        out.backward(g)
        # the local VJP is float32 array code (probabilities, three matmuls): measured against the
        # exact gradient it stays within a few u of the magnitude; 64 u bounds it
        for t, ref in zip(ts, vjp("scaled_dot_product_attention", (q, k, v), g, mask=m)):
            _within_declared(t.grad.numpy(), ref, units=64.0)


# ---------------------------------------------------------------- cost on the harness's sizes


def test_reference_cost_on_harness_sizes():
    rng = np.random.default_rng(28)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    gamma, beta = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    start = time.process_time()
    fwd("layer_norm", x, gamma, beta)
    vjp("layer_norm", (x, gamma, beta), rng.standard_normal((4, 64)))
    assert time.process_time() - start < 2.0
    q, k = rng.standard_normal((2, 16, 16)).astype(np.float32), rng.standard_normal((2, 16, 16)).astype(np.float32)
    v = rng.standard_normal((2, 16, 32)).astype(np.float32)
    mask = rng.random((2, 16, 16)) < 0.8
    start = time.process_time()
    fwd("scaled_dot_product_attention", q, k, v, mask=mask)
    vjp("scaled_dot_product_attention", (q, k, v), rng.standard_normal((2, 16, 32)), mask=mask)
    assert time.process_time() - start < 2.0
