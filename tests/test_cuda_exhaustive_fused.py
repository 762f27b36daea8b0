"""The exhaustive sweep's fused kernels (conformance/exhaustive/fused.py) on the GPU, as NVRTC
builds them: each equals the NumPy function it replaces bit for bit on every float32 class, a
strided sample of all 2^32 patterns and the inputs nearest the rounding boundaries; the counting
kernels' block reductions give the NumPy counts on chunks of many blocks; and a sampled sweep of
native capsules writes the same record through the fused kernels as through CuPy's array code."""
from __future__ import annotations

import numpy as np
import pytest

from conformance import exhaustive
from conformance.exhaustive import fused as exhaustive_fused, refs as exhaustive_refs
from conformance.exhaustive.judge import DeviceRef, Tally
from conformance.exhaustive.refs import REFS

pytestmark = pytest.mark.cuda

STRIDE = 65537


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy")
    from engine.runtime.native import native_available
    if not native_available():
        pytest.skip("no usable GPU")
    return cupy


def _bits():
    from test_exhaustive_fused_host import _sample_bits
    return np.concatenate([_sample_bits(),
                           np.arange(0, 1 << 32, 4093, dtype=np.uint64).astype(np.uint32)])


def _same(dev, host):
    from test_exhaustive_fused_host import _same_bits
    return _same_bits(dev.get(), host)


def test_conversions_equal_numpy_bit_for_bit(cp):
    from test_exhaustive_fused_host import _awkward_doubles
    x = _bits().view(np.float32)
    xd = cp.asarray(x)
    assert exhaustive_fused.enabled(cp) and not exhaustive_fused.enabled(np)
    assert _same(exhaustive_refs.f32_to_f64(cp, xd), exhaustive_refs.f32_to_f64(np, x))
    assert _same(exhaustive_refs.subnormal32(cp, xd), exhaustive_refs.subnormal32(np, x))
    with np.errstate(invalid="ignore"):
        v = np.concatenate([_awkward_doubles(), x.astype(np.float64),
                            np.random.default_rng(0).standard_normal(1 << 18) * 1e-39])
    assert _same(exhaustive_refs.f64_to_f32(cp, cp.asarray(v)), exhaustive_refs.f64_to_f32(np, v))


@pytest.mark.parametrize("per_element", [False, True])
def test_certify_equals_numpy_at_the_rounding_boundaries(cp, per_element):
    from test_exhaustive_fused_host import FORMULAS, _boundary_values
    from conformance.exhaustive.refs import LIB
    v = _boundary_values(LIB)
    x = np.resize(np.array([1.0, -1.0, 0.0, -2.0]), v.shape)
    bound = np.full(v.shape, LIB) if per_element else LIB
    for formula in FORMULAS:
        want = exhaustive_refs.certify(np, v, bound, x, formula)
        got = exhaustive_refs.certify(cp, cp.asarray(v), cp.asarray(bound) if per_element
                                      else bound, cp.asarray(x), formula)
        assert _same(got[1], want[1]) and _same(got[0], want[0]), formula.reason


@pytest.mark.parametrize("op", sorted(REFS))
def test_certify_equals_numpy_on_every_formulas_values(cp, op):
    """The formula's float64 values and bounds computed on the host (CuPy's exp is not NumPy's),
    certified by the kernel and by NumPy."""
    x = _bits().view(np.float32)
    x64 = exhaustive_refs.f32_to_f64(np, x)
    for formula in (REFS[op].forward, REFS[op].vjp):
        if formula is None or formula.exact:
            continue
        with np.errstate(all="ignore"):
            v64, bound = formula.evaluate(np, x64)
        want = exhaustive_refs.certify(np, v64, bound, x64, formula)
        dev_bound = cp.asarray(bound) if np.ndim(bound) else bound
        got = exhaustive_refs.certify(cp, cp.asarray(v64), dev_bound, cp.asarray(x64), formula)
        assert _same(got[1], want[1]) and _same(got[0], want[0]), formula.reason


