"""native_cuda.add_layer_norm (norm.cu's layer_norm kernels with the residual sum formed as each
row is loaded, the RES templates) on the GPU: the harness's own check (mpmath reference and the
declared bound) over every variant's row widths, d % 4 != 0, unaligned inputs (the scalar path)
and special values; the sum is the float32 add bit for bit and y is native layer_norm's at that
sum bit for bit (the same template, the same operation order); dgamma and dbeta are layer_norm's
VJP's bit for bit and dx is its float64 value plus the sum's cotangent, rounded once; bits repeat
in both reduction modes; a missing cotangent part (the tape's Parts with None) is zero; and a
pre-norm block built with the fused op trains like the composition on CUDA."""
import numpy as np
import pytest

import cuda_helpers as H
from conformance import generators
from conformance.campaign import check_case
from engine import ops
from engine.autograd import Parts
from engine.registry import registry
from engine.runtime.deterministic import deterministic_reductions
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

NAME, LN = "native_cuda.add_layer_norm", "native_cuda.layer_norm"
pytestmark = [pytest.mark.cuda, pytest.mark.capsules(NAME)]
f32 = np.float32

# (rows, d): each forward variant (w8 <= 256, v4 <= 512, v8 <= 1024 with d % 4 == 0, b4 (999),
# b8, b32, the general block-per-row kernel past 8192) and backward variant (w8, q4, q8, b8, b16,
# general past 4096); gpt2-124m's width 768; d % 4 != 0 and one-feature rows
SHAPES = [(1, 1), (3, 7), (50, 64), (33, 256), (9, 300), (40, 512), (64, 768), (4, 999), (7, 1000),
          (5, 1030), (3, 2048), (2, 4096), (2, 5000), (2, 8192), (1, 9001), (300, 5)]
# the kernels' own checks also at gpt2-124m's rows (the harness's mpmath reference is slow there)
KERNEL_SHAPES = SHAPES + [(8192, 768)]


def _inputs(rows, d, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, d)) * 2 + 0.5).astype(f32)
    r = rng.standard_normal((rows, d)).astype(f32)
    gamma = (1 + 0.1 * rng.standard_normal(d)).astype(f32)
    beta = (0.1 * rng.standard_normal(d)).astype(f32)
    return x, r, gamma, beta


def _case(arrays):
    return generators.Case(Entry.add_layer_norm, "normal", tuple(arrays), {"eps": 1e-5}, seed=0,
                           index=0)


@pytest.mark.parametrize("rows, d", SHAPES)
def test_native_passes_the_harness_check(rows, d):
    res = check_case(*registry().get(NAME), _case(_inputs(rows, d, rows * 31 + d)), {},
                     identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]
    assert res.vjp is not None and res.vjp.identity in ("passed", "skipped-nonsmooth")


def test_special_values_pass_the_harness_check():
    x = np.array([[np.inf, 1.0, 2.0, 3.0], [3e38, 3e38, 0.0, 1.0], [0.0, -0.0, 1e-45, 5.0],
                  [np.nan, 1.0, 1.0, 1.0], [1e30, 1e30, 1e30, 1e30]], f32)
    r = np.array([[0.0, 1.0, -2.0, 0.5], [3e38, 1.0, 0.0, -1.0], [-0.0, -0.0, -1e-45, 1.0],
                  [1.0, 1.0, 1.0, 1.0], [-1e30, -1e30, 1.0, -1e30]], f32)
    gamma, beta = np.array([1, 2, 0.5, -1], f32), np.array([0, 1, -1, 0.25], f32)
    res = check_case(*registry().get(NAME), _case((x, r, gamma, beta)), {})
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]


