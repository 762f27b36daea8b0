"""bias_gelu's two native capsules, declared on the CPU: the plain native_cuda.bias_gelu runs the
float32 kernels (tl_act_f32.cuh's functors, native_cuda.gelu's declared bound, its own derived VJP
rule) and is what the cuda profiles plan; native_cuda.bias_gelu.accurate keeps the float64 kernels
and the op's derived rules, and accurate_cuda plans it; the tape runs the VJP of the capsule that
ran the forward."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conformance import families
from conformance.families import elementwise as elementwise_records, fused as fused_records
from conformance.error_models import forward_model, vjp_model
from conformance.references import get as reference
from engine.capsule import ACCURATE, ExecutableKernel
from engine.ops import vjp_function
from engine.ops._dispatch import TAPE_KERNELS
from engine.profile import PROFILES
from engine.providers.native_cuda import fused
from engine.registry import registry
from engine.types import RuntimeEntry as Entry

FAST, ACC = "native_cuda.bias_gelu", "native_cuda.bias_gelu.accurate"
pytestmark = pytest.mark.capsules(FAST, ACC)
f32 = np.float32
U = 2.0 ** -24


def test_the_plain_capsule_is_the_float32_one_and_the_variant_the_float64_one():
    fast, acc = registry().get(FAST)[0], registry().get(ACC)[0]
    assert fast.variant is None and acc.variant == ACCURATE
    decl = {d.capsule_name: d for d in fused.DECLS}
    assert decl[FAST].file == decl[ACC].file == "bias_gelu.cu"
    assert decl[FAST].forward_symbols == ("tl_bias_gelu_f32",)
    assert decl[FAST].vjp_symbols == ("tl_bias_gelu_bwd_f32", "tl_bias_gelu_db")
    assert decl[ACC].forward_symbols == ("tl_bias_gelu_fwd",)
    assert decl[ACC].vjp_symbols == ("tl_bias_gelu_bwd", "tl_bias_gelu_db")
    # each says which it is
    assert fast.value_contract.summary.startswith("fast float32")
    assert ACC in fast.value_contract.summary
    assert acc.value_contract.summary.startswith("accurate variant")


def test_the_fast_forward_declares_native_cuda_gelus_bound():
    """Read from native_cuda.gelu's declaration, not copied (its float32 forward's bound may
    change: this one follows)."""
    gelu = registry().get("native_cuda.gelu")[0].value_contract.declared_bound
    fast = registry().get(FAST)[0].value_contract.declared_bound
    assert fast is not None and fast == gelu
    assert registry().get(ACC)[0].value_contract.declared_bound is None   # derived
    model = forward_model(registry().get(FAST)[0], "composite")
    assert model.kind == "ulps" and model.ulps == gelu.ulps and model.source == "declared"
    assert forward_model(registry().get(ACC)[0], "composite").kind == "derived"


def test_each_capsule_is_judged_by_its_own_vjp_rule():
    assert families.rule_for(Entry.bias_gelu, FAST, vjp=True) is fused_records.BIAS_GELU_F32.vjp
    assert families.rule_for(Entry.bias_gelu, ACC, vjp=True) is fused_records.BIAS_GELU_VJP
    assert vjp_model(registry().get(FAST)[0], "composite").capsule == FAST


@pytest.mark.parametrize("profile, name", [("checked_cuda", FAST), ("graph_cuda", FAST),
                                           ("flash_cuda", FAST), ("accurate_cuda", ACC)])
def test_profiles_plan_the_fast_capsule_and_accurate_cuda_the_variant(profile, name):
    assert PROFILES[profile].plan([Entry.bias_gelu]).selected[Entry.bias_gelu].name == name


@pytest.mark.parametrize("name, vjp", [(FAST, "bias_gelu_f32_vjp"), (ACC, "bias_gelu_vjp")])
def test_the_tape_runs_the_vjp_of_the_capsule_that_ran_the_forward(name, vjp):
    cap, handler = registry().get(name)
    fn = vjp_function(ExecutableKernel(cap, handler))
    assert fn is handler.vjp and fn.__name__ == vjp and fn is getattr(fused, vjp)


def test_the_tape_rule_on_cuda_names_the_accurate_kernels():
    """The local rule (the tape capsules' VJP: float64, rounded once) is the accurate formula."""
    assert TAPE_KERNELS[Entry.bias_gelu] == ("bias_gelu.cu:tl_bias_gelu_bwd",
                                             "bias_gelu.cu:tl_bias_gelu_db")


def _ctx(x, b, g, index):
    return SimpleNamespace(inputs=(x, b), g=g, input_index=index, params={})


def test_the_dx_rule_is_native_cuda_gelus_at_s():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((20, 6)) * 3).astype(f32)
    b, g = rng.standard_normal(6).astype(f32), rng.standard_normal((20, 6)).astype(f32)
    rdx, _ = reference("bias_gelu").vjp((x, b), g)
    s = (x + b).astype(np.float64)
    want = elementwise_records.gelu_f32_vjp_bound(rdx, SimpleNamespace(inputs=(s,), g=g), U)
    got = fused_records.f32_vjp_bound(rdx, _ctx(x, b, g, 0), U)
    assert np.array_equal(got, want)


def test_the_db_rule_sums_the_term_bounds_and_stays_within_a_few_u_of_the_magnitude():
    """db's bound is at least the sum of its terms' bounds (each term may be off by its own) and,
    away from cancellation, a few u of the magnitude (a rule that admitted anything would pass
    any kernel)."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((300, 5)) * 2).astype(f32)
    b, g = rng.standard_normal(5).astype(f32), rng.standard_normal((300, 5)).astype(f32)
    rdx, rdb = reference("bias_gelu").vjp((x, b), g)
    terms = fused_records.f32_vjp_bound(rdx, _ctx(x, b, g, 0), U).sum(axis=0)
    bound = fused_records.f32_vjp_bound(rdb, _ctx(x, b, g, 1), U)
    assert np.all(bound >= terms * (1 - 1e-6))
    assert np.all(bound <= 40 * U * rdb.magnitude)
