"""Order and contraction claims (issue 35, class 5): every declared fixed order is replayed by a
program of conformance/orders.py, held to repeatability where the op's record says no program can
exist, or refused as `unchecked-order-claim`; selective_scan's recurrence program, separate and
fused, and the exact FMA it stands on."""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance import order_claims, orders
from conformance.campaign import UNCHECKED_ORDER_CLAIM, Settings, run_campaign
from engine.capsule import KernelHandler, standard_capsule
from engine.providers.reference import OPS as REF_OPS
from engine.registry import registry
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, RuntimeEntry as Entry, Subnormals, TrustLevel,
                          VJPMode)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import _fma_exact  # noqa: E402  (the exact rational FMA of the mutation suite)

F32 = np.float32


def policy(reduction, contraction=Contraction.separate):
    return NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow, contraction,
                           reduction)


LEFT, TREE = Reduction.fixed_left, Reduction.fixed_tree


@pytest.mark.parametrize("op, pol, checked", [
    (Op.reduce_sum, policy(TREE), "program"),
    (Op.reduce_mean, policy(LEFT, Contraction.fused), "program"),
    (Op.selective_scan, policy(LEFT, Contraction.implementation_defined), "program"),
    (Op.matmul, policy(TREE), "program"),
    (Op.matmul, policy(TREE, Contraction.fused), "unchecked"),
    (Op.linear, policy(TREE, Contraction.implementation_defined), "unchecked"),
    (Op.scatter_add, policy(TREE), "unchecked"),
    (Op.selective_scan, policy(TREE), "unchecked"),
    (Op.mse_loss, policy(LEFT), "unchecked"),
    (Op.layer_norm, policy(LEFT), "unchecked"),
    (Op.softmax, policy(LEFT), "repeatability only"),
    (Entry.attention_heads, policy(LEFT, Contraction.fused), "repeatability only"),
    (Op.mse_loss, policy(Reduction.implementation_defined, Contraction.fused), "no fixed order"),
])
def test_every_fixed_order_is_replayed_held_to_repeatability_or_refused(op, pol, checked):
    assert order_claims.claim_check(op, pol).startswith(checked)
    why = order_claims.unchecked_claim(op, pol)
    assert (why is not None) == (checked == "unchecked")
    if why:   # says what was declared, why it cannot be checked and what to do
        assert f"reduce={pol.reduction.label}" in why and op.label in why
        assert "Declare reduce=implementation-defined" in why


def test_no_registered_capsule_declares_an_unchecked_order():
    for cap in registry().capsules():
        assert order_claims.unchecked_claim(cap.op, cap.numerical_policy) is None, cap.name


def test_the_exact_fma_is_one_rounding_on_ties_subnormals_and_overflow():
    rng = np.random.default_rng(5)
    n = 1500
    a = rng.integers(-2 ** 13, 2 ** 13, n) * 2.0 ** -12        # products land on midpoints
    b = rng.integers(1, 5, n) * 1.0
    c = rng.integers(-2 ** 24, 2 ** 24, n) * 1.0
    sub = rng.standard_normal((3, n)) * 2.0 ** rng.integers(-149, -110, (3, n))
    big = rng.standard_normal((3, n)) * np.array([[1.5e19], [2.2e19], [3.0e38]])
    for x, y, acc in ((a, b, c), tuple(sub), tuple(big)):
        with np.errstate(all="ignore"):        # 3e38 * normal overflows to inf: part of it
            x, y, acc = (np.asarray(v, F32) for v in (x, y, acc))
            got = orders._fma(acc, x, y)
        want = np.array([_fma_exact(acc[i], x[i], y[i]) for i in range(n)], F32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _scan_inputs(rng, seq, state, token):
    coef = (seq, state) if token else (state,)
    return tuple(rng.standard_normal(s).astype(F32) for s in (coef, coef, (seq, state), (state,)))


def test_the_scan_program_is_the_reference_recurrence_and_fma_differs():
    rng = np.random.default_rng(3)
    for seq, state, token in ((40, 3, True), (1, 1, False), (0, 2, True), (7, 0, False)):
        inputs = _scan_inputs(rng, seq, state, token)
        (sep,) = order_claims.ordered_results(Op.selective_scan, policy(LEFT), inputs, {})
        want = REF_OPS[Op.selective_scan].forward(*inputs)
        assert np.array_equal(sep.view(np.uint32), want.view(np.uint32))
    inputs = _scan_inputs(rng, 64, 4, False)
    fused = order_claims.ordered_results(Op.selective_scan, policy(LEFT, Contraction.fused), inputs, {})
    both = order_claims.ordered_results(Op.selective_scan,
                                  policy(LEFT, Contraction.implementation_defined), inputs, {})
    assert len(fused) == 2 and len(both) == 3
    assert np.any(orders.order_mismatch(fused[0], [sep_of(inputs)]))
    assert not np.any(orders.order_mismatch(fused[1], both))


def sep_of(inputs):
    return order_claims.ordered_results(Op.selective_scan, policy(LEFT), inputs, {})[0]


def test_a_capsule_with_an_unchecked_order_fails_every_case_and_says_why():
    def mse(pred, target):
        with np.errstate(all="ignore"):
            d = (pred - target).astype(F32)
            return (np.sum((d * d).astype(F32), dtype=F32) / F32(max(d.size, 1))).astype(F32)
    cap = standard_capsule(Op.mse_loss, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.torchlean_tape, policy=policy(LEFT),
                           source_file="t.py", name="user.mse_left")
    handler = KernelHandler(cap.name, Op.mse_loss, Provider.custom_chip, Device.cpu, mse, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = run_campaign(cap, handler, Settings(cases=1, seed=0), only=("normal", "shapes"))
    assert result["status"] == "failed"
    assert result["failure_reasons"] == {UNCHECKED_ORDER_CLAIM: result["cases"]["total"]}
    assert result["observed"]["order_claim"] == "unchecked"
    ce = result["counterexamples"][0]
    assert ce["reasons"] == [UNCHECKED_ORDER_CLAIM] and "mse_loss" in ce["failures"][0]["got"]
