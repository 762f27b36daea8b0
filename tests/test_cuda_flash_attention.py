"""native_cuda.flash_attention on CUDA (tiled float32 online softmax, backend VJP), forward and VJP,
judged by the harness's own comparison (conformance/error_models.compare) under the capsule's
derived bound (conformance/families/attention.py, FLASH) against a float64 oracle.

The oracle is the attention formula in float64 (NumPy matrix products) with data no participating
term uses zeroed (the reference's hard-mask semantics, so a NaN in a blocked key's row takes no
part). Its own error, a float64 evaluation of sums of at most d + Lk + Lq terms, is under
(d + Lk + Lq) 2^-53 of each element's magnitude: below 2^-30 of the float32 bounds it stands in
for, so no tolerance is added for it. Shapes cover Lq != Lk, lengths that are not multiples of
the 64 tile, d and dv of 32, 64, 128 and widths padded to them (48, 16), causal, random and no
masks, a fully blocked row, a key nobody attends, NaN and inf in blocked data, empty axes, the
bitwise repeat of two runs, the VJP of an output the forward did not make (its statistics
recomputed, bit for bit the kept ones), dq with and without the dS scratch (bit for bit) and the
gpt2 size (B*H = 96, T = 1024, d = 64, causal).
"""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
from engine.types import BackendOp as Op

pytestmark = pytest.mark.cuda

NAME = "native_cuda.flash_attention"
OP = Op.scaled_dot_product_attention


def _handler():
    from engine.registry import registry
    return registry().get(NAME)


def _run(q, k, v, mask, scale, g):
    """(out, [dq, dk, dv]) of the capsule's handlers on device copies, back on the host."""
    cp = H.cupy()
    _, h = _handler()
    dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
    dm = None if mask is None else cp.asarray(mask)
    out = h.forward(dq, dk, dv, mask=dm, scale=scale)
    grads = h.vjp((dq, dk, dv), out, cp.asarray(g), mask=dm, scale=scale)
    return out.get(), [x.get() for x in grads]


