"""native_cuda.bias_gelu's float32 kernels (bias_gelu.cu tl_bias_gelu_f32, tl_bias_gelu_bwd_f32
and tl_bias_gelu_db) run on the CPU by the host emulation tests/emulated/loss_optim_host.cpp (g++,
every float operation and fma rounded once, PTX rcp.approx at each admissible result): the
forward within the bound the capsule declares (native_cuda.gelu's), dx and db within
conformance/families/fused.py's BIAS_GELU_F32 rule against the mpmath reference; the float4 and scalar
paths give the same bits (dx, y, and db for one chunk split); the row walk over warps and chunks
covers every row once; the harness's own check_case passes the emulated kernels under the
capsule's models and fails them moved by a few ulps. The GPU runs the same checks in
tests/test_cuda_bias_gelu.py."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

import cuda_helpers as H
from conformance.families import fused as R
from conformance.error_terms import HALF_SUB
from conformance.references import get as reference
from emulated.host_build import GELU_TABLE_WIDE, RCP_APPROX_F32, build
from engine.providers.native_cuda.fused import F32_VJP_BLOCKS, GELU_F32_BOUND, f32_vjp_chunks

pytestmark = pytest.mark.capsules("native_cuda.bias_gelu")
f32 = np.float32
U = 2.0 ** -24


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    out = tmp_path_factory.mktemp("bias_gelu_f32")
    built = build(out, "bias_gelu.cu", "loss_optim_host.cpp", ("-w", "-DTL_EMU_BIAS_GELU"),
                  (RCP_APPROX_F32, GELU_TABLE_WIDE))
    if isinstance(built, str):
        pytest.fail(built)
    return built


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` 4 bytes past a 16-byte boundary: the kernels' scalar path."""
    flat = np.empty(a.size + 4, f32)
    start = (-(flat.ctypes.data // 4) + 1) % 4     # first index at 4 mod 16 bytes
    view = flat[start:start + a.size].reshape(a.shape)
    view[...] = a
    assert view.ctypes.data % 16 == 4
    return view


def _aligned(a: np.ndarray) -> np.ndarray:
    flat = np.empty(a.size + 4, f32)
    start = (-(flat.ctypes.data // 4)) % 4
    view = flat[start:start + a.size].reshape(a.shape)
    view[...] = a
    assert view.ctypes.data % 16 == 0
    return view


def _vec(d: int, *arrays) -> bool:
    return d % 4 == 0 and all(a.ctypes.data % 16 == 0 for a in arrays)


def _forward(lib, x, b):
    y = _aligned(np.full(x.shape, np.nan, f32)) if _vec(x.shape[-1], x, b) else \
        _unaligned(np.full(x.shape, np.nan, f32))
    n, d = x.size, b.size
    per = 4 if _vec(d, x, b, y) else 1
    lib.emu_bias_gelu_f32(ctypes.c_uint(max(1, -(-n // (per * 256)))), _p(x), _p(b), _p(y),
                          ctypes.c_uint(n), ctypes.c_uint(d))
    return np.array(y)


def _vjp(lib, x, b, g, chunk=None):
    rows, d = x.shape
    place = _aligned if _vec(d, x, b, g) else _unaligned
    dx = place(np.full(x.shape, np.nan, f32))
    vec = _vec(d, x, b, g, dx)
    col_blocks = -(-d // (128 if vec else 32))
    if chunk is None:
        chunks, chunk = f32_vjp_chunks(rows, col_blocks)
    chunks = -(-rows // chunk)
    part = np.full((chunks, d), np.nan)
    db = np.full(d, np.nan, f32)
    lib.emu_bias_gelu_bwd_f32(ctypes.c_uint(col_blocks * chunks), _p(x), _p(b), _p(g), _p(dx),
                              _p(part), ctypes.c_uint(rows), ctypes.c_uint(d), ctypes.c_uint(chunk),
                              ctypes.c_uint(col_blocks), ctypes.c_uint(int(vec)))
    lib.emu_bias_gelu_db(ctypes.c_uint(-(-d // 256)), _p(part), _p(db), ctypes.c_uint(chunks),
                         ctypes.c_uint(d))
    return np.array(dx), db, vec


def _inputs(rows, d, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, d)) * 3).astype(f32)
    flat = x.reshape(-1)
    # the limits, NaN, signed zeros, the VJP's interval ends and its factor's root, gelu's limits
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, -0.625, -0.7524614, 10.5, -11.0, -12.0]
    flat[: min(len(special), flat.size)] = special[: flat.size]
    b = rng.standard_normal(d).astype(f32)
    b[: min(2, d)] = 0.0                          # the specials reach s unchanged
    g = rng.standard_normal((rows, d)).astype(f32)
    return x, b, g


def _ctx(x, b, g, index):
    return SimpleNamespace(inputs=(x, b), g=g, input_index=index, params={})


# (rows, d, chunk): float4 columns across the 128-column block, scalar d % 4 != 0, warps with no
# row in a chunk (chunk < 8), a chunk of one row, one column
SHAPES = [(5, 8, 2), (13, 132, 5), (40, 12, 40), (9, 7, 1), (33, 300, 11), (70, 1, 8), (3, 260, 7)]


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
@pytest.mark.parametrize("rows, d, chunk", SHAPES)
def test_within_the_declared_and_derived_bounds(lib, rcp_ulps, rows, d, chunk):
    lib.emu_set_rcp_ulps(rcp_ulps)
    x, b, g = _inputs(rows, d, rows * 1000 + d)
    x, b, g = (_aligned(a) for a in (x, b, g))
    mod = reference("bias_gelu")
    y = _forward(lib, x, b)
    ref = mod.forward((x, b))
    H.assert_ulps(y, ref.value, GELU_F32_BOUND.ulps, f"bias_gelu f32 forward, rcp {rcp_ulps:+d}")
    H.assert_bitwise(y[np.isinf(x) | (x == 0)], ref.value[np.isinf(x) | (x == 0)],
                     "forward limits and signed zeros")
    dx, db, _ = _vjp(lib, x, b, g, chunk)
    rdx, rdb = mod.vjp((x, b), g)
    for i, (got, r) in enumerate(((dx, rdx), (db, rdb))):
        bound = R.f32_vjp_bound(r, _ctx(x, b, g, i), U) + 4 * HALF_SUB
        fin = np.isfinite(r.exact)
        assert np.array_equal(np.isnan(got), np.isnan(r.value)), i
        err = np.abs(got[fin].astype(np.float64) - r.exact[fin])
        bad = np.flatnonzero(~(err <= bound[fin]))
        assert bad.size == 0, (i, got[fin][bad[:3]], r.exact[fin][bad[:3]], bound[fin][bad[:3]])


@pytest.mark.parametrize("rows, d, chunk", [(13, 132, 5), (33, 300, 11), (40, 12, 3)])
def test_float4_and_scalar_paths_agree_bit_for_bit(lib, rows, d, chunk):
    lib.emu_set_rcp_ulps(0)
    x, b, g = _inputs(rows, d, 7 + d)
    xa, ba, ga = (_aligned(a) for a in (x, b, g))
    xu, bu, gu = (_unaligned(a) for a in (x, b, g))
    H.assert_bitwise(_forward(lib, xu, bu), _forward(lib, xa, ba), "forward, scalar vs float4")
    dxa, dba, va = _vjp(lib, xa, ba, ga, chunk)
    dxu, dbu, vu = _vjp(lib, xu, bu, gu, chunk)
    assert va and not vu
    H.assert_bitwise(dxu, dxa, "dx, scalar vs float4")
    H.assert_bitwise(dbu, dba, "db, scalar vs float4 (one chunk split: the same sums)")


def test_db_rule_catches_a_dropped_row(lib):
    """The db rule is tight enough to fail a kernel that skips one row (a test of the rule the
    other tests lean on): the kernel's db passes it, db less row 17's terms fails it in nearly
    every column (a column whose term is under the bound cannot be told apart)."""
    lib.emu_set_rcp_ulps(0)
    x, b, g = _inputs(64, 16, 3)
    x, b, g = (_aligned(np.nan_to_num(a, nan=0.5, posinf=0.5, neginf=0.5)) for a in (x, b, g))
    _, rdb = reference("bias_gelu").vjp((x, b), g)
    bound = R.f32_vjp_bound(rdb, _ctx(x, b, g, 1), U)
    dx, db, _ = _vjp(lib, x, b, g, 8)
    assert np.all(np.abs(db - rdb.exact) <= bound)
    dropped = db.astype(np.float64) - dx[17]
    assert np.mean(np.abs(dropped - rdb.exact) > bound) >= 0.9
    assert np.all(bound <= 64 * U * rdb.magnitude)


def test_chunks_cover_the_rows_with_about_one_wave_of_blocks():
    for rows in (1, 7, 8, 9, 100, 8192, 70000, 2 ** 20):
        for col_blocks in (1, 3, 24, 800, 2000):
            chunks, chunk = f32_vjp_chunks(rows, col_blocks)
            assert chunk >= 1 and chunks * chunk >= rows > (chunks - 1) * chunk
            assert chunks <= max(1, -(-rows // 8)) or chunk == 1
            assert chunks * col_blocks <= max(F32_VJP_BLOCKS + col_blocks, col_blocks)
    assert f32_vjp_chunks(8192, 24) == (33, 249)    # gpt2-124m's MLP: 792 blocks


def _emulated_capsule(lib):
    """native_cuda.bias_gelu's capsule (its declared bound, policy and rules by name) on the CPU
    device, its handler the emulated kernels: the harness's own check of what the GPU runs."""
    import dataclasses
    from engine.registry import registry
    from engine.types import Device
    cap, handler = registry().get("native_cuda.bias_gelu")

    def flat(a):
        return _aligned(np.ascontiguousarray(a, f32))

    def forward(x, b):
        return _forward(lib, flat(x), flat(b))

    def vjp(inputs, output_, g):
        x, b = inputs
        x2 = flat(x).reshape(-1, max(b.size, 1)) if x.size else flat(x).reshape(0, b.size)
        if b.size == 0 or x.size == 0:
            return np.zeros(x.shape, f32), np.zeros(b.shape, f32)
        dx, db, _ = _vjp(lib, x2, flat(b), flat(g).reshape(x2.shape))
        return dx.reshape(x.shape), db
    return (dataclasses.replace(cap, device=Device.cpu),
            dataclasses.replace(handler, device=Device.cpu, forward=forward, vjp=vjp))


@pytest.mark.parametrize("rows, d", [(9, 8), (40, 7), (3, 132), (1, 1)])
def test_the_harness_passes_the_emulated_kernels(lib, rows, d):
    from conformance import generators
    from conformance.campaign import check_case
    from engine.types import RuntimeEntry
    lib.emu_set_rcp_ulps(0)
    x, b, _ = _inputs(rows, d, 40 + d)
    cap, handler = _emulated_capsule(lib)
    case = generators.Case(RuntimeEntry.bias_gelu, "normal", (x, b), {}, seed=0, index=0)
    res = check_case(cap, handler, case, {}, identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]
    assert res.vjp is not None


def test_the_harness_catches_the_emulated_kernels_off_by_a_few_ulps(lib):
    """The same check fails each output moved by a few ulps (forward 8, dx 32, db 64 ulp):
    the models it applies to this capsule are not vacuous."""
    import dataclasses
    from conformance import generators
    from conformance.campaign import check_case
    from engine.types import RuntimeEntry
    lib.emu_set_rcp_ulps(0)
    x, b, _ = _inputs(40, 7, 47)
    cap, h = _emulated_capsule(lib)
    case = generators.Case(RuntimeEntry.bias_gelu, "normal", (x, b), {}, seed=0, index=0)

    def scaled(a, k):
        return (a.astype(np.float64) * (1 + 2.0 ** -k)).astype(f32)
    wrong = {
        "value": dataclasses.replace(h, forward=lambda x, b: scaled(h.forward(x, b), 21)),
        "grad[0]": dataclasses.replace(
            h, vjp=lambda i, o, g: (scaled(h.vjp(i, o, g)[0], 19), h.vjp(i, o, g)[1])),
        "grad[1]": dataclasses.replace(
            h, vjp=lambda i, o, g: (h.vjp(i, o, g)[0], scaled(h.vjp(i, o, g)[1], 18))),
    }
    for output, handler in wrong.items():
        res = check_case(cap, handler, case, {})
        assert any(f.output == output for f in res.failures), output
