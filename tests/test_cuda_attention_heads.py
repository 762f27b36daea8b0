"""native_cuda.attention_heads on the GPU: the flash kernels on the packed [B, T, H*D] layout with
the implicit causal mask (or none) give the bits of native_cuda.flash_attention on the permuted
[B*H, T, D] copies with the causal triangle as a mask tensor (the same float operations in the
same order), forward and VJP, for T off the 64-row tile, D in {32, 64, 128}, H 1 and 12; the
harness's own check (mpmath reference, the flash bound per head) passes; bits repeat; and through
the ops on a checked_cuda session the entry equals the composition (reshape, permute, attention,
permute back) bit for bit, values and gradients."""
import numpy as np
import pytest

import cuda_helpers as H
from conformance import generators
from conformance.campaign import check_case
from engine import ops
from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.registry import registry
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = [pytest.mark.cuda, pytest.mark.capsules("native_cuda.attention_heads")]
f32 = np.float32

# (B, T, H, D, causal): T off and on the 64-row tile, every kernel width, H 1 and 12, no mask
# too, and gpt2-124m's layer (8, 1024, 12, 64)
SHAPES = [(2, 70, 12, 64, True), (1, 130, 1, 32, True), (2, 65, 12, 128, True),
          (3, 33, 1, 64, True), (2, 200, 12, 32, True), (1, 64, 12, 64, True),
          (2, 100, 3, 64, False), (1, 129, 12, 128, False), (8, 1024, 12, 64, True)]
IDS = [f"{b}x{t}x{h}x{d}-{'causal' if c else 'none'}" for b, t, h, d, c in SHAPES]


def _data(b, t, h, d, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((b, t, h * d)).astype(f32) for _ in range(4)]


def _bits(a):
    return np.ascontiguousarray(H.to_host(a), f32).view(np.uint32)


@pytest.mark.parametrize("b,t,h,d,causal", SHAPES, ids=IDS)
def test_packed_layout_equals_flash_on_the_permuted_copies_bit_for_bit(b, t, h, d, causal):
    cp = H.cupy()
    q, k, v, g = (cp.asarray(x) for x in _data(b, t, h, d))
    scale = float(f32(1.0 / np.sqrt(d)))
    _, heads = registry().get("native_cuda.attention_heads")
    _, flash = registry().get("native_cuda.flash_attention")
    out = heads.forward(q, k, v, heads=h, causal=causal, scale=scale)
    grads = heads.vjp((q, k, v), out, g, heads=h, causal=causal, scale=scale)
    split = [split_heads(x, h) for x in (q, k, v)]
    mask = causal_mask(cp, b * h, t) if causal else None
    want = flash.forward(*split, mask=mask, scale=scale)
    want_grads = flash.vjp(split, want, split_heads(g, h), mask=mask, scale=scale)
    H.assert_bitwise(out, merge_heads(want, b, h), "attention_heads forward")
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want_grads):
        H.assert_bitwise(got, merge_heads(exp, b, h), f"attention_heads {name}")


@pytest.mark.parametrize("b,t,h,d,causal", [(1, 70, 2, 32, True), (2, 33, 3, 64, False),
                                            (1, 65, 1, 128, True)])
def test_native_passes_the_harness_check(b, t, h, d, causal):
    q, k, v, _ = _data(b, t, h, d, seed=3)
    case = generators.Case(Entry.attention_heads, "normal", (q, k, v),
                           {"heads": h, "causal": causal, "scale": float(f32(d ** -0.5))},
                           seed=0, index=0)
    res = check_case(*registry().get("native_cuda.attention_heads"), case, {},
                     identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]


def test_forward_and_vjp_repeat_bit_for_bit():
    cp = H.cupy()
    q, k, v, g = (cp.asarray(x) for x in _data(4, 300, 12, 64, seed=9))
    _, heads = registry().get("native_cuda.attention_heads")

    def run():
        out = heads.forward(q, k, v, heads=12, causal=True, scale=0.125)
        return [out.get()] + [x.get() for x in heads.vjp((q, k, v), out, g, heads=12,
                                                           causal=True, scale=0.125)]
    first = run()
    for _ in range(3):
        for a, w in zip(run(), first):
            H.assert_bitwise(a, w, "attention_heads repeat")


def _step(fused: bool, b=2, t=130, h=12, d=64):
    session = Session("cuda")
    with use_session(session):
        q, k, v, g = (tensor(x, requires_grad=True) for x in _data(b, t, h, d, seed=4))
        if fused:
            out = ops.attention_heads(q, k, v, h)
        else:
            def split(x):
                return ops.reshape(ops.permute(ops.reshape(x, (b, t, h, d)), (0, 2, 1, 3)),
                                   (b * h, t, d))
            mask = np.repeat(np.tril(np.ones((t, t), bool))[None], b * h, axis=0)
            o = ops.scaled_dot_product_attention(split(q), split(k), split(v), mask=mask)
            out = ops.reshape(ops.permute(ops.reshape(o, (b, h, t, d)), (0, 2, 1, 3)),
                              (b, t, h * d))
        ops.reduce_sum(ops.mul(out, tensor(_data(b, t, h, d, seed=5)[0])), (0, 1, 2)).backward()
        return out.numpy(), [x.grad.numpy() for x in (q, k, v)], set(session.dispatched)


def test_the_entry_equals_the_composition_on_checked_cuda():
    out, grads, used = _step(True)
    want, want_grads, want_used = _step(False)
    assert Entry.attention_heads in used and Entry.attention_heads not in want_used
    H.assert_bitwise(out, want, "attention_heads vs composition")
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want_grads):
        H.assert_bitwise(got, exp, f"attention_heads vs composition {name}")
