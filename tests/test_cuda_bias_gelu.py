"""native_cuda.bias_gelu (the float32 kernels of engine/csrc/cuda/bias_gelu.cu, what the cuda
profiles plan) and native_cuda.bias_gelu.accurate (the float64 ones) on the GPU: forward and VJP
pass the harness's own check (mpmath reference, the declared bound and the derived rules,
repeatability, the inner-product identity) over row and column extents across the blocks and
chunks, gpt2's MLP width, d % 4 != 0 and unaligned views (the scalar path) and special values;
bits repeat run to run in both reduction modes; the float4 and scalar paths agree bit for bit;
empty shapes; the fused op agrees with the composition gelu(add(x, broadcast(b))) on CUDA."""
from types import SimpleNamespace

import numpy as np
import pytest

import cuda_helpers as H
from conformance.families import fused as R
from conformance import generators
from conformance.campaign import check_case
from conformance.error_terms import HALF_SUB
from conformance.references import get as reference
from engine import ops
from engine.registry import registry
from engine.runtime.deterministic import deterministic_reductions
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

FAST, ACCURATE = "native_cuda.bias_gelu", "native_cuda.bias_gelu.accurate"
pytestmark = [pytest.mark.cuda, pytest.mark.capsules(FAST, ACCURATE)]
f32 = np.float32
U = 2.0 ** -24
BOTH = pytest.mark.parametrize("name", [FAST, ACCURATE])

# (rows, d): one element, odd sizes, columns across the 256-thread block (accurate) and the
# 128-column float4 block (fast), rows across the chunks of the VJPs, gpt2-124m's MLP width 3072,
# one long column, one long row; d % 4 != 0 takes the fast kernels' scalar path
SHAPES = [(1, 1), (3, 7), (2, 257), (63, 5), (65, 3), (1000, 33), (16, 3072), (70000, 1),
          (1, 65537), (9, 132), (300, 128), (5, 4)]


def _case(x, b):
    return generators.Case(Entry.bias_gelu, "normal", (x, b), {}, seed=0, index=0)


@BOTH
@pytest.mark.parametrize("rows, d", SHAPES)
def test_native_passes_the_harness_check(name, rows, d):
    rng = np.random.default_rng(rows * 31 + d)
    x = (rng.standard_normal((rows, d)) * 3).astype(f32)
    b = rng.standard_normal(d).astype(f32)
    res = check_case(*registry().get(name), _case(x, b), {},
                     identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]
    assert res.vjp is not None and res.vjp.identity in ("passed", "skipped-nonsmooth")


@BOTH
def test_special_values_pass_the_harness_check(name):
    x = np.array([[np.inf, -np.inf, 1.0, np.nan, -0.7518, 3e38, -0.7524614, -1.0],
                  [0.0, -0.0, 1e-45, -20.0, 20.0, -3e38, -0.625, 10.5]], f32)
    b = np.array([0.0, 1.0, -np.inf, 0.0, 0.0, 3e38, 0.0, -0.25], f32)
    res = check_case(*registry().get(name), _case(x, b), {})
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]


@BOTH
@pytest.mark.parametrize("shape", [(4096, 512), (8192, 3072), (1000, 33)])
def test_forward_and_vjp_repeat_bit_for_bit_in_both_reduction_modes(name, shape):
    cp = H.cupy()
    h = registry().handler(name)
    rng = np.random.default_rng(5)
    x, b = cp.asarray(rng.standard_normal(shape).astype(f32)), \
        cp.asarray(rng.standard_normal(shape[1]).astype(f32))
    g = cp.asarray(rng.standard_normal(shape).astype(f32))
    first = (h.forward(x, b).get(), *(a.get() for a in h.vjp((x, b), None, g)))
    for mode in (False, True, False, True):
        with deterministic_reductions(mode):
            got = (h.forward(x, b), *h.vjp((x, b), None, g))
        for w, o, what in zip(first, got, ("y", "dx", "db")):
            H.assert_bitwise(o, w, f"{name} {what}, deterministic={mode}")


def _unaligned(cp, a):
    """A device copy of `a` 4 bytes past a 16-byte boundary (the fast kernels' scalar path)."""
    flat = cp.empty(a.size + 4, f32)
    view = flat[1:1 + a.size].reshape(a.shape)
    view[...] = cp.asarray(a)
    assert view.data.ptr % 16 == 4 and flat.data.ptr % 16 == 0
    return view


