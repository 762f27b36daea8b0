"""The input-aware bound of sums that are exact in every order (conformance/exact_sums.py): the
grain of float32 values, the theorem's boundary at 2^24 grid units (0 only where no order can
round: checked against many evaluation orders, and never 0 one grid step past it), products,
flushing policies, the division of a mean, and the exact-sums generator class whose every output
meets the theorem."""
import numpy as np
import pytest

from conformance import error_models, exact_sums, generators
from conformance.exact_cases import EXACT_SUMS, LONG_LOG2
from conformance.exact_sums import NO_TERM, NOT_FINITE, grain, lowbit_exponents
from conformance.references import get as reference
from engine.capsule import standard_capsule
from engine.providers.reference import TREE
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32 = np.float32
ANY = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                      Contraction.implementation_defined, Reduction.implementation_defined)
FLUSHING = NumericalPolicy(Rounding.nearest_even, Subnormals.flush_to_zero,
                           Contraction.implementation_defined, Reduction.implementation_defined)


def _capsule(op, policy):
    return standard_capsule(op, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                            vjp_mode=VJPMode.torchlean_tape, policy=policy, source_file="t.py")


def bound(op, inputs, params=None, policy=ANY, g=None):
    """The per-element bound error_models applies to the forward value (or, with g, a
    gradient-shaped context: no input-aware bound there)."""
    params = params or {}
    ref = reference(op.label).forward(tuple(inputs), **params)
    model = error_models.forward_model(_capsule(op, policy), ref.kind)
    ctx = error_models.BoundContext(op, tuple(inputs), params, policy, g=g)
    return error_models.bound_array(model, ref, ctx), ref, model, ctx


def test_lowbit_exponents_of_float32_values():
    x = np.array([1.0, 3.0, 0.5, 6.0, 2.0 ** -149, 3 * 2.0 ** -149, 2.0 ** -126,
                  float(np.finfo(F32).max), 0.0, -0.0, -12.0, np.inf, np.nan], F32)
    want = [0, 0, -1, 1, -149, -149, -126, 104, NO_TERM, NO_TERM, 2, NOT_FINITE, NOT_FINITE]
    assert lowbit_exponents(x).tolist() == want
    assert grain(np.array([4.0, 6.0, 0.0], F32)) == 1
    assert grain(np.zeros(0, F32)) == NO_TERM


def test_the_boundary_is_2_to_the_24_grid_units_exactly():
    """S = 2^24 units: every order is exact, bound 0; one unit more: the left fold
    (2^23 + 2^23) + 1 rounds to 2^24, and the bound is the a-priori one."""
    for e in (0, -30, 20):
        at = np.array([2.0 ** 23, 2.0 ** 23 - 1, 1.0], F32) * F32(2.0 ** e)
        past = np.array([2.0 ** 23, 2.0 ** 23, 1.0], F32) * F32(2.0 ** e)
        b_at, *_ = bound(Op.reduce_sum, [at], {"axes": None})
        b_past, ref, *_ = bound(Op.reduce_sum, [past], {"axes": None})
        assert float(b_at) == 0.0
        assert float(b_past) > 0.0
        left = (past[0] + past[1]) + past[2]
        assert float(left) != float(ref.exact)          # some order is inexact past it


@pytest.mark.parametrize("seed", range(4))
def test_bound_zero_only_where_every_order_is_exact(seed):
    """Random rows on one grid with S on both sides of 2^24 units: where the bound is 0, left and
    right folds, NumPy's pairwise sum, a tree and 20 random permutations all give the exact sum;
    where some order does not, the bound is not 0."""
    rng = np.random.default_rng(seed)
    for _ in range(150):
        n = int(rng.integers(2, 40))
        e = int(rng.choice([0, -149, -126, -20, 30]))
        target = 2.0 ** 24 * float(rng.choice([0.5, 0.999, 1.0, 1.0001, 1.5]))
        k = np.floor(rng.dirichlet(np.ones(n)) * target) + 1
        k *= np.where(rng.random(n) < 0.8, 1.0, -1.0)
        row = np.ldexp(np.clip(k, -2.0 ** 24, 2.0 ** 24), e).astype(F32)
        b, ref, *_ = bound(Op.reduce_sum, [row], {"axes": None})
        exact = float(ref.exact)
        with np.errstate(all="ignore"):
            orders = [row, row[::-1]] + [row[rng.permutation(n)] for _ in range(20)]
            results = [float(np.add.reduce(r, dtype=F32)) for r in orders]
            results += [float(_left(r)) for r in orders]
        if float(b) == 0.0:
            assert all(r == exact for r in results), (row, exact, results)
        if any(r != exact for r in results):
            assert float(b) > 0.0


def _left(r):
    acc = F32(r[0])
    for v in r[1:]:
        acc = F32(acc + v)
    return acc


