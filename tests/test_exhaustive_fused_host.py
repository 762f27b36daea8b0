"""The exhaustive sweep's fused kernels (conformance/exhaustive/fused.py) on the CPU: their element
functions, built with g++ from the very text NVRTC compiles and driven by host loops
(tests/emulated/exhaustive_fused_host.cpp), equal the NumPy functions they replace bit for bit;
and the sweep's fused path (exhaustive._judge_fused, Tally.add's fused branch, certify's), run
through that twin on the flushing stand-in for CuPy, writes the record the array path writes.
tests/test_cuda_exhaustive_fused.py checks the kernels themselves on the GPU."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conformance import error_models, exhaustive
from conformance.exhaustive import fused as exhaustive_fused, refs as exhaustive_refs
from conformance.exhaustive.judge import DeviceRef, Tally
from conformance.exhaustive.refs import LIB, REFS, Formula
from emulated.host_build import compile_shared
from engine.float32 import OVERFLOW_THRESHOLD

HOST_CPP = Path(__file__).parent / "emulated" / "exhaustive_fused_host.cpp"


@pytest.fixture(scope="module")
def twin_lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH: the host twin cannot be built")
    out = tmp_path_factory.mktemp("fused")
    helpers = out / "helpers.h"
    helpers.write_text(exhaustive_fused.HELPERS)
    lib = compile_shared(out / "libexhaustive_fused_host.so", HOST_CPP,
                         (f'TL_HELPERS_FILE="{helpers}"',), std="c++17")
    assert not isinstance(lib, str), lib
    return lib


def _launcher(lib, calls: set):
    """exhaustive_fused._launch for the host twin: same names, same arguments."""
    def launch(name, n, *args):
        if not n:
            return
        calls.add(name)
        conv = []
        for a in (*args, np.int64(n)):
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous
                conv.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, np.int64):
                conv.append(ctypes.c_longlong(int(a)))
            elif isinstance(a, np.uint32):
                conv.append(ctypes.c_uint(int(a)))
            elif isinstance(a, np.int32):
                conv.append(ctypes.c_int(int(a)))
            else:
                raise TypeError(f"{name}: an argument of type {type(a).__name__}")
        getattr(lib, name)(*conv)
    return launch


@pytest.fixture
def calls():
    return set()


@pytest.fixture
def fused(twin_lib, monkeypatch, calls):
    monkeypatch.setattr(exhaustive_fused, "_launch", _launcher(twin_lib, calls))
    return exhaustive_fused


KERNELS = {"tl_k_f32_to_f64", "tl_k_f64_to_f32", "tl_k_subnormal32", "tl_k_certify",
           "tl_k_classify", "tl_k_tally"}


def _class_bits():
    """Every float32 class, both signs: zeros, subnormals, normals, the largest, inf, NaNs."""
    pos = np.array([0, 1, 2, 0x3FFFFF, 0x400000, 0x7FFFFE, 0x7FFFFF, 0x800000, 0x800001,
                    0x3F800000, 0x3F7FFFFF, 0x4B000000, 0x7F7FFFFE, 0x7F7FFFFF, 0x7F800000,
                    0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FFFFFFF], np.uint32)
    return np.concatenate([pos, pos | np.uint32(0x80000000)])


def _sample_bits():
    return np.concatenate([_class_bits(),
                           np.arange(0, 1 << 32, 65521, dtype=np.uint64).astype(np.uint32),
                           np.arange(0, 1 << 12, dtype=np.uint32),
                           np.arange(0x807FF000, 0x80801000, dtype=np.uint32),
                           np.arange(0x7F7FF000, 0x7F800010, dtype=np.uint32)])


def _awkward_doubles():
    """float64 values at and beside every kind of float32 rounding boundary, NaNs with
    payloads, and float64 subnormals (test_exhaustive's set, extended)."""
    from test_exhaustive import _awkward_doubles as base
    nans = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF,
                     0x7FF4000020000000, 0x0000000000000001, 0x000FFFFFFFFFFFFF],
                    np.uint64).view(np.float64)
    return np.concatenate([base(), nans, -nans])


def _same_bits(a, b):
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_conversions_equal_numpy_bit_for_bit(fused):
    x = _sample_bits().view(np.float32)
    assert _same_bits(fused.f32_to_f64(np, x), exhaustive_refs.f32_to_f64(np, x))
    assert _same_bits(fused.subnormal32(np, x), exhaustive_refs.subnormal32(np, x))
    with np.errstate(invalid="ignore"):
        v = np.concatenate([_awkward_doubles(), x.astype(np.float64),
                            np.random.default_rng(0).standard_normal(4096) * 1e-39])
    assert _same_bits(fused.f64_to_f32(np, v), exhaustive_refs.f64_to_f32(np, v))
    assert fused.f32_to_f64(np, x[:0]).size == 0       # an empty chunk launches nothing


