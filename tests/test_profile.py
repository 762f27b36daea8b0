"""Binding, planning, the assurance gate and the accepted plan (section 5.3.4)."""
import dataclasses

import numpy as np
import pytest

import engine
from engine import ops
from engine.capsule import ExecutableKernel, KernelHandler, standard_capsule
from engine.errors import (BindingMismatchError, GateRejectedError, NoMaintainedProfileError,
                           PlanningError, ProviderMismatchError)
from engine.profile import (CHECKED, CHECKED_CPU, CHECKED_CUDA, EXTERNAL, LIBTORCH_FORWARD_CUDA,
                            VERIFIED, AssurancePolicy, BackendProfile, maintained_for_device)
from engine.registry import Registry, registry
from engine.session import Session, use_session
from engine.types import (BackendOp as Op, Claim, ClaimKind, Device, Evidence, Provider,
                          TrustLevel, VJPMode)
from engine.providers.reference import EXACT


def _cap(op=Op.add, provider=Provider.reference, device=Device.cpu, trust=TrustLevel.checked,
         vjp=VJPMode.torchlean_tape, **kw):
    return standard_capsule(op, provider, device, trust=trust, vjp_mode=vjp, policy=EXACT,
                            source_file="tests/test_profile.py", **kw)


def _handler(cap, **overrides):
    fields = dict(name=cap.name, op=cap.op, provider=cap.provider, device=cap.device,
                  forward=lambda a, b: a + b, vjp=None)
    fields.update(overrides)
    return KernelHandler(**fields)


@pytest.mark.parametrize("field, value", [("op", Op.sub), ("provider", Provider.native_cuda),
                                          ("device", Device.cuda)])
def test_bind_rejects_each_identity_mismatch(field, value):
    cap = _cap()
    with pytest.raises(BindingMismatchError, match=f"{field} is `{value.label}` on the handler "
                                                   f"but `{getattr(cap, field).label}`"):
        ExecutableKernel.bind(cap, _handler(cap, **{field: value}))


def test_bind_requires_a_vjp_function_for_backend_vjp():
    cap = _cap(vjp=VJPMode.backend_vjp)
    with pytest.raises(BindingMismatchError, match="declares vjp=backend-vjp but the handler"):
        ExecutableKernel.bind(cap, _handler(cap))
    assert ExecutableKernel.bind(cap, _handler(cap, vjp=lambda *a: a)).capsule is cap


def test_maintained_profiles():
    assert maintained_for_device("cpu") is CHECKED_CPU
    assert maintained_for_device(Device.cuda) is CHECKED_CUDA
    for name in ("metal", "rocm", "tpu", "trainium", "wasm", "custom", "external"):
        with pytest.raises(NoMaintainedProfileError,
                           match=f"device `{name}` has no maintained runtime profile"):
            maintained_for_device(name)
    assert LIBTORCH_FORWARD_CUDA not in (maintained_for_device("cuda"),)


def _registry(*caps_and_handlers):
    reg = Registry()
    for cap, handler in caps_and_handlers:
        reg.register(cap, handler)
    return reg


def test_capsule_of_a_provider_the_target_lacks_is_never_selected_and_the_plan_says_why():
    foreign = _cap(provider=Provider.cublas, name="cublas.add_on_cpu")
    local = _cap()
    reg = _registry((foreign, _handler(foreign)), (local, _handler(local)))
    profile = dataclasses.replace(CHECKED_CPU, preferences=(Provider.cublas, Provider.reference))
    plan = profile.accept_graph([Op.add], reg)
    assert plan.kernel(Op.add).capsule.name == "reference.add"
    assert plan.rejections[Op.add] == [
        ("cublas.add_on_cpu", "provider `cublas` is not a feature of target `checked_cpu` "
                              "(features: reference)")]
    reg2 = _registry((foreign, _handler(foreign)))
    with pytest.raises(PlanningError, match="no admissible capsule for add:\n  add: "
                                            "cublas.add_on_cpu: provider `cublas` is not a feature"):
        profile.accept_graph([Op.add], reg2)


def test_prefer_tries_the_preferred_provider_first_then_catalogue_order():
    a = _cap(provider=Provider.native_cuda, name="native_cuda.add_cpu")
    b = _cap(provider=Provider.custom_chip, name="custom_chip.add_cpu")
    reg = _registry((a, _handler(a)), (b, _handler(b)))
    base = BackendProfile("t", Device.cpu, frozenset({Provider.native_cuda, Provider.custom_chip}),
                          (), CHECKED)
    assert base.accept_graph([Op.add], reg).kernel(Op.add).capsule is a   # catalogue order
    pref = dataclasses.replace(base, preferences=(Provider.custom_chip,))
    assert pref.accept_graph([Op.add], reg).kernel(Op.add).capsule is b


