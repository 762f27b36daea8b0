"""The plain capsules' float32 activations (engine/csrc/cuda/tl_act_f32.cuh) on the GPU: sigmoid,
softplus and gelu forward within their declared 2 ulp of the float64 formula of docs/OPS.md over
a bit sweep of every exponent, the clamps and the subnormal-result thresholds (signed zeros and
infinities bit for bit), gelu's float32 VJP within the capsule's derived rule (relative on every
float of [-1, -0.625], where its factor cancels), both repeatable
bit for bit and equal on the float4 and the scalar loop, and gelu's forward and VJP equal to the
host emulation bit for bit (8.5M and 6.3M inputs). The host emulation runs the same checks on the
CPU (tests/test_activations_emulated.py; it needs g++ here too); the exhaustive sweep covers all
2^32 inputs (`torchlean-conformance exhaustive --capsule native_cuda.sigmoid`)."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
import test_activations_emulated as emu
import test_cuda_elementwise_fast_path as f64

pytestmark = pytest.mark.cuda


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["sigmoid", "softplus", "gelu"])
def test_f32_forward_within_two_ulp(op):
    from engine.providers.native_cuda.elementwise import F32_ACT
    cp = H.cupy()
    x = emu._f32_sweep()
    h = H.native_handler(op)
    got = H.to_host(h.forward(cp.asarray(x)))
    with np.errstate(all="ignore"):
        want = f64._forward_ref(op, x.astype(np.float64)).astype(np.float32)
    worst = H.assert_ulps(got, want, F32_ACT.ulps, f"{op} float32 forward")
    for where, what in ((x == 0, "signed zeros"), (np.isinf(x), "infinities")):
        H.assert_bitwise(got[where], want[where], f"{op} float32 forward, {what}")
    H.assert_bitwise(H.to_host(h.forward(cp.asarray(x))), got, f"{op} float32 forward repeated")
    xs = cp.zeros(x.size + 1, cp.float32)
    xs[1:] = cp.asarray(x)
    H.assert_bitwise(H.to_host(h.forward(xs[1:])), got, f"{op} float32 forward, scalar loop")
    print(f"{op} float32 forward: worst {worst} ulp")


@pytest.mark.capsules("native_cuda.gelu")
def test_f32_gelu_vjp_within_the_harness_rule():
    cp = H.cupy()
    x = emu._f32_sweep()
    g = (np.random.default_rng(5).standard_normal(x.shape) * 2.0).astype(np.float32)
    h = H.native_handler("gelu")
    dx = cp.asarray(x)
    (ga,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
    got = H.to_host(ga).astype(np.float64)
    with np.errstate(all="ignore"):
        want = f64._vjp_ref("gelu", x.astype(np.float64), g.astype(np.float64))
    live = np.isfinite(x)
    bound = emu._gelu_vjp_bound(x[live].astype(np.float64), g[live].astype(np.float64),
                                want[live])
    bad = np.flatnonzero(~(np.abs(got[live] - want[live]) <= bound))
    assert bad.size == 0, (f"gelu float32 VJP: {bad.size} beyond the rule; x = "
                           f"{x[live][bad[0]]!r}: {got[live][bad[0]]!r} vs {want[live][bad[0]]!r}")
    H.assert_bitwise(got[~live].astype(np.float32), want[~live].astype(np.float32),
                     "gelu float32 VJP, NaN and infinities")
    (again,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
    H.assert_bitwise(again, got.astype(np.float32), "gelu float32 VJP repeated")


@pytest.mark.capsules("native_cuda.gelu")
def test_f32_gelu_vjp_every_float_of_the_cancelling_interval():
    cp = H.cupy()
    h = H.native_handler("gelu")

    def run(x, g):
        dx = cp.asarray(x)
        (ga,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
        return H.to_host(ga)

    emu.check_gelu_vjp_interval(run, "gelu float32 VJP")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return emu.build_host_lib(tmp_path_factory)


@pytest.mark.capsules("native_cuda.gelu")
def test_f32_gelu_forward_equals_the_host_emulation_bit_for_bit(host):
    """tl_gelu_f32 on the device against tests/emulated/activations_host.cpp's run of the same
    source (g++, each float operation and fma rounded once) on every 1021st float32 bit pattern
    (every exponent, both signs, infinities, NaN payloads) and every 509th float of [-11, 11]:
    each element equals the emulation's bits under one of rcp.approx's admissible results (the
    correctly rounded reciprocal of dh or one ulp either way: PTX specifies MUFU.RCP no closer;
    ties of subnormal inputs' x/2 follow it), NaN where the emulation has NaN."""
    cp = H.cupy()
    every = np.arange(0, 2 ** 32, 1021, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([every, emu.gelu_dense(509)])
    got = H.to_host(H.native_handler("gelu").forward(cp.asarray(x)))
    assert got.dtype == np.float32 and got.shape == x.shape
    matched = np.zeros(x.shape, bool)
    exact_rcp = None
    for rcp in (0, 1, -1):
        host.emu_set_rcp_ulps(rcp)
        want = emu._run(host, True, "gelu_f32", x, x)
        same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
        matched |= same
        exact_rcp = same if exact_rcp is None else exact_rcp
    bad = np.flatnonzero(~matched)
    assert bad.size == 0, (f"tl_gelu_f32: {bad.size} of {x.size} elements differ from the host "
                           f"emulation under every admissible rcp.approx; x = {x[bad[0]]!r}: "
                           f"device {got[bad[0]]!r}")
    print(f"tl_gelu_f32 = host emulation on {x.size} inputs ({int(exact_rcp.sum())} with the "
          f"correctly rounded reciprocal)")


@pytest.mark.capsules("native_cuda.gelu")
def test_f32_gelu_vjp_equals_the_host_emulation_bit_for_bit(host):
    """tl_gelu_bwd_f32 on the device against the host emulation of the same source on every
    1021st float32 bit pattern and every 1021st float of [-11.5, 10] (the VJP's computed range,
    its ends, the root, specials), g random: each element equals the emulation's bits under one
    of rcp.approx's admissible results (the VJP's reciprocal pair corrects w0, so the three
    usually agree), NaN where the emulation has NaN."""
    cp = H.cupy()
    every = np.arange(0, 2 ** 32, 1021, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([every, emu.gelu_vjp_dense(1021)])
    g = (np.random.default_rng(11).standard_normal(x.shape) * 2.0).astype(np.float32)
    h = H.native_handler("gelu")
    dx = cp.asarray(x)
    (ga,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
    got = H.to_host(ga)
    assert got.dtype == np.float32 and got.shape == x.shape
    matched = np.zeros(x.shape, bool)
    for rcp in (0, 1, -1):
        host.emu_set_rcp_ulps(rcp)
        want = emu._run(host, False, "gelu_f32", x, g)
        matched |= (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
    bad = np.flatnonzero(~matched)
    assert bad.size == 0, (f"tl_gelu_bwd_f32: {bad.size} of {x.size} elements differ from the "
                           f"host emulation under every admissible rcp.approx; x = {x[bad[0]]!r}, "
                           f"g = {g[bad[0]]!r}: device {got[bad[0]]!r}")
    print(f"tl_gelu_bwd_f32 = host emulation on {x.size} inputs")
