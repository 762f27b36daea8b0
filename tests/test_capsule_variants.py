"""Variants: a second native kernel of one op registers as `native_cuda.<op>.<variant>`;
checked_cuda plans the plain capsule, accurate_cuda the accurate variant where one exists; the two
never share a build fingerprint; a variant without its plain declaration, or declared twice, is
refused."""
import dataclasses

import pytest

from conformance.fingerprint import capsule_fingerprint
from engine.capsule import ACCURATE, capsule_variant
from engine.profile import ACCURATE_CUDA, CHECKED_CUDA, profile_named
from engine.providers.native_cuda import capsules, softmax
from engine.registry import Registry, registry
from engine.types import BackendOp as Op, Provider


def _with_variant(monkeypatch, op: Op) -> Registry:
    """A registry whose native-cuda declarations gain an accurate variant of `op` (a copy of the
    plain declaration under the variant's name), unless the build already has one."""
    if not any(d.op is op and d.variant == ACCURATE for d in capsules.VARIANTS):
        variant = dataclasses.replace(capsules.DECLARATIONS[op], variant=ACCURATE)
        monkeypatch.setattr(capsules, "ALL_DECLARATIONS", capsules.ALL_DECLARATIONS + (variant,))
    reg = Registry()
    capsules.register_all(reg)
    return reg


def test_a_variant_is_named_after_its_op_and_provider():
    plain = registry().get("native_cuda.softmax")[0]
    assert plain.variant is None
    assert capsule_variant("native_cuda.softmax.accurate", Provider.native_cuda,
                           Op.softmax) == ACCURATE
    assert capsule_variant("native_cuda.direct_attention", Provider.native_cuda,
                           Op.scaled_dot_product_attention) is None
    decl = dataclasses.replace(capsules.DECLARATIONS[Op.softmax], variant=ACCURATE)
    assert decl.capsule_name == "native_cuda.softmax.accurate"


def test_checked_cuda_plans_the_plain_capsule_and_accurate_cuda_the_variant(monkeypatch):
    reg = _with_variant(monkeypatch, Op.softmax)
    assert {c.name for c in reg.capsules(Op.softmax) if c.provider is Provider.native_cuda} == \
        {"native_cuda.softmax", "native_cuda.softmax.accurate"}
    ops = [Op.softmax, Op.add]
    fast = CHECKED_CUDA.plan(ops, reg).selected
    accurate = ACCURATE_CUDA.plan(ops, reg).selected
    assert fast[Op.softmax].name == "native_cuda.softmax"
    assert accurate[Op.softmax].name == "native_cuda.softmax.accurate"
    # An op without a variant plans its plain capsule under both.
    assert fast[Op.add].name == accurate[Op.add].name == "native_cuda.add"
    assert profile_named("accurate_cuda") is ACCURATE_CUDA
    plan = ACCURATE_CUDA.accept_graph(ops, reg)
    assert plan.kernel(Op.softmax).capsule.variant == ACCURATE


def test_variants_have_their_own_capsule_fingerprints(monkeypatch):
    reg = _with_variant(monkeypatch, Op.softmax)
    prints = {name: capsule_fingerprint(*reg.get(name))["value"]
              for name in ("native_cuda.softmax", "native_cuda.softmax.accurate")}
    assert len(set(prints.values())) == 2, prints


def test_a_variant_without_its_plain_declaration_or_declared_twice_is_refused(monkeypatch):
    plain = capsules.DECLARATIONS[Op.softmax]
    variant = dataclasses.replace(plain, variant=ACCURATE)
    monkeypatch.setattr(softmax, "DECLS", tuple(softmax.DECLS) + (variant, variant))
    with pytest.raises(ValueError, match="declared twice"):
        capsules._collect()
    monkeypatch.setattr(softmax, "DECLS", tuple(d for d in softmax.DECLS
                                               if d.op is not Op.softmax) + (variant,))
    with pytest.raises(ValueError, match="no plain declaration"):
        capsules._collect()


@pytest.mark.parametrize("op", [Op.sigmoid, Op.softplus, Op.gelu])
def test_the_activations_plan_float32_plainly_and_float64_accurately(op):
    """The float32 activations are the plain capsules; accurate_cuda plans today's float64
    kernels; the campaign judges each under its own declared bound (2 and 1 ulp)."""
    from conformance.error_models import forward_model, vjp_model
    reg = registry()
    fast = CHECKED_CUDA.plan([op], reg).selected[op]
    accurate = ACCURATE_CUDA.plan([op], reg).selected[op]
    assert (fast.name, accurate.name) == (f"native_cuda.{op.label}",
                                          f"native_cuda.{op.label}.accurate")
    fm, am = forward_model(fast, "transcendental"), forward_model(accurate, "transcendental")
    assert (fm.kind, fm.source, fm.ulps) == ("ulps", "declared", 2.0)
    assert (am.kind, am.source, am.ulps) == ("ulps", "declared", 1.0)
    assert fm.reason == fast.value_contract.declared_bound.reason
    # the VJPs declare nothing: both are judged by the op's derived rule
    assert vjp_model(fast, "composite").kind == vjp_model(accurate, "composite").kind \
        == "derived"
    prints = {capsule_fingerprint(*reg.get(c.name))["value"] for c in (fast, accurate)}
    assert len(prints) == 2
