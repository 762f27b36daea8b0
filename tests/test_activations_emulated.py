"""elementwise.cu's activation kernels (sigmoid, softplus and gelu forward; their VJPs and tanh's
and exp's) on the CPU through a host emulation (tests/emulated/activations_host.cpp, the real
source built with g++), under every admissible result of PTX rcp.approx.f32 (1 ulp either way):
within 1 ulp of the float64 formulas of docs/OPS.md on a strided sweep of float32 bit patterns
(every exponent, both signs, the fast ranges' thresholds and their neighbours, +-0, subnormals,
+-inf, NaN: fast and tail elements side by side in one float4), and the float4 loop and the
scalar loop (a misaligned view) bit for bit. The GPU runs the same checks for real
(tests/test_cuda_elementwise_fast_path.py)."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import cuda_helpers as H
import test_cuda_elementwise_fast_path as gpu

HOST = Path(__file__).parent / "emulated" / "activations_host.cpp"
_ASM = 'asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rf) : "f"(f));'
FORWARD = ("sigmoid", "softplus", "gelu")          # emu_fwd's op numbers, in order
VJP = ("sigmoid", "softplus", "gelu", "tanh", "exp")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not on PATH")
    from engine.runtime import loader
    text = loader.source_text("elementwise.cu")
    assert text.count(_ASM) == 1, "tl_rcp_1_2's rcp.approx statement changed: update the builder"
    out = tmp_path_factory.mktemp("activations_emulation")
    (out / "source.cu").write_text(text.replace(_ASM, "rf = emu_rcp_approx(f);"))
    so = out / "libactivations_host.so"
    cmd = [gxx, "-std=c++17", "-O1", "-ffp-contract=off", "-fPIC", "-shared",
           f'-DTL_KERNEL_SOURCE="{out / "source.cu"}"', "-o", str(so), str(HOST)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        pytest.fail(f"g++ could not build the emulation: {proc.stderr[-600:]}")
    return ctypes.CDLL(str(so))


def _sweep() -> np.ndarray:
    bits = np.arange(0, 0x7F800001, 16411, dtype=np.uint32)
    v = bits.view(np.float32)
    edges = np.concatenate([gpu._around(t, 4) for t in (64.0, 32.0, 8.0, 2.0 ** -126)])
    root = np.float32(-0.7517916) + np.arange(-300, 300, dtype=np.float32) * np.float32(6e-8)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)
    return np.concatenate([v, -v, edges, root, special]).astype(np.float32)


def _run(lib, forward: bool, op: str, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    from engine.providers.native_cuda.elementwise import _ew_blocks
    out = np.full(x.shape, np.nan, np.float32)
    p = lambda a: ctypes.c_void_p(a.ctypes.data)  # noqa: E731
    grid, n = ctypes.c_uint(_ew_blocks(x.size)), ctypes.c_uint(x.size)
    if forward:
        lib.emu_fwd(FORWARD.index(op), grid, p(x), p(out), n)
    else:
        lib.emu_bwd(VJP.index(op), grid, p(x), p(g), p(out), n)
    return out


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
@pytest.mark.parametrize("forward,op", [(True, o) for o in FORWARD] + [(False, o) for o in VJP])
def test_within_one_ulp_and_both_loops_agree(lib, rcp_ulps, forward, op):
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = _sweep()
    g = (np.random.default_rng(4).standard_normal(x.shape) * 2.0).astype(np.float32)
    g[g == 0] = 1.0
    got = _run(lib, forward, op, x, g)
    with np.errstate(all="ignore"):
        want = (gpu._forward_ref(op, x.astype(np.float64)) if forward else
                gpu._vjp_ref(op, x.astype(np.float64), g.astype(np.float64))).astype(np.float32)
    what = f"{op} {'forward' if forward else 'VJP'}, rcp {rcp_ulps:+d} ulp"
    H.assert_ulps(got, want, 1.0, what)
    # the scalar loop: a view one element in (4-byte aligned only), the same bits
    xs, gs = np.empty(x.size + 1, np.float32), np.empty(x.size + 1, np.float32)
    xs[1:], gs[1:] = x, g
    H.assert_bitwise(_run(lib, forward, op, xs[1:], gs[1:]), got, what + ", scalar loop")
