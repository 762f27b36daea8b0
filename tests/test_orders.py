"""The fixed-order programs the harness checks declared orders against: the scalar FMA fold used
for long single dot products equals the vectorised one bit for bit, on ties, subnormals and
overflow, and the order programs accept empty kept axes."""
import numpy as np
import pytest

from conformance import order_claims, orders
from engine.types import BackendOp as Op, Contraction, NumericalPolicy, Reduction, Rounding, \
    Subnormals

F32 = np.float32


def _vectorised(a, b):
    acc = np.asarray([a[0] * b[0]], F32)
    for j in range(1, a.size):
        acc = orders._fma(acc, a[j:j + 1], b[j:j + 1])
    return acc[0]


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


def test_the_order_programs_accept_an_empty_kept_axis():
    policy = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                             Contraction.separate, Reduction.fixed_left)
    a = np.zeros((0, 4), F32)
    (out,) = order_claims.ordered_results(Op.reduce_sum, policy, (a,), {"axes": (1,), "keepdims": True})
    assert out.shape == (0, 1)
