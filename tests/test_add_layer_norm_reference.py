"""add_layer_norm's mpmath reference (conformance/references/add_layer_norm.py): half 0 of the
forward is float32(x + r) bit for bit and half 1 layer_norm's reference at it; both against an
independent mpmath evaluation on small cases (a cancelling row included); the VJP's dx equals dr,
equals layer_norm's dx + g[0] within the stated float64 error, and is correctly rounded but for
that error; the harness passes the reference capsule (forward, VJP, inner-product identity) on
drawn cases, and the engine wrapper's (s, y) agree with the reference."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from conformance import generators
from conformance.campaign import check_case
from conformance.references import get as reference
from conformance.references._common import ReferenceInputError
from conformance.rounding import ulp_array
from conformance.worker import resolve
from engine import ops
from engine.errors import ParameterValueError, ShapeError
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = pytest.mark.capsules("reference.add_layer_norm")
f32 = np.float32
U, U64 = 2.0 ** -24, 2.0 ** -53
EPS = 1e-5
REF = reference("add_layer_norm")
LN = reference("layer_norm")


def _draw(seed, shape, cancel=False):
    rng = np.random.default_rng(seed)
    d = shape[-1]
    x = rng.standard_normal(shape).astype(f32)
    r = rng.standard_normal(shape).astype(f32)
    if cancel:   # rows of s nearly constant at 2^12 (the variance cancels), split into x + r
        target = 4096.0 + 2.0 ** -6 * rng.standard_normal(shape)
        r = (1000.0 * rng.standard_normal(shape)).astype(f32)
        x = (target - r).astype(f32)
    gamma = rng.standard_normal(d).astype(f32)
    beta = rng.standard_normal(d).astype(f32)
    return x, r, gamma, beta


def _mp_row(s_row, gamma, beta, g1_row, eps):
    """layer_norm's forward and dx of one row at 200 bits, from the float32 sum s."""
    with mpmath.workprec(200):
        s = [mpmath.mpf(float(v)) for v in s_row]
        n = len(s)
        mu = mpmath.fsum(s) / n
        dev = [v - mu for v in s]
        var = mpmath.fsum(t * t for t in dev) / n
        rstd = 1 / mpmath.sqrt(var + mpmath.mpf(float(f32(eps))))
        xhat = [t * rstd for t in dev]
        y = [xh * float(gm) + float(bt) for xh, gm, bt in zip(xhat, gamma, beta)]
        h = [mpmath.mpf(float(gv)) * float(gm) for gv, gm in zip(g1_row, gamma)]
        mean_h = mpmath.fsum(h) / n
        mean_hx = mpmath.fsum(a * b for a, b in zip(h, xhat)) / n
        dx = [rstd * (hi - mean_h - xh * mean_hx) for hi, xh in zip(h, xhat)]
        return [float(v) for v in y], dx


@pytest.mark.parametrize("shape,cancel", [((7,), False), ((3, 5), False), ((2, 33), True),
                                          ((2, 1, 4), False)])
def test_against_mpmath(shape, cancel):
    x, r, gamma, beta = _draw(len(shape) + 10 * cancel, shape, cancel)
    s = (x + r).astype(f32)
    g = np.random.default_rng(5).standard_normal((2,) + shape).astype(f32)
    fwd = REF.forward((x, r, gamma, beta), eps=EPS)
    dsum, dr, dgamma, dbeta = REF.vjp((x, r, gamma, beta), g, eps=EPS)
    assert fwd.value.shape == fwd.exact.shape == (2,) + shape
    assert np.array_equal(fwd.value[0].view(np.uint32), s.view(np.uint32))
    assert np.array_equal(fwd.exact[0], s.astype(np.float64))
    rows = s.reshape(-1, shape[-1])
    g1 = g[1].reshape(rows.shape)
    y_val, y_ex = fwd.value[1].reshape(rows.shape), fwd.exact[1].reshape(rows.shape)
    dx_val, dx_ex = dsum.value.reshape(rows.shape), dsum.exact.reshape(rows.shape)
    g0 = g[0].reshape(rows.shape).astype(np.float64)
    for i, row in enumerate(rows):
        y_mp, dx_mp = _mp_row(row, gamma, beta, g1[i], EPS)
        y_mp = np.array(y_mp)
        # y correctly rounded (within half an ulp) and exact to float64
        assert np.all(np.abs(y_val[i] - y_mp) <= 0.5 * ulp_array(y_val[i].astype(np.float64)))
        assert np.all(np.abs(y_ex[i] - y_mp) <= 2 * U64 * np.abs(y_mp))
        # dx + g0: the float64 sum of the float64-nearest dx and g0 (2^-53 (|dx| + |total|))
        with mpmath.workprec(200):
            total = [d + float(a) for d, a in zip(dx_mp, g0[i])]
            err = [abs(float(mpmath.mpf(float(e)) - t)) for e, t in zip(dx_ex[i], total)]
            slack = [U64 * (abs(float(d)) + abs(float(t))) for d, t in zip(dx_mp, total)]
            err_v = [abs(float(mpmath.mpf(float(v)) - t)) for v, t in zip(dx_val[i], total)]
        assert all(e <= s_ for e, s_ in zip(err, slack))
        half = 0.5 * ulp_array(dx_val[i].astype(np.float64))
        assert np.all(np.array(err_v) <= half + np.array(slack))
    # dx is dr; dgamma and dbeta are layer_norm's at s for g[1]
    assert dr is dsum or np.array_equal(dr.value, dsum.value)
    ln_dx, ln_dg, ln_db = LN.vjp((s, gamma, beta), np.ascontiguousarray(g[1]), eps=EPS)
    assert np.array_equal(dgamma.value.view(np.uint32), ln_dg.value.view(np.uint32))
    assert np.array_equal(dbeta.value.view(np.uint32), ln_db.value.view(np.uint32))
    # and dx is layer_norm's dx + g[0] in float64, its magnitude dx's plus |g[0]|
    assert np.array_equal(dsum.exact, ln_dx.exact + g[0].astype(np.float64))
    assert np.array_equal(dsum.magnitude, ln_dx.magnitude + np.abs(g[0].astype(np.float64)))
    ln_y = LN.forward((s, gamma, beta), eps=EPS)
    assert np.array_equal(fwd.value[1].view(np.uint32), ln_y.value.view(np.uint32))


