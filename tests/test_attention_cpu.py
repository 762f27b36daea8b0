"""Attention on the reference path: hard-mask regressions and batched vs repeated single-sample."""
import numpy as np
import pytest

import engine
from engine import ops
from engine.errors import ParameterTypeError, ParameterValueError, ShapeError
from engine.nn import MultiHeadAttention

RNG = np.random.default_rng(7)
# Both paths evaluate the same float32 expression; BLAS may pick other accumulation orders for
# other row counts, each stage differing by at most 2 gamma_k sum|terms| (k <= 16 here, terms O(1)):
# about 4e-6 per stage, so 2e-5 bounds the five stages (declared, not fitted).
PATH_TOL = 2e-5


@pytest.mark.capsules("reference.scaled_dot_product_attention")
def test_sdpa_mask_regressions(cpu_session):
    q = engine.tensor(np.eye(2, 4, dtype=np.float32))
    k = engine.tensor(np.array([[1000, 0, 0, 0], [-1000, 0, 0, 0], [3, 0, 0, 0]], np.float32))
    v = engine.tensor(np.array([[1.0], [2.0], [3.0]], np.float32))
    mask = np.array([[False, True, False], [False, False, False]])
    out = ops.scaled_dot_product_attention(q, k, v, mask=mask, scale=1.0).numpy()
    np.testing.assert_array_equal(out, [[2.0], [0.0]])   # only key 1 participates; row 2 blocked
    with pytest.raises(ShapeError, match="mask must be boolean of shape"):
        ops.scaled_dot_product_attention(q, k, v, mask=np.ones((2, 2), bool))


@pytest.mark.capsules("reference.scaled_dot_product_attention")
def test_blocked_keys_get_exactly_zero_gradient(cpu_session):
    q = engine.tensor(RNG.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    k = engine.tensor(RNG.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
    v = engine.tensor(RNG.standard_normal((5, 2)).astype(np.float32), requires_grad=True)
    mask = np.ones((3, 5), bool)
    mask[:, 4] = False          # key 4 never participates
    mask[2, :] = False          # query 2 fully blocked
    ops.scaled_dot_product_attention(q, k, v, mask=mask).backward(
        RNG.standard_normal((3, 2)).astype(np.float32))
    assert np.all(k.grad.numpy()[4] == 0) and np.all(v.grad.numpy()[4] == 0)
    assert np.all(q.grad.numpy()[2] == 0)


@pytest.mark.capsules("reference.scaled_dot_product_attention")
def test_batched_attention_equals_repeated_single_sample(cpu_session):
    layer = MultiHeadAttention(model_dim=8, heads=2, seed=11)
    x = RNG.standard_normal((3, 5, 8)).astype(np.float32)
    mask = np.tril(np.ones((5, 5), bool))
    g = RNG.standard_normal((3, 5, 8)).astype(np.float32)

    xb = engine.tensor(x, requires_grad=True)
    layer(xb, mask=mask).backward(g)
    batched_out = layer(engine.tensor(x), mask=mask).numpy()
    batched_w = [p.grad.numpy().copy() for p in layer.parameters()]

    singles, xgrads = [], []
    w_sum = [np.zeros_like(w) for w in batched_w]
    for i in range(3):
        for p in layer.parameters():
            p.zero_grad()
        xi = engine.tensor(x[i], requires_grad=True)
        out = layer(xi, mask=mask)
        out.backward(g[i])
        singles.append(out.numpy())
        xgrads.append(xi.grad.numpy())
        w_sum = [a + p.grad.numpy() for a, p in zip(w_sum, layer.parameters())]
    np.testing.assert_allclose(batched_out, np.stack(singles), rtol=0, atol=PATH_TOL)
    np.testing.assert_allclose(xb.grad.numpy(), np.stack(xgrads), rtol=0, atol=PATH_TOL)
    for got, want in zip(batched_w, w_sum):
        np.testing.assert_allclose(got, want, rtol=0, atol=3 * PATH_TOL)
    ops_used = {op.label for op in cpu_session.dispatched}
    assert {"matmul", "permute", "reshape", "scaled_dot_product_attention"} <= ops_used


def test_layer_shape_errors(cpu_session):
    with pytest.raises(ShapeError, match="model_dim 6 must be a positive multiple of heads 4"):
        MultiHeadAttention(6, 4, seed=0)
    layer = MultiHeadAttention(4, 2, seed=0)
    with pytest.raises(ShapeError, match=r"mask shape \(2, 2\) should be"):
        layer(engine.tensor(np.ones((3, 4))), mask=np.ones((2, 2), bool))


@pytest.mark.parametrize("scale", [float("inf"), 1e39, True])
def test_attention_scale_must_fit_float32(cpu_session, scale):
    q = engine.tensor(np.ones((2, 4), np.float32))
    error = ParameterTypeError if isinstance(scale, bool) else ParameterValueError
    with pytest.raises(error, match="scale must be a"):
        ops.scaled_dot_product_attention(q, q, q, scale=scale)


def test_mask_expanded_per_head_equals_the_shared_mask(cpu_session):
    """A [batch * heads, t, t] mask (row block b * heads + j for sample b, head j) is the same
    attention as the [t, t] mask it expands: outputs and gradients bit for bit."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    shared = np.tril(np.ones((5, 5), bool))
    shared[3, 1] = False
    runs = []
    for mask in (shared, np.ascontiguousarray(np.broadcast_to(shared, (4, 5, 5)))):
        layer = MultiHeadAttention(4, 2, seed=1)
        xt = engine.tensor(x, requires_grad=True)
        out = layer(xt, mask=mask)
        out.backward(np.ones((2, 5, 4), np.float32))
        runs.append((out.numpy(), xt.grad.numpy()))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    # The wrong expansion (heads of one sample masked differently) is not silently accepted as
    # equal: a fully open mask gives other values.
    layer = MultiHeadAttention(4, 2, seed=1)
    open_out = layer(engine.tensor(x), mask=np.ones((4, 5, 5), bool)).numpy()
    assert not np.array_equal(open_out, runs[0][0])