def _oracle(q, k, v, mask, scale, g):
    """float64 forward and VJP with their magnitudes and term counts (module docstring)."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    part = np.ones(q.shape[:-1] + (k.shape[-2],), bool) if mask is None else np.asarray(mask)
    rows, cols = part.any(axis=2)[..., None], part.any(axis=1)[..., None]
    q, g = np.where(rows, q, 0.0), np.where(rows, g, 0.0)
    k, v = np.where(cols, k, 0.0), np.where(cols, v, 0.0)
    t = lambda a: np.swapaxes(a, 1, 2)
    s = scale * (q @ t(k))
    m = np.max(np.where(part, s, -np.inf), axis=2, keepdims=True, initial=-np.inf)
    e = np.where(part, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    tot = e.sum(axis=2, keepdims=True)
    p = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0)
    out, out_mag = p @ v, p @ np.abs(v)
    dp = np.where(part, g @ t(v), 0.0)
    ds = p * (dp - (p * dp).sum(axis=2, keepdims=True))
    mdp = np.where(part, np.abs(g) @ t(np.abs(v)), 0.0)
    mds = p * (mdp + (p * mdp).sum(axis=2, keepdims=True))
    sc = abs(scale)
    grads = (scale * (ds @ k), scale * (t(ds) @ q), t(p) @ g)
    mags = (sc * (mds @ np.abs(k)), sc * (t(mds) @ np.abs(q)), t(p) @ np.abs(g))
    per_row, per_key = part.sum(axis=2)[..., None], part.sum(axis=1)[..., None]
    terms = (per_row, per_key, per_key)
    return (out, out_mag, per_row), list(zip(grads, mags, terms))


def _ref(exact, mag, terms):
    from conformance.references._common import Reference
    exact = np.asarray(exact, np.float64)
    return Reference(exact.astype(np.float32), exact, np.asarray(mag, np.float64),
                     np.broadcast_to(terms, exact.shape).astype(np.int64), "composite")


def _judge(q, k, v, mask, scale, g, out, grads, what):
    """Every output within the capsule's derived bound (forward and each gradient); returns the
    worst error / bound ratio seen."""
    from conformance.error_models import BoundContext, compare, forward_model, vjp_model
    cap, _ = _handler()
    (fx, fm, ft), gr = _oracle(q, k, v, mask, scale, g)
    fwd = _ref(fx, fm, ft)
    params = {"mask": mask, "scale": scale}
    ctx = BoundContext(OP, (q, k, v), params, cap.numerical_policy, out=out)
    model = forward_model(cap, "composite")
    assert model.kind == "derived" and model.capsule == NAME
    verdict = compare(model, fwd, out, ctx)
    worst = float(np.nanmax(verdict.ratio, initial=0.0))
    assert verdict.passed, (what, "forward", verdict.reasons(), worst)
    for n, (got, (x, mg, tm)) in enumerate(zip(grads, gr)):
        ctx = BoundContext(OP, (q, k, v), params, cap.numerical_policy, out=out, fwd_ref=fwd, g=g,
                           input_index=n)
        verdict = compare(vjp_model(cap, "composite"), _ref(x, mg, tm), got, ctx)
        ratio = float(np.nanmax(verdict.ratio, initial=0.0))
        assert verdict.passed, (what, "dq dk dv".split()[n], verdict.reasons(), ratio)
        worst = max(worst, ratio)
    return worst


def _inputs(seed, batch, lq, lk, d, dv, mask_kind, spread=1.0):
    r = np.random.default_rng(seed)
    q = (r.standard_normal((batch, lq, d)) * spread).astype(np.float32)
    k = (r.standard_normal((batch, lk, d)) * spread).astype(np.float32)
    v = r.standard_normal((batch, lk, dv)).astype(np.float32)
    g = r.standard_normal((batch, lq, dv)).astype(np.float32)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "causal":   # query i sees keys j <= i + (Lk - Lq), as a KV cache would
        mask = np.broadcast_to(np.tri(lq, lk, lk - lq, dtype=bool), (batch, lq, lk)).copy()
    else:
        mask = r.random((batch, lq, lk)) < 0.7
    return q, k, v, mask, g


SHAPES = [(2, 70, 130, 64, 64), (1, 5, 3, 32, 32), (3, 64, 64, 32, 32), (2, 33, 200, 48, 16),
          (1, 100, 257, 128, 128), (2, 129, 65, 64, 32), (1, 1, 1, 8, 8), (2, 200, 150, 128, 96)]


@pytest.mark.capsules(NAME)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "random"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_vjp_within_the_derived_bound(shape, mask_kind):
    batch, lq, lk, d, dv = shape
    q, k, v, mask, g = _inputs(sum(shape), batch, lq, lk, d, dv, mask_kind, spread=0.5)
    scale = float(np.float32(d ** -0.5))
    out, grads = _run(q, k, v, mask, scale, g)
    worst = _judge(q, k, v, mask, scale, g, out, grads, f"{shape} {mask_kind}")
    if lq * lk > 1:    # (one key: out = v and the gradients are exact, a zero error is right)
        assert worst > 0   # the comparison measured rounding errors


@pytest.mark.capsules(NAME)
def test_large_scores_rescale_many_times_within_the_bound():
    """Scores up to ~60 that grow along the keys: the running max changes in most key tiles, so
    nearly every weight is rescaled many times (the online part of the bound)."""
    r = np.random.default_rng(3)
    lq, lk, d = 40, 640, 64
    q = (r.standard_normal((1, lq, d)) * 0.2 + 1.0).astype(np.float32)
    k = (r.standard_normal((1, lk, d)) * 0.2 + np.linspace(0, 1, lk)[None, :, None]).astype(
        np.float32)
    v = r.standard_normal((1, lk, 32)).astype(np.float32)
    g = r.standard_normal((1, lq, 32)).astype(np.float32)
    out, grads = _run(q, k, v, None, 1.0, g)
    _judge(q, k, v, None, 1.0, g, out, grads, "growing scores")


@pytest.mark.capsules(NAME)
def test_blocked_rows_keys_and_non_finite_blocked_data():
    """A fully blocked query row gives +0 outputs and +0 dq; a key no query attends gets +0 dk
    and dv; NaN and inf in that key's k and v rows and in the blocked row's q and g take no part."""
    q, k, v, mask, g = _inputs(4, 2, 70, 90, 32, 32, "random")
    mask[0, 5, :] = False
    mask[1, :, 7] = False
    q[0, 5], g[0, 5] = np.nan, np.inf
    k[1, 7], v[1, 7] = np.inf, np.nan
    out, grads = _run(q, k, v, mask, 0.25, g)
    for x in (out, *grads):
        assert np.all(np.isfinite(x))
    assert np.all(out[0, 5] == 0) and not np.any(np.signbit(out[0, 5]))
    assert np.all(grads[0][0, 5] == 0) and not np.any(np.signbit(grads[0][0, 5]))
    for x in grads[1:]:
        assert np.all(x[1, 7] == 0) and not np.any(np.signbit(x[1, 7]))
    _judge(q, k, v, mask, 0.25, g, out, grads, "blocked data")


@pytest.mark.capsules(NAME)
def test_mask_regressions_and_non_finite_participating_scores():
    """Scores [1000, -1000, 3, 4] with mask [F, T, F, F] give [0, 1, 0, 0] exactly; an allowed
    -5000 beats a blocked score (no finite sentinel); a participating +inf score makes its row
    NaN (the reference's rule), other rows stay finite."""
    q = np.array([[1.0], [1.0], [-5.0], [np.inf]], np.float32)
    k = np.array([[1000.0], [-1000.0], [3.0], [4.0]], np.float32)
    v = np.eye(4, dtype=np.float32)
    mask = np.array([[False, True, False, False], [False] * 4, [True, False, False, False],
                     [True, True, False, False]])
    g = np.ones((4, 4), np.float32)
    out, (gq, gk, gv) = _run(q, k, v, mask, 1.0, g)
    want = np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(out[:3], want)
    assert np.all(np.isnan(out[3]))
    assert np.all(gq[1] == 0)


@pytest.mark.capsules(NAME)
@pytest.mark.parametrize("shape", [(0, 4, 5, 8, 8), (2, 0, 5, 8, 8), (2, 4, 0, 8, 8),
                                   (2, 4, 5, 8, 0), (2, 4, 5, 0, 8)])
def test_empty_axes(shape):
    """Empty batch, query, key or value axes give empty (or +0) results; d = 0 gives scores 0
    (uniform weights over participants)."""
    batch, lq, lk, d, dv = shape
    q, k, v, mask, g = _inputs(9, batch, lq, lk, d, dv, "none")
    out, grads = _run(q, k, v, None, 1.0, g)
    assert out.shape == (batch, lq, dv) and [x.shape for x in grads] == [q.shape, k.shape, v.shape]
    if lk == 0:
        assert np.all(out == 0)
    if batch * lq * lk * dv and d == 0:
        # weights expf(0) = 1 exactly: O is a float32 sum of Lk = 5 rows of v divided by 5
        # (at most 5 roundings of u times sum |v| / 5)
        want = np.broadcast_to(v.astype(np.float64).mean(axis=1, keepdims=True), out.shape)
        np.testing.assert_allclose(out, want, rtol=0,
                                   atol=5 * H.U * float(np.abs(v).sum(axis=1).max()) / 5 * 1.01)


@pytest.mark.capsules(NAME)
def test_two_runs_are_bitwise_identical():
    q, k, v, mask, g = _inputs(5, 3, 150, 190, 64, 64, "random")
    first = _run(q, k, v, mask, 0.125, g)
    second = _run(q, k, v, mask, 0.125, g)
    for a, b in zip([first[0], *first[1]], [second[0], *second[1]]):
        H.assert_bitwise(a, b, "flash attention repeat")


@pytest.mark.capsules(NAME)
def test_vjp_of_an_output_it_did_not_make_recomputes_the_same_statistics():
    """The forward keeps each row's m and 1 / l (and the tile flags) with its output; the VJP of
    an output the forward did not make (a copy) recomputes them with the forward's code: the
    gradients agree bit for bit. The kept entry is bound to the call's inputs and goes with its
    output."""
    import gc
    from engine.providers.native_cuda import flash_attention as flash
    cp = H.cupy()
    _, h = _handler()
    q, k, v, mask, g = _inputs(6, 2, 130, 100, 64, 48, "causal")
    dq, dk, dv, dm, dg = (cp.asarray(x) for x in (q, k, v, mask, g))
    out = h.forward(dq, dk, dv, mask=dm, scale=0.125)
    assert flash.saved_statistics(out, dq, dk, dv, dm, 0.125) is not None
    assert flash.saved_statistics(out, dq, dk, dv, None, 0.125) is None      # another call
    assert flash.saved_statistics(out, dq, dk, dv, dm, 0.25) is None
    copy = cp.asarray(out.get())
    assert flash.saved_statistics(copy, dq, dk, dv, dm, 0.125) is None
    kept = h.vjp((dq, dk, dv), out, dg, mask=dm, scale=0.125)
    again = h.vjp((dq, dk, dv), copy, dg, mask=dm, scale=0.125)
    for a, b in zip(kept, again):
        H.assert_bitwise(a.get(), b.get(), "kept vs recomputed statistics")
    _judge(q, k, v, mask, 0.125, g, out.get(), [x.get() for x in again], "recomputed")
    key = id(out)
    del out
    gc.collect()
    assert key not in flash._SAVED


DQ_PATHS = [((2, 70, 130, 64, 64), "random"), ((1, 5, 3, 32, 32), "causal"),
            ((1, 100, 257, 128, 128), "random")]


@pytest.mark.capsules(NAME)
@pytest.mark.parametrize("shape,mask_kind", DQ_PATHS, ids=lambda x: "x".join(map(str, x))
                         if isinstance(x, tuple) else x)
def test_dq_without_the_ds_scratch_gives_the_same_bits(shape, mask_kind, monkeypatch):
    """dq from the dS tiles tl_flash_dkdv wrote (tl_flash_dqs) and, with the scratch refused
    (DS_SCRATCH_MAX_BYTES = 0, as for long sequences), from a pass recomputing P and dS
    (tl_flash_dq): the same fold over the same dS bits, so the same dq bit for bit."""
    from engine.providers.native_cuda import flash_attention as flash
    batch, lq, lk, d, dv = shape
    q, k, v, mask, g = _inputs(sum(shape) + 1, batch, lq, lk, d, dv, mask_kind)
    assert flash.ds_scratch_floats(batch, lq, lk) > 0
    out, grads = _run(q, k, v, mask, 0.2, g)
    monkeypatch.setattr(flash, "DS_SCRATCH_MAX_BYTES", 0)
    assert flash.ds_scratch_floats(batch, lq, lk) == 0
    out2, grads2 = _run(q, k, v, mask, 0.2, g)
    for a, b in zip([out, *grads], [out2, *grads2]):
        H.assert_bitwise(a, b, f"dq paths {shape} {mask_kind}")
    _judge(q, k, v, mask, 0.2, g, out2, grads2, f"recomputed dq {shape} {mask_kind}")


@pytest.mark.capsules(NAME)
def test_gpt2_size_causal():
    """B*H = 96, T = 1024, d = 64, causal: every entry against a float64 oracle on the device
    (relative L2 error under 1e-5: float32 attention lands near 1e-7), two entries under the
    derived bound element by element, and a bitwise repeat."""
    cp = H.cupy()
    _, h = _handler()
    bh, t, d = 96, 1024, 64
    rng = cp.random.RandomState(96)
    q, k, v, g = (rng.standard_normal((bh, t, d), dtype=cp.float32) for _ in range(4))
    mask = cp.ascontiguousarray(cp.broadcast_to(cp.tril(cp.ones((t, t), bool)), (bh, t, t)))
    scale = float(np.float32(d ** -0.5))
    out = h.forward(q, k, v, mask=mask, scale=scale)
    grads = h.vjp((q, k, v), out, g, mask=mask, scale=scale)
    out2 = h.forward(q, k, v, mask=mask, scale=scale)
    grads2 = h.vjp((q, k, v), out2, g, mask=mask, scale=scale)
    for a, b in zip((out, *grads), (out2, *grads2)):
        H.assert_bitwise(a.get(), b.get(), "gpt2-size repeat")
    q64, k64, v64, g64 = (x.astype(cp.float64) for x in (q, k, v, g))
    s = scale * (q64 @ k64.transpose(0, 2, 1))
    s = cp.where(mask, s, -cp.inf)
    p = cp.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    want = p @ v64
    dp = g64 @ v64.transpose(0, 2, 1)
    ds = p * (dp - (p * dp).sum(axis=2, keepdims=True))
    wants = (scale * (ds @ k64), scale * (ds.transpose(0, 2, 1) @ q64), p.transpose(0, 2, 1) @ g64)
    for name, got, ref in zip(("out", "dq", "dk", "dv"), (out, *grads), (want, *wants)):
        err = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
        assert err < 1e-5, (name, err)
    del s, p, dp, ds
    host = [x.get() for x in (q, k, v, g)]
    m = mask.get()
    for b in (0, bh - 1):
        sel = slice(b, b + 1)
        _judge(*(x[sel] for x in host[:3]), m[sel], scale, host[3][sel], out.get()[sel],
               [x.get()[sel] for x in grads], f"gpt2 entry {b}")
