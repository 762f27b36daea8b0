"""The native-cuda and cublas capsules are data: they register, plan and report without CuPy;
the CPU parity stub's allocator telemetry; the provider launches only kernels the map names."""
import numpy as np
import pytest

from engine.native_sources import (ADAM_STEP, CAPSULE_SOURCES, COMPOSED_ATTENTION, POISON_FILL,
                                   SOURCES, TAPE_SOURCES, files_for)
from engine.profile import (ACCURATE_CUDA, CHECKED_CUDA, LIBTORCH_FORWARD_CUDA,
                            maintained_for_device)
from engine.registry import registry
from engine.runtime import loader
from engine.runtime.native import native_available
from engine.types import (BackendOp as Op, Contraction, Provider, Reduction, RuntimeEntry,
                          Subnormals, VJPMode)

NATIVE_OPS = set(SOURCES)


def test_every_listed_op_has_a_native_capsule_with_the_right_vjp_mode():
    caps = {c.op: c for c in registry().capsules()
            if c.provider is Provider.native_cuda and c.variant is None}
    assert set(caps) == NATIVE_OPS
    for op, cap in caps.items():
        want = "native_cuda.direct_attention" if op is Op.scaled_dot_product_attention else \
            f"native_cuda.{op.label}"
        assert cap.name == want and cap.device.label == "cuda"
        assert cap.vjp_mode is (VJPMode.backend_vjp if op.needs_vjp else VJPMode.none)
        assert cap.value_contract.provenance.source_file == SOURCES[op].path


ATOMIC_OPS = {Op.reduce_sum, Op.reduce_mean, Op.mse_loss, Op.scatter_add, Op.gather, Op.broadcast}
ATOMIC_OPS |= {Op.max_pool, Op.avg_pool, Op.smooth_max_pool}   # pooling backward scatters
ATOMIC_OPS |= {Op.conv, Op.conv_transpose}   # dKernel / dBias chunk partials (conv.cu)
ROW_OPS = {Op.softmax, Op.log_softmax, Op.hard_masked_softmax, Op.layer_norm, Op.batch_norm,
           Op.scaled_dot_product_attention}


def test_policies_match_the_compile_flags_and_reduction_order():
    caps = {c.op: c for c in registry().capsules()
            if c.provider is Provider.native_cuda and c.variant is None}
    for op, cap in caps.items():
        # --ftz=false keeps subnormals, except where default mode adds with float atomicAdd:
        # PTX atom.add.f32 flushes subnormal inputs and results (the H200 campaign saw it).
        want = Subnormals.implementation_defined if op in ATOMIC_OPS else \
            Subnormals.gradual_underflow
        assert cap.numerical_policy.subnormals is want, op
        # --fmad=false; attention_heads runs the flash kernels, whose fmaf are explicit (fused)
        allowed = (Contraction.fused,) if op is RuntimeEntry.attention_heads else \
            (Contraction.separate, Contraction.not_applicable)
        assert cap.numerical_policy.contraction in allowed, op
    for op in ATOMIC_OPS:
        assert caps[op].numerical_policy.reduction is Reduction.implementation_defined, op
    from conformance.determinism import audited
    for op in ROW_OPS:   # float64 inside, rounded once: no float32 reduction (as reference.py)
        assert caps[op].numerical_policy.reduction is Reduction.not_applicable, op
        assert not audited(caps[op]), f"{op.label}: the determinism suite has no case for it"
    assert all(audited(caps[op]) for op in ATOMIC_OPS)
    for op, ulps in ((Op.exp, 2), (Op.log, 1), (Op.sin, 2), (Op.cos, 2), (Op.tanh, 2)):
        bound = caps[op].value_contract.declared_bound
        assert bound is not None and bound.ulps == ulps and "Programming Guide" in bound.reason
    for op in (Op.add, Op.mul, Op.sqrt, Op.inv):
        assert caps[op].value_contract.declared_bound is None   # correctly rounded: no bound
    accurate = {c.op: c for c in registry().capsules()
                if c.provider is Provider.native_cuda and c.variant == "accurate"}
    assert set(accurate) == {Op.softmax, Op.log_softmax, Op.sigmoid, Op.softplus, Op.gelu,
                             RuntimeEntry.bias_gelu}
    # bias_gelu's accurate variant: float64 rounded once, judged by the op's derived rules (no
    # declared bound), its db a fixed-order sum (tests/test_bias_gelu_capsules.py)
    fused = accurate.pop(RuntimeEntry.bias_gelu)
    assert fused.value_contract.declared_bound is None
    assert fused.numerical_policy.reduction is Reduction.fixed_left
    for cap in (*accurate.values(), caps[Op.hard_masked_softmax]):   # float64, rounded once
        bound = cap.value_contract.declared_bound
        assert bound.ulps == 1.0 and bound.magnitude_units == 0.0, cap.name   # positive sums
        assert cap.numerical_policy.reduction is Reduction.not_applicable, cap.name
    # The fast float32 forwards: derived bounds (tl_softmax_f32.cuh), never looser than what
    # the harness measured for PyTorch's kernels on the H200 (evidence/h200/aten.softmax.json:
    # 27 ulp, aten.log_softmax.json: 9 ulp).
    for op, ulps, torch_ulps in ((Op.softmax, 10.0, 27), (Op.log_softmax, 6.0, 9)):
        bound = caps[op].value_contract.declared_bound
        assert bound.ulps == ulps <= torch_ulps and bound.magnitude_units == 0.0, op
        assert "for any row length" in bound.reason and "float32" in bound.reason
        assert "fast float32" in caps[op].value_contract.summary
        assert "accurate variant" in accurate[op].value_contract.summary
    # The float32 activations (tl_act_f32.cuh): 2 ulp derived, never looser than PyTorch's
    # measured (evidence/h200/aten.*.json: sigmoid 2, softplus 2, gelu 862 ulp); their accurate
    # variants keep the float64 kernels within 1 ulp.
    for op, torch_ulps in ((Op.sigmoid, 2), (Op.softplus, 2), (Op.gelu, 862)):
        bound = caps[op].value_contract.declared_bound
        assert bound.ulps == 2.0 <= torch_ulps and bound.magnitude_units == 0.0, op
        assert "float32" in bound.reason and "fast float32" in caps[op].value_contract.summary
        assert f"native_cuda.{op.label}.accurate" in caps[op].value_contract.summary
        assert "tl_act_f32.cuh" in caps[op].notes
        assert "accurate variant" in accurate[op].value_contract.summary
        assert accurate[op].value_contract.declared_bound.ulps == 1.0
        symbols = caps[op].value_contract.provenance.native_symbol
        assert f"tl_{op.label}_f32" in symbols and f"tl_{op.label}_fwd" not in symbols
        assert f"tl_{op.label}_fwd" in accurate[op].value_contract.provenance.native_symbol
    # gelu's plain VJP is float32 too (no float64-once note), the others' stay float64
    assert "tl_gelu_bwd_f32" in caps[Op.gelu].value_contract.provenance.native_symbol
    assert "evaluated in float64 from the input" not in caps[Op.gelu].notes
    assert "evaluated in float64 from the input" in caps[Op.sigmoid].notes
    for op in (Op.layer_norm, Op.batch_norm, Op.scaled_dot_product_attention):
        bound = caps[op].value_contract.declared_bound       # float64 once, as the reference
        assert bound.ulps == 1.0 and bound.magnitude_units == 1.0


