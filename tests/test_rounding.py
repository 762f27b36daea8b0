"""Tests for conformance.rounding: exact conversion, correct rounding at every boundary of the float32
format, the ulp, the Ziv loop, and the vectorised fast paths against NumPy and plain mpmath."""

import math

import mpmath
import numpy as np
import pytest
from mpmath import mpf

from conformance import rounding as R

TWO = mpf(2)
F32_MAX = np.float32(np.finfo(np.float32).max)


def bits(x) -> int:
    return int(np.asarray(x, dtype=np.float32).view(np.uint32))


def exact(expr):
    """Evaluate a lambda of mpmath ops at enough precision to be exact for these tests."""
    with mpmath.workprec(2000):
        return +expr()


# ---------------------------------------------------------------- conversion


def test_f32_to_mpf_is_exact_including_subnormals_and_specials():
    assert R.f32_to_mpf(np.float32(2.0 ** -149)) == TWO ** -149
    assert R.f32_to_mpf(F32_MAX) == (2 - TWO ** -23) * TWO ** 127
    assert R.f32_to_mpf(np.float32(0.1)) == mpf(13421773) * TWO ** -27
    assert R.f32_to_mpf(np.float32(-np.inf)) == mpmath.mpf("-inf")
    assert mpmath.isnan(R.f32_to_mpf(np.float32(np.nan)))
    assert R.f32_to_mpf(np.float32(-0.0)) == 0
    assert R.sign_bit(np.float32(-0.0)) and not R.sign_bit(np.float32(0.0))


# ---------------------------------------------------------------- round_mpf_to_f32


@pytest.mark.parametrize(
    "value, expected_bits",
    [
        (lambda: 1 + TWO ** -24, 0x3F800000),  # tie, 1 is even
        (lambda: 1 + 3 * TWO ** -24, 0x3F800002),  # tie, rounds up to the even neighbour
        (lambda: 1 + TWO ** -24 + TWO ** -80, 0x3F800001),  # just over the tie
        (lambda: 1 + TWO ** -24 - TWO ** -80, 0x3F800000),  # just under
        (lambda: -(1 + TWO ** -24), 0xBF800000),
        (lambda: -(1 + 3 * TWO ** -24), 0xBF800002),
        (lambda: TWO ** -126, 0x00800000),  # smallest normal
        (lambda: TWO ** -126 - TWO ** -149, 0x007FFFFF),  # largest subnormal
        (lambda: TWO ** -126 - TWO ** -150, 0x00800000),  # tie between them: even is 2^-126
        (lambda: TWO ** -149, 0x00000001),
        (lambda: TWO ** -150, 0x00000000),  # half the smallest subnormal: tie to even 0
        (lambda: -TWO ** -150, 0x80000000),  # ... keeping the sign
        (lambda: TWO ** -150 + TWO ** -300, 0x00000001),  # just over half: rounds up
        (lambda: 3 * TWO ** -150, 0x00000002),  # 1.5 subnormal quanta: tie to even 2
        (lambda: 5 * TWO ** -150, 0x00000002),  # 2.5 quanta: tie to even 2
        (lambda: TWO ** -160, 0x00000000),
        (lambda: (2 - TWO ** -23) * TWO ** 127, 0x7F7FFFFF),  # largest finite
        (lambda: TWO ** 128 - TWO ** 103, 0x7F800000),  # midpoint to 2^128: tie to even = inf
        (lambda: TWO ** 128 - TWO ** 103 - TWO ** -50, 0x7F7FFFFF),  # just below the threshold
        (lambda: -(TWO ** 128 - TWO ** 103), 0xFF800000),
        (lambda: TWO ** 128, 0x7F800000),
        (lambda: mpf("1e100000"), 0x7F800000),
        (lambda: mpf("-1e-100000"), 0x80000000),
    ],
)
def test_round_mpf_to_f32_boundaries(value, expected_bits):
    assert bits(R.round_mpf_to_f32(exact(value))) == expected_bits


def test_round_mpf_to_f32_zero_and_specials():
    assert bits(R.round_mpf_to_f32(mpf(0))) == 0
    assert bits(R.round_mpf_to_f32(mpf(0), negative_zero=True)) == 0x80000000
    assert R.round_mpf_to_f32(mpmath.mpf("-inf")) == -np.inf
    assert np.isnan(R.round_mpf_to_f32(mpmath.mpf("nan")))
    # a Python int is taken exactly, not through mpf at the working precision
    assert bits(R.round_mpf_to_f32(2 ** 60 + 2 ** 36 + 1)) == bits(np.float32(2.0 ** 60 + 2.0 ** 37))