def test_planning_rejects_trust_vjp_mode_and_misaligned_contracts():
    fuzzed = _cap(trust=TrustLevel.fuzzed, name="fz.add")
    tape = _cap(name="tape.add")
    bad = dataclasses.replace(_cap(name="bad.add"),
                              value_contract=_cap().shape_contract)   # claims shape-safety
    reg = _registry(*((c, _handler(c)) for c in (fuzzed, tape, bad)))
    prof = dataclasses.replace(CHECKED_CPU, vjp_request=VJPMode.backend_vjp)
    with pytest.raises(PlanningError) as err:
        prof.accept_graph([Op.add], reg)
    msg = str(err.value)
    assert "fz.add: trust `fuzzed` is not allowed by assurance policy `checked`" in msg
    assert ("tape.add: vjp mode `torchlean-tape` does not satisfy the requested `backend-vjp`"
            in msg)
    assert "bad.add: value contract claims `shape-safety`, expected `value-refinement`" in msg


def test_gate_reports_four_obligations_and_names_each_failure():
    cap = _cap(value_evidence=Evidence.trusted_boundary, vjp_evidence=Evidence.not_provided)
    reg = _registry((cap, _handler(cap)))
    with pytest.raises(GateRejectedError) as err:
        CHECKED_CPU.accept_graph([Op.add], reg)
    msg = str(err.value)
    assert "rejected 2 obligation(s)" in msg
    assert ("reference.add [value]: claim value-refinement rests on trusted-boundary evidence, "
            "which assurance policy `checked` does not accept") in msg
    assert "reference.add [vjp]: claim vjp-refinement(torchlean-tape) rests on not-provided" in msg
    ext = dataclasses.replace(CHECKED_CPU, assurance=EXTERNAL)
    with pytest.raises(GateRejectedError, match=r"rejected 1 obligation\(s\)"):
        ext.accept_graph([Op.add], reg)
    ok = _cap()
    plan = CHECKED_CPU.accept_graph([Op.add], _registry((ok, _handler(ok))))
    assert [(r.obligation, r.passed) for r in plan.obligations] == [
        ("shape", True), ("layout", True), ("value", True), ("vjp", True)]


def test_verified_policy_rejects_checked_capsules():
    prof = dataclasses.replace(CHECKED_CPU, assurance=VERIFIED)
    with pytest.raises(PlanningError, match="trust `checked` is not allowed by assurance policy "
                                            "`verified`"):
        prof.accept_graph([Op.add])


def test_require_evidence_rejects_capsules_claiming_more_than_earned():
    prof = dataclasses.replace(CHECKED_CPU, assurance=CHECKED.with_evidence_required())
    with pytest.raises(GateRejectedError, match=r"reference.add \[evidence\]: claims `checked` "
                                                "but has earned nothing"):
        prof.accept_graph([Op.add])
    with pytest.raises(GateRejectedError, match=r"claims `checked`, earned `fuzzed`: it claims "
                                                "more than it earned"):
        prof.accept_graph([Op.add], earned_trust={"reference.add": TrustLevel.fuzzed})
    plan = prof.accept_graph([Op.add], earned_trust={"reference.add": TrustLevel.checked})
    assert plan.obligations[-1].obligation == "evidence" and plan.obligations[-1].passed


def test_wrapper_never_substitutes_a_provider(cpu_session):
    a = engine.tensor([1.0, 2.0])
    other_cap = _cap(provider=Provider.custom_chip, name="custom_chip.add")
    other = ExecutableKernel.bind(other_cap, _handler(other_cap))
    with pytest.raises(ProviderMismatchError,
                       match="asked to run `custom_chip.add` .* selected `reference.add`"):
        ops.apply(Op.add, (a, a), a.shape, kernel=other)
    planned = cpu_session.kernel_for(Op.add)
    out = ops.apply(Op.add, (a, a), a.shape, kernel=planned)
    np.testing.assert_array_equal(out.numpy(), [2.0, 4.0])


def test_every_reference_capsule_is_accepted_by_checked_cpu():
    ops_with_reference = [c.op for c in registry().capsules() if c.provider is Provider.reference]
    from engine.providers.reference import OPS
    assert sorted(o.label for o in ops_with_reference) == sorted(o.label for o in OPS)
    plan = CHECKED_CPU.accept_graph(ops_with_reference)
    assert all(k.capsule.provider is Provider.reference for k in plan.kernels.values())


def test_session_rejects_a_profile_for_another_device():
    with pytest.raises(ProviderMismatchError, match="profile `checked_cuda` targets `cuda`"):
        Session("cpu", CHECKED_CUDA)


def test_device_mismatch_is_named(cpu_session):
    from engine.errors import DeviceMismatchError
    from engine.runtime.buffer import AnyBuffer
    from engine.tensor import Tensor
    fake = Tensor(AnyBuffer(np.zeros(2, np.float32), Device.cuda), (2,))
    with pytest.raises(DeviceMismatchError, match="input 0 lives on `cuda` but the session runs "
                                                  "on `cpu`"):
        ops.relu(fake)


def test_registering_a_capsule_name_twice_is_named():
    from engine.registry import DuplicateCapsuleError
    cap = _cap()
    reg = _registry((cap, _handler(cap)))
    with pytest.raises(DuplicateCapsuleError, match="capsule `reference.add` is already "
                                                    "registered; give the new one another name"):
        reg.register(cap, _handler(cap))