def test_overflowing_sum_follows_layer_norm():
    x = np.array([[3e38, 1.0, 2.0], [1.0, 2.0, 4.0]], f32)
    r = np.array([[3e38, 0.5, 0.25], [0.5, 0.5, 0.5]], f32)
    gamma, beta = np.ones(3, f32), np.zeros(3, f32)
    with np.errstate(all="ignore"):
        s = (x + r).astype(f32)
    fwd = REF.forward((x, r, gamma, beta))
    assert np.isposinf(fwd.value[0, 0, 0])
    ln = LN.forward((s, gamma, beta))
    assert np.array_equal(fwd.value[1], ln.value, equal_nan=True)
    assert np.all(np.isnan(fwd.value[1, 0])) and np.all(np.isfinite(fwd.value[1, 1]))
    g = np.ones((2,) + x.shape, f32)
    dsum, _, _, _ = REF.vjp((x, r, gamma, beta), g)
    assert np.all(np.isfinite(dsum.value[1]))


@pytest.mark.parametrize("inputs", [
    (np.zeros((2, 3), f32), np.zeros((3, 2), f32), np.ones(3, f32), np.ones(3, f32)),
    (np.zeros((2, 3), f32), np.zeros((2, 3), f32), np.ones(2, f32), np.ones(3, f32)),
    (np.zeros((), f32), np.zeros((), f32), np.ones(1, f32), np.ones(1, f32)),
    (np.zeros((2, 3), f32), np.zeros((2, 3), f32), np.ones(3, f32)),
])
def test_bad_inputs(inputs):
    with pytest.raises(ReferenceInputError):
        REF.forward(inputs)


def test_bad_cotangent_shape():
    x = np.zeros((2, 3), f32)
    with pytest.raises(ReferenceInputError):
        REF.vjp((x, x, np.ones(3, f32), np.ones(3, f32)), np.zeros((2, 3), f32))


@pytest.mark.parametrize("cls", ["edges", "normal", "shapes", "cancellation", "special",
                                 "near-overflow", "params"])
def test_harness_passes_the_reference_capsule(cls):
    capsule, handler = resolve("reference.add_layer_norm", None)
    models: dict = {}
    op = Entry.add_layer_norm
    indices = range(6) if cls == "edges" else range(2)   # the cheap edge forms
    for i in indices:
        case = generators.draw_case(op, 0, cls, i)
        rng = generators.identity_rng(op, 0, cls, i) if cls in ("normal", "shapes") else None
        res = check_case(capsule, handler, case, models, identity_rng=rng)
        assert not res.failed, (cls, i, res.reasons(), res.failures[:2])
        if rng is not None:
            assert res.vjp.identity == "passed", (cls, i, res.vjp.identity_detail)


def test_cancellation_class_keeps_rows_nearly_constant():
    case = generators.draw_case(Entry.add_layer_norm, 0, "cancellation", 1)
    x, r = case.inputs[:2]
    s = (x + r).astype(np.float64).reshape(-1, x.shape[-1])
    assert np.all(s.std(axis=1) < 2.0 ** -3 * np.abs(s).mean(axis=1))
    assert np.all(np.abs(r) > 0)


def test_engine_wrapper_against_the_reference(cpu_session):
    x, r, gamma, beta = _draw(3, (4, 33), cancel=True)
    g = np.random.default_rng(8).standard_normal((2, 4, 33)).astype(f32)
    tx, tr = tensor(x, requires_grad=True), tensor(r, requires_grad=True)
    tg, tb = tensor(gamma, requires_grad=True), tensor(beta, requires_grad=True)
    s, y = ops.add_layer_norm(tx, tr, tg, tb)
    fwd = REF.forward((x, r, gamma, beta))
    assert np.array_equal(s.numpy().view(np.uint32), fwd.value[0].view(np.uint32))
    bound = ulp_array(fwd.value[1].astype(np.float64)) + U * fwd.magnitude[1]
    assert np.all(np.abs(y.numpy() - fwd.exact[1]) <= bound)
    ops.reduce_sum(ops.add(ops.mul(s, tensor(g[0])), ops.mul(y, tensor(g[1])))).backward()
    dsum, _, dgamma, dbeta = REF.vjp((x, r, gamma, beta), g)
    for got, ref in ((tx.grad, dsum), (tr.grad, dsum), (tg.grad, dgamma), (tb.grad, dbeta)):
        b = ulp_array(ref.value.astype(np.float64)) + U * ref.magnitude
        assert np.all(np.abs(got.numpy() - ref.exact) <= b)


def test_wrapper_errors(cpu_session):
    x = tensor(np.zeros((2, 3), f32))
    with pytest.raises(ShapeError, match=r"r of x's shape"):
        ops.add_layer_norm(x, tensor(np.zeros((3, 2), f32)), tensor(np.ones(3, f32)),
                           tensor(np.ones(3, f32)))
    with pytest.raises(ParameterValueError, match=r"eps must be a positive finite number"):
        ops.add_layer_norm(x, x, tensor(np.ones(3, f32)), tensor(np.ones(3, f32)), eps=math.inf)
