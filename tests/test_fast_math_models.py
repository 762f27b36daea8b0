"""The error models of a --use_fast_math build (the compile-flag matrix's `fast-math` set), judged
against what CUDA documents for it. The H200 matrix of 2026-12-02 failed two capsules under their
own fast-math policy: log's VJP g / a came back 2 ulp off (approximate division, -prec-div=false:
2 ulp in the CUDA C Programming Guide; the model allowed 1) and softmax 11-12 ulp off (__expf:
2 + floor(1.173 |x|) ulp; the derived rule assumed libdevice's 2). Each test below replays that
error on the CPU: the default build's model must reject it, the fast-math build's must accept it."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from conformance import error_models
from conformance.campaign import check_case
from conformance.generators import Case
from conformance.references import get as get_reference
from engine.capsule import KernelHandler
from engine.providers.native_cuda import capsules
from engine.registry import Registry
from engine.runtime import loader
from engine.types import BackendOp as Op, Device

F32 = np.float32
CUDA_SRC = Path(__file__).resolve().parent.parent / "engine" / "csrc" / "cuda"
FLOAT32_ELEMENTARY = re.compile(
    r"\b(__)?(exp|log|log1p|expm1|exp2|exp10|log2|log10|tanh|sinh|cosh|sin|cos|tan|pow|erf|erfc|"
    r"atan|asin|acos|cbrt)f\s*\(")


def _on_cpu(cap):
    """The capsule as a CPU one: the NumPy stand-ins below are its kernels; its models (policy,
    bounds, elementary_ulps) are the native capsule's."""
    return dataclasses.replace(cap, device=Device.cpu)


def _caps(monkeypatch, fast: bool) -> dict:
    if fast:
        monkeypatch.setattr(loader, "OPTIONS", loader.OPTIONS + ("--use_fast_math",))
    monkeypatch.setattr(loader, "DECLARED_OPTIONS", None)
    reg = Registry()
    capsules.register_all(reg)
    return {c.name: c for c in reg.capsules() if c.name.startswith("native_cuda.")}


def _ulps_up(a, k: int):
    out = np.asarray(a, F32).copy()
    for _ in range(k):
        out = np.nextafter(out, np.float32(np.inf), dtype=F32)
    return out