@pytest.mark.parametrize("rows, d", KERNEL_SHAPES)
def test_the_sum_is_the_add_and_y_is_layer_norms_bit_for_bit(rows, d):
    """Both halves against the unfused kernels run on the same sum: the add (x + r, correctly
    rounded) and native layer_norm at it, dgamma/dbeta of layer_norm's VJP at it; dx within one
    rounding of layer_norm's float64 dx plus gs (the fused kernel rounds the sum once, the
    composition twice: bounded by one ulp of each rounding)."""
    cp = H.cupy()
    x, r, gamma, beta = (cp.asarray(a) for a in _inputs(rows, d, 7 * rows + d))
    fused, ln = registry().handler(NAME), registry().handler(LN)
    out = fused.forward(x, r, gamma, beta, eps=1e-5)
    s = (x.get() + r.get()).astype(f32)
    H.assert_bitwise(out[0], s, "s = x + r")
    H.assert_bitwise(out[1], ln.forward(cp.asarray(s), gamma, beta, eps=1e-5), "y vs layer_norm")
    rng = np.random.default_rng(rows + d)
    g = cp.asarray(rng.standard_normal((2, rows, d)).astype(f32))
    dx, dr, dgamma, dbeta = fused.vjp((x, r, gamma, beta), out, g, eps=1e-5)
    assert dx is dr
    ln_dx, ln_dg, ln_db = ln.vjp((cp.asarray(s), gamma, beta), None, g[1], eps=1e-5)
    H.assert_bitwise(dgamma, ln_dg, "dgamma vs layer_norm's")
    H.assert_bitwise(dbeta, ln_db, "dbeta vs layer_norm's")
    want = H.to_host(ln_dx).astype(np.float64) + H.to_host(g[0]).astype(np.float64)
    got = H.to_host(dx).astype(np.float64)
    spacing = np.spacing(np.abs(H.to_host(ln_dx))).astype(np.float64)
    assert np.all(np.abs(got - want) <= spacing + np.spacing(np.abs(want).astype(f32)))


def test_a_missing_part_is_zero():
    """The tape's Parts: no cotangent for s gives layer_norm's dx (signed zeros aside: + 0.0);
    none for y gives dx = gs and zero dgamma, dbeta."""
    cp = H.cupy()
    x, r, gamma, beta = (cp.asarray(a) for a in _inputs(64, 768, 3))
    fused, ln = registry().handler(NAME), registry().handler(LN)
    out = fused.forward(x, r, gamma, beta)
    gy = cp.asarray(np.random.default_rng(4).standard_normal((64, 768)).astype(f32))
    dx, _, dg, db = fused.vjp((x, r, gamma, beta), out, Parts([None, gy]))
    ln_dx, ln_dg, ln_db = ln.vjp((out[0].copy(), gamma, beta), None, gy)
    zero = f32(0.0)   # on the host: CuPy's own kernels flush subnormals
    H.assert_bitwise(H.to_host(dx) + zero, H.to_host(ln_dx) + zero, "dx without gs")
    H.assert_bitwise(dg, ln_dg, "dgamma without gs")
    dx, _, dg, db = fused.vjp((x, r, gamma, beta), out, Parts([gy, None]))
    H.assert_bitwise(dx, gy, "dx without gy")
    H.assert_bitwise(dg, np.zeros(768, f32), "dgamma without gy")
    H.assert_bitwise(db, np.zeros(768, f32), "dbeta without gy")


def test_unaligned_inputs_take_the_scalar_path_with_the_same_sum():
    """x and r 4 bytes past a 16-byte boundary: the register (scalar) variant instead of the
    float4 one; the sum is the same floats, y within the declared bound of each other (the two
    variants' double sums run in different orders)."""
    cp = H.cupy()
    x, r, gamma, beta = _inputs(33, 768, 9)
    flat = cp.empty(2 * x.size + 8, f32)
    xu = flat[1:1 + x.size].reshape(x.shape)
    ru = flat[2 + x.size:2 + 2 * x.size].reshape(x.shape)
    xu[...], ru[...] = cp.asarray(x), cp.asarray(r)
    assert xu.data.ptr % 16 and ru.data.ptr % 16
    h = registry().handler(NAME)
    a = h.forward(cp.asarray(x), cp.asarray(r), cp.asarray(gamma), cp.asarray(beta))
    u = h.forward(xu, ru, cp.asarray(gamma), cp.asarray(beta))
    H.assert_bitwise(u[0], a[0], "s, scalar vs float4")
    H.assert_ulps(u[1], a[1], 1, "y, scalar vs float4", abs_floor=2.0 ** -40)


