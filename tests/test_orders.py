"""The fixed-order programs the harness checks declared orders against: the scalar FMA fold used
for long single dot products equals the vectorised one bit for bit, on ties, subnormals and
overflow, and the order programs accept empty kept axes."""
import numpy as np
import pytest

from conformance import order_claims, orders
from engine.types import BackendOp as Op, Contraction, NumericalPolicy, Reduction, Rounding, \
    Subnormals

F32 = np.float32


WIDE = 9     # rows past _fma's few-element Python path: the vectorised evaluation


def _vectorised(a, b):
    acc = np.full(WIDE, a[0] * b[0], F32)
    for j in range(1, a.size):
        acc = orders._fma(acc, np.full(WIDE, a[j], F32), np.full(WIDE, b[j], F32))
    return acc[0]


def test_few_element_fma_equals_the_vectorised_one():
    """_fma's Python path for rows of up to eight elements (a scan's state row) against the
    vectorised evaluation of the same elements in a wider row: ties, the overflow threshold,
    subnormals, signed zeros, and the non-finite inputs it hands back to the vectorised path."""
    rng = np.random.default_rng(3)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38, -3.4028235e38,
                        2.0 ** 64, 1 + 2.0 ** -23, 2.0 ** -24, 2.0 ** -75], F32)
    # float64 sums exactly on a float32 midpoint, TwoSum's error below and above it, where the
    # tie's even neighbour is the wrong one; the overflow threshold; -0 + -0
    crafted = [(1 + 2.0 ** -23, -2.0 ** -24 * (1 + 2.0 ** -23), -(1 - 2.0 ** -23)),
               (1 + 2.0 ** -23, 2.0 ** -24 * (1 + 2.0 ** -23), 1 - 2.0 ** -23),
               (1 + 3 * 2.0 ** -23, -2.0 ** -24 * (1 + 2.0 ** -23), 1 - 2.0 ** -23),
               (1 + 2.0 ** -23, 0.00024412575, 0.0002441555),
               (3.4028235e38, 2.0 ** 103 * (1 + 2.0 ** -23), 1 - 2.0 ** -23),
               (3.4028235e38, 2.0 ** 103 * (1 + 2.0 ** -23), 1 + 2.0 ** -23), (-0.0, -0.0, 5.0)]
    for trial in range(3000):
        n = int(rng.integers(0, 9))
        acc, a, b = (rng.standard_normal(n) * 2.0 ** rng.integers(-150, 64, n) for _ in range(3))
        if trial < len(crafted):
            acc, a, b = (np.array([v]) for v in crafted[trial])
            n = 1
        if trial % 3 == 0:       # acc + a b near float32 midpoints
            a, b = acc * 2.0 ** -12, 2.0 ** -12 * (1 + rng.integers(-3, 4, n) * 2.0 ** -23)
        if trial % 4 == 0:
            for v in (acc, a, b):
                hit = rng.random(n) < 0.3
                v[hit] = rng.choice(special, hit.sum())
        with np.errstate(all="ignore"):
            acc, a, b = (v.astype(F32) for v in (acc, a, b))
            got = orders._fma(acc, a, b)
            pad = lambda v: np.concatenate([v, np.ones(WIDE, F32)])
            want = orders._fma(pad(acc), pad(a), pad(b))[:n]
        assert got.dtype == F32 and got.shape == (n,)
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (acc, a, b)


@pytest.mark.parametrize("kind", ["normal", "subnormal", "ties", "overflow", "specials"])
def test_scalar_fma_fold_equals_the_vectorised_fold(kind):
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(2, 40))
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        if kind == "subnormal":
            a = a * 2.0 ** rng.integers(-149, -120, n)
        elif kind == "ties":     # exact binary fractions: many sums land on float32 midpoints
            a, b = rng.integers(-2 ** 13, 2 ** 13, n) * 2.0 ** -12, rng.integers(1, 5, n) * 1.0
            a[0], b[0] = 2.0 ** 12, 1.0
        elif kind == "overflow":
            a, b = a * 1.5e19, b * 1.5e19
        elif kind == "specials":
            a[rng.integers(0, n)] = rng.choice([np.inf, -np.inf, np.nan])
        a, b = a.astype(F32), b.astype(F32)
        with np.errstate(all="ignore"):
            want = _vectorised(a, b)
        got = orders.fused_fold_1d(a, b)
        assert np.asarray(got, F32).view(np.uint32) == np.asarray(want, F32).view(np.uint32) or \
            (np.isnan(got) and np.isnan(want)), (kind, a, b)