def test_float32_composite_kernels_call_no_elementary_function_but_expf():
    """elementary_ulps_declared takes __expf's bound for the derived rules under fast math: sound
    only while expf is the one float32 elementary function outside the unary kernels (which
    declare FAST_MATH_BOUNDS of their own)."""
    calls = {}
    for path in sorted(CUDA_SRC.glob("*.cu*")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            for m in FLOAT32_ELEMENTARY.finditer(code):
                calls.setdefault(m.group(2) + "f", []).append(f"{path.name}:{n}")
    unary = {"logf", "sinf", "cosf", "tanhf"}   # elementwise.cu's Log/SafeLog, Sin, Cos, Tanh
    assert set(calls) <= {"expf"} | unary, calls
    for fn in unary & set(calls):
        assert all(at.startswith("elementwise.cu:") for at in calls[fn]), (fn, calls[fn])
    assert calls.get("expf")   # the check above would pass vacuously on a renamed tree


def test_fast_math_models_name_their_sources(monkeypatch):
    default = _caps(monkeypatch, False)
    assert capsules.elementary_ulps_declared() == 2.0
    fast = _caps(monkeypatch, True)
    assert capsules.elementary_ulps_declared() == capsules.FAST_MATH_BOUNDS["expf"].ulps == 106.0
    # the float32 softmax forwards declare bounds derived for libdevice's expf: fast math swaps
    # in the same derivations with __expf's
    for name, plain, fast_ulps in (("native_cuda.softmax", 10.0, 426.0),
                                   ("native_cuda.log_softmax", 6.0, 214.0)):
        assert default[name].value_contract.declared_bound.ulps == plain
        bound = fast[name].value_contract.declared_bound
        assert bound.ulps == fast_ulps and "__expf" in bound.reason
    # the derived rules (here log_softmax's VJP: exp(y) by float32 expf) take __expf's E
    plain = error_models.vjp_model(default["native_cuda.log_softmax"], "composite")
    model = error_models.vjp_model(fast["native_cuda.log_softmax"], "composite")
    assert (model.kind, model.elementary_ulps) == ("derived", 106.0)
    assert "within 106 ulp, as the capsule declares" in model.reason
    assert "__expf" in fast["native_cuda.log_softmax"].notes
    assert plain.elementary_ulps == 2.0 and "__expf" not in plain.reason
    assert plain.unit == 2.0 ** -24 and model.unit == 2.0 ** -22   # 2-ulp division: 4u
    vjp = error_models.vjp_model(fast["native_cuda.log"], "rounded")
    assert (vjp.kind, vjp.ulps) == ("faithful", 2.0) and "-prec-div=false" in vjp.reason


@pytest.mark.parametrize("fast", [False, True])
def test_log_vjp_two_ulps_off_passes_only_the_fast_math_model(monkeypatch, fast):
    cap = _on_cpu(_caps(monkeypatch, fast)["native_cuda.log"])
    ref = get_reference("log")
    r = np.random.default_rng(5)
    a = r.uniform(0.5, 3.0, 64).astype(F32)
    g = r.standard_normal(64).astype(F32)

    def vjp(inputs, out, gg):    # the H200's fast-math result: 2 ulp above the rounded g / a
        return (_ulps_up(ref.vjp(inputs, gg)[0].value, 2),)

    h = KernelHandler(cap.name, cap.op, cap.provider, cap.device,
                      lambda x: ref.forward((x,)).value, vjp)
    res = check_case(cap, h, Case(Op.log, "normal", (a,), {}, cotangent=g), {}, repeat=False)
    assert res.harness_error is None and not res.skipped and res.vjp is not None
    grad = [f.reason for f in res.failures if f.output.startswith("grad")]
    assert not [f for f in res.failures if f.output == "value"]
    assert (not grad) is fast, grad


@pytest.mark.parametrize("fast", [False, True])
def test_softmax_sixty_ulps_off_passes_only_the_fast_math_model(monkeypatch, fast):
    """60 ulp at d = x - max = -13: __expf alone may be 2 + floor(1.173 * 13) = 17 ulp off there,
    and the sum carries every term's error; libdevice's 2-ulp rule allows about 20."""
    cap = _on_cpu(_caps(monkeypatch, fast)["native_cuda.softmax"])
    ref = get_reference("softmax")
    x = np.linspace(-13.0, 0.0, 16).astype(F32)[None, :]

    def forward(a, axis=-1):
        out = np.array(ref.forward((a,), axis=axis).value, F32)
        out[0, 0] = _ulps_up(out[0, 0], 60)
        return out

    h = KernelHandler(cap.name, cap.op, cap.provider, cap.device, forward, None)
    res = check_case(cap, h, Case(Op.softmax, "normal", (x,), {"axis": -1}), {}, repeat=False)
    assert res.harness_error is None and not res.skipped and res.fwd is not None
    value = [f for f in res.failures if f.output == "value"]
    assert (not value) is fast, [(f.reason, f.element) for f in value]


def test_a_derived_bound_grows_by_exactly_the_declared_elementary_error():
    """bound_array hands the model's elementary_ulps to the rule: log_softmax's VJP bound has
    one exp term, E_REL s_i |sum g|, so 106 ulp instead of 2 adds 104 * 2^-23 s_i |sum g|."""
    from engine.registry import registry
    cap = next(c for c in registry().capsules() if c.name == "native_cuda.log_softmax")
    ref = get_reference("log_softmax")
    r = np.random.default_rng(11)
    x = (r.standard_normal((3, 40)) * 4).astype(F32)
    g = r.standard_normal(x.shape).astype(F32)
    fwd = ref.forward((x,), axis=-1)
    gref = ref.vjp((x,), g, axis=-1)[0]
    model = error_models.vjp_model(cap, gref.kind)
    assert model.kind == "derived" and model.elementary_ulps == 2.0
    ctx = error_models.BoundContext(cap.op, (x,), {"axis": -1}, cap.numerical_policy,
                                    out=np.asarray(fwd.value, F32), fwd_ref=fwd, g=g)
    libdevice = error_models.bound_array(model, gref, ctx)
    fast = error_models.bound_array(dataclasses.replace(model, elementary_ulps=106.0), gref, ctx)
    s = np.exp(np.asarray(fwd.exact, np.float64))
    want = 104 * 2.0 ** -23 * s * np.abs(g.astype(np.float64).sum(-1, keepdims=True))
    np.testing.assert_allclose(fast - libdevice, want, rtol=1e-9, atol=0)