def test_round_to_f64_and_ratio_paths():
    assert R.round_mpf_to_f64(exact(lambda: 1 + TWO ** -53)) == 1.0
    assert R.round_mpf_to_f64(exact(lambda: TWO ** -1075)) == 0.0
    assert R.round_mpf_to_f64(exact(lambda: 3 * TWO ** -1075)) == 2 * 2.0 ** -1074
    assert bits(R.round_ratio_to_f32(1, 3)) == 0x3EAAAAAB
    assert bits(R.round_ratio_to_f32(-1, 3)) == 0xBEAAAAAB
    assert bits(R.round_ratio_to_f32(0, 7, negative_zero=True)) == 0x80000000
    assert bits(R.round_ratio_to_f32(1, 2 ** 150)) == 0  # exact tie below the subnormal grid
    assert bits(R.round_ratio_to_f32(3, 2 ** 150)) == 2
    assert R.round_ratio_to_f32(2 ** 200, 3) == np.inf
    assert R.round_ratio_to_f64(1, 3) == 1 / 3
    rng = np.random.default_rng(5)
    for num, den in zip(rng.integers(-(2 ** 62), 2 ** 62, 2000), rng.integers(1, 2 ** 62, 2000)):
        num, den = int(num) << int(rng.integers(0, 40)), int(den) << int(rng.integers(0, 200))
        with mpmath.workprec(400):
            ref = R.round_mpf_to_f32(mpf(num) / den)
        assert bits(R.round_ratio_to_f32(num, den)) == bits(ref)


def test_dyadic_rounding():
    assert bits(R.round_dyadic_to_f32((1 << 24) + 1, -24)) == 0x3F800000
    assert bits(R.round_dyadic_to_f32(-3, -150)) == 0x80000002
    assert bits(R.round_dyadic_to_f32(0, 5, negative_zero=True)) == 0x80000000
    assert R.round_dyadic_to_f64(3, -1075) == 2 * 2.0 ** -1074


# ---------------------------------------------------------------- ulp


def test_ulp_definition():
    assert R.ulp(1.0) == 2.0 ** -23 and R.ulp(1.5) == 2.0 ** -23 and R.ulp(-1.0) == 2.0 ** -23
    assert R.ulp(2.0) == 2.0 ** -22
    assert R.ulp(np.float32(0.0)) == 2.0 ** -149
    assert R.ulp(2.0 ** -130) == 2.0 ** -149 and R.ulp(2.0 ** -126) == 2.0 ** -149
    assert R.ulp(F32_MAX) == 2.0 ** 104 and R.ulp(2.0 ** 127) == 2.0 ** 104 and R.ulp(1e39) == 2.0 ** 104
    assert R.ulp(np.inf) == np.inf and math.isnan(R.ulp(np.nan))
    x = np.random.default_rng(0).standard_normal(10000).astype(np.float32) * np.float32(1e3)
    np.testing.assert_array_equal(R.ulp_array(x), np.spacing(np.abs(x)).astype(np.float64))