def _boundary_values(b):
    """The certification tests' values (tests/test_exhaustive.py): beside every float32
    midpoint, the overflow threshold, the zero/subnormal boundary, below 2^-1000, inf, NaN."""
    vals = []
    for bits in (0x3F800000, 0x3F7FFFFF, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFE,
                 0x4B000000, 0x3F800001):
        lo = float(np.uint32(bits).view(np.float32))
        hi = float(np.uint32(bits + 1).view(np.float32))
        mid = (lo + hi) / 2
        vals += [mid * (1 + 2 * b), mid * (1 - 2 * b), mid * (1 + b / 2), mid * (1 - b / 2), mid]
    for t in (OVERFLOW_THRESHOLD, 2.0 ** -150):
        vals += [t * (1 + 2 * b), t * (1 - 2 * b), t * (1 + b / 2), t * (1 - b / 2), t]
    vals += [0.0, 2.0 ** -1060, 2.0 ** -1030, 2.0 ** -1000, np.nextafter(2.0 ** -1000, 0),
             np.inf, np.nan, 2.0 ** 128, 1e300]
    vals = np.array(vals)
    return np.concatenate([vals, -vals, _awkward_doubles()])


FORMULAS = [Formula(lambda xp, x: (x, LIB), "plain"),
            Formula(lambda xp, x: (x, LIB), "signed", tiny_sign=lambda xp, x: np.where(
                x < 0, -1, np.where(x > 0, 1, 0)).astype(np.int8)),
            Formula(lambda xp, x: (x, LIB), "overflow", overflow_exact=True),
            Formula(lambda xp, x: (x, LIB), "domain", nan_domain=lambda xp, x: x < 0)]


@pytest.mark.parametrize("formula", FORMULAS, ids=lambda f: f.reason)
@pytest.mark.parametrize("per_element", [False, True])
def test_certify_equals_numpy_at_the_rounding_boundaries(fused, formula, per_element):
    v = _boundary_values(LIB)
    x = np.resize(np.array([1.0, -1.0, 0.0, -2.0]), v.shape)      # the tiny sign, the domain
    bound = np.full(v.shape, LIB) if per_element else LIB
    want = exhaustive_refs.certify(np, v, bound, x, formula)
    sign = None if formula.tiny_sign is None else formula.tiny_sign(np, x)
    dom = None if formula.nan_domain is None else formula.nan_domain(np, x)
    got = fused.certify(np, v, bound, sign, dom, formula.overflow_exact)
    assert _same_bits(got[1], want[1]) and want[1].any() and not want[1].all()
    assert _same_bits(got[0], want[0])


@pytest.mark.parametrize("op", sorted(REFS))
@pytest.mark.parametrize("vjp", [False, True])
def test_certify_equals_numpy_on_every_formula(fused, op, vjp, monkeypatch):
    """Each op's own values and bounds (arrays for gelu) on the sample, through evaluate()."""
    x = _sample_bits().view(np.float32)
    formula = REFS[op].vjp if vjp else REFS[op].forward
    with np.errstate(all="ignore"):
        want = exhaustive_refs.evaluate(np, formula, x)
        monkeypatch.setattr(exhaustive_fused, "enabled", lambda xp: xp is np)
        got = exhaustive_refs.evaluate(np, formula, x)
    for a, b in zip(got, want):
        assert _same_bits(a, b)


def _judge_arrays(seed=1, n=20000):
    """A chunk's input, reference and output with every case the pre-filter and the tally tell
    apart: equal, one ulp off, NaN for NaN, poison, subnormal inputs / references / outputs,
    flushed zeros, signed-zero and infinity mismatches."""
    from engine.runtime.poison import POISON_BITS
    rng = np.random.default_rng(seed)
    xb = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    xb[:40] = _class_bits()
    rb = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    rb[::11] = rng.integers(1, 0x800000, rb[::11].size, dtype=np.uint32)      # subnormal refs
    kind = rng.integers(0, 8, n)
    yb = rb.copy()
    yb[kind == 1] += np.uint32(1)
    yb[kind == 2] = np.uint32(POISON_BITS)
    yb[kind == 3] = rb[kind == 3] & np.uint32(0x80000000)                      # flushed
    yb[kind == 4] = rb[kind == 4] ^ np.uint32(0x80000000)
    yb[kind == 5] = np.uint32(0x7F800000)
    yb[kind == 6] = np.uint32(0x7FC00000)
    rb[kind == 7], yb[kind == 7] = np.uint32(0), np.uint32(0x80000000)        # +0 for -0
    ob = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return xb.view(np.float32), rb.view(np.float32), yb.view(np.float32), ob.view(np.float32)


