"""Error models: which check each policy and reference kind get, and the per-element comparison."""
import numpy as np
import pytest

from conformance import order_claims, orders, error_models
from conformance.references._common import Reference
from engine.capsule import standard_capsule
from engine.providers.reference import BLAS, EXACT, F64_ONCE, ROUNDED, TREE
from engine.types import (BackendOp as Op, Contraction, DeclaredBound, Device, NumericalPolicy,
                          Provider, Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32 = np.float32
FTZ = NumericalPolicy(Rounding.nearest_even, Subnormals.flush_to_zero, Contraction.separate,
                      Reduction.not_applicable)
DIRECTED = NumericalPolicy(Rounding.directed, Subnormals.gradual_underflow,
                           Contraction.not_applicable, Reduction.not_applicable)


def cap(op=Op.add, pol=ROUNDED, declared=None):
    return standard_capsule(op, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                            vjp_mode=VJPMode.torchlean_tape, policy=pol, source_file="t.py",
                            declared_bound=declared)


def check(model, value, got, exact=None, op=Op.add, pol=ROUNDED, magnitude=None, terms=None,
          kind="rounded"):
    value = np.asarray(value, F32)
    exact = value.astype(np.float64) if exact is None else np.asarray(exact, np.float64)
    ref = Reference(value, exact, magnitude, terms, kind)
    ctx = error_models.BoundContext(op, (), {}, pol)
    return error_models.compare(model, ref, np.asarray(got, F32), ctx)


def reasons(verdict):
    return [error_models.REASONS[c] for c in verdict.reason.reshape(-1)]


def test_gamma_and_k_follow_higham():
    assert error_models.gamma(3) == pytest.approx(3 * 2.0 ** -24 / (1 - 3 * 2.0 ** -24))
    n = np.array([1, 2, 1025])
    assert list(error_models.k_for(Reduction.fixed_left, n, False)) == [0, 1, 1024]
    assert list(error_models.k_for(Reduction.fixed_left, n, True)) == [1, 2, 1025]
    assert list(error_models.k_for(Reduction.fixed_tree, n, False)) == [0, 1, 11]
    assert list(error_models.k_for(Reduction.fixed_tree, n, True)) == [1, 2, 12]
    assert list(error_models.k_for(Reduction.implementation_defined, n, True)) == [1, 2, 1025]


def test_model_selection_by_kind_and_policy():
    assert error_models.forward_model(cap(pol=EXACT), "exact").kind == "bitwise"
    assert error_models.forward_model(cap(pol=EXACT), "exact").signed_zero
    assert error_models.forward_model(cap(), "rounded").kind == "correctly-rounded"
    faithful = error_models.forward_model(cap(pol=DIRECTED), "rounded")
    assert (faithful.kind, faithful.ulps) == ("faithful", 1.0)
    declared = error_models.forward_model(cap(Op.exp, declared=F64_ONCE), "transcendental")
    assert (declared.kind, declared.ulps, declared.source) == ("ulps", 1.0, "declared")
    # a library transcendental that declares nothing claims correct rounding
    assert error_models.forward_model(cap(Op.exp), "transcendental").kind == "correctly-rounded"
    # a composite that declares nothing gets the derived bound
    derived = error_models.forward_model(cap(Op.softmax), "composite")
    assert (derived.kind, derived.source) == ("derived", "derived")
    tree = error_models.forward_model(cap(Op.reduce_sum, pol=TREE), "reduction")
    assert tree.kind == "gamma" and tree.order == "fixed-tree" and "ceil(log2 n)" in tree.label
    assert error_models.forward_model(cap(Op.matmul, pol=BLAS), "reduction").flush_allowed


def test_bitwise_checks_signed_zero_and_nan():
    model = error_models.forward_model(cap(Op.relu, pol=EXACT), "exact")
    v = check(model, [0.0, 1.0, np.nan, np.inf], [-0.0, 1.0, np.nan, np.inf], kind="exact")
    assert reasons(v) == ["signed-zero", "ok", "ok", "ok"]
    v = check(model, [1.0, 2.0, np.nan], [1.0000001, np.nan, 3.0], kind="exact")
    assert reasons(v) == ["not-bitwise", "nan-mismatch", "nan-mismatch"]


def test_correct_rounding_is_equality_with_the_rounded_reference():
    model = error_models.forward_model(cap(), "rounded")
    one_up = np.nextafter(F32(1), F32(2))
    v = check(model, [1.0, 1.0, np.inf], [1.0, one_up, F32(3.4e38)],
              exact=[1.0, 1.0 + 2.0 ** -25, 3.5e38])
    assert reasons(v) == ["ok", "not-correctly-rounded", "inf-mismatch"]
    assert v.ratio[0] <= 1.0


def test_faithful_rounding_accepts_either_neighbour_only():
    model = error_models.forward_model(cap(pol=DIRECTED), "rounded")
    one_up = np.nextafter(F32(1), F32(2))
    two_up = np.nextafter(one_up, F32(2))
    v = check(model, [1.0, 1.0], [one_up, two_up], exact=[1.0 + 2.0 ** -25] * 2)
    assert reasons(v) == ["ok", "exceeds-bound"]


def test_declared_ulp_bound_is_measured_from_the_rounded_reference():
    model = error_models.forward_model(cap(Op.exp, declared=DeclaredBound(2.0, "library")),
                                 "transcendental")
    x = F32(1.5)
    ups = [x, np.nextafter(x, F32(2)), F32(x + 2 * np.spacing(x)), F32(x + 3 * np.spacing(x))]
    v = check(model, [x] * 4, ups, op=Op.exp, kind="transcendental")
    assert reasons(v) == ["ok", "ok", "ok", "exceeds-bound"]
    assert v.ratio[2] == pytest.approx(1.0)


def test_reduction_bound_is_gamma_k_times_magnitude():
    model = error_models.forward_model(cap(Op.reduce_sum, pol=TREE), "reduction")
    n, mag = 8, 100.0
    bound = error_models.gamma(3) * mag * (1 + 2 * 2.0 ** -24)
    inside, outside = 1.0 + 0.9 * bound, 1.0 + 1.2 * bound
    v = check(model, [1.0, 1.0], [inside, outside], exact=[1.0, 1.0], op=Op.reduce_sum,
              pol=TREE, magnitude=[mag, mag], terms=n, kind="reduction")
    assert reasons(v) == ["ok", "exceeds-bound"]


def test_overflow_of_a_partial_sum_is_admissible_only_near_the_threshold():
    model = error_models.forward_model(cap(Op.reduce_sum, pol=BLAS), "reduction")
    v = check(model, [1e38, 1e38], [np.inf, np.inf], exact=[1e38, 1e38], op=Op.reduce_sum,
              pol=BLAS, magnitude=[6e38, 2e38], terms=3, kind="reduction")
    assert reasons(v) == ["ok", "inf-mismatch"]
    assert v.observed["overflow_admissible"] == 1


def test_flushed_subnormal_passes_only_when_the_policy_allows_flushing():
    sub = F32(2.0 ** -140)
    strict = error_models.forward_model(cap(), "rounded")
    v = check(strict, [sub, -sub], [0.0, 0.0])
    # -sub met by +0 is not a same-signed flush: it is a wrong result
    assert reasons(v) == ["flushed-subnormal", "not-correctly-rounded"]
    lenient = error_models.forward_model(cap(pol=FTZ), "rounded")
    v = check(lenient, [sub, -sub, sub], [0.0, -0.0, sub], pol=FTZ)
    assert reasons(v) == ["ok", "ok", "ok"]
    assert v.observed == {"subnormal_results": 3, "subnormals_flushed": 2,
                          "subnormals_preserved": 1, "overflow_admissible": 0}


def test_vjp_models_never_check_zero_signs():
    model = error_models.vjp_model(cap(Op.add), "exact")
    v = check(model, [0.0], [-0.0], kind="exact")
    assert reasons(v) == ["ok"]


def test_fixed_orders_are_float32_programs():
    terms = np.array([[1.0, 2.0 ** -24, 2.0 ** -24, 2.0 ** -24]], F32)
    assert orders.left_fold(terms)[0] == F32(1.0)          # each tiny term is rounded away
    tree = order_claims.ordered_results(Op.reduce_sum, TREE, (terms,), {"axes": (1,)})[0]
    assert tree[0] == F32(1.0 + 2.0 ** -23)                 # (1 + t) + (t + t) keeps them
    assert list(orders.order_mismatch(np.array([1.0, np.nan], F32),
                                      [np.array([1.0, np.nan], F32)])) == [False, False]
    assert order_claims.ordered_results(Op.matmul, BLAS, (), {}) is None


def test_inputs_read_as_zero_pass_only_under_a_flushing_policy():
    import warnings
    from conformance.campaign import check_case
    from conformance.generators import Case
    from engine.capsule import KernelHandler

    def add_daz(a, b):
        flush = lambda x: np.where(np.abs(x) < F32(2.0 ** -126), F32(0), x).astype(F32)
        return (flush(a) + flush(b)).astype(F32)
    # 2^-125 + 2^-140 is exact; read as 2^-125 + 0 it is 256 ulps off
    case = Case(Op.add, "subnormal", (np.array([2.0 ** -140, 1.0], F32),
                                      np.array([2.0 ** -125, 2.0], F32)), {})
    for pol, ok in ((ROUNDED, False), (FTZ, True)):
        c = cap(Op.add, pol)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = check_case(c, KernelHandler(c.name, c.op, c.provider, c.device, add_daz), case,
                             {}, repeat=False)
        assert (not any(f.output == "value" for f in res.failures)) is ok
        if ok:
            assert res.fwd.observed["inputs_flushed"] == 1


def test_gradients_of_inputs_read_as_zero_pass_only_under_a_flushing_policy():
    """The VJP check accepts a subnormal input or cotangent read as zero under a flushing policy,
    as the forward check does (the compile-flag matrix on the H200 failed relu's VJP built with
    --use_fast_math, under its own flush-to-zero policy, for want of this)."""
    from conformance.campaign import check_case
    from conformance.generators import Case
    from conformance.error_models import daz
    from engine.capsule import KernelHandler

    def relu(a):
        return np.where(a > 0, a, F32(0)).astype(F32)

    def relu_vjp_daz(inputs, out, g):
        (a,) = inputs
        return (np.where(daz(a) > 0, daz(g), F32(0)).astype(F32),)
    # a subnormal input passes g through in the reference, 0 when read as zero; a subnormal
    # cotangent is passed as itself by the reference, as 0 when read as zero
    a = np.array([2.0 ** -140, 1.0, -1.0, 3.0], F32)
    g = np.array([1.0, 2.0, 3.0, 2.0 ** -130], F32)
    for pol, ok in ((ROUNDED, False), (FTZ, True)):
        c = standard_capsule(Op.relu, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                             vjp_mode=VJPMode.backend_vjp, policy=pol, source_file="t.py")
        res = check_case(c, KernelHandler(c.name, c.op, c.provider, c.device, relu,
                                          relu_vjp_daz),
                         Case(Op.relu, "subnormal", (a,), {}, cotangent=g), {}, repeat=False)
        grad = [f for f in res.failures if f.output.startswith("grad")]
        assert (not grad) is ok, [f.reason for f in grad]
        if ok:   # the flushed cotangent's result is a flushed subnormal result: allowed as is
            assert res.vjp.checks[0].verdict.observed["inputs_flushed"] == 1
        else:
            assert {f.reason for f in grad} == {"vjp-not-bitwise", "vjp-flushed-subnormal"}


def test_declared_magnitude_units_add_u_times_the_magnitude():
    declared = DeclaredBound(1.0, "float64 once", magnitude_units=2.0)
    model = error_models.forward_model(cap(Op.layer_norm, declared=declared), "composite")
    assert (model.kind, model.magnitude_units) == ("ulps", 2.0)
    assert "1 ulp + 2 u*sum|terms|" in model.label and model.to_json()["magnitude_units"] == 2.0
    # 1 ulp of 1.0 plus 2 u * 64 = 65 ulps of 1.0, measured from the rounded reference
    ulp = 2.0 ** -23
    got = [1.0 + 60 * ulp, 1.0 + 65 * ulp, 1.0 + 66 * ulp]
    v = check(model, [1.0] * 3, got, op=Op.layer_norm, magnitude=[64.0] * 3, terms=3,
              kind="composite")
    assert reasons(v) == ["ok", "ok", "exceeds-bound"] and v.ratio[1] == pytest.approx(1.0)
    assert v.bound[0] == pytest.approx(65 * ulp)
    # no magnitude: |exact| stands in; no magnitude_units: the plain ulp bound
    v = check(model, [1.0] * 3, got, op=Op.layer_norm, kind="composite")
    assert reasons(v) == ["exceeds-bound"] * 3
    plain = error_models.forward_model(cap(Op.layer_norm, declared=DeclaredBound(1.0, "x")), "composite")
    assert plain.magnitude_units == 0 and "u*sum" not in plain.label
    assert plain.to_json()["magnitude_units"] == 0.0


def test_declared_absolute_term_adds_to_the_ulp_bound_near_zero():
    """fast-math's __logf is documented by an absolute error near x = 1, where log x is near 0
    and a relative bound says nothing: the declared absolute term carries it."""
    absolute = 2.0 ** -21.41
    declared = DeclaredBound(3.0, "__logf", absolute=absolute)
    model = error_models.forward_model(cap(Op.log, declared=declared), "transcendental")
    assert (model.kind, model.absolute) == ("ulps", absolute)
    assert "3 ulp + 3.59e-07 absolute" in model.label and model.to_json()["absolute"] == absolute
    v0 = F32(1e-6)                         # log of an input near 1: 3 ulp of it is ~3e-13
    ulp = float(np.spacing(v0))
    got = [float(v0) + 0.9 * absolute, float(v0) + 3 * ulp + 1.01 * absolute]
    got = [F32(g) for g in got]
    v = check(model, [v0] * 2, got, exact=[float(v0)] * 2, op=Op.log, kind="transcendental")
    assert reasons(v) == ["ok", "exceeds-bound"]
    assert v.bound[0] == pytest.approx(3 * ulp + absolute)
    # without the term the same 0.9 absolute is thousands of ulps: a failure
    plain = error_models.forward_model(cap(Op.log, declared=DeclaredBound(3.0, "x")),
                                       "transcendental")
    assert plain.absolute == 0.0 and "absolute" not in plain.label
    v = check(plain, [v0], got[:1], exact=[float(v0)], op=Op.log, kind="transcendental")
    assert reasons(v) == ["exceeds-bound"]


def test_an_infinite_derived_bound_admits_any_result_where_the_reference_is_finite():
    from conformance import families
    from conformance.error_terms import DerivedRule
    rule = families.FORWARD_RULES[Op.softmax]
    try:
        families.FORWARD_RULES[Op.softmax] = DerivedRule(
            "t", "t", lambda ref, ctx, unit: np.array([np.inf, np.inf, 0.0]))
        model = error_models.forward_model(cap(Op.softmax), "composite")
        v = check(model, [0.5, np.inf, 0.25], [np.nan, 1.0, 0.5], op=Op.softmax,
                  kind="composite")
    finally:
        families.FORWARD_RULES[Op.softmax] = rule
    assert reasons(v) == ["ok", "inf-mismatch", "exceeds-bound"]
    assert v.observed["overflow_admissible"] == 1 and np.isnan(v.ratio[0])
