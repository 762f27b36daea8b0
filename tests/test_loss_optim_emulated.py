"""xent.cu's cross-entropy kernels, bias_gelu.cu's kernels and optim.cu's multi-tensor Adam, run
on the CPU by the host emulation tests/emulated/loss_optim_host.cpp (g++): the real sources' row
walk, warp folds, special rows, column chunks and chunk walk, checked against the mpmath
references under the derived bounds (cross-entropy, bias_gelu) and bit for bit against
tl_adam_step per parameter (multi-tensor Adam). The GPU runs the same checks in
tests/test_cuda_cross_entropy.py, tests/test_cuda_bias_gelu.py and tests/test_cuda_adam_multi.py."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from conformance.families import reduction as D
from conformance.error_terms import HALF_SUB
from conformance.references import get as reference
from emulated.host_build import GELU_TABLE_WIDE, RCP_APPROX_F32, build, require
from engine.ops.reduction import cross_entropy_grad64
from engine.providers.native_cuda.optim_multi import chunk_list

f32 = np.float32
U = 2.0 ** -24


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("emu")
    built = (build(out, "xent.cu", "loss_optim_host.cpp", ("-w", "-DTL_EMU_LOSS")),
             build(out, "optim.cu", "loss_optim_host.cpp", ("-w", "-DTL_EMU_OPTIM")),
             build(out, "bias_gelu.cu", "loss_optim_host.cpp", ("-w", "-DTL_EMU_BIAS_GELU"),
                   (RCP_APPROX_F32, GELU_TABLE_WIDE)))
    return tuple(require(lib) for lib in built)


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


class _Ctx:
    def __init__(self, x):
        self.inputs = (x,)


def _xent(lib, x, t, g, blocks=None):
    rows, n = x.shape
    gx = blocks or -(-rows // 8)
    per_row = np.full(rows, np.nan)
    out = np.full(1, np.nan, f32)
    lib.emu_xent_rows(ctypes.c_uint(gx), _p(x), _p(t), _p(per_row), ctypes.c_uint(rows),
                      ctypes.c_uint(n))
    lib.emu_xent_mean(_p(per_row), _p(out), ctypes.c_uint(rows))
    grad = np.full(x.shape, np.nan, f32)
    gg = np.array([g], f32)
    lib.emu_xent_bwd(ctypes.c_uint(gx), _p(x), _p(t), _p(gg), _p(grad), ctypes.c_uint(rows),
                     ctypes.c_uint(n), ctypes.c_double(rows))
    return out[0], grad


CASES = [
    ("one class", np.array([[2.0]], f32), [0], None),
    ("odd", (np.random.default_rng(1).standard_normal((3, 7)) * 3).astype(f32), [0, 6, 3], None),
    ("past a warp", (np.random.default_rng(2).standard_normal((9, 257)) * 2).astype(f32),
     np.random.default_rng(3).integers(0, 257, 9), None),
    ("rows past the grid", (np.random.default_rng(4).standard_normal((20, 33))).astype(f32),
     np.random.default_rng(5).integers(0, 33, 20), 1),        # one block strides 20 rows
    ("dominant targets", np.array([[40.0, 0.0, 0.0], [0.0, -80.0, 3.0]], f32), [0, 2], None),
    ("ties and -inf", np.array([[2.0, 2.0, -np.inf, 1.0], [-np.inf, 1.0, 1.0, 1.0]], f32),
     [1, 3], None),
]


@pytest.mark.parametrize("name, x, t, blocks", CASES, ids=[c[0] for c in CASES])
def test_cross_entropy_kernels_within_the_derived_bounds(libs, name, x, t, blocks):
    t = np.asarray(t, np.int64)
    g = f32(-0.75)
    got, grad = _xent(libs[0], x, t, g, blocks)
    mod = reference("cross_entropy")
    ref = mod.forward((x,), targets=t)
    bound = D.xent_forward_bound(ref, _Ctx(x), U) + 4 * HALF_SUB
    assert abs(float(got) - float(ref.exact)) <= bound, (got, ref.exact)
    (dref,) = mod.vjp((x,), np.asarray(g), targets=t)
    vb = D.xent_vjp_bound(dref, _Ctx(x), U) + 4 * HALF_SUB
    assert np.all(np.abs(grad.astype(np.float64) - dref.exact) <= vb)
    # the same float64 formula as the tape rule's NumPy: equal but for libm and sum order
    assert np.all(np.abs(grad - cross_entropy_grad64(x, t, np.asarray(g))) <= 2 * vb)


def test_special_rows(libs):
    x = np.array([[1.0, np.nan, 0.0], [0.0, 1.0, 2.0]], f32)
    got, grad = _xent(libs[0], x, np.array([0, 1], np.int64), f32(1))
    assert np.isnan(got) and np.all(np.isnan(grad[0])) and np.all(np.isfinite(grad[1]))
    x = np.array([[-np.inf, 1.0, 0.0], [-np.inf, -np.inf, -np.inf]], f32)
    got, grad = _xent(libs[0], x[:1], np.array([0], np.int64), f32(1))
    assert got == np.inf and grad[0, 0] == -1.0 and grad[0, 1] > 0
    got, grad = _xent(libs[0], x, np.array([0, 1], np.int64), f32(1))
    assert np.isnan(got) and np.all(np.isnan(grad[1]))
    got, grad = _xent(libs[0], np.array([[-np.inf, 5.0]], f32), np.array([1], np.int64), f32(2))
    assert got == 0.0 and grad[0, 0] == 0.0 and grad[0, 1] == 0.0


# --- multi-tensor Adam --------------------------------------------------------------------------

SIZES = (0, 1, 4095, 4096, 4097, 10000, 3)
DECAY = (1, 0, 1, 1, 0, 1, 1)


def _adam_args(t, lr=1e-2, b1=0.9, b2=0.999):
    return (f32(lr), f32(b1), f32(b2), f32(1 - b1), f32(1 - b2), f32(1 - b1 ** t),
            f32(1 - b2 ** t), f32(1e-8))


def _f(v):
    return ctypes.c_float(float(v))


def test_multi_tensor_adam_equals_the_per_parameter_kernel_bit_for_bit(libs):
    lib = libs[1]
    rng = np.random.default_rng(6)
    shrink = f32(1 - 1e-2 * 0.1)
    params = [rng.standard_normal(n).astype(f32) for n in SIZES]
    start = [p.copy() for p in params]
    single = [p.copy() for p in params]
    ms = [np.zeros(n, f32) for n in SIZES]
    vs = [np.zeros(n, f32) for n in SIZES]
    ms1, vs1 = [m.copy() for m in ms], [v.copy() for v in vs]
    sizes = np.array(SIZES, np.uint32)
    decay = np.array(DECAY, np.uint32)
    chunks = chunk_list(list(SIZES))
    for step in (1, 2, 3):
        grads = [rng.standard_normal(n).astype(f32) for n in SIZES]
        skip = 5 if step == 2 else -1            # a parameter without a gradient this step
        table = np.array([p.ctypes.data for p in params] +
                         [0 if i == skip else g.ctypes.data for i, g in enumerate(grads)] +
                         [m.ctypes.data for m in ms] + [v.ctypes.data for v in vs], np.uint64)
        args = _adam_args(step)
        lib.emu_adam_multi(ctypes.c_uint(len(chunks) // 2), _p(table), ctypes.c_uint(len(SIZES)),
                           _p(sizes), _p(decay), _p(chunks), ctypes.c_uint(1), _f(shrink),
                           *[_f(a) for a in args])
        for i, n in enumerate(SIZES):
            if i == skip or n == 0:
                continue
            if DECAY[i]:
                single[i] *= shrink
            lib.emu_adam_step(ctypes.c_uint(2), _p(single[i]), _p(grads[i]), _p(ms1[i]),
                              _p(vs1[i]), ctypes.c_uint(n), *[_f(a) for a in args])
        for i in range(len(SIZES)):
            assert np.array_equal(params[i].view(np.uint32), single[i].view(np.uint32)), (step, i)
            assert np.array_equal(ms[i].view(np.uint32), ms1[i].view(np.uint32)), (step, i)
            assert np.array_equal(vs[i].view(np.uint32), vs1[i].view(np.uint32)), (step, i)
    assert all(not np.array_equal(p, p0) for p, p0 in zip(params, start) if p.size)


def test_set_ptrs_writes_one_window(libs):
    table = np.zeros(100, np.uint64)
    values = np.arange(1, 65, dtype=np.uint64) * 8
    libs[1].emu_set_ptrs(_p(table), ctypes.c_uint(30), ctypes.c_uint(40), _p(values))
    assert table[30:70].tolist() == values[:40].tolist()
    assert not table[:30].any() and not table[70:].any()


# --- bias_gelu ------------------------------------------------------------------------------------

class _GradCtx:
    def __init__(self, x, b, g, index):
        self.inputs, self.g, self.input_index = (x, b), g, index


@pytest.mark.parametrize("rows, d, chunks", [(1, 1, 1), (5, 7, 3), (130, 3, 64), (3, 300, 2)])
def test_bias_gelu_kernels_within_the_derived_bounds(libs, rows, d, chunks):
    from conformance.families import fused as B
    lib = libs[2]
    rng = np.random.default_rng(rows * d)
    x = (rng.standard_normal((rows, d)) * 3).astype(f32)
    x.reshape(-1)[:3] = [np.inf, -np.inf, -0.7518][: min(3, x.size)]
    b = rng.standard_normal(d).astype(f32)
    g = rng.standard_normal((rows, d)).astype(f32)
    y = np.full(x.shape, np.nan, f32)
    n = x.size
    lib.emu_bias_gelu_fwd(ctypes.c_uint(-(-n // 256)), _p(x), _p(b), _p(y), ctypes.c_uint(n),
                          ctypes.c_uint(d))
    chunk = -(-rows // chunks)
    chunks = -(-rows // chunk)
    part = np.full((chunks, d), np.nan)
    dx, db = np.full(x.shape, np.nan, f32), np.full(d, np.nan, f32)
    lib.emu_bias_gelu_bwd(ctypes.c_uint(-(-d // 256)), ctypes.c_uint(chunks), _p(x), _p(b),
                          _p(g), _p(dx), _p(part), ctypes.c_uint(rows), ctypes.c_uint(d),
                          ctypes.c_uint(chunk))
    lib.emu_bias_gelu_db(ctypes.c_uint(1), _p(part), _p(db), ctypes.c_uint(chunks),
                         ctypes.c_uint(d))
    mod = reference("bias_gelu")
    ref = mod.forward((x, b))
    bound = B.forward_bound(ref, _GradCtx(x, b, None, 0), U) + 4 * HALF_SUB
    assert np.array_equal(np.isnan(y), np.isnan(ref.value))
    fin = np.isfinite(ref.value)
    assert np.all(y[~fin] == ref.value[~fin])
    assert np.all(np.abs(y[fin].astype(np.float64) - ref.exact[fin]) <= bound[fin])
    rdx, rdb = mod.vjp((x, b), g)
    for i, (got, r) in enumerate(((dx, rdx), (db, rdb))):
        vb = B.vjp_bound(r, _GradCtx(x, b, g, i), U) + 4 * HALF_SUB
        assert np.all(np.abs(got.astype(np.float64) - r.exact) <= vb), i


def test_an_emulation_that_no_longer_builds_fails_and_only_a_missing_gxx_skips():
    from emulated.host_build import NO_GXX
    with pytest.raises(pytest.fail.Exception, match="could not build"):
        require("g++ could not build the emulation: error: no such instruction")
    with pytest.raises(pytest.skip.Exception):
        require(NO_GXX)
    assert require(f32) is f32   # a built library passes through