def expected_classify(x, ref, got, out):
    """What classify must give, from the array code's own pre-filter (exhaustive._judge): each
    element's code (0 same bits, 1 judged on the device, 2 on the host) and the six counts."""
    from engine.runtime.poison import POISON_BITS
    sub = exhaustive_refs.subnormal32
    poison = got.view(np.uint32) == POISON_BITS
    same = ((ref.view(np.uint32) == got.view(np.uint32)) | (np.isnan(ref) & np.isnan(got))) & \
        ~poison
    risky = sub(np, x) | sub(np, got) | sub(np, ref) | (False if out is None else sub(np, out))
    code = np.where(same, 0, np.where(risky, 2, 1)).astype(np.uint8)
    return code, {"same": same.sum(), "same_subnormal": (same & sub(np, ref)).sum(),
                  "subnormal_inputs": sub(np, x).sum(), "device": (~same & ~risky).sum(),
                  "host": (~same & risky).sum(), "poison": poison.sum()}


def test_classify_equals_the_array_prefilter(fused):
    from engine.runtime.poison import POISON_BITS
    x, ref, got, out = _judge_arrays()
    for o in (None, out):
        code, n = fused.classify(np, x, got, ref, o, POISON_BITS)
        want_code, want_n = expected_classify(x, ref, got, o)
        assert np.array_equal(code, want_code)
        assert n == want_n
        assert min(n.values()) > 0


class _Verdict:
    def __init__(self, ok, ulps, reason):
        self.ok, self.ulps, self.reason, self.observed = ok, ulps, reason, {}


