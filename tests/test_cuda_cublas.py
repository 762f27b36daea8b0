"""cublas.matmul and cublas.linear: values within gamma_k * sum|a_i b_i| of a float64 product
(which a TF32 path would break), VJPs the same way, and the transpose-flag path making no copy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda


def _stored(shape, trans, r):
    """A matrix whose *logical* shape is `shape`, stored transposed when `trans` is set."""
    s = shape[:-2] + (shape[-1], shape[-2]) if trans else shape
    return r.standard_normal(s).astype(np.float32)


def _op(x, trans):
    return np.swapaxes(x, -1, -2) if trans else x


def _check_product(got, a, b, k, what):
    """Every element within 2 gamma_k sum|a_i b_i| of the float64 product (2: ours and the
    bound's slack for the float64 reference)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = 2 * H.gamma(k) * (np.abs(a64) @ np.abs(b64)) + 1e-30
    err = np.abs(H.to_host(got).astype(np.float64) - want)
    assert np.all(err <= bound), f"{what}: worst error/bound {np.max(err / bound):.3g}"
    # TF32 keeps 10 mantissa bits: its error would be ~2^-11 relative, far above gamma_k here.
    return float(np.max(err / bound))


@pytest.mark.capsules("cublas.matmul")
@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("batch", [None, 3])
def test_matmul_forward_and_vjp_every_flag(trans_a, trans_b, batch):
    cp = H.cupy()
    r = np.random.default_rng(17)
    m, k, n = 33, 257, 19
    pre = (batch,) if batch else ()
    a = _stored(pre + (m, k), trans_a, r)
    b = _stored(pre + (k, n), trans_b, r)
    from engine.registry import registry
    handler = registry().handler("cublas.matmul")
    params = {"trans_a": trans_a, "trans_b": trans_b}
    out = handler.forward(cp.asarray(a), cp.asarray(b), **params)
    assert out.shape == pre + (m, n)
    _check_product(out, _op(a, trans_a), _op(b, trans_b), k, "matmul forward")
    g = r.standard_normal(pre + (m, n)).astype(np.float32)
    da, db = handler.vjp((cp.asarray(a), cp.asarray(b)), out, cp.asarray(g), **params)
    assert da.shape == a.shape and db.shape == b.shape
    # dop(A) = G op(B)^T, dop(B) = op(A)^T G, mapped back through the flags.
    _check_product(da, *( (_op(b, trans_b), np.swapaxes(g, -1, -2)) if trans_a else
                         (g, np.swapaxes(_op(b, trans_b), -1, -2)) ), n, "matmul dA")
    _check_product(db, *( (np.swapaxes(g, -1, -2), _op(a, trans_a)) if trans_b else
                         (np.swapaxes(_op(a, trans_a), -1, -2), g) ), m, "matmul dB")


@pytest.mark.capsules("cublas.linear")
def test_linear_forward_and_vjp():
    cp = H.cupy()
    from engine.registry import registry
    handler = registry().handler("cublas.linear")
    r = np.random.default_rng(4)
    x = r.standard_normal((4, 5, 64)).astype(np.float32)
    w = r.standard_normal((24, 64)).astype(np.float32)
    b = r.standard_normal(24).astype(np.float32)
    out = handler.forward(cp.asarray(x), cp.asarray(w), cp.asarray(b))
    assert out.shape == (4, 5, 24)
    want = x.reshape(-1, 64).astype(np.float64) @ w.T.astype(np.float64) + b
    bound = 2 * H.gamma(65) * (np.abs(x.reshape(-1, 64)) @ np.abs(w.T) + np.abs(b))
    assert np.all(np.abs(out.get().reshape(-1, 24) - want) <= bound)
    g = r.standard_normal((4, 5, 24)).astype(np.float32)
    dx, dw, db = handler.vjp(tuple(cp.asarray(v) for v in (x, w, b)), out, cp.asarray(g))
    g2 = g.reshape(-1, 24)
    _check_product(dx.reshape(-1, 64), g2, w, 24, "linear dx")
    _check_product(dw, g2.T, x.reshape(-1, 64), 20, "linear dw")
    _check_product(db.reshape(1, 24), np.ones((1, 20), np.float32), g2, 20, "linear db")


def _allocations(fn):
    from engine.runtime.allocator import allocator_stats
    cp = H.cupy()
    cp.cuda.Device().synchronize()
    before = allocator_stats()
    result = fn()
    cp.cuda.Device().synchronize()
    after = allocator_stats()
    return result, after.alloc_count - before.alloc_count, after.live_bytes - before.live_bytes


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_transpose_flags_make_no_copy(trans_a, trans_b):
    """Forward: exactly one allocation (the output); VJP: exactly two (dA, dB). A transposed
    copy of any operand would be one more allocation through the same allocator; the control
    below shows that such a copy is counted."""
    cp = H.cupy()
    from engine.registry import registry
    handler = registry().handler("cublas.matmul")
    r = np.random.default_rng(2)
    a = cp.asarray(_stored((64, 48), trans_a, r))
    b = cp.asarray(_stored((48, 40), trans_b, r))
    g = cp.asarray(r.standard_normal((64, 40)).astype(np.float32))
    params = {"trans_a": trans_a, "trans_b": trans_b}
    handler.vjp((a, b), handler.forward(a, b, **params), g, **params)   # warm: handle, workspace
    out, n_fwd, live_fwd = _allocations(lambda: handler.forward(a, b, **params))
    assert (n_fwd, live_fwd) == (1, out.nbytes)
    grads, n_vjp, live_vjp = _allocations(lambda: handler.vjp((a, b), out, g, **params))
    assert (n_vjp, live_vjp) == (2, grads[0].nbytes + grads[1].nbytes)
    copy, n_copy, _ = _allocations(lambda: cp.ascontiguousarray(a.T))
    assert n_copy == 1 and copy.shape == a.T.shape   # the control: a copy is visible


def test_products_go_through_cublas_in_a_cuda_session():
    from engine import ops
    from engine.tensor import tensor
    r = np.random.default_rng(8)
    with H.cuda_session() as session:
        x = tensor(r.standard_normal((6, 3)).astype(np.float32), requires_grad=True)
        w = tensor(r.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
        b = tensor(r.standard_normal(4).astype(np.float32), requires_grad=True)
        target = tensor(r.standard_normal((6, 3)).astype(np.float32))
        z = ops.matmul(ops.linear(x, w, b), w)
        ops.mse_loss(z, target).backward()
        report = session.backend_report()
    assert "linear: cublas.linear" in report and "matmul: cublas.matmul" in report
    assert "provider=cublas" in report and "mse_loss: native_cuda.mse_loss" in report
    for t in (x, w, b):
        assert t.grad is not None and np.all(np.isfinite(t.grad.numpy()))