def test_ulp_array_on_every_kind_of_float64():
    """ulp_array against the definition by math.frexp, element by element: zeros, float64
    subnormals, the float32 subnormal and top binades, values past float32's range, infinities,
    NaNs, random bit patterns; 0-d and empty arrays keep their shapes."""
    def want(v):
        if math.isnan(v) or math.isinf(v):
            return abs(v)
        binade = math.frexp(abs(v))[1] - 1 if v else -126
        return 2.0 ** (min(max(binade, -126), 127) - 23)

    rng = np.random.default_rng(1)
    x = np.concatenate([
        [0.0, -0.0, 5e-324, -2.0 ** -1022, 2.0 ** -150, 2.0 ** -149, 2.0 ** -127, 2.0 ** -126,
         1.0, np.nextafter(2.0, 0), 2.0, F32_MAX, 2.0 ** 127, 2.0 ** 128, -1e300, np.inf, -np.inf,
         np.nan],
        rng.integers(0, 2 ** 64 - 1, 20000, dtype=np.uint64, endpoint=True).view(np.float64),
        rng.standard_normal(2000) * 2.0 ** rng.integers(-160, 140, 2000)])
    got = R.ulp_array(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    expected = np.array([want(float(v)) for v in x])
    assert np.array_equal(got, expected, equal_nan=True)
    assert R.ulp_array(np.float32(3.0)).shape == ()
    assert R.ulp_array(np.zeros((0, 2))).shape == (0, 2)


# ---------------------------------------------------------------- Ziv loop


def test_ziv_exact_results_and_known_values():
    assert bits(R.correctly_rounded(lambda c, x: c.exp(x), 0.0)) == 0x3F800000
    assert bits(R.correctly_rounded(lambda c, x: c.sqrt(x), 4.0)) == 0x40000000
    assert R.correctly_rounded(lambda c, x: c.exp(x), 1.0) == np.float32(math.e)
    v32, v64 = R.ziv(lambda c, x: c.log(x), 2.0)
    assert v32 == np.float32(math.log(2)) and v64 == math.log(2)


def test_ziv_exact_midpoints_fall_back_to_ties_even():
    # x / 2 at x = 2^-149 is exactly the midpoint 2^-150: no precision decides it, the fallback does
    assert bits(R.correctly_rounded(lambda c, x: x / 2, 2.0 ** -149, max_prec=320)) == 0
    assert bits(R.correctly_rounded(lambda c, x: x / 2, 3 * 2.0 ** -149, max_prec=320)) == 2
    # the sign of an exact zero comes from the caller, a tiny nonzero value keeps its own
    assert bits(R.correctly_rounded(lambda c, x: c.sin(x), 0.0, negative_zero=True)) == 0x80000000
    assert bits(R.correctly_rounded(lambda c, x: -c.exp(x), -200.0)) == 0x80000000


def test_ziv_unbounded_interval_raises():
    with pytest.raises(R.ZivError):
        R.correctly_rounded(lambda c, x: 1 / x, 0.0, max_prec=160)


def test_ziv_matches_plain_mpmath():
    rng = np.random.default_rng(1)
    wide = np.ldexp(rng.uniform(0.5, 1, 100), rng.integers(-140, 100, 100))
    xs = np.concatenate([rng.standard_normal(400) * 30, wide])
    xs = xs.astype(np.float32)
    for name in ("exp", "sin", "cos"):
        for x in xs:
            got = R.correctly_rounded(lambda c, t: getattr(c, name)(t), float(x))
            with mpmath.workprec(400):
                want = R.round_mpf_to_f32(getattr(mpmath, name)(mpf(float(x))))
            assert bits(got) == bits(want), (name, x)


# ---------------------------------------------------------------- vectorised fast paths


def _same(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_round_f64_to_f32_matches_numpy_on_a_million_doubles():
    rng = np.random.default_rng(2)
    n = 1_000_000
    every_exponent = rng.integers(0, 2 ** 64, n // 2, dtype=np.uint64).view(np.float64)
    f32_range = np.ldexp(rng.uniform(0.5, 1, n // 4), rng.integers(-155, 130, n // 4)) * rng.choice([-1, 1], n // 4)
    # exact float32 midpoints (and their neighbours) across the normal and subnormal range
    base = np.ldexp(rng.uniform(0.5, 1, n // 4), rng.integers(-150, 128, n // 4)).astype(np.float32).astype(np.float64)
    mids = base + R.ulp_array(base) / 2
    k = n // 12
    ties = np.concatenate([mids[:k], np.nextafter(mids, np.inf)[:k], np.nextafter(mids, -np.inf)[:k]])
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 2.0 ** 128 - 2.0 ** 103]
    x = np.concatenate([every_exponent, f32_range, ties, specials])
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float32)
    assert _same(R.round_f64_to_f32(x), want).all()


def test_round_f64_to_f32_matches_the_mpf_path():
    rng = np.random.default_rng(3)
    x = np.ldexp(rng.uniform(-1, 1, 3000), rng.integers(-160, 132, 3000))
    got = R.round_f64_to_f32(x)
    want = np.array([R.round_mpf_to_f32(mpf(v)) for v in x.tolist()], np.float32)
    assert _same(got, want).all()


def test_pair_rounding_uses_the_sign_of_lo_only_on_midpoints():
    hi = np.array([1 + 2.0 ** -24] * 3 + [1 + 2.0 ** -25] * 2)
    lo = np.array([1e-30, -1e-30, 0.0, -1e-30, 1e-30])
    got = R.round_f64_pair_to_f32(hi, lo).view(np.uint32)
    assert got.tolist() == [0x3F800001, 0x3F800000, 0x3F800000, 0x3F800000, 0x3F800000]
    assert R.round_f64_pair_to_f32(np.float64(1.5)).shape == ()


def _random_f32(rng, n):
    mant = rng.uniform(1, 2, n) * rng.choice([-1, 1], n)
    return np.ldexp(mant, rng.integers(-160, 127, n)).astype(np.float32)  # some underflow to signed zero


def test_add_sub_mul_fast_paths_match_exact_mpmath():
    rng = np.random.default_rng(4)
    a, b = _random_f32(rng, 3000), _random_f32(rng, 3000)
    b[:1000] = -(a[:1000].astype(np.float64) * rng.uniform(0.99, 1.01, 1000)).astype(np.float32)  # cancellation
    b[1000:1500] = np.ldexp(np.float32(1), rng.integers(-149, 128, 500)).astype(np.float32)  # ties near powers
    s, _ = R.add_f32(a, b)
    d, _ = R.sub_f32(a, b)
    p, p64 = R.mul_f32(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(over="ignore"):  # IEEE float64 gives the sign of an exact zero result
        zs, zd, zp = np.signbit(a64 + b64), np.signbit(a64 - b64), np.signbit(a64 * b64)
    for i in range(a.size):
        x, y = mpf(float(a[i])), mpf(float(b[i]))
        assert bits(s[i]) == bits(R.round_mpf_to_f32(mpmath.fadd(x, y, exact=True), zs[i]))
        assert bits(d[i]) == bits(R.round_mpf_to_f32(mpmath.fsub(x, y, exact=True), zd[i]))
        assert bits(p[i]) == bits(R.round_mpf_to_f32(mpmath.fmul(x, y, exact=True), zp[i]))
        assert mpf(float(p64[i])) == mpmath.fmul(x, y, exact=True)


def test_add_and_mul_special_cases():
    f = np.float32
    pairs = [
        (1.0, 2.0 ** -24, 0x3F800000),  # tie to even
        (1.0, 2.0 ** -24 * (1 + 2.0 ** -23), 0x3F800001),
        (F32_MAX, F32_MAX, 0x7F800000),
        (F32_MAX, 2.0 ** 103, 0x7F800000),  # exactly the overflow midpoint
        (F32_MAX, 2.0 ** 102, 0x7F7FFFFF),
        (-0.0, -0.0, 0x80000000),
        (0.0, -0.0, 0x00000000),
        (1.0, -1.0, 0x00000000),
        (2.0 ** 127, 2.0 ** -149, 0x7F000000),  # the exact sum needs 277 bits; float64 alone would lose it
    ]
    for a, b, want in pairs:
        assert bits(R.add_f32(f(a), f(b))[0]) == want, (a, b)
    assert bits(R.sub_f32(f(-0.0), f(0.0))[0]) == 0x80000000
    assert np.isnan(R.add_f32(f(np.inf), f(-np.inf))[0])
    assert bits(R.mul_f32(f(2.0 ** -75), f(2.0 ** -75))[0]) == 0  # 2^-150: tie to even 0
    assert bits(R.mul_f32(f(3 * 2.0 ** -75), f(2.0 ** -75))[0]) == 2  # 1.5 quanta: tie to even 2
    assert bits(R.mul_f32(f(-1.0), f(0.0))[0]) == 0x80000000
    assert np.isnan(R.mul_f32(f(np.inf), f(0.0))[0])


def test_scaled_ints_and_exact_sum():
    ints, scale = R.f32_to_scaled_ints(np.float32([1.5, -3.0, 0.25]))
    assert scale == 25 and [i * 2.0 ** -scale for i in ints] == [1.5, -3.0, 0.25]
    ints, scale = R.f32_to_scaled_ints(np.float32([2.0 ** -149, 1.0]))
    assert scale == 149 and ints.tolist() == [1, 2 ** 149]
    with pytest.raises(ValueError):
        R.f32_to_scaled_ints(np.float32([np.inf]))
    assert R.exact_sum_mpf(np.float32([1e8, 1.0, -1e8])) == 1


# ---------------------------------------------------------------- division and square root, near boundaries


def _near_boundary_quotients(rng, n):
    """(a, b) float32 pairs whose quotient lies within a few float32 ulps of a rounding boundary
    (midpoints in every binade, subnormal ones and the overflow threshold), plus exact quotients."""
    e = rng.integers(-160, 129, n)
    mids = np.ldexp(rng.integers(1 << 23, 1 << 24, n) * 2 + 1, e - 25).astype(np.float64)  # 25-bit odd: midpoints
    mids = np.where(e < -126, np.ldexp(rng.integers(0, 1 << 23, n) * 2 + 1, -150), mids)  # subnormal midpoints
    mids[: n // 50] = 2.0 ** 128 * (1 - 2.0 ** -25)
    b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-40, 40, n)).astype(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        a = (mids * b.astype(np.float64)).astype(np.float32)
        exact = rng.random(n) < 0.1  # a = k b exactly: the quotient is a float32
        k = rng.integers(-(1 << 12), 1 << 12, n).astype(np.float32)
        a = np.where(exact, (k.astype(np.float64) * b).astype(np.float32), a)
    b = np.where(rng.random(n) < 0.5, -b, b).astype(np.float32)
    keep = np.isfinite(a) & (a != 0)
    return a[keep], b[keep]


def test_div_f32_is_the_correct_rounding_on_100k_near_boundary_quotients():
    from fractions import Fraction
    rng = np.random.default_rng(12)
    a, b = _near_boundary_quotients(rng, 110_000)
    assert a.size >= 100_000
    value, exact = R.div_f32(a, b)
    want32 = np.empty(a.size, np.float32)
    want64 = np.empty(a.size)
    for i, (x, y) in enumerate(zip(a.astype(np.float64).tolist(), b.astype(np.float64).tolist())):
        q = Fraction(x) / Fraction(y)
        want32[i] = R.round_ratio_to_f32(q.numerator, q.denominator)
        want64[i] = R.round_ratio_to_f64(q.numerator, q.denominator)
    assert np.array_equal(value.view(np.uint32), want32.view(np.uint32))
    assert np.array_equal(exact, want64)
    assert np.any(np.abs(value) < 2.0 ** -126) and np.any(np.isinf(value))  # subnormal and overflowing results
    # IEEE specials and signed zeros, as float64 division gives them
    x = np.float32([0.0, -0.0, 1.0, -1.0, np.inf, 1.0, np.nan, 0.0, 3.0])
    y = np.float32([1.0, 1.0, 0.0, 0.0, np.inf, -np.inf, 1.0, 0.0, -2.0 ** -149])
    v, _ = R.div_f32(x, y)
    assert [bits(t) for t in v[[0, 1, 2, 3, 5, 8]]] == [0, 0x80000000, 0x7F800000, 0xFF800000, 0x80000000, 0xFF800000]
    assert np.isnan(v[[4, 6, 7]]).all()


def test_sqrt_double_rounding_is_innocuous_near_boundaries():
    rng = np.random.default_rng(13)
    n = 20_000
    mids = np.ldexp(rng.integers(1 << 23, 1 << 24, n) * 2 + 1, rng.integers(-100, 60, n) - 25).astype(np.float64)
    a = np.concatenate([(mids * mids).astype(np.float32), np.float32([2.0 ** -149, 2.0 ** -148, 3.4e38])])
    got = np.sqrt(a.astype(np.float64))  # what references/sqrt.py rounds once more
    with mpmath.workprec(200):
        want = [R.round_mpf_to_f32(mpmath.sqrt(R.f32_to_mpf(v))) for v in a]
        want64 = [R.round_mpf_to_f64(mpmath.sqrt(R.f32_to_mpf(v))) for v in a]
    assert np.array_equal(R.round_f64_to_f32(got).view(np.uint32), np.array(want, np.float32).view(np.uint32))
    assert np.array_equal(got, np.array(want64))


def test_is_f32_tie_and_decide_interval():
    x = np.array([1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, 1.0, 2.0 ** -150, 3 * 2.0 ** -150,
                  2.0 ** 128 * (1 - 2.0 ** -25), 1 + 2.0 ** -25, -(1 + 2.0 ** -24), 0.0, np.inf, np.nan])
    assert R.is_f32_tie(x).tolist() == [True, True, False, True, True, True, False, True, False, False, False]
    with mpmath.workprec(200):
        tie, tiny = 1 + TWO ** -24, TWO ** -60
        lo1, lo2, hi2 = tie - tiny, tie + tiny, tie + 2 * tiny
    with R.iv_precision(80):
        assert R.decide_interval(mpmath.iv.mpf([1, 1 + tiny])) == (np.float32(1), 1.0)
        assert R.decide_interval(mpmath.iv.mpf([lo1, lo2])) is None  # straddles a float32 tie
        assert R.decide_interval(mpmath.iv.mpf([lo2, hi2])) == (np.float32(1 + 2.0 ** -23),
                                                                                 1 + 2.0 ** -24)


def test_ziv_exact_zero_takes_the_callers_sign_even_when_the_midpoint_is_noise():
    # an interval that keeps straddling 0 asymmetrically: its midpoint has a sign, the exact zero does not
    def fn(ctx, x):
        return ctx.mpf([-(TWO ** -300), TWO ** -290]) * x
    assert bits(R.correctly_rounded(fn, 1.0, max_prec=320, negative_zero=True)) == 0x80000000
    assert bits(R.correctly_rounded(fn, 1.0, max_prec=320, negative_zero=False)) == 0
