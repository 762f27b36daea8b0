"""Attention on CUDA: torchlean.composed_attention (cuBLAS + native hard-masked softmax, tape VJP),
native_cuda.direct_attention (fused kernels, backend VJP) and, where torch imports,
libtorch.sdpa_forward (torch forward, tape VJP), against a float64 oracle and each other.

The oracle is the reference forward (float64, rounded once) and the tape rule `_sdpa_vjp`
evaluated on float64 copies of the inputs (rounded once). Tolerances, declared here:
- direct (float64 inside, rounded once): 2 ulps, plus 2^-26 of the tensor's largest magnitude for
  entries that cancel (a quarter of a float32 ulp there; float64 sums err far less);
- composed and libtorch (float32 products): ATTN_C * (d + Lk + dv) * u of the tensor's largest
  magnitude: two float32 products of length <= d + Lk (gamma_k each), the score error amplified
  through exp (at most 16 d u relative for scores of size |q||k| scale <= 16), and a few roundings.
Mask properties (blocked is exactly zero) are asserted exactly for every capsule.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuda_helpers as H
from engine.types import BackendOp as Op, Provider

pytestmark = pytest.mark.cuda

ATTN_C = 32
PATH_TOL = 2e-5   # as tests/test_attention_cpu.py: five float32 stages of length <= 16


def _have_torch() -> bool:
    from engine.providers.libtorch import torch_present
    return torch_present()


def _handler(name):
    from engine.registry import registry
    return registry().get(name)[1]


CAPSULES = ["torchlean.composed_attention", "native_cuda.direct_attention",
            "libtorch.sdpa_forward"]


def _skip_absent(name):
    if name.startswith("libtorch") and not _have_torch():
        pytest.skip("torch is not importable here: libtorch.sdpa_forward is unavailable")


def _run(name, q, k, v, mask, scale, g):
    """Forward and (q, k, v) gradients of one capsule as the tape would compute them."""
    cp = H.cupy()
    from engine.ops._dispatch import LOCAL_VJP
    import engine.ops  # noqa: F401
    h = _handler(name)
    dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
    dm = None if mask is None else cp.asarray(mask)
    out = h.forward(dq, dk, dv, mask=dm, scale=scale)
    vjp = h.vjp or LOCAL_VJP[Op.scaled_dot_product_attention]
    grads = vjp((dq, dk, dv), out, cp.asarray(g), mask=dm, scale=scale)
    return out.get(), [x.get() for x in grads]


def _oracle(q, k, v, mask, scale, g):
    from engine.ops.attention import _sdpa_vjp
    out = H.reference_forward("scaled_dot_product_attention")(q, k, v, mask=mask, scale=scale)
    with np.errstate(all="ignore"):
        grads = _sdpa_vjp(tuple(x.astype(np.float64) for x in (q, k, v)), None,
                          g.astype(np.float64), mask, scale)
    return out, list(grads)


def _close(name, got, want, what, d, lk, dv):
    big = float(np.max(np.abs(want), initial=0.0))
    if name == "native_cuda.direct_attention":
        H.assert_ulps(got, want, 2, f"{name} {what}", abs_floor=2.0 ** -26 * big)
    else:
        tol = ATTN_C * (d + lk + dv) * H.U * big
        H.assert_ulps(got, want, 0, f"{name} {what}", abs_floor=tol)


@pytest.mark.capsules("{name}")
@pytest.mark.parametrize("name", CAPSULES)
def test_mask_regressions(name):
    """scores [1000, -1000, 3, 4] with mask [F, T, F, F] give [0, 1, 0, 0]; a fully blocked row
    gives zeros; an allowed logit of -5000 beats a blocked one (a finite sentinel of -1000 for
    the blocked entry would win instead)."""
    _skip_absent(name)
    q = np.array([[1.0], [1.0], [-5.0]], np.float32)
    k = np.array([[1000.0], [-1000.0], [3.0], [4.0]], np.float32)
    v = np.eye(4, dtype=np.float32)
    mask = np.array([[False, True, False, False], [False] * 4, [True, False, False, False]])
    g = np.ones((3, 4), np.float32)
    out, (gq, gk, gv) = _run(name, q, k, v, mask, 1.0, g)
    want = np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], np.float32)
    if name.startswith("libtorch"):
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-6)
    else:
        np.testing.assert_array_equal(out, want)
    assert np.all(gq[1] == 0), "a fully blocked query row has zero dq"
    assert np.all(gk[[2, 3]] == 0) and np.all(gv[[2, 3]] == 0), "keys nobody attends: zero"


def _masked_case(seed, batch=3, lq=37, lk=45, d=16, dv=8):
    r = np.random.default_rng(seed)
    q = r.standard_normal((batch, lq, d)).astype(np.float32)
    k = r.standard_normal((batch, lk, d)).astype(np.float32)
    v = r.standard_normal((batch, lk, dv)).astype(np.float32)
    g = r.standard_normal((batch, lq, dv)).astype(np.float32)
    mask = r.random((batch, lq, lk)) < 0.7
    mask[0, 5, :] = False          # a fully blocked query row
    mask[1, :, 7] = False          # a key no query attends
    return q, k, v, mask, g


@pytest.mark.capsules("{name}")
@pytest.mark.parametrize("name", CAPSULES)
def test_masked_forward_dq_dk_dv_against_float64(name):
    _skip_absent(name)
    q, k, v, mask, g = _masked_case(1)
    scale = float(np.float32(1 / 4))
    out, grads = _run(name, q, k, v, mask, scale, g)
    want, wgrads = _oracle(q, k, v, mask, scale, g)
    _close(name, out, want, "forward", 16, 45, 8)
    for what, gv, wv in zip(("dq", "dk", "dv"), grads, wgrads):
        _close(name, gv, wv, what, 16, 45, 8)
    assert np.all(out[0, 5] == 0) and np.all(grads[0][0, 5] == 0)
    assert np.all(grads[1][1, 7] == 0) and np.all(grads[2][1, 7] == 0)


@pytest.mark.capsules("native_cuda.direct_attention")
@pytest.mark.parametrize("shape", [(1, 5, 3000, 64, 64), (1, 9, 1000, 16, 16), (2, 70, 300, 24, 40),
                                   (4, 33, 1, 8, 8), (1, 3, 200, 500, 30), (1, 3, 20, 600, 400),
                                   (1, 2, 5, 2000, 1000)])
def test_direct_attention_tiles_and_sizes(shape):
    """Sizes that select every tile height the VJP can take (query tiles of 8, 4, 2 rows in the
    forward, 8, 4, 2, 1 in the row pass, key tiles of 8, 4, 2, 1 in the column pass), query counts
    that are not multiples of the tile, a single key, and wide heads."""
    batch, lq, lk, d, dv = shape
    r = np.random.default_rng(lk)
    q, k = (r.standard_normal((batch, n, d)).astype(np.float32) * 0.3 for n in (lq, lk))
    v = r.standard_normal((batch, lk, dv)).astype(np.float32)
    g = r.standard_normal((batch, lq, dv)).astype(np.float32)
    mask = r.random((batch, lq, lk)) < 0.9
    scale = float(np.float32(d ** -0.5))
    out, grads = _run("native_cuda.direct_attention", q, k, v, mask, scale, g)
    want, wgrads = _oracle(q, k, v, mask, scale, g)
    _close("native_cuda.direct_attention", out, want, f"forward {shape}", d, lk, dv)
    for what, gv, wv in zip(("dq", "dk", "dv"), grads, wgrads):
        _close("native_cuda.direct_attention", gv, wv, f"{what} {shape}", d, lk, dv)


@pytest.mark.capsules("native_cuda.direct_attention")
def test_direct_attention_long_rows_forward_and_the_shared_memory_limit():
    """5000 keys: the forward takes one query row per block; the VJP's row pass would need
    more than 48 KiB for one row and refuses with a ShapeError naming the composed capsule."""
    from engine.errors import ShapeError
    cp = H.cupy()
    r = np.random.default_rng(2)
    q = (r.standard_normal((1, 3, 64)) * 0.3).astype(np.float32)
    k = (r.standard_normal((1, 5000, 64)) * 0.3).astype(np.float32)
    v = r.standard_normal((1, 5000, 64)).astype(np.float32)
    mask = r.random((1, 3, 5000)) < 0.5
    h = _handler("native_cuda.direct_attention")
    args = tuple(cp.asarray(x) for x in (q, k, v))
    out = h.forward(*args, mask=cp.asarray(mask), scale=0.125)
    want = H.reference_forward("scaled_dot_product_attention")(q, k, v, mask=mask, scale=0.125)
    _close("native_cuda.direct_attention", out.get(), want, "forward, 5000 keys", 64, 5000, 64)
    with pytest.raises(ShapeError, match="torchlean.composed_attention"):
        h.vjp(args, out, cp.asarray(np.ones((1, 3, 64), np.float32)), mask=cp.asarray(mask),
              scale=0.125)
    with pytest.raises(ShapeError, match="torchlean.composed_attention"):
        h.forward(*(cp.asarray(x) for x in (q, np.zeros((1, 7000, 64), np.float32),
                                            np.zeros((1, 7000, 64), np.float32))), scale=0.125)


@pytest.mark.capsules("torchlean.composed_attention", "native_cuda.direct_attention")
def test_blocked_key_data_never_leaks_into_the_forward():
    """An inf or NaN in a blocked key's v (or k) row takes no part: composed's GEMM would make
    0 * NaN = NaN, which tl_attn_fixup recomputes over the participants; direct skips the key."""
    q, k, v, mask, g = _masked_case(4, batch=2, lq=9, lk=12)
    mask[:, :, 3] = False
    v[:, 3, :] = np.nan
    v[:, 3, 0] = np.inf
    k[:, 3, :] = np.nan
    want = H.reference_forward("scaled_dot_product_attention")(q, k, v, mask=mask, scale=0.25)
    assert np.all(np.isfinite(want))
    for name in CAPSULES[:2]:
        out, grads = _run(name, q, k, v, mask, 0.25, g)
        assert np.all(np.isfinite(out)), name
        _close(name, out, want, "forward with non-finite blocked data", 16, 12, 8)
    _, grads = _run("native_cuda.direct_attention", q, k, v, mask, 0.25, g)
    assert all(np.all(np.isfinite(np.delete(x, 3, axis=1))) for x in grads[1:])
    assert np.all(np.isfinite(grads[0])) and np.all(grads[1][:, 3] == 0)


@pytest.mark.capsules("torchlean.composed_attention", "native_cuda.direct_attention", "libtorch.sdpa_forward")
@pytest.mark.parametrize("masked", [False, True])
def test_composed_direct_and_libtorch_agree(masked):
    q, k, v, mask, g = _masked_case(7, batch=4, lq=64, lk=64, d=32, dv=32)
    mask = mask if masked else None
    scale = float(np.float32(32 ** -0.5))
    want, wgrads = _oracle(q, k, v, mask, scale, g)
    results = {}
    for name in CAPSULES:
        if name.startswith("libtorch") and not _have_torch():
            continue
        results[name] = _run(name, q, k, v, mask, scale, g)
        out, grads = results[name]
        _close(name, out, want, f"forward masked={masked}", 32, 64, 32)
        for what, gv, wv in zip(("dq", "dk", "dv"), grads, wgrads):
            _close(name, gv, wv, f"{what} masked={masked}", 32, 64, 32)
    if masked:
        for name, (out, grads) in results.items():
            assert np.all(out[0, 5] == 0) and np.all(grads[0][0, 5] == 0), name


def _profile(kind: str):
    from engine.profile import CHECKED_CUDA, LIBTORCH_FORWARD_CUDA
    if kind == "libtorch":
        return LIBTORCH_FORWARD_CUDA
    if kind == "flash":
        return CHECKED_CUDA          # its attention since the flash capsule's evidence came in
    order = (Provider.torchlean, Provider.cublas, Provider.native_cuda) if kind == "composed" \
        else (Provider.native_cuda, Provider.cublas, Provider.torchlean)
    # No op or variant preference: checked_cuda's (flash first) would outrank `order`.
    return dataclasses.replace(CHECKED_CUDA, name=f"test_{kind}", preferences=order,
                               op_preferences={}, variant_preferences=())


@pytest.mark.parametrize("kind", ["composed", "direct", "flash", "libtorch"])
def test_batched_attention_equals_repeated_single_sample(kind):
    """engine.nn.MultiHeadAttention on CUDA under each attention capsule: the batched forward,
    input gradients and summed weight gradients equal repeated single-sample attention."""
    import engine
    from engine.nn import MultiHeadAttention
    from engine.session import Session, use_session
    if kind == "libtorch" and not _have_torch():
        pytest.skip("torch is not importable here: libtorch.sdpa_forward is unavailable")
    want_capsule = {"composed": "torchlean.composed_attention",
                    "direct": "native_cuda.direct_attention",
                    "flash": "native_cuda.flash_attention",
                    "libtorch": "libtorch.sdpa_forward"}[kind]
    r = np.random.default_rng(11)
    x = r.standard_normal((3, 5, 8)).astype(np.float32)
    mask = np.tril(np.ones((5, 5), bool))
    g = r.standard_normal((3, 5, 8)).astype(np.float32)
    with use_session(Session("cuda", profile=_profile(kind))) as session:
        layer = MultiHeadAttention(model_dim=8, heads=2, seed=11)
        xb = engine.tensor(x, requires_grad=True)
        out = layer(xb, mask=mask)
        out.backward(g)
        batched_out = out.numpy()
        batched_w = [p.grad.numpy().copy() for p in layer.parameters()]
        singles, xgrads = [], []
        w_sum = [np.zeros_like(w) for w in batched_w]
        for i in range(3):
            for p in layer.parameters():
                p.zero_grad()
            xi = engine.tensor(x[i], requires_grad=True)
            oi = layer(xi, mask=mask)
            oi.backward(g[i])
            singles.append(oi.numpy())
            xgrads.append(xi.grad.numpy())
            w_sum = [a + p.grad.numpy() for a, p in zip(w_sum, layer.parameters())]
        assert session.dispatched[Op.scaled_dot_product_attention].name == want_capsule
    np.testing.assert_allclose(batched_out, np.stack(singles), rtol=0, atol=PATH_TOL)
    np.testing.assert_allclose(xb.grad.numpy(), np.stack(xgrads), rtol=0, atol=PATH_TOL)
    for got, want in zip(batched_w, w_sum):
        np.testing.assert_allclose(got, want, rtol=0, atol=3 * PATH_TOL)


def test_device_cuda_never_selects_libtorch():
    from engine.profile import maintained_for_device
    plan = maintained_for_device("cuda").accept_graph([Op.scaled_dot_product_attention])
    assert plan.kernel(Op.scaled_dot_product_attention).capsule.provider is not Provider.libtorch