def test_attention_capsules_and_who_selects_them():
    reg = registry()
    composed, _ = reg.get("torchlean.composed_attention")
    assert composed.provider is Provider.torchlean and composed.vjp_mode is VJPMode.torchlean_tape
    assert composed.device.label == "cuda" and composed.value_contract.declared_bound is None
    assert "cublasSgemmStridedBatched" in composed.value_contract.provenance.native_symbol
    direct, handler = reg.get("native_cuda.direct_attention")
    assert direct.vjp_mode is VJPMode.backend_vjp and handler.vjp is not None
    plan = CHECKED_CUDA.accept_graph([Op.layer_norm, Op.batch_norm, Op.softmax, Op.log_softmax,
                                      Op.hard_masked_softmax])
    assert {k.capsule.provider for k in plan.kernels.values()} == {Provider.native_cuda}
    from engine.providers.libtorch import torch_present
    plan = LIBTORCH_FORWARD_CUDA.accept_graph([Op.scaled_dot_product_attention])
    assert plan.kernel(Op.scaled_dot_product_attention).capsule.name == (
        "libtorch.sdpa_forward" if torch_present() else "torchlean.composed_attention")


def test_checked_cuda_prefers_flash_attention_and_accurate_cuda_composed():
    for profile in (CHECKED_CUDA, maintained_for_device("cuda")):
        plan = profile.accept_graph([Op.scaled_dot_product_attention])
        assert plan.kernel(Op.scaled_dot_product_attention).capsule.name == \
            "native_cuda.flash_attention"
    plan = ACCURATE_CUDA.accept_graph([Op.scaled_dot_product_attention, Op.softmax])
    assert plan.kernel(Op.scaled_dot_product_attention).capsule.name == \
        "torchlean.composed_attention"
    assert plan.kernel(Op.softmax).capsule.name == "native_cuda.softmax.accurate"


def test_libtorch_capsule_is_never_selected_where_torch_cannot_import(monkeypatch):
    import importlib.util
    from engine.providers import libtorch
    from engine.registry import Registry
    from engine.types import Evidence, TrustLevel
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    reg = Registry()
    libtorch.register_all(reg)      # a description only: torch is not imported
    # Without torch the plan skips it and says why.
    graph = LIBTORCH_FORWARD_CUDA.plan([Op.scaled_dot_product_attention], reg)
    assert Op.scaled_dot_product_attention not in graph.selected
    assert graph.rejections[Op.scaled_dot_product_attention] == [
        ("libtorch.sdpa_forward", "PyTorch (LibTorch) is not installed; install torch to use "
                                  "the libtorch_forward_cuda profile")]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert LIBTORCH_FORWARD_CUDA.plan([Op.scaled_dot_product_attention], reg).selected[
        Op.scaled_dot_product_attention].name == "libtorch.sdpa_forward"
    cap, handler = reg.get("libtorch.sdpa_forward")
    assert cap.provider is Provider.libtorch and cap.trust_level is TrustLevel.trusted_external
    assert cap.value_contract.evidence is Evidence.trusted_boundary
    assert cap.vjp_mode is VJPMode.torchlean_tape and handler.vjp is None
    assert not CHECKED_CUDA._rejection(cap, Op.scaled_dot_product_attention) is None   # never


