"""attention_heads (engine/ops/attention_heads.py) on the reference provider: values and gradients
equal bit for bit to the composition it replaces (reshape -> permute(0, 2, 1, 3) ->
scaled_dot_product_attention with the causal triangle expanded per (batch, head), or no mask ->
permute back -> reshape), and its argument errors."""
from __future__ import annotations

import numpy as np
import pytest

from engine import ops
from engine.errors import ParameterTypeError, ShapeError
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def _inputs(rng, b, t, h, d):
    return [tensor(rng.standard_normal((b, t, h * d)).astype(np.float32) * 2,
                   requires_grad=True) for _ in range(3)]


def _composed(q, k, v, h, causal, scale):
    b, t, w = q.shape
    d = w // h

    def split(x):
        return ops.reshape(ops.permute(ops.reshape(x, (b, t, h, d)), (0, 2, 1, 3)),
                           (b * h, t, d))
    mask = np.repeat(np.tril(np.ones((t, t), bool))[None], b * h, axis=0) if causal else None
    o = ops.scaled_dot_product_attention(split(q), split(k), split(v), mask=mask, scale=scale)
    return ops.reshape(ops.permute(ops.reshape(o, (b, h, t, d)), (0, 2, 1, 3)), (b, t, w))


def _run(fused, shape, causal, scale, seed):
    b, t, h, d = shape
    session = Session("cpu")
    with use_session(session):
        rng = np.random.default_rng(seed)
        q, k, v = _inputs(rng, b, t, h, d)
        g = rng.standard_normal((b, t, h * d)).astype(np.float32)
        out = (ops.attention_heads(q, k, v, h, causal=causal, scale=scale) if fused
               else _composed(q, k, v, h, causal, scale))
        loss = ops.reduce_sum(ops.mul(out, tensor(g)), (0, 1, 2))
        loss.backward()
        planned = session.kernel_for(RuntimeEntry.attention_heads).capsule.name \
            if fused else None
        return out.numpy(), [x.grad.numpy() for x in (q, k, v)], planned


@pytest.mark.capsules("reference.attention_heads")
@pytest.mark.parametrize("shape,causal,scale", [
    ((2, 5, 3, 4), True, None), ((1, 7, 1, 8), True, None), ((2, 6, 4, 2), False, None),
    ((3, 1, 2, 3), True, 0.37), ((1, 9, 12, 2), True, None), ((2, 4, 2, 5), False, 1e3)])
def test_values_and_gradients_equal_the_composition_bit_for_bit(shape, causal, scale):
    out, grads, planned = _run(True, shape, causal, scale, 11)
    want, want_grads, _ = _run(False, shape, causal, scale, 11)
    assert planned == "reference.attention_heads"
    assert out.shape == want.shape and np.array_equal(_bits(out), _bits(want))
    for name, got, exp in zip("qkv", grads, want_grads):
        assert np.array_equal(_bits(got), _bits(exp)), name
    # the causal triangle is really applied: query row 0 attends only key 0, so out[:, 0] is v's
    # row 0 per head (a one-term softmax is exactly 1)
    if causal:
        b, t, h, d = shape
        rng = np.random.default_rng(11)
        v = [rng.standard_normal((b, t, h * d)).astype(np.float32) * 2 for _ in range(3)][2]
        assert np.array_equal(_bits(out[:, 0]), _bits(v[:, 0]))


@pytest.mark.capsules("reference.attention_heads")
def test_empty_tokens_and_batch():
    with use_session(Session("cpu")):
        for shape in ((0, 4, 6), (2, 0, 6)):
            q = tensor(np.zeros(shape, np.float32), requires_grad=True)
            out = ops.attention_heads(q, q, q, 3)
            assert out.shape == shape


@pytest.mark.parametrize("args,needle", [
    (((2, 3, 6), (2, 3, 6), (2, 4, 6), 3), "equal rank-3 shapes"),
    (((2, 3, 6), (2, 3, 6), (2, 3, 6), 4), "must be a positive int dividing the width 6"),
    (((2, 3, 6), (2, 3, 6), (2, 3, 6), 0), "must be a positive int"),
    (((3, 6), (3, 6), (3, 6), 3), "equal rank-3 shapes"),
])
def test_shape_errors_name_what_was_given(args, needle):
    *shapes, heads = args
    with use_session(Session("cpu")):
        q, k, v = (tensor(np.zeros(s, np.float32)) for s in shapes)
        with pytest.raises(ShapeError, match=needle):
            ops.attention_heads(q, k, v, heads)