def test_products_below_the_subnormal_grid_are_not_exact():
    a = np.array([[2.0 ** -100, 2.0 ** -100]], F32)
    b = np.array([[2.0 ** -60], [2.0 ** -60]], F32)
    assert float(bound(Op.matmul, [a, b])[0].max()) > 0.0         # products of 2^-160
    a, b = a * F32(2.0 ** 40), b                                    # products of 2^-120
    assert float(bound(Op.matmul, [a, b])[0].max()) == 0.0


def test_matmul_and_linear_on_integer_grids_are_exact():
    a = np.array([[3.0, -5.0, 7.0]], F32) * F32(2.0 ** -3)
    b = np.array([[2.0], [6.0], [-10.0]], F32) * F32(2.0 ** 5)
    assert float(bound(Op.matmul, [a, b])[0].max()) == 0.0
    x, w, bias = np.array([[1.0, 2.0]], F32), np.array([[3.0, 4.0]], F32), np.array([0.5], F32)
    assert float(bound(Op.linear, [x, w, bias])[0].max()) == 0.0   # the bias is a term: 2^-1
    big = np.array([2.0 ** 24], F32)                                # S = 2^24 + 11 on grid 1/2
    assert float(bound(Op.linear, [x, w, big])[0].max()) > 0.0


def test_a_flushing_policy_needs_every_value_above_the_subnormal_range():
    tiny = np.array([3.0, 5.0, 1.0], F32) * F32(2.0 ** -130)         # subnormal terms
    assert float(bound(Op.reduce_sum, [tiny], {"axes": None})[0]) == 0.0
    assert float(bound(Op.reduce_sum, [tiny], {"axes": None}, FLUSHING)[0]) > 0.0
    normal = tiny * F32(2.0 ** 10)
    assert float(bound(Op.reduce_sum, [normal], {"axes": None}, FLUSHING)[0]) == 0.0


def test_a_mean_keeps_its_division_and_fails_one_ulp_off():
    x = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], F32)
    b, ref, model, ctx = bound(Op.reduce_mean, [x], {"axes": (1,)})
    assert list(b) == pytest.approx([2.0 ** -24 * v * (1 + 2 * 2.0 ** -24) + 2.0 ** -150
                                     for v in (1.0, 7 / 3)])
    off = np.array([1.0 + 2.0 ** -23, float(ref.value[1])], F32)
    verdict = error_models.compare(model, ref, off, ctx)
    assert [error_models.REASONS[c] for c in verdict.reason] == ["exceeds-bound", "ok"]


def test_gradients_infinities_and_huge_totals_keep_the_a_priori_bound():
    row = np.array([1.0, 2.0, 3.0], F32)
    g = np.ones((), F32)
    assert float(bound(Op.reduce_sum, [row], {"axes": None}, g=g)[0]) > 0.0
    with_inf = np.array([1.0, np.inf], F32)
    _, ref, model, ctx = bound(Op.reduce_sum, [with_inf], {"axes": None})
    assert not error_models.exact_in_every_order(model, ref, ctx, ref.magnitude, 2).any()
    huge = np.array([2.0 ** 126, 2.0 ** 126, 2.0 ** 104], F32)      # S > 2^127
    assert float(bound(Op.reduce_sum, [huge], {"axes": None})[0]) > 0.0


def test_the_model_label_names_the_input_aware_part():
    label = error_models.forward_model(_capsule(Op.reduce_sum, TREE), "reduction").label
    assert "0 where the terms are exact in every order" in label
    mean = error_models.forward_model(_capsule(Op.reduce_mean, TREE), "reduction").label
    assert "the division's rounding alone" in mean
    assert "exact in every order" not in error_models.vjp_model(
        _capsule(Op.reduce_sum, TREE), "reduction").label


EXACT_OPS = sorted((op for op, spec in generators.OP_SPECS.items()
                    if spec.exact_sums is not None), key=lambda o: o.label)


@pytest.mark.parametrize("op", EXACT_OPS, ids=lambda o: o.label)
def test_every_exact_sums_case_meets_the_theorem(op):
    """Every output of the class's cases is exact in every order (no zero terms, so a lost term
    always shows); even indices reach 2^LONG_LOG2 - 1 terms and more."""
    assert EXACT_SUMS in generators.classes_for(op)
    spec = generators.OP_SPECS[op]
    for seed in range(3):
        for index in range(4):
            case = generators.draw_case(op, seed, EXACT_SUMS, index)
            ref = reference(op.label).forward(case.inputs, **case.params)
            ctx = error_models.BoundContext(op, case.inputs, case.params, ANY)
            n = np.broadcast_to(np.asarray(ref.terms, np.float64), np.shape(ref.value))
            model = error_models.forward_model(_capsule(op, ANY), ref.kind)
            exact = error_models.exact_in_every_order(model, ref, ctx, ref.magnitude, n)
            assert exact is not None and exact.all(), (seed, index, case.summary())
            assert all(np.all(x != 0) for x in case.inputs[:1])
            if index % 2 == 0:
                assert max(np.size(x) for x in case.inputs) >= 2 ** LONG_LOG2 - 1
    # without its inputs (a bound context of none) nothing is claimed
    assert exact_sums.term_grains(spec.exact_sums, ()) == (NOT_FINITE, NOT_FINITE)
