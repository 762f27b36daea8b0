"""A CUDA capsule whose gradients come from the engine's tape rule, which flushes subnormals there
(engine.ops.TAPE_FLUSHES_ON_CUDA: CuPy's kernels are built with -ftz=true), is judged by a
derived bound that counts those flushes (error_models.vjp_bound_policy): 2^-126 a rounding, not
the 2^-150 of gradual underflow. The H100 mutation table of 2026-12-06 flagged an honest
float32 attention_heads on 3 seeds of 10 with dq = 0 where the exact value was ~5e-12: a
subnormal probability, flushed, that a large key would have multiplied. This is that situation in
a 2-token case small enough to work out by hand, run on the CPU."""
from types import SimpleNamespace

import numpy as np

from conformance import error_models
from conformance.references import get as get_reference
from conformance.vjp import check_gradients
from engine.capsule import standard_capsule
from engine.types import (Contraction, Device, NumericalPolicy, Provider, Reduction, Rounding,
                          RuntimeEntry as Entry, Subnormals, TrustLevel, VJPMode)

ANY_ORDER = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                            Contraction.implementation_defined, Reduction.implementation_defined)
F32 = np.float32

# Causal, one head, scale 1. Token 1 attends to key 0 with score 0 and to key 1 with score 95:
# p_10 = e^-95 ~ 5.5e-42 (subnormal), p_11 = 1 in float32. With g_1 = (1, 0), v_0 = (1, 0) and
# v_1 = 0: dp_10 = 1, dp_11 = 0, ds_10 = p_10 (1 - p_10) ~ 5.5e-42, ds_11 ~ -5.5e-42, and
# dq_1 = ds_10 k_0 + ds_11 k_1 ~ (5.5e-22, -5.2e-40), because k_0 = (1e20, 0).
Q = np.array([[[0, 0], [0, 1]]], F32)
K = np.array([[[1e20, 0], [0, 95]]], F32)
V = np.array([[[1, 0], [0, 0]]], F32)
G = np.array([[[0, 1], [1, 0]]], F32)
PARAMS = {"heads": 1, "causal": True, "scale": 1.0}
# What the rule gives with every subnormal flushed (CuPy's exp, product and difference): ds = 0,
# so dq = dk = 0, and dv_0 = p_00 g_0 + flushed p_10 g_1 = (0, 1), dv_1 = p_11 g_1 = (1, 0).
FLUSHED_GRADS = (np.zeros((1, 2, 2), F32), np.zeros((1, 2, 2), F32),
                 np.array([[[0, 1], [1, 0]]], F32))


def _capsule(device, vjp_mode):
    return standard_capsule(Entry.attention_heads, Provider.custom_chip, device,
                            trust=TrustLevel.fuzzed, vjp_mode=vjp_mode, policy=ANY_ORDER,
                            source_file="tests/test_tape_flush_bounds.py",
                            name=f"flush_probe.{device.name}.{vjp_mode.name}")


def _judge(capsule):
    reference = get_reference(Entry.attention_heads.label)
    case = SimpleNamespace(inputs=(Q, K, V), params=dict(PARAMS))
    fwd_ref = reference.forward(case.inputs, **case.params)
    out = np.asarray(fwd_ref.value, F32)
    return check_gradients(capsule, FLUSHED_GRADS, reference, case, out, fwd_ref, G, {})


def test_the_case_is_what_the_comment_works_out():
    reference = get_reference(Entry.attention_heads.label)
    dq = reference.vjp((Q, K, V), G, **PARAMS)[0]
    assert 5e-22 < float(dq.exact[0, 1, 0]) < 6e-22
    assert 0 < -float(dq.exact[0, 1, 1]) < 2.0 ** -126          # subnormal: flushing it is allowed


def test_a_cuda_tape_rule_that_flushes_passes_under_the_bound_that_counts_flushes():
    capsule = _capsule(Device.cuda, VJPMode.torchlean_tape)
    assert error_models.tape_flush_reason(capsule) is not None
    assert error_models.vjp_bound_policy(capsule).subnormals is Subnormals.flush_to_zero
    assert capsule.numerical_policy.subnormals is Subnormals.gradual_underflow   # untouched
    outcome = _judge(capsule)
    assert outcome.failures == [], [(f.output, f.element, f.reason) for f in outcome.failures]


def test_the_same_gradients_fail_where_nothing_declares_a_flush():
    # the capsule's own VJP (backend_vjp) on CUDA, or any capsule on the CPU: its author's
    # policy says gradual underflow, so losing 5.5e-22 to a flushed probability is a finding
    for device, mode in ((Device.cuda, VJPMode.backend_vjp), (Device.cpu, VJPMode.torchlean_tape)):
        capsule = _capsule(device, mode)
        assert error_models.vjp_bound_policy(capsule) is capsule.numerical_policy
        failures = _judge(capsule).failures
        assert {(f.output, tuple(f.element), f.reason) for f in failures} >= \
            {("grad[0]", (0, 1, 0), "vjp-exceeds-bound")}, (device, mode)