@pytest.mark.parametrize("seed", [1, 2])
def test_tally_equals_the_array_tally(fused, seed, monkeypatch):
    """Tally.add through the fused kernel gives the array code's record, the histogram's bin
    edges, non-finite ulps and the first counterexamples included."""
    import ftz_numpy
    x, ref, got, _ = _judge_arrays(seed)
    rng = np.random.default_rng(seed)
    n = x.size
    ok = rng.random(n) < 0.9
    ulps = rng.choice(np.array([0.0, -0.0, 0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 4.0, 16.0, 17.0,
                                256.0, 257.0, np.inf, np.nan]), n)
    ulps[5], ulps[n - 5] = 300.0, 1e30       # the second part's maximum replaces the first's
    ok[5] = ok[n - 5] = False
    reason = np.where(ok, 0, rng.integers(1, len(error_models.REASONS), n)).astype(np.int8)
    bits = x.view(np.uint32)
    dev = ftz_numpy.FtzNumPy()
    monkeypatch.setattr(exhaustive_fused, "enabled", lambda xp: xp is dev)
    want, have = Tally(), Tally()
    for part in (slice(0, n // 2), slice(n // 2, n)):      # the maximum carried over parts
        want.add(np, bits[part], got[part], DeviceRef(ref[part], None),
                 _Verdict(ok[part], ulps[part], reason[part]))
        have.add(dev, dev.asarray(bits[part]), dev.asarray(got[part]),
                 DeviceRef(dev.asarray(ref[part]), None),
                 _Verdict(dev.asarray(ok[part]), dev.asarray(ulps[part]),
                          dev.asarray(reason[part])))
    assert have.to_json() == want.to_json()
    assert want.failed and want.flushed_accepted and want.signed_zero_mismatch
    assert want.inf_mismatch and want.nan_mismatch and want.max_ulps == 1e30


def test_the_largest_ulps_key_orders_negative_values_too(fused):
    """tl_tally's maximum is kept as an ordered integer key; decoded it is the float64 itself."""
    for ulps, top in (([-3.0, -2.5, -7.0], -2.5), ([-0.0, 0.0], 0.0), ([-0.0], -0.0),
                      ([2.0 ** -1074, 5.0, 4.5], 5.0), ([1e308, -1e308], 1e308)):
        u = np.array(ulps)
        t = fused.tally(np, np.ones(u.size, bool), u, np.zeros(u.size, np.float32),
                        np.zeros(u.size, np.float32))
        assert _same_bits(np.float64(t["worst"]), np.float64(top)), (ulps, t["worst"])
    t = fused.tally(np, np.ones(2, bool), np.array([np.inf, np.nan]), np.zeros(2, np.float32),
                    np.zeros(2, np.float32))
    assert t["worst"] is None and t["live"] == 0


def test_certify_keeps_its_safety_factor_on_both_sides(fused):
    """Bounds chosen so that |v| - m_lo or m_hi - |v| exceeds b |v| (1 + 2^-51) by less than
    the (1 - 2^-51) factor takes away: undecided, in the kernel as in NumPy."""
    mids = np.array([1.0 + 2.0 ** -24, 3.0 + 2.0 ** -22, 2.0 ** -140 * 1.5, 1e30])
    v = np.concatenate([mids * (1 - k * 2.0 ** -40) for k in (1, 3, 7)] +
                       [mids * (1 + k * 2.0 ** -40) for k in (1, 3, 7)])
    m_lo, m_hi = exhaustive_refs.f32_boundaries(np, exhaustive_refs.f64_to_f32(np, v))
    safety = 2.0 ** -51
    d = np.minimum(v - m_lo, m_hi - v)
    bounds, inside = [], []
    for t in np.linspace(0.2, 0.8, 7):        # rr between d (1 - 2^-51) and d
        b = d * (1 - t * safety) / v / (1 + safety)
        rr = v * b * (1 + safety)
        bounds.append(b)
        inside.append((d * (1 - safety) <= rr) & (d > rr))
    bound, inside = np.concatenate(bounds), np.concatenate(inside)
    vv = np.tile(v, len(bounds))
    formula = Formula(lambda xp, x: (x, LIB), "plain")
    want = exhaustive_refs.certify(np, vv, bound, vv, formula)
    got = fused.certify(np, vv, bound, None, None, False)
    assert inside.sum() >= 20 and not want[1][inside].any()
    assert _same_bits(got[1], want[1]) and _same_bits(got[0], want[0])


FUSED_CAPSULES = ["reference.sqrt", "reference.exp", "reference.gelu", "reference.tanh",
                  "reference.abs"]


@pytest.mark.parametrize("name", FUSED_CAPSULES)
def test_the_fused_device_path_writes_the_array_paths_record(fused, calls, name, monkeypatch):
    """The device path on the flushing stand-in, once with the array code and once through the
    fused kernels' twin: the same record (counts, histogram, maxima, counterexamples,
    reference bookkeeping), so fusing changed no verdict."""
    import ftz_numpy
    from test_exhaustive import _device_run
    plain = _device_run(name, monkeypatch)
    monkeypatch.setattr(exhaustive_fused, "enabled",
                        lambda xp: isinstance(xp, ftz_numpy.FtzNumPy))
    fast = _device_run(name, monkeypatch)
    assert fast["status"] == plain["status"] == "passed", fast["message"]
    for key in ("forward", "vjp", "reference", "patterns", "chunks"):
        assert fast[key] == plain[key], key
    assert {"tl_k_f32_to_f64", "tl_k_classify"} <= calls <= KERNELS
    assert ("tl_k_certify" in calls) == (name != "reference.abs")     # abs: exact formulas


def test_the_fused_path_finds_a_flushing_kernel_as_the_host_does(fused, calls, monkeypatch):
    """Failures, their reasons and counterexamples, flushed inputs and results, through the
    fused path: what the host sweep records for a kernel that flushes while claiming IEEE."""
    import ftz_numpy
    from conformance.plugins import plugin_handlers
    cap, handler = plugin_handlers("fixtures.plugins.numpy_flushing:ENTRIES")[
        "user.ftz_sin_claims_ieee"]
    plain = exhaustive.sweep_capsule(cap, handler, "cpu", 65521)
    monkeypatch.setattr(exhaustive_fused, "enabled",
                        lambda xp: isinstance(xp, ftz_numpy.FtzNumPy))
    fast = exhaustive.sweep_capsule(cap, ftz_numpy.device_handler(handler), "cpu", 65521,
                                    xp=ftz_numpy.FtzNumPy())
    assert fast["status"] == plain["status"] == "failed"
    assert fast["forward"] == plain["forward"] and fast["forward"]["counterexamples"]
    assert {"tl_k_classify", "tl_k_tally", "tl_k_certify"} <= calls


def test_spot_check_picks_are_flatnonzero_of_the_decided_without_building_it():
    rng = np.random.default_rng(5)
    only_17 = np.ones(50, bool)
    only_17[17] = False
    for todo in (np.zeros(1000, bool), rng.random(1000) < 0.01, rng.random(1000) < 0.9,
                 only_17):
        live = np.flatnonzero(~todo)
        k = rng.integers(0, live.size, 64)
        assert np.array_equal(exhaustive._outside(np.flatnonzero(todo), k), live[k])


def test_the_kernel_module_compiles_for_the_h200_without_spills(tmp_path):
    """The source NVRTC gets on the GPU (the kernels' file with its header inlined by the
    engine's loader), compiled here by nvcc for sm_90 with the same options."""
    from engine.runtime import loader
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    src = tmp_path / "exhaustive_fused.cu"
    src.write_text(loader.inline_headers(exhaustive_fused.KERNELS_PATH))
    assert exhaustive_fused.HELPERS in src.read_text()
    proc = subprocess.run([nvcc, *exhaustive_fused.OPTIONS, "-arch=sm_90", "-Xptxas", "-v", "-c",
                           "-o", str(tmp_path / "k.o"), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "spill stores" in proc.stderr
    assert all(line.split()[0] == "0" for line in proc.stderr.split(",")
               if "bytes spill stores" in line)
