"""Tests for the certified fast paths of the references (conformance/references/fast/): the dd
enclosures against mpmath, the rounding certificate against exact rounding at both ends of each
enclosure (near-midpoint values go to the slow path), and every fast path bit for bit equal to the
exact path (fast.exact_only()) on random and adversarial inputs: subnormal results, overflow edges,
signed zeros, inf/NaN, empty arrays, rank 0. The last test times one op per family on 2^20 + 1
elements and prints the table."""

import math
import time
import zlib

import mpmath
import numpy as np
import pytest
from mpmath import mpf

from conformance import references, rounding
from conformance.references.fast import ddmath, exact_only
from conformance.references.fast.certify import certify
from conformance.references.fast.dd import DD, const

f32 = np.float32
INF, NAN = np.inf, np.nan


def same(a, b) -> np.ndarray:
    """Bitwise equality per element (float32 or float64), any NaN matching any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    view = np.uint32 if a.dtype == np.float32 else np.uint64
    return (a.view(view) == b.view(view)) | (np.isnan(a) & np.isnan(b))


def assert_same_reference(fast, slow):
    """value and exact bit for bit; magnitude to float64 accuracy (both are float64 estimates)."""
    for name in ("value", "exact"):
        got, want = getattr(fast, name), getattr(slow, name)
        ok = same(got, want)
        assert ok.all(), (name, np.flatnonzero(~ok.reshape(-1))[:5], got.reshape(-1)[~ok.reshape(-1)][:5],
                          want.reshape(-1)[~ok.reshape(-1)][:5])
    assert fast.kind == slow.kind
    assert np.array_equal(np.asarray(fast.terms), np.asarray(slow.terms))
    if slow.magnitude is not None:
        np.testing.assert_allclose(fast.magnitude, slow.magnitude, rtol=1e-9, atol=2.0 ** -60)


def both(op, inputs, g=None, **params):
    """(fast, exact) forward references, and VJPs when g is given."""
    mod = references.get(op)
    fast = mod.forward(tuple(inputs), **params) if g is None else mod.vjp(tuple(inputs), g, **params)
    with exact_only():
        slow = mod.forward(tuple(inputs), **params) if g is None else mod.vjp(tuple(inputs), g, **params)
    return fast, slow


def mixed(rng, n, edges=()):
    """Normals, wide exponents, subnormals, signed zeros, inf/NaN and op-specific edge values."""
    parts = [rng.standard_normal(n) * 3,
             np.ldexp(rng.uniform(1, 2, n) * rng.choice([-1, 1], n), rng.integers(-149, 128, n)),
             np.ldexp(rng.uniform(1, 2, n) * rng.choice([-1, 1], n), rng.integers(-30, 10, n)),
             rng.choice(np.array([0.0, -0.0, INF, -INF, NAN, 2.0 ** -149, -(2.0 ** -149), 1.0]), n),
             rng.choice(np.array(list(edges) or [1.0]), n)]
    return np.choose(rng.integers(0, len(parts), n), parts).astype(np.float32)


# ---------------------------------------------------------------- dd and the certificate


def _exact(x: DD, i: int) -> mpf:
    return mpf(float(x.hi[i])) + mpf(float(x.lo[i]))


def test_ddmath_enclosures_hold_against_mpmath():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(150) * 5, rng.uniform(-700, 700, 60),
                        np.ldexp(rng.uniform(-1, 1, 60), rng.integers(-149, 0, 60))]).astype(f32).astype(np.float64)
    big = np.ldexp(rng.uniform(1, 2, 80) * rng.choice([-1, 1], 80), rng.integers(0, 128, 80)).astype(f32)
    cases = [
        ("exp", ddmath.exp(DD(x)), x, mpmath.exp),
        ("expm1", ddmath.expm1(DD(x[np.abs(x) < 40])), x[np.abs(x) < 40], mpmath.expm1),
        ("log", ddmath.log(DD(np.abs(x[x != 0]))), np.abs(x[x != 0]), mpmath.log),
        ("log1p", ddmath.log1p(DD(np.abs(x[x != 0]) * 1e-3)), np.abs(x[x != 0]) * 1e-3, mpmath.log1p),
    ]
    trig_x = np.concatenate([x, big.astype(np.float64)])
    s, c = ddmath.sincos_f32(trig_x)
    cases += [("sin", s, trig_x, mpmath.sin), ("cos", c, trig_x, mpmath.cos)]
    with mpmath.workprec(400):
        for name, dd, xs, fn in cases:
            for i in range(xs.size):
                if dd.bad[i]:
                    continue
                true = fn(mpf(float(xs[i])))
                assert abs(true - _exact(dd, i)) <= mpf(float(dd.rad[i])), (name, xs[i])
                if true != 0 and abs(true) > mpf(2) ** -900:
                    assert float(dd.rad[i] / abs(true)) < 2.0 ** -68, (name, xs[i], dd.rad[i])


def _endpoint_roundings(x: DD, i: int):
    with mpmath.workprec(2000):
        v, r = _exact(x, i), mpf(float(x.rad[i]))
        return [(rounding.round_mpf_to_f32(e), rounding.round_mpf_to_f64(e)) for e in (v - r, v + r)]


def test_certificate_is_sound_and_refuses_near_midpoints():
    rng = np.random.default_rng(2)
    n = 3000
    # float32 midpoints (normal, subnormal, the overflow threshold), then values within 2^-40 of them
    a = rng.standard_normal(n).astype(f32)
    a[:200] = np.ldexp(rng.integers(1, 1 << 23, 200).astype(np.float64), -149).astype(f32)  # subnormals
    a[200] = f32(np.finfo(np.float32).max)
    mids = a.astype(np.float64) + rounding.ulp_array(a.astype(np.float64)) / 2
    mids[200] = 2.0 ** 128 * (1 - 2.0 ** -25)
    offset = mids * rng.choice([-1, 1], n) * np.ldexp(1.0, -rng.integers(30, 120, n))
    hi, lo = mids + offset, np.zeros(n)
    exact_mid = rng.random(n) < 0.1  # some exactly on the midpoint, decided by a tiny lo
    hi = np.where(exact_mid, mids, hi)
    lo = np.where(exact_mid, mids * rng.choice([-1, 1], n) * 2.0 ** -140, lo)
    rad = np.abs(mids) * np.ldexp(1.0, -rng.integers(40, 200, n))
    rad[rng.random(n) < 0.1] = 0.0
    x = DD(hi, lo, rad)
    v32, v64, ok = certify(x)
    assert 0.05 < ok.mean() < 0.95  # both outcomes occur
    inside = np.zeros(n, bool)
    with mpmath.workprec(2000):
        for i in range(n):
            v, r, m = _exact(x, i), mpf(float(rad[i])), mpf(float(mids[i]))
            inside[i] = abs(v - m) < r  # strictly: an exact value on a midpoint (rad 0) is decided
            if ok[i]:  # sound: both ends of the enclosure round to the claimed values
                for e in (v - r, v + r):
                    assert same(v32[i], rounding.round_mpf_to_f32(e)), i
                    assert v64[i] == rounding.round_mpf_to_f64(e), i
    # a midpoint inside the enclosure (all of these lie within 2^-30 of one) is never certified
    assert inside.sum() > 100 and not ok[inside].any()
    # and a clear margin is certified: distance over 4 rad + 2^-98 |m|, enclosure far from float64 ties
    clear = (np.abs(hi + lo - mids) > 4 * rad + 2.0 ** -98 * np.abs(mids)) & (rad < 2.0 ** -60 * np.abs(mids)) \
        & (np.abs(hi - mids) > 2.0 ** -45 * np.abs(mids))
    assert clear.sum() > 100 and ok[clear].mean() > 0.99


def test_dd_constants_are_exact_to_106_bits():
    pi2 = const(lambda mp: mp.pi / 2)
    with mpmath.workprec(300):
        assert abs(mpf(float(pi2.hi)) + mpf(float(pi2.lo)) - mpmath.pi / 2) <= mpf(float(pi2.rad))


# ---------------------------------------------------------------- elementwise ops, bit for bit

_EDGES = {
    "exp": (88.72, 88.73, -103.97, -87.3, 709.78, 709.79, -745.13, -745.2, 700.0, -700.0),
    "log": (1.0, 2.0 ** -149, 3.4e38),
    "sin": (3.1415927, 1.5707964, 1e30, 2.0 ** 100), "cos": (3.1415927, 1.5707964, 1e30),
    "tanh": (19.1, 19.0, 9.1, -19.1, 330.0, 420.0), "sigmoid": (37.5, -37.5, -745.0, -700.0, 104.0),
    "softplus": (37.5, -600.0, -745.0, -700.0, 88.7), "gelu": (8.0, -0.7518, -21.2, -30.0, 10.0),
    "sqrt": (2.0 ** -149, 4.0, 2.0), "inv": (2.0 ** 127, 2.0 ** -149, 3.0), "safe_log": (1e-12, 0.0),
}


@pytest.mark.parametrize("op", sorted(_EDGES))
def test_elementwise_fast_paths_equal_the_exact_path(op):
    rng = np.random.default_rng(zlib.crc32(op.encode()))  # str hash() differs per process
    n = 1200
    a = mixed(rng, n, _EDGES[op])
    if op in ("log", "sqrt", "safe_log"):
        a = np.where(rng.random(n) < 0.8, np.abs(a), a).astype(f32)
    g = mixed(rng, n, (1.0, -0.0, 2.0 ** -149, 3e38))
    fast, slow = both(op, (a,))
    assert_same_reference(fast, slow)
    assert fast.slow_elements <= n // 10, fast.slow_elements
    (fast_g,), (slow_g,) = both(op, (a,), g)
    assert_same_reference(fast_g, slow_g)
    assert fast_g.slow_elements <= n // 10, fast_g.slow_elements
    # rank 0 and empty inputs take the same paths
    for shape in ((), (0,), (3, 0, 2)):
        x = np.full(shape, f32(0.75))
        fast, slow = both(op, (x,))
        assert_same_reference(fast, slow)
        (fast_g,), (slow_g,) = both(op, (x,), np.full(shape, f32(-2)))
        assert_same_reference(fast_g, slow_g)


def test_fast_paths_count_the_elements_they_leave():
    # tanh of 1 is certified; e^x near the float64 subnormal band is rounded on its grid, not left
    r = references.get("tanh").forward((np.full(50, f32(1)),))
    assert r.slow_elements == 0
    r = references.get("exp").forward((np.array([-720.0, -745.0, 709.5, 710.0], f32),))
    with exact_only():
        want = references.get("exp").forward((np.array([-720.0, -745.0, 709.5, 710.0], f32),))
    assert_same_reference(r, want)
    assert r.exact[0] != 0 and r.exact[0] < 2.0 ** -1022 and r.value[0] == 0  # a float64 subnormal
    with exact_only():
        assert references.get("tanh").forward((np.full(3, f32(1)),)).slow_elements == 3


# ---------------------------------------------------------------- sums and products


def test_sum_fast_paths_equal_the_exact_path_ties_and_zeros_included():
    rng = np.random.default_rng(3)
    ties = np.zeros((700, 3), f32)
    ties[:, 0], ties[:, 1] = 1.0, f32(2.0 ** -24)  # 1 + 2^-24: a tie ...
    ties[:, 2] = np.where(rng.random(700) < 0.5, f32(2.0 ** -70), f32(-(2.0 ** -70)))  # ... broken either way
    cases = [
        (mixed(rng, 5000).reshape(5000), None),
        (np.where(np.isfinite(x := mixed(rng, 6000)), x, f32(1)).reshape(2000, 3), (1,)),
        (rng.choice(np.array([0.0, -0.0, 1.0, -1.0], f32), (1500, 3)), (1,)),
        (ties, (1,)),
        (np.tile(np.array([1.0, 2.0 ** -24], f32), 1500), None),
        (rng.standard_normal((3, 1500)).astype(f32), (1,)),
        (rng.standard_normal((40, 60, 5)).astype(f32), (0, 2)),
    ]
    for a, axes in cases:
        for op in ("reduce_sum", "reduce_mean"):
            fast, slow = both(op, (a,), axes=axes)
            assert_same_reference(fast, slow)
            g = rng.standard_normal(fast.value.shape).astype(f32)
            (fg,), (sg,) = both(op, (a,), g, axes=axes)
            assert_same_reference(fg, sg)
    fast, _ = both("reduce_sum", (ties,), axes=(1,))
    assert np.all(fast.value == np.where(ties[:, 2] > 0, f32(1 + 2.0 ** -23), f32(1)))
    p, t = mixed(rng, 4000), mixed(rng, 4000)
    p, t = np.where(np.isfinite(p), p, f32(0)), np.where(np.isfinite(t), t, f32(0))
    fast, slow = both("mse_loss", (p, t))
    assert_same_reference(fast, slow)
    fg, sg = both("mse_loss", (p, t), f32(0.5))
    for a, b in zip(fg, sg):
        assert_same_reference(a, b)


def test_matmul_and_linear_fast_paths_equal_the_exact_path():
    rng = np.random.default_rng(4)

    def fin(shape):
        x = mixed(rng, math.prod(shape)).reshape(shape)
        return np.where(np.isfinite(x), x, f32(1.5)).astype(f32)

    zeros = lambda *s: rng.choice(np.array([0.0, -0.0, 1.0, -1.0], f32), s)  # noqa: E731
    cases = [(fin((1, 3000)), fin((3000, 1))), (fin((3, 1200)), fin((1200, 2))), (fin((1025, 3)), fin((3, 3))),
             (zeros(40, 7), zeros(7, 40)), (mixed(rng, 2000).reshape(2, 1000), mixed(rng, 3000).reshape(1000, 3)),
             (fin((2, 30, 40)), fin((2, 40, 5)))]
    for a, b in cases:
        fast, slow = both("matmul", (a, b))
        assert_same_reference(fast, slow)
        g = rng.standard_normal(fast.value.shape).astype(f32)
        for x, y in zip(*both("matmul", (a, b), g)):
            assert_same_reference(x, y)
    x, w, bias = fin((4, 700)), fin((3, 700)), fin((3,))
    assert_same_reference(*both("linear", (x, w, bias)))
    for u, v in zip(*both("linear", (x, w, bias), rng.standard_normal((4, 3)).astype(f32))):
        assert_same_reference(u, v)


# ---------------------------------------------------------------- softmax family, norms, attention


def _row_cases(rng):
    n = lambda *s: rng.standard_normal(s).astype(f32)  # noqa: E731
    yield n(1, 600) * 3, n(1, 600)
    yield (n(200, 3) * 300), n(200, 3)  # probabilities far below the dd domain
    yield rng.choice(np.array([0, 1, -1, -INF, 2.5, -800, 1e-7], f32), (100, 6)), \
        rng.choice(np.array([1, 2, -0.0, 0], f32), (100, 6))  # ties, -inf, zeros
    yield n(40, 30), np.full((40, 30), f32(1.5))  # constant g: every gradient an exact zero
    yield np.full((30, 20), f32(2)), rng.integers(-2, 3, (30, 20)).astype(f32)  # one group per row
    x, g = n(20, 30), n(20, 30)
    x.reshape(-1)[::37], g.reshape(-1)[::53] = NAN, INF
    yield x, g


def test_softmax_family_fast_paths_equal_the_exact_path():
    rng = np.random.default_rng(5)
    for x, g in _row_cases(rng):
        for op in ("softmax", "log_softmax", "hard_masked_softmax"):
            params = {"axis": -1}
            if op == "hard_masked_softmax":
                params["mask"] = rng.random(x.shape) < 0.7
                params["mask"][0] = False
            assert_same_reference(*both(op, (x,), **params))
            (fg,), (sg,) = both(op, (x,), g, **params)
            assert_same_reference(fg, sg)
    x = rng.standard_normal((30, 20)).astype(f32)
    assert_same_reference(*both("softmax", (x,), axis=0))


def test_log_softmax_far_rows_decide_float64_ties_without_the_exact_path():
    # the maximum dwarfs every other entry (R is far below the dd domain), and max - x lands exactly on
    # a float64 midpoint for x = +-2^74 (half an ulp of 1.5 * 2^127): -log1p(R) < 0 breaks the tie
    big = f32(1.5 * 2.0 ** 127)
    row = np.array([big, 2.0 ** 74, -(2.0 ** 74), 1.0, -3.0, 2.0 ** -149] * 50, f32).reshape(1, 300)
    row[0, 6:] = np.where(row[0, 6:] == big, f32(2.0), row[0, 6:])  # one maximum
    fast, slow = both("log_softmax", (row,))
    assert_same_reference(fast, slow)
    assert fast.slow_elements == 0


def test_norm_fast_paths_equal_the_exact_path():
    rng = np.random.default_rng(6)
    n = lambda *s: rng.standard_normal(s).astype(f32)  # noqa: E731
    for shape in ((1, 500), (60, 5), (8, 40)):
        d = shape[-1]
        wide = (n(*shape) * np.exp2(rng.integers(-60, 60, shape))).astype(f32)
        const_row = n(*shape)
        const_row[0] = 2.0
        ints = rng.integers(-3, 4, shape).astype(f32)
        for x, gamma, beta, g in ((n(*shape) * 3, n(d), n(d), n(*shape)),
                                  (n(*shape), np.ones(d, f32), n(d), np.ones(shape, f32)),
                                  (const_row, n(d), np.full(d, f32(-0.0)), n(*shape)),
                                  (ints, rng.integers(-2, 3, d).astype(f32), rng.choice(np.array([0, -0.0, 1], f32), d),
                                   rng.integers(-2, 3, shape).astype(f32)),
                                  (wide, n(d), n(d), n(*shape))):
            assert_same_reference(*both("layer_norm", (x, gamma, beta)))
            for u, v in zip(*both("layer_norm", (x, gamma, beta), g)):
                assert_same_reference(u, v)
    for shape in ((500, 1), (3, 200), (20, 3, 7)):
        c = shape[1]
        for g in (n(*shape), np.full(shape, f32(0.5))):
            x, gamma, beta = n(*shape), n(c), n(c)
            assert_same_reference(*both("batch_norm", (x, gamma, beta)))
            for u, v in zip(*both("batch_norm", (x, gamma, beta), g)):
                assert_same_reference(u, v)


def _assert_attention(fast, slow):
    for name in ("value", "exact"):
        assert same(getattr(fast, name), getattr(slow, name)).all(), name
    # the exact path's magnitudes come from 64-bit fixed-point probabilities (absolute error 2^-65)
    np.testing.assert_allclose(fast.magnitude, slow.magnitude, rtol=1e-9, atol=2.0 ** -60 * 1e3)


def test_attention_fast_path_equals_the_exact_path():
    rng = np.random.default_rng(7)
    n = lambda *s: rng.standard_normal(s).astype(f32)  # noqa: E731
    op = "scaled_dot_product_attention"
    for lq, lk, d, dv in ((1, 600, 1, 1), (3, 150, 5, 2), (30, 9, 3, 3)):
        for q, k, v, g, mask in ((n(lq, d), n(lk, d), n(lk, dv), n(lq, dv), None),
                                 (n(lq, d), n(lk, d), n(lk, dv), n(lq, dv), rng.random((lq, lk)) < 0.6),
                                 # scores to +-500: probabilities far below the dd domain (kept to
                                 # values the exact path resolves: it stops at 3072 fixed-point bits)
                                 (n(lq, d) * 12, n(lk, d) * 12, n(lk, dv), n(lq, dv), None),
                                 (n(lq, d), n(lk, d), np.tile(n(1, dv), (lk, 1)), n(lq, dv), None),
                                 (n(lq, d), n(lk, d), n(lk, dv), np.full((lq, dv), f32(-0.0)), None)):
            _assert_attention(*both(op, (q, k, v), mask=mask))
            for u, w in zip(*both(op, (q, k, v), g, mask=mask)):
                _assert_attention(u, w)
    fast = references.get(op).forward((n(1, 1), n(600, 1), n(600, 1)))
    assert fast.slow_elements == 0


# ---------------------------------------------------------------- throughput on 2^20 + 1 elements


def test_big_inputs_take_well_under_seconds_per_million_elements():
    rng = np.random.default_rng(8)
    n = 2 ** 20 + 1
    x = rng.standard_normal(n).astype(f32)
    row = x.reshape(1, n)
    cases = [
        ("exp", (x,), {}), ("gelu", (x,), {}), ("sin", (x,), {}), ("reduce_mean", (x,), {}),
        ("softmax", (row,), {}), ("matmul", (row, x.reshape(n, 1)), {}),
        ("layer_norm", (row, x, x[::-1].copy()), {}),
        ("scaled_dot_product_attention", (x[:1].reshape(1, 1), x.reshape(n, 1), x[::-1].reshape(n, 1)), {}),
    ]
    lines = []
    for op, inputs, params in cases:
        mod = references.get(op)
        # CPU time, not the wall clock: the reference's cost, not how busy the cores are
        start = time.process_time()
        out = mod.forward(inputs, **params)
        mid = time.process_time()
        grads = mod.vjp(inputs, rng.standard_normal(out.value.shape).astype(f32), **params)
        end = time.process_time()
        slow = [out.slow_elements] + [r.slow_elements for r in grads]
        lines.append(f"{op:30s} forward {mid - start:6.2f} s  vjp {end - mid:6.2f} s  slow {slow}")
        assert sum(slow) <= 16, (op, slow)
        assert mid - start < 10 and end - mid < 10, lines[-1]  # generous: slow CI cores
    print("\n2^20 + 1 elements, normal values:\n" + "\n".join(lines))