def test_causal_and_heads_types():
    with use_session(Session("cpu")):
        q = tensor(np.zeros((1, 2, 4), np.float32))
        with pytest.raises(ParameterTypeError, match="causal must be True or False, got "
                                                     "'causal'"):
            ops.attention_heads(q, q, q, 2, causal="causal")
        with pytest.raises(ParameterTypeError, match="heads must be an int, got bool True"):
            ops.attention_heads(q, q, q, True)


def _mha_run(monkeypatch, packed: bool):
    from engine import nn
    from engine.nn import attention as nn_attention
    monkeypatch.setattr(nn_attention, "heads_planned", lambda: packed)
    session = Session("cpu")
    with use_session(session):
        layer = nn.MultiHeadAttention(12, 3, 4)
        rng = np.random.default_rng(2)
        x = tensor(rng.standard_normal((2, 9, 12)).astype(np.float32), requires_grad=True)
        out = layer(x, mask="causal")
        ops.reduce_sum(ops.mul(out, out), (0, 1, 2)).backward()
        grads = [p.grad.numpy() for p in layer.parameters()] + [x.grad.numpy()]
    return out.numpy(), grads, set(session.dispatched)


def test_multi_head_attention_causal_packed_equals_the_permuted_path(monkeypatch):
    """MultiHeadAttention(mask="causal"): attention_heads where planned, else the triangle
    expanded per head through permutes and scaled_dot_product_attention: the same bits."""
    out, grads, used = _mha_run(monkeypatch, True)
    want, want_grads, want_used = _mha_run(monkeypatch, False)
    assert RuntimeEntry.attention_heads in used
    assert not {ops.BackendOp.permute, ops.BackendOp.scaled_dot_product_attention} & used
    assert RuntimeEntry.attention_heads not in want_used
    assert np.array_equal(_bits(out), _bits(want))
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        assert np.array_equal(_bits(g), _bits(w)), i


def test_multi_head_attention_names_the_one_string_mask():
    from engine import nn
    with use_session(Session("cpu")):
        layer = nn.MultiHeadAttention(4, 2, 0)
        with pytest.raises(ShapeError, match="mask 'upper' is not a mask; the one named mask is "
                                             "\"causal\""):
            layer(tensor(np.zeros((1, 3, 4), np.float32)), mask="upper")


def test_accurate_cuda_leaves_attention_heads_unplanned():
    """accurate_cuda's composed attention is not the flash kernels: it runs the composition."""
    from engine.models import gpt2
    from engine.profile import ACCURATE_CUDA, CHECKED_CPU
    plan = ACCURATE_CUDA.plan([RuntimeEntry.attention_heads])
    assert RuntimeEntry.attention_heads not in plan.selected
    assert any("does not plan the fused entry `attention_heads`" in why
               for _, why in plan.rejections[RuntimeEntry.attention_heads])
    assert ops.BackendOp.permute in gpt2.ops_for(ACCURATE_CUDA)
    assert gpt2.ops_for(CHECKED_CPU) == gpt2.OPS


def test_the_oracle_is_the_sdpa_oracle_per_head():
    """conformance/references/attention_heads.py: causal query 0 attends key 0 alone, so its
    output is v's row 0 exactly and its dq an exact +0 (dS = P (dP - P dP) = 0); a head's
    values are the sdpa oracle's on that head's columns."""
    from conformance.references import attention_heads as oracle
    from conformance.references import scaled_dot_product_attention as sdpa
    rng = np.random.default_rng(8)
    q, k, v, g = (rng.standard_normal((1, 4, 6)).astype(np.float32) for _ in range(4))
    out = oracle.forward((q, k, v), heads=2, causal=True, scale=0.5)
    assert np.array_equal(_bits(out.value[:, 0]), _bits(v[:, 0])) and out.kind == "composite"
    dq, dk, dv = oracle.vjp((q, k, v), g, heads=2, causal=True, scale=0.5)
    assert np.array_equal(_bits(dq.value[0, 0]), np.zeros(6, np.uint32))
    head1 = sdpa.forward(tuple(x[:, :, 3:] for x in (q, k, v)),
                         mask=np.tril(np.ones((1, 4, 4), bool)), scale=0.5)
    assert np.array_equal(_bits(out.value[:, :, 3:]), _bits(head1.value))
    assert np.array_equal(out.terms[0, :, 0], [1, 2, 3, 4])   # participants per query row