@pytest.mark.parametrize("shape", [(70, 12), (33, 3072), (1, 4)])
def test_fast_float4_and_scalar_paths_agree_bit_for_bit(shape):
    """Unaligned views take the scalar path: y and dx are the same floats; db too where both paths
    split the rows into the same chunks (checked here: the same chunk count), else within the
    derived rule."""
    from engine.providers.native_cuda.fused import f32_vjp_chunks
    cp = H.cupy()
    h = registry().handler(FAST)
    rng = np.random.default_rng(11)
    x, b = (rng.standard_normal(shape) * 3).astype(f32), rng.standard_normal(shape[1]).astype(f32)
    g = rng.standard_normal(shape).astype(f32)
    xa, ba, ga = cp.asarray(x), cp.asarray(b), cp.asarray(g)
    xu, bu, gu = _unaligned(cp, x), _unaligned(cp, b), _unaligned(cp, g)
    H.assert_bitwise(h.forward(xu, bu), h.forward(xa, ba), "forward, scalar vs float4")
    dxa, dba = h.vjp((xa, ba), None, ga)
    dxu, dbu = h.vjp((xu, bu), None, gu)
    H.assert_bitwise(dxu, dxa, "dx, scalar vs float4")
    rows, d = shape
    if f32_vjp_chunks(rows, -(-d // 128)) == f32_vjp_chunks(rows, -(-d // 32)):
        H.assert_bitwise(dbu, dba, "db, scalar vs float4")
    rdb = reference("bias_gelu").vjp((x, b), g)[1]
    ctx = SimpleNamespace(inputs=(x, b), g=g, input_index=1, params={})
    bound = R.f32_vjp_bound(rdb, ctx, U) + 4 * HALF_SUB
    for got in (dba, dbu):
        assert np.all(np.abs(H.to_host(got).astype(np.float64) - rdb.exact) <= bound)


@BOTH
@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0), (2, 0, 4)])
def test_empty_shapes(name, shape):
    cp = H.cupy()
    h = registry().handler(name)
    x, b = cp.zeros(shape, f32), cp.ones(shape[-1], f32)
    y = h.forward(x, b)
    dx, db = h.vjp((x, b), y, cp.ones(shape, f32))
    assert y.shape == shape and dx.shape == shape and db.shape == (shape[-1],)
    H.assert_bitwise(db, np.zeros(shape[-1], f32), f"{name}: db of no rows")


def test_the_two_capsules_run_different_kernels_near_each_other():
    """gpt2-124m's MLP shape through both capsules: the forwards within 2 + 1 ulp of each other
    (the declared bounds, both of the same rounded reference) and not the same floats
    everywhere (each capsule ran its own kernel)."""
    cp = H.cupy()
    rng = np.random.default_rng(3)
    x, b = cp.asarray(rng.standard_normal((8192, 3072)).astype(f32)), \
        cp.asarray(rng.standard_normal(3072).astype(f32))
    y_fast = registry().handler(FAST).forward(x, b)
    y_acc = registry().handler(ACCURATE).forward(x, b)
    H.assert_ulps(y_fast, y_acc, 3, "fast vs accurate forward")
    assert not np.array_equal(H.to_host(y_fast), H.to_host(y_acc))


def test_fused_agrees_with_the_composition_on_cuda():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((64, 96)) * 2).astype(f32)
    b = rng.standard_normal(96).astype(f32)
    w = rng.standard_normal((64, 96)).astype(f32)
    with use_session(Session("cuda")):
        a, c = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
        a2, c2 = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
        fused = ops.bias_gelu(a, c)
        composed = ops.gelu(ops.add(a2, ops.broadcast(c2, x.shape)))
        ops.reduce_sum(ops.mul(fused, tensor(w))).backward()
        ops.reduce_sum(ops.mul(composed, tensor(w))).backward()
        y1, y2 = H.to_host(fused.numpy()), H.to_host(composed.numpy())
        d1, d2 = H.to_host(a.grad.numpy()), H.to_host(a2.grad.numpy())
        b1, b2 = H.to_host(c.grad.numpy()), H.to_host(c2.grad.numpy())
    # checked_cuda plans the float32 capsules of both: gelu(s) and its VJP are the same functors
    # (tl_act_f32.cuh) of the same s = x + b, so y and dx are the same floats; db: the fused one
    # is the double sum of dx's columns rounded once (within 0.5 ulp + 2^-40 of the float64 sum),
    # the composition's broadcast VJP a float32 sum (cupy.sum): gamma_64 of sum |dx|
    H.assert_bitwise(y1, y2, "bias_gelu vs gelu(add)")
    H.assert_bitwise(d1, d2, "bias_gelu dx vs gelu(add)'s")
    col = np.abs(d1.astype(np.float64)).sum(axis=0)
    exact = d1.astype(np.float64).sum(axis=0)
    assert np.all(np.abs(b1 - exact) <= 2.0 ** -24 * np.abs(exact) + 2.0 ** -40 * col)
    assert np.all(np.abs(b2 - exact) <= 64 * 2.0 ** -24 * col)