@pytest.mark.parametrize("shape", [(8192, 768), (64, 5000)])
def test_forward_and_vjp_repeat_bit_for_bit_in_both_reduction_modes(shape):
    cp = H.cupy()
    h = registry().handler(NAME)
    args = tuple(cp.asarray(a) for a in _inputs(*shape, 5))
    g = cp.asarray(np.random.default_rng(6).standard_normal((2,) + shape).astype(f32))
    out = h.forward(*args)
    first = (out.get(), *(a.get() for a in h.vjp(args, out, g)[1:]))
    for mode in (False, True, False, True):
        with deterministic_reductions(mode):
            out = h.forward(*args)
            got = (out, *h.vjp(args, out, g)[1:])
        for w, o, what in zip(first, got, ("out", "dx", "dgamma", "dbeta")):
            H.assert_bitwise(o, w, f"{what}, deterministic={mode}")


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 4)])
def test_empty_shapes(shape):
    cp = H.cupy()
    h = registry().handler(NAME)
    x, r = cp.zeros(shape, f32), cp.zeros(shape, f32)
    gamma, beta = cp.ones(shape[-1], f32), cp.zeros(shape[-1], f32)
    out = h.forward(x, r, gamma, beta)
    assert out.shape == (2,) + shape
    dx, dr, dg, db = h.vjp((x, r, gamma, beta), out, cp.ones((2,) + shape, f32))
    assert dx.shape == shape and dg.shape == (shape[-1],)
    H.assert_bitwise(dg, np.zeros(shape[-1], f32), "dgamma of no rows")


def test_a_block_with_the_fused_op_trains_like_the_composition_on_cuda():
    """x + a, then layer_norm of it, fed on (s into a second add, y into a product): the fused op
    and the composition give the same s and y bit for bit, and gradients within one rounding of
    each other (the fused dx rounds layer_norm's dx plus gs once; the composition rounds
    layer_norm's dx, then the tape's add)."""
    rng = np.random.default_rng(8)
    x, a = (rng.standard_normal((4, 32, 768)).astype(f32) for _ in range(2))
    w1, w2 = (rng.standard_normal((4, 32, 768)).astype(f32) for _ in range(2))
    gamma, beta = (1 + 0.1 * rng.standard_normal(768)).astype(f32), \
        (0.1 * rng.standard_normal(768)).astype(f32)
    results = []
    with use_session(Session("cuda")):
        for fused in (True, False):
            leaves = [tensor(v, requires_grad=True) for v in (x, a, gamma, beta)]
            if fused:
                s, y = ops.add_layer_norm(*leaves)
            else:
                s = ops.add(leaves[0], leaves[1])
                y = ops.layer_norm(s, leaves[2], leaves[3])
            loss = ops.add(ops.reduce_sum(ops.mul(s, tensor(w1))),
                           ops.reduce_sum(ops.mul(y, tensor(w2))))
            loss.backward()
            results.append([H.to_host(s.numpy()), H.to_host(y.numpy())]
                           + [H.to_host(t.grad.numpy()) for t in leaves])
    (s1, y1, dx1, da1, dg1, db1), (s2, y2, dx2, da2, dg2, db2) = results
    H.assert_bitwise(s1, s2, "s")
    H.assert_bitwise(y1, y2, "y")
    H.assert_bitwise(dx1, da1, "dx = da")
    # fused: round(v + gs); composition: round(round(v) + gs), v layer_norm's float64 dx: apart
    # by at most half an ulp of each of the three roundings (|v| ~ |dx - gs|; gs = w1 here)
    v = np.abs(dx2.astype(np.float64) - w1) * (1 + 2.0 ** -20)
    tol = np.spacing(np.abs(dx1)) + np.spacing(np.abs(dx2)) + np.spacing(v.astype(f32))
    assert np.all(np.abs(dx1.astype(np.float64) - dx2) <= tol), "dx, fused vs composition"
    H.assert_bitwise(dg1, dg2, "dgamma")
    H.assert_bitwise(db1, db2, "dbeta")