def test_checked_cuda_selects_cublas_for_products_and_native_for_the_rest():
    plan = CHECKED_CUDA.accept_graph(sorted(NATIVE_OPS | {Op.matmul, Op.linear},
                                            key=lambda o: o.label))
    for op, kernel in plan.kernels.items():
        want = Provider.cublas if op in (Op.matmul, Op.linear) else Provider.native_cuda
        assert kernel.capsule.provider is want, (op, kernel.capsule.name)
    assert "cublas.matmul" in "\n".join(plan.kernels[Op.matmul].capsule.report_lines())


def test_provider_launches_only_mapped_kernels():
    """Every kernel handle this process made (native_cuda.KERNELS is process-wide: earlier tests in
    the worker may have run the tape's rules, poisoning or the cuFFT capsules on CUDA) names a
    mapped kernel."""
    from engine.providers import native_cuda
    from engine.providers.cufft import CUFFT_SOURCES
    registry()
    import engine.providers.native_cuda.attention  # noqa: F401  (declares its kernels)
    # CAPSULE_SOURCES: a variant's kernels (native_cuda.softmax.accurate's) are mapped there;
    # CUFFT_SOURCES: the spectral.cu kernels around cuFFT's calls (a GPU worker that had run an
    # FFT capsule before this test saw them launched, unmapped here)
    mapped = {k for src in [*SOURCES.values(), *CAPSULE_SOURCES.values(), *TAPE_SOURCES.values(),
                            *CUFFT_SOURCES.values(), ADAM_STEP, COMPOSED_ATTENTION, POISON_FILL]
              for k in src.kernels()}
    from engine.providers.native_cuda import launch
    launch.kernel("tape.cu", "tl_tape_exp")          # as a tape rule on CUDA makes it (no launch)
    launched = {(k.file, k.symbol) for k in native_cuda.KERNELS.values()}
    assert launched and launched <= mapped, sorted(launched - mapped)
    assert files_for(Op.broadcast) == ("shape.cu", "reduce.cu")
    assert ("tape.cu", "tl_tape_exp") in mapped     # the H200 run that saw it launched, unmapped
    assert set(files_for(Op.reduce_mean)) == {"reduce.cu", "shape.cu"}
    for file, _ in mapped:
        assert loader.source_path(file).is_file()


@pytest.mark.skipif(native_available(), reason="checks the CPU parity stub; this process has "
                                               "a native CUDA runtime")
def test_parity_stub_reports_zero_cache_and_cap_and_counts_host_wrappers(capsys):
    from engine.cli_memory import run_memory
    from engine.runtime import allocator_stats, device_buffer
    before = allocator_stats()
    bufs = [device_buffer.upload(np.zeros(1000, np.float32), "cpu") for _ in range(3)]
    held = allocator_stats()
    assert held.cache_bytes == 0 and held.cache_cap_bytes == 0 and held.backend == "cpu-parity-stub"
    assert held.live_bytes - before.live_bytes == 3 * 4000
    assert held.wrapper_live - before.wrapper_live == 3
    assert device_buffer.download(bufs[0]).shape == (1000,)
    del bufs
    after = allocator_stats()
    assert after.live_bytes == before.live_bytes and after.wrapper_live == before.wrapper_live
    assert after.wrapper_finalize - before.wrapper_finalize == 3
    assert run_memory(None) == 0
    out = capsys.readouterr().out
    assert "cache=0 " in out and "cache_cap=unbounded" in out and "cpu-parity-stub" in out


def test_no_handler_calls_the_allocator_through_a_name_its_parameter_hides():
    """A VJP's saved forward result is its parameter `output`. The allocator was once named
    launch.output too, and calling output(shape, n) inside such a VJP called the array (a
    TypeError on the GPU only, seen on the H100 on 2026-12-07 in concat's VJP); it is
    launch.new_array now, and no module may bring the name back: no function with that parameter
    calls `output(...)`, and launch defines no `output`."""
    import ast
    from pathlib import Path
    import engine.providers.native_cuda as family
    offenders = []
    for path in sorted(Path(family.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and \
                    "output" in {a.arg for a in node.args.args + node.args.kwonlyargs}:
                offenders += [f"{path.name}:{call.lineno} in {node.name}"
                              for call in ast.walk(node) if isinstance(call, ast.Call)
                              and isinstance(call.func, ast.Name) and call.func.id == "output"]
    assert not offenders, offenders
    from engine.providers.native_cuda import launch
    assert not hasattr(launch, "output")