def _big_judge_arrays():
    """_judge_arrays at 2^21 elements: many blocks, every warp reduction and atomic used."""
    from test_exhaustive_fused_host import _judge_arrays
    return _judge_arrays(seed=3, n=1 << 21)


def test_classify_counts_on_a_chunk_of_many_blocks(cp):
    from engine.runtime.poison import POISON_BITS
    from test_exhaustive_fused_host import expected_classify
    x, ref, got, out = _big_judge_arrays()
    code, n = exhaustive_fused.classify(cp, cp.asarray(x), cp.asarray(got), cp.asarray(ref),
                                        cp.asarray(out), POISON_BITS)
    want_code, want_n = expected_classify(x, ref, got, out)
    assert _same(code, want_code)
    assert n == want_n


def test_tally_on_a_chunk_of_many_blocks_equals_numpys(cp):
    from test_exhaustive_fused_host import _Verdict
    from conformance import error_models
    x, ref, got, _ = _big_judge_arrays()
    rng = np.random.default_rng(4)
    n = x.size
    ulps = rng.choice(np.array([0.0, 0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 4.0, 16.0, 17.0, 256.0,
                                257.0, np.inf, np.nan]), n)
    ulps[n - 77] = 1e30
    ok = rng.random(n) < 0.9
    ok[n - 77] = False
    reason = np.where(ok, 0, rng.integers(1, len(error_models.REASONS), n)).astype(np.int8)
    bits = x.view(np.uint32)
    want, have = Tally(), Tally()
    want.add(np, bits, got, DeviceRef(ref, None), _Verdict(ok, ulps, reason))
    have.add(cp, cp.asarray(bits), cp.asarray(got), DeviceRef(cp.asarray(ref), None),
             _Verdict(cp.asarray(ok), cp.asarray(ulps), cp.asarray(reason)))
    assert have.to_json() == want.to_json()
    assert want.max_ulps == 1e30 and want.max_ulps_input == f"0x{int(bits[n - 77]):08x}"


@pytest.mark.parametrize("name", ["native_cuda.abs", "native_cuda.exp", "native_cuda.tanh",
                                  "native_cuda.gelu.accurate"])
def test_a_sampled_sweep_writes_the_same_record_fused_or_not(cp, name, monkeypatch):
    """The sweep through the fused kernels and through CuPy's array code (the path before them):
    the same counts, histogram, maxima, counterexamples and reference bookkeeping."""
    from engine.registry import registry
    reg = registry()
    cap = next(c for c in reg.capsules() if c.name == name)
    handler = reg.handler(name)
    fast = exhaustive.sweep_capsule(cap, handler, "cuda", STRIDE)
    monkeypatch.setattr(exhaustive_fused, "enabled", lambda xp: False)
    plain = exhaustive.sweep_capsule(cap, handler, "cuda", STRIDE)
    assert fast["status"] == plain["status"] == "passed", fast["message"]
    for key in ("forward", "vjp", "reference", "patterns", "chunks"):
        assert fast[key] == plain[key], key


@pytest.mark.parametrize("vjp", [False, True])
def test_the_gelu_reference_kernel_equals_cupys_array_code_bit_for_bit(cp, vjp, monkeypatch):
    """tl_k_gelu_ref against exhaustive_refs' array code run by CuPy (the same CUDA exp): value
    and bound, on every float32 class, a strided sample and the boundary inputs."""
    x = cp.asarray(exhaustive_refs.f32_to_f64(np, _bits().view(np.float32)))
    ref = exhaustive_refs.REFS["gelu"]
    formula = ref.vjp if vjp else ref.forward
    with np.errstate(all="ignore"):
        v, b = formula.evaluate(cp, x)
        monkeypatch.setattr(exhaustive_fused, "enabled", lambda xp: False)
        v0, b0 = formula.evaluate(cp, x)
    assert _same(v, v0.get()) and _same(b, b0.get())
