"""The exhaustive sweep on the CPU: the certification rule at the inputs nearest to float32
rounding boundaries, the certified references against mpmath on a strided subset, the sampled
sweep end to end (a correct capsule passes, a wrong one fails with counterexamples), the plan
and its shards, the user errors, and the `verified` trust rule."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conformance import cli, error_models, exhaustive, trust
from conformance.exhaustive import plan as exhaustive_plan
from conformance.exhaustive.judge import DeviceRef, _Namespace, _rebind
from conformance.exhaustive.refs import LIB, REFS, Formula, certify, evaluate, \
    f32_to_f64, f64_to_f32, subnormal32
from conformance.references import get as get_reference
from engine.float32 import OVERFLOW_THRESHOLD

B = LIB          # the bound the boundary cases are built around


def _certify(v, formula=Formula(lambda xp, x: (x, B), "test"), x=None):
    v = np.asarray(v, np.float64)
    return certify(np, v, B, np.zeros_like(v) if x is None else np.asarray(x, np.float64),
                   formula)


def _f32(bits):
    return float(np.uint32(bits).view(np.float32))


@pytest.mark.parametrize("bits", [0x3F800000, 0x3F7FFFFF, 0x00000001, 0x007FFFFF, 0x00800000,
                                  0x7F7FFFFE, 0x4B000000, 0x3F800001])
def test_certificate_around_a_midpoint(bits):
    """A value just outside the bound from a midpoint is decided (to the float32 on its side);
    one within the bound, or on the midpoint, is not."""
    lo, hi = _f32(bits), _f32(bits + 1)
    mid = (lo + hi) / 2                         # exact in float64
    above, below = mid * (1 + 2 * B), mid * (1 - 2 * B)
    near_above, near_below = mid * (1 + B / 2), mid * (1 - B / 2)
    v32, ok = _certify([above, below, near_above, near_below, mid])
    assert ok.tolist() == [True, True, False, False, False]
    assert v32[:2].tolist() == [np.float32(hi), np.float32(lo)]


def test_certificate_at_the_overflow_threshold():
    v32, ok = _certify([OVERFLOW_THRESHOLD * (1 + 2 * B), OVERFLOW_THRESHOLD * (1 - 2 * B),
                        OVERFLOW_THRESHOLD * (1 + B / 2), OVERFLOW_THRESHOLD * (1 - B / 2), OVERFLOW_THRESHOLD])
    assert ok.tolist() == [True, True, False, False, False]
    assert math.isinf(v32[0]) and v32[1] == np.float32(3.4028234663852886e38)


def test_certificate_at_the_zero_and_subnormal_boundary():
    half_min = 2.0 ** -150                      # between +0 and the smallest subnormal
    v32, ok = _certify([half_min * (1 + 2 * B), half_min * (1 - 2 * B), -half_min * (1 - 2 * B),
                        half_min * (1 + B / 2), half_min])
    assert ok.tolist() == [True, True, True, False, False]
    assert v32[0] == np.float32(2.0 ** -149) and v32[1] == 0 and not np.signbit(v32[1])
    assert v32[2] == 0 and np.signbit(v32[2])


def test_certificate_below_float64_normal_range_needs_a_sign():
    """|v| < 2^-1000 (0 included) is decided only where the op states the sign there."""
    tiny = [0.0, 2.0 ** -1060, -2.0 ** -1030]
    _, ok = _certify(tiny)
    assert not ok.any()
    signed = Formula(lambda xp, x: (x, B), "t", tiny_sign=lambda xp, x: np.where(
        x < 0, -1, np.where(x > 0, 1, 0)).astype(np.int8))
    v32, ok = _certify(tiny, signed, x=[1.0, 1.0, -1.0])
    assert ok.all() and v32.tolist() == [0.0, 0.0, 0.0]
    assert np.signbit(v32).tolist() == [False, False, True]
    _, ok = _certify(tiny, signed, x=[0.0, 0.0, 0.0])
    assert not ok.any()


def test_certificate_infinities_and_nans():
    plain = Formula(lambda xp, x: (x, B), "t")
    over = Formula(lambda xp, x: (x, B), "t", overflow_exact=True)
    dom = Formula(lambda xp, x: (x, B), "t", nan_domain=lambda xp, x: x < 0)
    assert not _certify([np.inf, np.nan], plain)[1].any()
    v32, ok = _certify([np.inf], over)
    assert ok.all() and np.isposinf(v32[0])
    v32, ok = _certify([np.nan, np.nan], dom, x=[-1.0, 1.0])
    assert ok.tolist() == [True, False] and np.isnan(v32[0])


def _awkward_doubles():
    """float64 values at and beside every kind of float32 rounding boundary."""
    sub = np.array([1, 2, 3, 0x7FFFFF, 0x800000, 0x800001, 0x7F7FFFFF], np.uint32)
    f = sub.view(np.float32).astype(np.float64)
    nxt = (sub + 1).view(np.float32).astype(np.float64)
    mids = (f + nxt) / 2
    vals = np.concatenate([f, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                           [2.0 ** -150, 2.0 ** -151, 3 * 2.0 ** -150, 2.0 ** -126 * (1 - 2 ** -25),
                            2.0 ** -126 * (1 - 2 ** -26), OVERFLOW_THRESHOLD, np.nextafter(OVERFLOW_THRESHOLD, 0),
                            2.0 ** 128, 1e300, 1e-300, 0.0, np.inf, np.nan]])
    return np.concatenate([vals, -vals])


def test_bitwise_float_conversions_are_exact():
    """The sweep's conversions (no float32 arithmetic: CuPy would flush) equal NumPy's."""
    bits = np.concatenate([np.arange(0, 1 << 32, 65521, dtype=np.uint64).astype(np.uint32),
                           np.arange(0, 1 << 12, dtype=np.uint32),
                           np.arange(0x807FF000, 0x80801000, dtype=np.uint32)])
    x = bits.view(np.float32)
    got = f32_to_f64(np, x)
    with np.errstate(invalid="ignore"):   # signalling NaNs
        want = x.astype(np.float64)
    assert np.array_equal(got.view(np.uint64)[~np.isnan(want)],
                          want.view(np.uint64)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()
    v = np.concatenate([_awkward_doubles(), want])
    with np.errstate(all="ignore"):
        want32 = v.astype(np.float32)
    got32 = f64_to_f32(np, v)
    nan = np.isnan(want32)
    assert np.array_equal(got32.view(np.uint32)[~nan], want32.view(np.uint32)[~nan])
    assert np.isnan(got32[nan]).all()


def test_subnormal_bits():
    x = np.array([0x00000001, 0x007FFFFF, 0x00800000, 0x80000001, 0x80000000, 0],
                 np.uint32).view(np.float32)
    assert subnormal32(np, x).tolist() == [True, True, False, True, False, False]


def test_a_flushing_kernel_passes_only_under_a_flushing_policy(tmp_path, capsys):
    """NumPy functions that flush subnormals (what CuPy's -ftz=true does): declared
    flush-to-zero they pass, with the flushes counted; declared gradual underflow they fail."""
    code, out, _ = _run(["--device", "cpu", "--stride", "4099", "--evidence-dir", str(tmp_path),
                         "--plugin", "fixtures.plugins.numpy_flushing:ENTRIES"], capsys)

    def rec(name):
        return json.loads((tmp_path / f"exhaustive-user.{name}.json").read_text())
    sin, log, ieee = rec("ftz_sin")["forward"], rec("ftz_log")["forward"], rec(
        "ftz_sin_claims_ieee")
    assert sin["failed"] == 0 and sin["subnormals_flushed"] > 0
    assert sin["flushed_accepted"] == sin["subnormals_flushed"] and sin["max_ulps"] <= 1.0
    assert sum(sin["ulp_histogram"].values()) + sin["flushed_accepted"] == sin["elements"]
    assert log["failed"] == 0 and log["inputs_flushed"] == log["subnormal_inputs"] > 0
    assert ieee["status"] == "failed"
    assert ieee["forward"]["failed"] == sin["subnormals_flushed"]
    assert set(ieee["forward"]["reasons"]) == {"flushed-subnormal"}
    assert code == 1


def _strided(stride=(1 << 20) + 7):
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    return x[np.isfinite(x) & (x != 0)]


@pytest.mark.parametrize("op", sorted(REFS))
@pytest.mark.parametrize("vjp", [False, True])
def test_certified_reference_agrees_with_mpmath_on_a_strided_subset(op, vjp):
    x = _strided()
    formula = REFS[op].vjp if vjp else REFS[op].forward
    v32, _, decided = evaluate(np, formula, x)
    ref = get_reference(op)
    want = (ref.vjp((x,), np.ones_like(x))[0] if vjp else ref.forward((x,))).value
    same = (v32.view(np.uint32) == want.view(np.uint32)) | (np.isnan(v32) & np.isnan(want))
    assert decided.sum() >= 0.99 * x.size      # the certificate decides nearly every input
    assert same[decided].all(), x[decided & ~same][:5]


def test_gelu_below_2_to_minus_30_is_decided_by_its_proof_and_agrees_with_mpmath():
    """a/2 is a float32 midpoint below 2^-125: the rule must round it the way mpmath does."""
    top = np.float32(2.0 ** -30).view(np.uint32)
    bits = np.concatenate([np.arange(1, 1 << 16, dtype=np.uint32),           # subnormals
                           np.arange(0x00800000 - 500, 0x00800000 + 500, dtype=np.uint32),
                           np.arange(top - 300, top, dtype=np.uint32),
                           np.arange(1, int(top), 9973, dtype=np.uint32)])
    x = np.concatenate([bits.view(np.float32), -bits.view(np.float32)])
    v32, _, decided = evaluate(np, REFS["gelu"].forward, x)
    want = get_reference("gelu").forward((x,)).value
    assert decided.all()
    assert np.array_equal(v32.view(np.uint32), want.view(np.uint32))


def test_plan_covers_every_pattern_once_and_nans_once_per_class():
    chunks = exhaustive_plan.plan(1, exhaustive_plan.CHUNK)
    assert exhaustive_plan.patterns_checked(chunks) == 2 * 0x7F800001 + 4
    nan_bits = np.array(list(exhaustive_plan.NAN_CLASSES.values()), np.uint32)
    x = nan_bits.view(np.float32)
    assert np.isnan(x).all()
    quiet = (nan_bits & 0x00400000) != 0
    assert quiet.tolist() == [True, True, False, False]
    assert np.signbit(x).tolist() == [False, True, False, True]
    small = exhaustive_plan.plan(1, 1 << 29)
    last_plus = [c for c in small if c.start < 0x80000000 and not c.explicit][-1]
    assert last_plus.start + last_plus.count - 1 == 0x7F800000      # +inf, not a NaN


def test_chunk_bits_are_built_from_an_iota():
    c = exhaustive_plan.Chunk(0x80000000 + 5, 4, 3)
    assert c.bits(np).tolist() == [0x80000005, 0x80000008, 0x8000000B, 0x8000000E]


@pytest.mark.parametrize("devices", [1, 2, 3, 8])
def test_shards_give_every_chunk_to_exactly_one_device(devices):
    chunks = exhaustive_plan.plan(1, exhaustive_plan.CHUNK)
    parts = exhaustive_plan.shards(chunks, devices)
    assert len(parts) == devices
    flat = [c for p in parts for c in p]
    assert sorted(flat, key=lambda c: (c.start, c.explicit)) == \
        sorted(chunks, key=lambda c: (c.start, c.explicit))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_sweep_runs_shards_with_a_fake_gpu_count(monkeypatch, tmp_path):
    """Two shards on the CPU (the fake count reaches the cuda code path's split)."""
    from engine.registry import registry
    reg = registry()
    cap = next(c for c in reg.capsules() if c.name == "reference.exp")
    handler = reg.handler(cap.name)
    one = exhaustive.sweep_capsule(cap, handler, "cpu", 1000003, 1)
    monkeypatch.setattr(exhaustive, "shards", lambda chunks, n: [chunks[0::2], chunks[1::2]])
    two = exhaustive.sweep_capsule(cap, handler, "cpu", 1000003, 2)
    assert two["shards"] == 2
    for key in ("elements", "failed", "ulp_histogram", "max_ulps", "not_correctly_rounded"):
        assert two["forward"][key] == one["forward"][key]
        assert two["vjp"][key] == one["vjp"][key]


def _run(args, capsys):
    code = cli.main(["exhaustive", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_sampled_sweep_of_reference_capsules_passes(tmp_path, capsys):
    code, out, _ = _run(["--device", "cpu", "--stride", "1000003", "--evidence-dir",
                         str(tmp_path), "--capsule", "reference.exp", "--capsule",
                         "reference.gelu"], capsys)
    assert code == 0, out
    rec = json.loads((tmp_path / "exhaustive-reference.gelu.json").read_text())
    assert rec["mode"] == "sampled" and rec["status"] == "passed" and rec["stride"] == 1000003
    assert rec["forward"]["elements"] == rec["patterns"]["checked"] == rec["vjp"]["elements"]
    assert sum(rec["forward"]["ulp_histogram"].values()) == rec["forward"]["elements"]
    assert rec["forward"]["max_ulps"] <= 1.0
    assert rec["reference"]["forward"]["spot_check"]["disagreed"] == 0
    assert rec["reference"]["forward"]["to_mpmath"] >= 6       # the two zeros, four NaNs
    assert "sampled passed" in out


def test_a_wrong_kernel_fails_with_counterexamples(tmp_path, capsys):
    code, out, _ = _run(["--device", "cpu", "--stride", "1000003", "--evidence-dir",
                         str(tmp_path), "--plugin", "fixtures.plugins.numpy_kernels:ENTRIES",
                         "--capsule", "user.naive_softplus"], capsys)
    assert code == 1
    rec = json.loads((tmp_path / "exhaustive-user.naive_softplus.json").read_text())
    fwd = rec["forward"]
    assert rec["status"] == "failed" and fwd["failed"] > 0
    assert fwd["reasons"].get("inf-mismatch", 0) > 0           # exp overflows above 88.7
    assert 0 < len(fwd["counterexamples"]) <= 1000
    first = fwd["counterexamples"][0]
    x = np.uint32(int(first["input"], 16)).view(np.float32)
    assert repr(float(x)) == first["input_value"]
    assert fwd["max_ulps"] > 1


def test_judge_on_a_proxy_namespace_matches_the_host_error_model():
    """The rebinding reaches rounding.ulp_array and the derived rules (calls are seen), and
    the rebound compare gives the original's verdict."""
    seen = set()

    class Proxy:
        def __getattr__(self, name):
            seen.add(name)
            return getattr(np, name)

    ns = _Namespace(Proxy())
    compare = _rebind(error_models.compare, ns, {})
    from engine.registry import registry
    cap = next(c for c in registry().capsules() if c.name == "reference.gelu")
    x = _strided()
    ref = get_reference("gelu")
    fwd = ref.forward((x,))
    out = fwd.value.copy()
    out[::7] = np.nextafter(out[::7], np.float32(np.inf))
    grad_ref = ref.vjp((x,), np.ones_like(x))[0]
    grad = (grad_ref.value * np.float32(1 + 2 ** -20)).astype(np.float32)
    model = error_models.vjp_model(cap, grad_ref.kind)
    ctx = error_models.BoundContext(cap.op, (x,), {}, cap.numerical_policy, out=out,
                                    fwd_ref=fwd, g=np.ones_like(x))
    want = error_models.compare(model, grad_ref, grad, ctx)
    got = compare(model, DeviceRef(grad_ref.value, grad_ref.exact), grad, ctx)
    assert np.array_equal(want.ok, got.ok) and np.array_equal(want.reason, got.reason)
    assert {"frexp", "tanh", "broadcast_to"} <= seen


def test_unknown_glob_is_a_user_error(tmp_path, capsys):
    code, _, err = _run(["--device", "cpu", "--capsule", "nothing.*", "--evidence-dir",
                         str(tmp_path)], capsys)
    assert code == 2 and "matches no capsule" in err and "nothing.*" in err


def test_a_non_unary_capsule_is_a_user_error(tmp_path, capsys):
    code, _, err = _run(["--device", "cpu", "--capsule", "reference.add", "--evidence-dir",
                         str(tmp_path)], capsys)
    assert code == 2 and "reference.add" in err and "not a unary" in err


@pytest.mark.parametrize("stride", ["0", "-3", "x", str(1 << 32)])
def test_a_bad_stride_is_a_user_error(stride, tmp_path, capsys):
    code, _, err = _run(["--device", "cpu", "--stride", stride, "--evidence-dir",
                         str(tmp_path)], capsys)
    assert code == 2 and f"--stride {stride}" in err and "expected a whole number" in err


def test_cuda_without_a_gpu_is_a_user_error(tmp_path, capsys):
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("a GPU is visible here")
    code, _, err = _run(["--device", "cuda", "--evidence-dir", str(tmp_path)], capsys)
    assert code == 2 and "--device cuda: no usable GPU" in err and "--stride" in err
    assert not list(tmp_path.iterdir())


def test_interrupt_ends_with_one_line_and_130(monkeypatch, tmp_path, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(exhaustive, "sweep_capsule", interrupted)
    code, _, err = _run(["--device", "cpu", "--capsule", "reference.exp", "--evidence-dir",
                         str(tmp_path)], capsys)
    assert code == 130 and err.strip() == "torchlean-conformance: interrupted"


# --- the verified rule -------------------------------------------------------------------------

def _record(tmp_path, capsys, name="reference.exp"):
    _run(["--device", "cpu", "--stride", "1000003", "--evidence-dir", str(tmp_path),
          "--capsule", name], capsys)
    return json.loads((tmp_path / f"exhaustive-{name}.json").read_text())


def _target(name="reference.exp"):
    from engine.registry import registry
    reg = registry()
    cap = next(c for c in reg.capsules() if c.name == name)
    return cap, reg.handler(name)


ENV = {"gpu": "NVIDIA H200", "driver": 13000, "cuda_runtime": 13000}


def _as_exhaustive(rec):
    return dict(rec, mode="exhaustive", device="cuda", environment=dict(ENV))


def test_a_sampled_sweep_never_verifies(tmp_path, capsys):
    rec = _record(tmp_path, capsys)
    cap, handler = _target()
    assert "sampled" in trust.exhaustive_problem(rec, cap, handler, ENV)


def test_a_passing_exhaustive_record_from_this_environment_verifies(tmp_path, capsys):
    rec = _as_exhaustive(_record(tmp_path, capsys))
    cap, handler = _target()
    assert trust.exhaustive_problem(rec, cap, handler, ENV) is None
    assert trust.verified_by(rec) == \
        "verified by exhaustion on NVIDIA H200, driver API 13.0, CUDA runtime 13.0"


@pytest.mark.parametrize("key,value", [("gpu", "NVIDIA A100"), ("driver", 12080),
                                       ("cuda_runtime", 12080)])
def test_another_gpu_or_driver_earns_nothing(tmp_path, capsys, key, value):
    rec = _as_exhaustive(_record(tmp_path, capsys))
    cap, handler = _target()
    assert "another" in trust.exhaustive_problem(rec, cap, handler, dict(ENV, **{key: value}))
    assert trust.exhaustive_problem(rec, cap, handler, dict(ENV, **{key: None})) is not None


def test_stale_or_failed_records_earn_nothing(tmp_path, capsys):
    rec = _as_exhaustive(_record(tmp_path, capsys))
    cap, handler = _target()
    assert "fingerprint" in trust.exhaustive_problem(
        dict(rec, fingerprint={"value": "0" * 64}), cap, handler, ENV)
    assert "harness" in trust.exhaustive_problem(dict(rec, harness="old"), cap, handler, ENV)
    assert "status `failed`" in trust.exhaustive_problem(dict(rec, status="failed"), cap,
                                                        handler, ENV)


def test_verified_needs_checked_first(tmp_path, capsys, monkeypatch):
    rec = _as_exhaustive(_record(tmp_path, capsys))
    (tmp_path / "exhaustive-reference.exp.json").write_text(json.dumps(rec))
    cap, handler = _target()
    monkeypatch.setattr(trust.evidence, "environment", lambda device: dict(ENV))
    up, why = trust._with_exhaustive("checked", "ok", tmp_path, cap, handler, ENV)
    assert up == "verified" and "verified by exhaustion on NVIDIA H200" in why
    assert trust._with_exhaustive("fuzzed", "x", tmp_path, cap, handler, ENV)[0] == "fuzzed"
    assert trust._with_exhaustive(None, "x", tmp_path, cap, handler, ENV)[0] is None
    other = dict(ENV, driver=1)
    up, why = trust._with_exhaustive("checked", "ok", tmp_path, cap, handler, other)
    assert up == "checked" and "not verified: the exhaustive sweep ran on another driver" in why


@pytest.mark.parametrize("name,plugin", [("reference.gelu", None), ("reference.tanh", None),
                                         ("user.naive_softplus",
                                          "fixtures.plugins.numpy_kernels:ENTRIES")])
def test_judging_only_the_unequal_elements_agrees_with_judging_all(name, plugin, monkeypatch):
    """The sweep compares only outputs that differ from the correctly rounded reference; the
    host error model over every element (the cross-check, on here) must agree."""
    monkeypatch.setattr(exhaustive, "CROSS_CHECK_ON_CPU", True)
    monkeypatch.setattr(exhaustive, "JUDGE_CHECKS", 4096)
    if plugin:
        from conformance.plugins import plugin_handlers
        cap, handler = plugin_handlers(plugin)[name]
    else:
        cap, handler = _target(name)
    rec = exhaustive.sweep_capsule(cap, handler, "cpu", 1000003)
    for side in ("forward", "vjp"):
        if rec[side] is None:
            continue
        check = rec["reference"][side]["judge_cross_check"]
        assert check["checked"] > 4000 and check["disagreed"] == 0, check


def test_a_harness_defect_is_recorded_apart_with_exit_3(monkeypatch, tmp_path, capsys):
    def broken(*a, **k):
        raise RuntimeError("planted harness defect")
    monkeypatch.setattr(exhaustive, "sweep_capsule", broken)
    code, out, err = _run(["--device", "cpu", "--capsule", "reference.exp", "--evidence-dir",
                           str(tmp_path)], capsys)
    rec = json.loads((tmp_path / "exhaustive-reference.exp.json").read_text())
    assert code == 3 and rec["status"] == "harness-error"
    assert "planted harness defect" in rec["message"] and "planted harness defect" in err


def test_kernels_that_break_the_calling_convention_fail_with_their_reason(tmp_path, capsys):
    code, out, _ = _run(["--device", "cpu", "--stride", "1000003", "--evidence-dir",
                         str(tmp_path), "--plugin",
                         "fixtures.plugins.numpy_unary_misbehaving:ENTRIES"], capsys)
    assert code == 1

    def rec(name):
        return json.loads((tmp_path / f"exhaustive-user.{name}.json").read_text())
    raising, wide, mutating = rec("raising_abs"), rec("float64_abs"), rec("mutating_abs")
    assert raising["status"] == "failed" and "planted failure" in raising["message"]
    assert raising["forward"]["reasons"] == {"raised": 1}
    assert wide["status"] == "failed" and wide["forward"]["reasons"] == {"wrong-type": 1}
    assert mutating["status"] == "failed"
    assert mutating["forward"]["reasons"] == {"input-mutated": mutating["chunks"]}


FTZ_CAPSULES = ["reference.sqrt", "reference.inv", "reference.exp", "reference.sin",
                "reference.tanh", "reference.gelu", "reference.sigmoid", "reference.abs"]


def _device_run(name, monkeypatch):
    import ftz_numpy
    cap, handler = _target(name)
    models = exhaustive._models

    def device_models(capsule, h):
        fwd_model, vjp_fn, vjp_model = models(capsule, h)

        def vjp(inputs, out, g):
            grads = vjp_fn(tuple(x.view(np.ndarray) for x in inputs), out.view(np.ndarray),
                           g.view(np.ndarray))
            return tuple(ftz_numpy._wrap(np.asarray(a)) for a in grads)
        return fwd_model, vjp, vjp_model
    monkeypatch.setattr(exhaustive, "_models", device_models)
    return exhaustive.sweep_capsule(cap, ftz_numpy.device_handler(handler), "cpu", 65521,
                                    xp=ftz_numpy.FtzNumPy())


def test_the_flushing_stand_in_flushes_and_a_float32_conversion_is_caught(monkeypatch):
    """The stand-in is no NumPy in disguise, and the sweep's own checks catch device code that
    converts float32 the plain way (here: the reference's input conversion)."""
    import ftz_numpy
    from conformance.exhaustive import refs as exhaustive_refs
    a = ftz_numpy.FtzNumPy().asarray(np.array([1e-40, -1e-40, 1.0], np.float32))
    assert a.astype(np.float64).tolist() == [0.0, 0.0, 1.0] and (a == 0).tolist()[:2] == [True] * 2
    monkeypatch.setattr(exhaustive_refs, "f32_to_f64", lambda xp, x: x.astype(np.float64))
    rec = _device_run("reference.sin", monkeypatch)
    assert rec["status"] == "harness-error" and "broke its stated bound" in rec["message"]


@pytest.mark.parametrize("name", FTZ_CAPSULES)
def test_device_path_under_cupy_flush_to_zero_matches_the_host(name, monkeypatch):
    """The device code path, run on a NumPy stand-in that flushes every float32 operation as
    CuPy's -ftz=true kernels do, gives the host path's verdict and counts, and its judgement
    agrees with the host error model on every cross-checked element."""
    cap, handler = _target(name)
    plain = exhaustive.sweep_capsule(cap, handler, "cpu", 65521)
    dev = _device_run(name, monkeypatch)
    assert dev["status"] == plain["status"] == "passed", dev["message"]
    for side in ("forward", "vjp"):
        a, b = plain[side], dev[side]
        for key in ("elements", "failed", "ulp_histogram", "max_ulps", "not_correctly_rounded",
                    "subnormal_inputs", "subnormal_results", "subnormals_preserved",
                    "signed_zero_mismatch", "nan_mismatch"):
            assert a[key] == b[key], (side, key, a[key], b[key])
        check = dev["reference"][side]["judge_cross_check"]
        assert check["checked"] > 0 and check["disagreed"] == 0
        assert dev["reference"][side]["spot_check"]["disagreed"] == 0
    assert plain["forward"]["subnormal_inputs"] > 0


@pytest.mark.parametrize("name", ["user.ftz_sin", "user.ftz_log", "user.ftz_sin_claims_ieee"])
def test_flushing_kernels_on_the_flushing_device_path_match_the_host(name):
    """What CuPy's own ufuncs do (flush), judged through the device path: same counts."""
    import ftz_numpy
    from conformance.plugins import plugin_handlers
    cap, handler = plugin_handlers("fixtures.plugins.numpy_flushing:ENTRIES")[name]
    plain = exhaustive.sweep_capsule(cap, handler, "cpu", 65521)
    dev = exhaustive.sweep_capsule(cap, ftz_numpy.device_handler(handler), "cpu", 65521,
                                   xp=ftz_numpy.FtzNumPy())
    assert dev["status"] == plain["status"]
    for key in ("elements", "failed", "reasons", "ulp_histogram", "max_ulps", "inputs_flushed",
                "subnormals_flushed", "flushed_accepted", "not_correctly_rounded"):
        assert dev["forward"][key] == plain["forward"][key], key
    assert dev["reference"]["forward"]["judge_cross_check"]["disagreed"] == 0


def test_rule_tables_a_rebound_function_reads_are_rebound_too():
    """families.rule_for reads its rule tables as globals: the rule it returns on the device must
    compute with the device's namespace (on the H200 the gelu VJP rule got NumPy and a CuPy
    array: every sweep with a derived VJP rule was a harness error)."""
    from conformance import families
    from engine.types import BackendOp as Op
    ns = _Namespace(np)
    for op in (Op.gelu, Op.sigmoid, Op.softplus, Op.tanh):
        rule = _rebind(families.rule_for, ns, {})(op, f"native_cuda.{op.label}", vjp=True)
        assert rule is not None and rule.bound.__globals__["np"] is ns, op