@pytest.mark.parametrize("kind", ["normal", "ties", "overflow", "underflow", "specials"])
def test_scalar_fma_fold_equals_the_vectorised_fold_on_long_folds(kind):
    """Long folds: the accumulator grows far past the products (most steps round, TwoSum's error is
    often nonzero, and an overflow mid-fold must stay inf to the end), on the finite inputs' fast
    loop and on the loop for inputs with an inf or a NaN."""
    rng = np.random.default_rng(11)
    for _ in range(4):
        n = int(rng.integers(300, 1500))
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        if kind == "ties":
            a, b = rng.integers(-2 ** 13, 2 ** 13, n) * 2.0 ** -12, rng.integers(1, 5, n) * 1.0
        elif kind == "overflow":     # partial sums cross 2^128 (1 - 2^-25) part way, either sign
            a, b = np.abs(a) * 1.5e19, np.abs(b) * 1.5e19 * rng.choice([-1.0, 1.0])
        elif kind == "underflow":    # products and sums in the subnormal range
            a, b = a * 2.0 ** -70, b * 2.0 ** -70
        elif kind == "specials":
            a[rng.integers(n // 2, n)] = rng.choice([np.inf, -np.inf, np.nan])
        a, b = a.astype(F32), b.astype(F32)
        with np.errstate(all="ignore"):
            want = _vectorised(a, b)
        got = orders.fused_fold_1d(a, b)
        assert np.asarray(got, F32).view(np.uint32) == np.asarray(want, F32).view(np.uint32) or \
            (np.isnan(got) and np.isnan(want)), (kind, n)


def test_scalar_fma_fold_on_rounding_boundaries():
    """Steps whose float64 sum is a float32 midpoint, a float64 neighbour of one, or at the
    overflow threshold, where TwoSum's error decides the side; and the empty and one-term folds."""
    m32 = 1 + 2.0 ** -23
    cases = [
        ([m32, 0.00024412575], [1, 0.0002441555]),   # s one float64 ulp below a midpoint, err > 0
        ([1.0, 2.0 ** -24, 2.0 ** -60], [1, 1, 1]),  # exactly a midpoint, then err decides
        ([m32, 2.0 ** -24, -2.0 ** -60], [1, 1, 1]),
        ([3.4028235e38, 2.0 ** 103, 2.0 ** -30], [1, 1, 1]),     # the overflow threshold
        ([3.4028235e38, 2.0 ** 103, -2.0 ** -30], [1, 1, 1]),
        ([3.4028235e38, 2.0 ** 102], [1, 1]), ([-3.4028235e38, 2.0 ** 104], [1, -1]),
        ([2.0 ** -149, 2.0 ** -75], [1, -2.0 ** -75]), ([1e-45, 1e-30], [1, 1e-16]),
        ([0.0, -0.0], [-1, 1]), ([5.0], [3.0]), ([], []),
    ]
    for a, b in cases:
        a, b = np.asarray(a, F32), np.asarray(b, F32)
        with np.errstate(all="ignore"):
            want = _vectorised(a, b) if a.size else F32(0)
        got = orders.fused_fold_1d(a, b)
        assert np.asarray(got, F32).view(np.uint32) == np.asarray(want, F32).view(np.uint32), (a, b)


def test_the_order_programs_accept_an_empty_kept_axis():
    policy = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                             Contraction.separate, Reduction.fixed_left)
    a = np.zeros((0, 4), F32)
    (out,) = order_claims.ordered_results(Op.reduce_sum, policy, (a,), {"axes": (1,), "keepdims": True})
    assert out.shape == (0, 1)


def _near_midpoints():
    """(acc, a, b) whose exact acc + a b lies within a few float64 ulps of the float32 midpoint
    above |acc| (odd acc: the midpoint's tie rounds away from acc): a = (2^23 + x) 2^i and
    b = (2^23 - x) 2^j make a b = 2^(E-24) (1 - x^2 2^-46) for acc in [2^E, 2^(E+1)), so the
    float64 sum lands one or two float64 ulps below the midpoint with TwoSum's error of either
    sign (x = 363..511: one ulp below, error toward the midpoint). Every exponent, both signs."""
    rng = np.random.default_rng(17)
    out = []
    for e in range(-100, 127, 3):
        i = (e - 70) // 2
        for sign in (1.0, -1.0):
            for x in (0, 300, 363, 400, 450, 511, 512, 600, 700, 724, 730):
                odd = 2 * int(rng.integers(0, 2 ** 22 - 1)) + 1
                acc = sign * (2 ** 23 + odd) * 2.0 ** (e - 23)
                a = (2 ** 23 + x) * 2.0 ** i
                b = sign * (2 ** 23 - x) * 2.0 ** (e - 70 - i)
                out.append((acc, a, b))
    # the overflow threshold 2^128 - 2^103 and its float64 neighbours, either side by TwoSum
    for a, b in ((2.0 ** 103, 1.0), (2.0 ** 103 * (1 + 2.0 ** -23), 1 - 2.0 ** -23),
                 (2.0 ** 103 * (1 - 2.0 ** -24), 1 + 2.0 ** -23), (2.0 ** 102, 2 - 2.0 ** -23)):
        out += [(3.4028235e38, a, b), (-3.4028235e38, -a, b)]
    return [tuple(F32(v) for v in case) for case in out]


def test_fma_is_the_exactly_rounded_fma_next_to_float32_midpoints():
    """_fma (its few-element path and its vectorised one) and fused_fold_1d give acc + a b rounded
    once, as exact rationals round it (tests/mutants._fma_exact), where the float64 sum sits on or
    beside a float32 midpoint: once, a float64 neighbour that is itself a midpoint made the test
    "its neighbours round apart" pick the far side (1 + 2^-23 + 0.00024412575 * 0.0002441555
    gave 1 + 2^-22 for 1 + 2^-23)."""
    from mutants import _fma_exact
    cases = _near_midpoints()
    acc, a, b = (np.array(v, F32) for v in zip(*cases))
    want = np.array([_fma_exact(*case) for case in cases], F32).view(np.uint32)
    with np.errstate(all="ignore"):
        vectorised = orders._fma(acc, a, b)          # one wide row: the vectorised path
        few = np.concatenate([orders._fma(acc[k:k + 1], a[k:k + 1], b[k:k + 1])
                              for k in range(len(cases))])
    folds = np.array([orders.fused_fold_1d(np.array([1, y], F32), np.array([c, z], F32))
                      for c, y, z in cases], F32)
    for name, got in (("vectorised", vectorised), ("few", few), ("fold", folds)):
        bad = np.flatnonzero(got.view(np.uint32) != want)
        assert bad.size == 0, (name, [cases[k] for k in bad[:3]])
    # the family reaches the case the old test got wrong, on both sides of the midpoint
    assert len(set(want.tolist())) > len(cases) // 4
