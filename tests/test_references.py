"""Tests for conformance.references: hand-computed values and special cases for every op's forward and
VJP, VJPs against central differences (<v, J u> = <J^T v, u>), fast paths against plain mpmath, and
Philox4x32-10 against the Random123 known-answer vectors."""

import math

import mpmath
import numpy as np
import pytest
from mpmath import mpf

from conformance import references
from conformance.references import rand_uniform
from conformance.references._common import Reference, ReferenceInputError
from conformance.rounding import round_mpf_to_f32

f32 = np.float32
NAN, INF = np.nan, np.inf


def arr(*values):
    return np.array(values, dtype=np.float32)


def fwd(op, *inputs, **params):
    return references.get(op).forward(tuple(inputs), **params)


def vjp(op, inputs, g, **params):
    return references.get(op).vjp(tuple(inputs), np.asarray(g, np.float32), **params)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32).tolist()


def assert_bits(got, want):
    """Bitwise equality, signed zeros included; any NaN matches any NaN."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, (got.shape, want.shape)
    both_nan = np.isnan(got) & np.isnan(want)
    assert np.all(both_nan | (got.view(np.uint32) == want.view(np.uint32))), (got, want)


def mp_round(fn, *xs, prec=400):
    """Plain mpmath (no intervals) at high precision, rounded once."""
    with mpmath.workprec(prec):
        return round_mpf_to_f32(fn(*[mpf(float(x)) for x in xs]))


# ---------------------------------------------------------------- registry and record


def test_registry_lists_every_op_and_refuses_unknown_names():
    from conformance.families import SPECS
    assert list(references.OPS) == [s.reference for s in SPECS] and len(set(references.OPS)) >= 40
    for op in references.OPS:
        module = references.get(op)
        assert callable(module.forward)
        assert hasattr(module, "vjp") == (op not in ("rand_uniform", "bernoulli_mask"))
    with pytest.raises(references.UnknownReferenceError, match="known ops: add, sub"):
        references.get("no_such_op")   # conv has a reference now
    assert issubclass(references.UnknownReferenceError, KeyError)


def test_reference_record_checks_itself_and_inputs_are_checked():
    with pytest.raises(ValueError, match="kind"):
        Reference(arr(1), np.ones(1), kind="approximate")
    with pytest.raises(ReferenceInputError, match="float32"):
        fwd("add", np.ones(2), np.ones(2))
    with pytest.raises(ReferenceInputError, match="equal shapes"):
        fwd("add", arr(1, 2), arr(1))
    with pytest.raises(ReferenceInputError, match="grad_out"):
        vjp("exp", (arr(1, 2),), arr(1))


# ---------------------------------------------------------------- elementwise arithmetic


def test_add_sub_mul():
    r = fwd("add", arr(1, 1, -0.0, 0.0, INF, 1), arr(2 ** -24, 3 * 2 ** -24, -0.0, -0.0, -INF, -1))
    assert r.kind == "rounded"
    assert_bits(r.value, arr(1, 1 + 2 ** -22, -0.0, 0.0, NAN, 0.0))
    assert r.exact[0] == 1 + 2 ** -24
    assert_bits(fwd("sub", arr(-0.0, 1), arr(0.0, 1)).value, arr(-0.0, 0.0))
    assert_bits(fwd("mul", arr(2 ** -75, 3 * 2 ** -75, -1, INF), arr(2 ** -75, 2 ** -75, 0, 0)).value,
                arr(0, 2 * 2 ** -149, -0.0, NAN))
    g = arr(-0.0, 3)
    da, db = vjp("add", (arr(1, 2), arr(3, 4)), g)
    assert da.kind == db.kind == "exact"
    assert_bits(da.value, g) and assert_bits(db.value, g)
    _, db = vjp("sub", (arr(1, 2), arr(3, 4)), g)
    assert_bits(db.value, arr(0.0, -3))
    da, db = vjp("mul", (arr(3, 2 ** -75), arr(5, 2 ** -75)), arr(2, 2 ** -75))
    assert_bits(da.value, arr(10, 0)) and assert_bits(db.value, arr(6, 0))


def test_max_min_ties_nan_and_signed_zero():
    a, b = arr(2, 1, 0.0, -0.0, NAN, 1, NAN, 3), arr(1, 2, -0.0, 0.0, 1, NAN, NAN, 3)
    assert_bits(fwd("max", a, b).value, arr(2, 2, 0.0, -0.0, NAN, NAN, NAN, 3))
    assert_bits(fwd("min", a, b).value, arr(1, 1, 0.0, -0.0, NAN, NAN, NAN, 3))
    g = arr(1, 1, 1, 1, 1, 1, 1, 2 ** -149)
    da, db = vjp("max", (a, b), g)
    assert_bits(da.value, arr(1, 0, 0.5, 0.5, 1, 0, 1, 0))  # the last tie halves 2^-149: rounds to 0
    assert_bits(db.value, arr(0, 1, 0.5, 0.5, 0, 1, 1, 0))
    da, db = vjp("min", (a, b), g)
    assert_bits(da.value, arr(0, 1, 0.5, 0.5, 1, 0, 1, 0))
    assert_bits(db.value, arr(1, 0, 0.5, 0.5, 0, 1, 1, 0))


def test_scale_rounds_alpha_first():
    assert_bits(fwd("scale", arr(1, 3), alpha=0.1).value, arr(f32(0.1), f32(np.float64(f32(0.1)) * 3)))
    assert_bits(fwd("scale", arr(3), alpha=1 / 3).value, arr(1))  # float32(1/3) * 3 = 1 + 2^-25 -> 1
    assert_bits(fwd("scale", arr(1), alpha=1e-46).value, arr(0))  # alpha itself underflows to 0
    (d,) = vjp("scale", (arr(1),), arr(4), alpha=0.5)
    assert_bits(d.value, arr(2))


def test_abs_relu_clamp():
    a = arr(2, -2, 0.0, -0.0, NAN)
    assert_bits(fwd("abs", a).value, arr(2, 2, 0, 0, NAN))
    (d,) = vjp("abs", (a,), arr(-1, -1, -1, -1, -1))
    assert_bits(d.value, arr(-1, 1, 0.0, 0.0, NAN))
    assert_bits(fwd("relu", a).value, arr(2, 0, 0, 0, NAN))
    (d,) = vjp("relu", (a,), arr(5, 5, 5, 5, 5))
    assert_bits(d.value, arr(5, 0, 0, 0, 0))
    c = arr(-2, 0.5, 2, -0.0, NAN, 0.0, 1)
    assert_bits(fwd("clamp", c, lo=0, hi=1).value, arr(0, 0.5, 1, -0.0, NAN, 0.0, 1))
    (d,) = vjp("clamp", (c,), np.full(7, 3, np.float32), lo=0, hi=1)
    assert_bits(d.value, arr(0, 3, 0, 0, 0, 0, 0))
    with pytest.raises(ReferenceInputError, match="lo <= hi"):
        fwd("clamp", c, lo=2, hi=1)


def test_sqrt_inv_and_their_vjps():
    r = fwd("sqrt", arr(4, -0.0, -1, INF, 2 ** -149, 2))
    assert_bits(r.value, arr(2, -0.0, NAN, INF, mp_round(mpmath.sqrt, 2 ** -149), mp_round(mpmath.sqrt, 2)))
    (d,) = vjp("sqrt", (arr(4, 0.0, -0.0, INF, -1, 2),), arr(1, 1, 1, 1, 1, -0.0))
    assert_bits(d.value, arr(0.25, INF, -INF, 0, NAN, -0.0))
    r = fwd("inv", arr(3, 0.0, -0.0, INF, 2 ** -149, 2 ** 127 * 1.5))
    assert bits(r.value)[0] == 0x3EAAAAAB
    assert_bits(r.value[1:], arr(INF, -INF, 0, INF, mp_round(lambda x: 1 / x, 2 ** 127 * 1.5)))
    assert r.value[5] != 0 and abs(r.value[5]) < 2 ** -126  # a subnormal, correctly rounded
    (d,) = vjp("inv", (arr(2, 0.0, 3, INF),), arr(1, 1, 1, 1))
    assert_bits(d.value, arr(-0.25, -INF, mp_round(lambda x: -1 / x ** 2, 3), -0.0))


def test_sqrt_fast_path_matches_plain_mpmath():
    rng = np.random.default_rng(7)
    x = np.ldexp(rng.uniform(1, 2, 2000), rng.integers(-149, 128, 2000)).astype(np.float32)
    got = fwd("sqrt", x).value
    assert_bits(got, [mp_round(mpmath.sqrt, v, prec=200) for v in x])


# ---------------------------------------------------------------- transcendentals and activations


def test_exp_log_special_values_and_boundaries():
    x = arr(0, -INF, INF, NAN, 89, 88.72, -103.9, -104, 1)
    r = fwd("exp", x)
    assert r.kind == "transcendental"
    want = [1, 0, INF, NAN, INF] + [mp_round(mpmath.exp, v) for v in x[5:]]
    assert_bits(r.value, want)
    r = fwd("log", arr(1, 0.0, -0.0, -1, INF, 2 ** -149, 3))
    assert_bits(r.value, [0.0, -INF, -INF, NAN, INF, mp_round(mpmath.log, 2 ** -149), mp_round(mpmath.log, 3)])
    (d,) = vjp("exp", (arr(0, -INF, 2),), arr(-0.0, 3, 1))
    assert_bits(d.value, arr(-0.0, 0, mp_round(mpmath.exp, 2)))
    (d,) = vjp("log", (arr(2, 3, 0.0, -0.0, -2),), arr(1, 1, 1, 1, 1))
    assert_bits(d.value, arr(0.5, f32(1 / 3), INF, -INF, -0.5))
    assert bits(d.value)[1] == 0x3EAAAAAB


def test_sin_cos():
    x = arr(-0.0, INF, 1e30, f32(math.pi), 1)
    assert_bits(fwd("sin", x).value, [-0.0, NAN] + [mp_round(mpmath.sin, v) for v in x[2:]])
    assert_bits(fwd("cos", x).value, [1, NAN] + [mp_round(mpmath.cos, v) for v in x[2:]])
    (d,) = vjp("cos", (arr(0.0, -0.0, 1),), arr(1, 1, 2))
    assert_bits(d.value, arr(-0.0, 0.0, mp_round(lambda t: -2 * mpmath.sin(t), 1)))  # (-g) * sin(a)
    (d,) = vjp("sin", (arr(0, 1),), arr(3, 2))
    assert_bits(d.value, arr(3, mp_round(lambda t: 2 * mpmath.cos(t), 1)))


def test_tanh_sigmoid_softplus():
    assert_bits(fwd("tanh", arr(-0.0, INF, -INF, 1e-30, 20, 0.5)).value,
                [-0.0, 1, -1, f32(1e-30), 1, mp_round(mpmath.tanh, 0.5)])
    (d,) = vjp("tanh", (arr(0, 40, -3, INF),), arr(1, 1, 2, 1))
    assert_bits(d.value, [1, mp_round(lambda t: mpmath.sech(t) ** 2, 40),
                          mp_round(lambda t: 2 * mpmath.sech(t) ** 2, -3), 0])
    s = fwd("sigmoid", arr(0, -INF, INF, -200, -100, 3))
    assert_bits(s.value, [0.5, 0, 1, 0] + [mp_round(lambda t: 1 / (1 + mpmath.exp(-t)), v) for v in (-100, 3)])
    assert 0 < s.value[4] < 2 ** -126
    (d,) = vjp("sigmoid", (arr(0, INF),), arr(1, 1))
    assert_bits(d.value, arr(0.25, 0))
    sp = fwd("softplus", arr(0, -200, -100, 100, -INF, INF, -20))
    want = [mp_round(lambda t: mpmath.log(1 + mpmath.exp(t)), v, prec=800) for v in (0, -200, -100, 100)]
    assert_bits(sp.value, want + [0, INF, mp_round(lambda t: mpmath.log1p(mpmath.exp(t)), -20)])
    assert sp.value[1] == 0 and sp.value[2] > 0 and sp.value[3] == 100
    (d,) = vjp("softplus", (arr(0),), arr(3))
    assert_bits(d.value, arr(1.5))


def _gelu_mp(a):
    # 0.5 a (1 + tanh u) written as a / (1 + e^-2u): the tanh form cancels to an exact 0 for very negative a
    u = mpmath.sqrt(2 / mpmath.pi) * (a + mpf("0.044715") * a ** 3)
    return a / (1 + mpmath.exp(-2 * u))


def test_gelu_against_the_tanh_formula():
    x = arr(0, -0.0, 1, -0.75, 3, -5, -20, INF, -INF, NAN)
    r = fwd("gelu", x)
    assert r.kind == "composite"
    want = [0.0, -0.0] + [mp_round(_gelu_mp, v) for v in x[2:6]] + [-0.0, INF, -0.0, NAN]
    assert_bits(r.value, want)
    (d,) = vjp("gelu", (arr(0, 1, -0.75, INF),), arr(2, 1, 1, 3))
    assert_bits(d.value, [1, mp_round(lambda t: mpmath.diff(_gelu_mp, t), 1),
                          mp_round(lambda t: mpmath.diff(_gelu_mp, t), -0.75), 3])


def test_safe_log():
    eps = f32(1e-12)
    r = fwd("safe_log", arr(0, -5, 1, NAN, 2))
    log_eps = mp_round(mpmath.log, eps)
    assert_bits(r.value, [log_eps, log_eps, 0.0, NAN, mp_round(mpmath.log, 2)])
    (d,) = vjp("safe_log", (arr(0, 1e-13, 2, 3),), arr(1, 1, 1, 1))
    assert_bits(d.value, arr(0, 0, 0.5, f32(1 / 3)))
    assert_bits(fwd("safe_log", arr(0.5), eps=1.0).value, arr(0.0))


def test_transcendental_references_match_plain_mpmath():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(300) * 8).astype(np.float32)
    pos = np.abs(x) + f32(1e-3)
    checks = [
        ("exp", x, mpmath.exp), ("log", pos, mpmath.log), ("sin", x, mpmath.sin), ("cos", x, mpmath.cos),
        ("tanh", x, mpmath.tanh), ("sigmoid", x, lambda t: 1 / (1 + mpmath.exp(-t))),
        ("softplus", x, lambda t: mpmath.log1p(mpmath.exp(t))), ("gelu", x, _gelu_mp),
    ]
    for op, inp, fn in checks:
        assert_bits(fwd(op, inp).value, [mp_round(fn, v) for v in inp])


# ---------------------------------------------------------------- reductions


def test_reduce_sum_is_exact_with_magnitude_and_terms():
    r = fwd("reduce_sum", arr(1e8, 1, -1e8))
    assert r.kind == "reduction" and r.value == 1 and r.exact == 1 and r.terms == 3
    assert r.magnitude == 2e8 + 1
    assert_bits(fwd("reduce_sum", arr(1, 2 ** -24, 2 ** -24)).value, f32(1 + 2 ** -23))  # a left fold gives 1
    assert_bits(fwd("reduce_sum", arr(-0.0, -0.0)).value, f32(-0.0))
    assert_bits(fwd("reduce_sum", arr(-0.0, 0.0)).value, f32(0.0))
    empty = fwd("reduce_sum", np.zeros((0,), np.float32))
    assert_bits(empty.value, f32(0.0)) and empty.terms == 0
    assert_bits(fwd("reduce_sum", np.array([[INF, 1], [INF, -INF], [NAN, 1]], np.float32), axes=(1,)).value,
                arr(INF, NAN, NAN))
    big = np.full(3, np.finfo(np.float32).max, np.float32)
    assert fwd("reduce_sum", big).value == INF and fwd("reduce_sum", big).exact == 3 * float(big[0])


def test_reduce_axes_keepdims_and_vjp():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    r = fwd("reduce_sum", a, axes=(0, -1), keepdims=True)
    assert r.value.shape == (1, 3, 1) and r.terms == 8
    np.testing.assert_array_equal(r.value, a.sum(axis=(0, 2), keepdims=True))
    (d,) = vjp("reduce_sum", (a,), arr(1, -0.0, 3).reshape(1, 3, 1), axes=(0, -1), keepdims=True)
    assert_bits(d.value, np.broadcast_to(arr(1, -0.0, 3).reshape(1, 3, 1), a.shape))
    m = fwd("reduce_mean", a, axes=(1,))
    assert m.value.shape == (2, 4) and m.terms == 3
    np.testing.assert_array_equal(m.value, a.mean(axis=1))
    with pytest.raises(ReferenceInputError, match="repeat"):
        fwd("reduce_sum", a, axes=(0, -3))


def test_reduce_mean_values():
    assert fwd("reduce_mean", arr(1, 2, 3, 4)).value == 2.5
    assert fwd("reduce_mean", arr(0.1, 0.1, 0.1)).value == f32(0.1)
    assert np.isnan(fwd("reduce_mean", np.zeros((0,), np.float32)).value)
    r = fwd("reduce_mean", arr(1, 0, 0))
    assert bits(r.value) == 0x3EAAAAAB and r.magnitude == 1 / 3
    (d,) = vjp("reduce_mean", (arr(5, 6, 7),), np.float32(1))
    assert bits(d.value) == [0x3EAAAAAB] * 3


def test_reductions_match_exact_mpmath_sums():
    rng = np.random.default_rng(9)
    a = (rng.standard_normal((40, 60)) * np.exp2(rng.integers(-30, 30, (40, 60)))).astype(np.float32)
    r = fwd("reduce_sum", a, axes=(1,))
    m = fwd("reduce_mean", a, axes=(1,))
    for i in range(40):
        with mpmath.workprec(2000):  # 2000 bits hold these sums exactly
            exact_sum = mpmath.fsum([mpf(float(v)) for v in a[i]])
            assert_bits(r.value[i], round_mpf_to_f32(exact_sum))
            assert_bits(m.value[i], round_mpf_to_f32(exact_sum / 60))


# ---------------------------------------------------------------- softmax family


def test_softmax_values_and_special_rows():
    assert_bits(fwd("softmax", arr(0, 0)).value, arr(0.5, 0.5))
    assert_bits(fwd("softmax", arr(1000, 0)).value, arr(1, 0))
    rows = np.array([[NAN, 1], [INF, 1], [-INF, 0], [-INF, -INF]], np.float32)
    assert_bits(fwd("softmax", rows).value, np.array([[NAN, NAN], [NAN, NAN], [0, 1], [NAN, NAN]], np.float32))
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((4, 7)) * 5).astype(np.float32)
    r = fwd("softmax", x, axis=0)
    assert r.terms == 4
    for i in range(4):
        for j in range(7):
            col = [mpf(float(v)) for v in x[:, j]]
            want = mp_round(lambda t: mpmath.exp(t) / mpmath.fsum(mpmath.exp(c) for c in col), x[i, j])
            assert_bits(r.value[i, j], want)


def test_hard_masked_softmax_blocks_exactly():
    a = arr(1000, -1000, 3, 4)
    assert_bits(fwd("hard_masked_softmax", a, mask=np.array([False, True, False, False])).value, arr(0, 1, 0, 0))
    assert_bits(fwd("hard_masked_softmax", a, mask=np.zeros(4, bool)).value, arr(0, 0, 0, 0))
    assert_bits(fwd("hard_masked_softmax", arr(-5000, 7), mask=np.array([True, False])).value, arr(1, 0))
    r = fwd("hard_masked_softmax", arr(-5000, 0, 7), mask=np.array([True, True, False]))
    assert_bits(r.value, arr(0, 1, 0))
    assert r.exact[0] == 0 and not np.signbit(r.exact[0])  # e^-5000 / (1 + e^-5000) is below float64 too
    assert_bits(fwd("hard_masked_softmax", arr(NAN, 1), mask=np.array([False, True])).value, arr(0, 1))
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    mask = np.array([[True, False, True], [False, False, False]])
    r = fwd("hard_masked_softmax", x, mask=mask)
    assert r.terms.tolist() == [[2, 2, 2], [0, 0, 0]]
    assert_bits(r.value[0], fwd("softmax", arr(1, 3)).value[[0, 0, 1]] * arr(1, 0, 1))
    (d,) = vjp("hard_masked_softmax", (x,), np.array([[1, 9, 2], [5, 5, 5]], np.float32), mask=mask)
    s = fwd("softmax", arr(1, 3)).exact
    want = s * (arr(1, 2) - (s * arr(1, 2)).sum())
    assert_bits(d.value, np.array([[want[0], 0, want[1]], [0, 0, 0]], np.float32))
    with pytest.raises(ReferenceInputError, match="mask"):
        fwd("hard_masked_softmax", x, mask=np.ones(3, bool))


def test_log_softmax_values():
    ln2 = mp_round(lambda t: -mpmath.log(2) + 0 * t, 0)
    assert_bits(fwd("log_softmax", arr(0, 0)).value, [ln2, ln2])
    r = fwd("log_softmax", arr(0, -5000))
    assert_bits(r.value, arr(-0.0, -5000))  # -log1p(e^-5000) is a tiny negative number: -0
    assert_bits(fwd("log_softmax", arr(3)).value, arr(0.0))
    assert_bits(fwd("log_softmax", arr(-INF, 0)).value, arr(-INF, 0))
    assert np.isnan(fwd("log_softmax", arr(INF, 0)).value).all()
    (d,) = vjp("log_softmax", (arr(0, 0),), arr(1, 0))
    assert_bits(d.value, arr(0.5, -0.5))


def test_log_softmax_exact_midpoint_plus_a_tiny_term():
    # a_1 - max = -(2^24 + 1) is a float32 midpoint; the true value lies below it by log1p(e^-(2^24+1)),
    # so it rounds away from zero (ties-to-even on the midpoint alone would give -2^24)
    assert_bits(fwd("log_softmax", arr(1, -2 ** 24)).value, arr(-0.0, -(2 ** 24 + 2)))
    # the max entry's gradient is -(g_1 + g_2) + (R/D) G: a midpoint -(1 + 2^-24) nudged by a negative
    # term, so it rounds to -(1 + 2^-23)
    (d,) = vjp("log_softmax", (arr(0, -1000, -1000),), arr(-5, 1, 2 ** -24))
    assert_bits(d.value[0], f32(-(1 + 2 ** -23)))
    assert_bits(d.value[1:], arr(1, 2 ** -24))  # g_i - s_i G with s_i = e^-1000: g_i itself
    (d,) = vjp("softmax", (arr(0.3, -1.2, 2),), arr(1, 1, 1))
    assert np.all(d.value == 0)  # s (1 - sum s) is exactly 0


def test_softmax_vjp_matches_mpmath():
    x, g = arr(0.5, -1, 2, 0.25), arr(1, -2, 0.5, 3)
    (d,) = vjp("softmax", (x,), g)
    with mpmath.workprec(300):
        e = [mpmath.exp(mpf(float(v))) for v in x]
        s = [v / mpmath.fsum(e) for v in e]
        t = mpmath.fsum(si * mpf(float(gi)) for si, gi in zip(s, g))
        want = [round_mpf_to_f32(si * (mpf(float(gi)) - t)) for si, gi in zip(s, g)]
    assert_bits(d.value, want)
    assert d.terms == 4 and np.all(d.magnitude >= np.abs(d.exact))


# ---------------------------------------------------------------- mse_loss


def test_mse_loss():
    r = fwd("mse_loss", arr(1, 2, 3), arr(1, 0, 0))
    assert r.value.shape == () and bits(r.value) == bits(f32(13 / 3)) and r.terms == 3
    r = fwd("mse_loss", arr(1e8, 1), arr(1e8 - 8, 1 + 2 ** -23))
    assert r.value == round_mpf_to_f32((mpf(64) + mpf(2) ** -46) / 2)
    assert np.isnan(fwd("mse_loss", arr(INF), arr(INF)).value)
    dp, dt = vjp("mse_loss", (arr(1, 2, 3), arr(1, 0, 0)), f32(1.5))
    assert_bits(dp.value, arr(0.0, 2, 3)) and assert_bits(dt.value, arr(-0.0, -2, -3))


# ---------------------------------------------------------------- shape and indexing


def test_shape_ops_and_their_vjps():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_bits(fwd("reshape", a, shape=(3, 2)).value, a.reshape(3, 2))
    (d,) = vjp("reshape", (a,), np.ones((3, 2), np.float32), shape=(3, 2))
    assert d.value.shape == (2, 3)
    with pytest.raises(ReferenceInputError):
        fwd("reshape", a, shape=(4, 2))
    b = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_bits(fwd("permute", b, perm=(2, 0, 1)).value, b.transpose(2, 0, 1))
    (d,) = vjp("permute", (b,), b.transpose(2, 0, 1), perm=(2, 0, 1))
    assert_bits(d.value, b)
    c1, c2 = arr(1, 2).reshape(1, 2), arr(3, 4, 5, 6).reshape(2, 2)
    assert_bits(fwd("concat", c1, c2, axis=0).value, np.concatenate([c1, c2]))
    d1, d2 = vjp("concat", (c1, c2), np.arange(6, dtype=np.float32).reshape(3, 2), axis=0)
    assert_bits(d1.value, arr(0, 1).reshape(1, 2)) and assert_bits(d2.value, arr(2, 3, 4, 5).reshape(2, 2))
    s = np.arange(10, dtype=np.float32).reshape(2, 5)
    assert_bits(fwd("slice", s, axis=1, start=1, stop=3).value, s[:, 1:3])
    (d,) = vjp("slice", (s,), arr(7, -0.0, 8, 9).reshape(2, 2), axis=1, start=1, stop=3)
    assert_bits(d.value, np.array([[0, 7, -0.0, 0, 0], [0, 8, 9, 0, 0]], np.float32))
    with pytest.raises(ReferenceInputError, match="start"):
        fwd("slice", s, axis=1, start=3, stop=2)


def test_broadcast_and_its_summing_vjp():
    a = arr(1, 2, 3).reshape(3, 1)
    r = fwd("broadcast", a, shape=(2, 3, 4))
    assert r.kind == "exact" and r.value.shape == (2, 3, 4)
    g = np.ones((2, 3, 4), np.float32)
    g[0, 0, 0] = 2 ** -24
    g[1, 0, 0] = 1e8
    g[1, 0, 1] = -1e8
    (d,) = vjp("broadcast", (a,), g, shape=(2, 3, 4))
    assert d.kind == "reduction" and d.terms == 8 and d.value.shape == (3, 1)
    # row 0 sums 2^-24, 1e8, -1e8 and five ones: exactly 5 + 2^-24, which rounds to 5
    assert_bits(d.value, arr(5, 8, 8).reshape(3, 1))
    assert d.magnitude[0, 0] == 2e8 + 5 + 2 ** -24
    with pytest.raises(ReferenceInputError, match="broadcast"):
        fwd("broadcast", arr(1, 2), shape=(3,))


def test_gather_and_scatter_add_accumulate_exactly():
    a = arr(10, 20, 30)
    assert_bits(fwd("gather", a, axis=0, indices=np.array([2, 0, 0])).value, arr(30, 10, 10))
    (d,) = vjp("gather", (a,), arr(1, 2 ** -24, -0.0), axis=0, indices=np.array([0, 0, 1]))
    assert_bits(d.value, arr(1, 0.0, 0))  # 1 + 2^-24 ties to 1; zeros + (-0) is +0
    assert d.terms.tolist() == [2, 1, 0]
    r = fwd("scatter_add", arr(0, -0.0, 0), arr(1, 2, 3, -0.0), axis=0, indices=np.array([2, 2, 0, 1]))
    assert_bits(r.value, arr(3, -0.0, 3)) and r.terms.tolist() == [2, 2, 3]
    base, src = np.zeros((2, 3), np.float32), np.arange(4, dtype=np.float32).reshape(2, 2)
    r = fwd("scatter_add", base, src, axis=1, indices=np.array([2, 2]))
    assert_bits(r.value, np.array([[0, 0, 1], [0, 0, 5]], np.float32))
    db, ds = vjp("scatter_add", (base, src), np.arange(6, dtype=np.float32).reshape(2, 3), axis=1,
                 indices=np.array([2, 0]))
    assert_bits(ds.value, np.array([[2, 0], [5, 3]], np.float32))
    with pytest.raises(ReferenceInputError, match="indices"):
        fwd("gather", a, axis=0, indices=np.array([3]))


# ---------------------------------------------------------------- linear algebra


def test_matmul_cancellation_flags_batches_and_zero_signs():
    r = fwd("matmul", arr(1e8, 1, -1e8).reshape(1, 3), arr(1, 1, 1).reshape(3, 1))
    assert r.value[0, 0] == 1 and r.magnitude[0, 0] == 2e8 + 1 and r.terms == 3 and r.kind == "reduction"
    a = arr(1, 2 ** -24, 2 ** -24).reshape(1, 3)
    assert_bits(fwd("matmul", a, arr(1, 1, 1).reshape(3, 1)).value, arr(1 + 2 ** -23).reshape(1, 1))
    assert_bits(fwd("matmul", arr(-0.0).reshape(1, 1), arr(1).reshape(1, 1)).value, arr(-0.0).reshape(1, 1))
    assert_bits(fwd("matmul", arr(1, -1).reshape(1, 2), arr(1, 1).reshape(2, 1)).value, arr(0.0).reshape(1, 1))
    r = fwd("matmul", arr(INF, 1, 1, 1).reshape(2, 2), arr(0, 1, 1, 1).reshape(2, 2))
    assert_bits(r.value, np.array([[NAN, INF], [1, 2]], np.float32))
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((2, 4, 3)).astype(np.float32), rng.standard_normal((2, 5, 3)).astype(np.float32)
    flagged = fwd("matmul", x, y, trans_b=True)
    plain = fwd("matmul", x, np.ascontiguousarray(np.swapaxes(y, 1, 2)))
    assert_bits(flagged.value, plain.value) and flagged.value.shape == (2, 4, 5)
    for b in range(2):
        for i in range(4):
            for j in range(5):
                with mpmath.workprec(500):
                    dot = mpmath.fsum(mpf(float(p)) * mpf(float(q)) for p, q in zip(x[b, i], y[b, j]))
                    want = round_mpf_to_f32(dot)
                assert_bits(flagged.value[b, i, j], want)
    with pytest.raises(ReferenceInputError, match="rank"):
        fwd("matmul", x, y[0])


def test_matmul_vjp_with_transpose_flags():
    a, b = arr(1, 2, 3, 4, 5, 6).reshape(2, 3), arr(1, 0, -1, 2, 0.5, 1).reshape(3, 2)
    g = arr(1, -1, 2, 0.5).reshape(2, 2)
    da, db = vjp("matmul", (a, b), g)
    np.testing.assert_array_equal(da.value, g @ b.T)
    np.testing.assert_array_equal(db.value, a.T @ g)
    assert da.terms == 2 and db.terms == 2
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    da_t, db_t = vjp("matmul", (at, bt), g, trans_a=True, trans_b=True)
    assert_bits(da_t.value, da.value.T) and assert_bits(db_t.value, db.value.T)


def test_linear_values_and_vjp():
    r = fwd("linear", arr(1, 2), arr(3, 4).reshape(1, 2), arr(-11))
    assert_bits(r.value, arr(0.0)) and r.terms == 3
    r = fwd("linear", arr(1e8, 1).reshape(1, 2), arr(1, 1).reshape(1, 2), arr(-1e8))
    assert r.value[0, 0] == 1 and r.magnitude[0, 0] == 2e8 + 1
    x, w = arr(1, 2, 3, 4).reshape(2, 2), arr(1, 0, 0, 1, 1, 1).reshape(3, 2)
    g = arr(1, 2, 3, 4, 5, 6).reshape(2, 3)
    dx, dw, db = vjp("linear", (x, w, arr(0, 0, 0)), g)
    np.testing.assert_array_equal(dx.value, g @ w)
    np.testing.assert_array_equal(dw.value, g.T @ x)
    np.testing.assert_array_equal(db.value, g.sum(axis=0))
    assert dx.terms == 3 and dw.terms == 2 and db.terms == 2


# ---------------------------------------------------------------- random


def test_philox4x32_10_known_answers():
    # Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key -> output
    kat = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for counter, key, want in kat:
        assert rand_uniform.philox4x32_10(counter, key) == want


def test_rand_uniform_and_bernoulli_bits():
    seed = 2 ** 40 + 7
    words = rand_uniform.philox_first_words(3000, seed)
    scalar = [rand_uniform.philox4x32_10((i, 0, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))[0] for i in range(3000)]
    assert words.tolist() == scalar
    u = fwd("rand_uniform", shape=(30, 100), seed=seed)
    assert u.kind == "exact" and u.value.dtype == np.float32
    assert_bits(u.value.reshape(-1), np.array([(w >> 8) * 2.0 ** -24 for w in scalar], np.float32))
    assert 0 <= u.value.min() and u.value.max() < 1
    assert_bits(fwd("rand_uniform", shape=(30, 100), seed=seed).value, u.value)
    m = fwd("bernoulli_mask", shape=(30, 100), p=0.25, seed=seed)
    assert_bits(m.value, (u.value < f32(0.25)).astype(np.float32))
    assert 0.2 < m.value.mean() < 0.3
    assert fwd("bernoulli_mask", shape=(50,), p=0.0, seed=1).value.sum() == 0
    assert fwd("bernoulli_mask", shape=(50,), p=1.0, seed=1).value.sum() == 50
    with pytest.raises(ReferenceInputError, match="seed"):
        fwd("rand_uniform", shape=(2,), seed=-1)
