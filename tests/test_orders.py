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

