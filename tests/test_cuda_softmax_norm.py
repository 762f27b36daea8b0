"""The native row kernels (softmax, log_softmax, hard-masked softmax, layer_norm, batch_norm),
forward and VJP, against the reference provider and its tape rules on the CPU.

Both sides evaluate in float64 and round once; they differ only in the order of float64 sums, so
results agree to 1 ulp (VJPs are fed the reference's forward output, so both rules see the same
s), plus, for outputs that cancel (normalized values, gradients with a mean
subtracted), a float64-sized absolute term: 2^-40 of the row's largest magnitude, far under a
float32 ulp of it (declared here, not fitted). The softmax / log_softmax forwards of the plain
capsules are float32 (tl_softmax_f32.cuh): checked under their derived bounds against a float64
evaluation (tests/softmax_checks.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
import softmax_checks as S

pytestmark = pytest.mark.cuda

F64_FLOOR = 2.0 ** -40
EPS = float(np.float32(1e-5))   # the wrappers round eps to float32 before any provider sees it


def _floor(want, scale=None):
    """F64_FLOOR times the largest |value| (or `scale`) of the whole output."""
    m = np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)), initial=0.0) if scale is None \
        else scale
    return F64_FLOOR * m


def _pair(op, *host, **params):
    cp = H.cupy()
    h = H.native_handler(op)
    dev = tuple(cp.asarray(x) for x in host)
    dparams = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in params.items()}
    out = h.forward(*dev, **dparams)
    want = H.reference_forward(op)(*host, **params)
    return h, dev, dparams, out, want


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("shape, axis", [((7, 300), -1), ((5, 9, 4), 1), ((3, 1025), 1),
                                         ((2, 3, 1), 2), ((2000, 3), 0)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family_forward_and_vjp(op, shape, axis):
    r = np.random.default_rng(3)
    x = (r.standard_normal(shape) * 6).astype(np.float32)
    h, dev, dparams, out, want = _pair(op, x, axis=axis)
    S.assert_forward(f"native_cuda.{op}", out, x, f"{op} forward {shape} axis={axis}", axis)
    g = r.standard_normal(shape).astype(np.float32)
    cp = H.cupy()
    (gx,) = h.vjp(dev, cp.asarray(want), cp.asarray(g), axis=axis)   # the same output s
    if op == "log_softmax":   # the plain capsule's VJP takes exp(y) from expf (softmax.cu)
        S.assert_log_softmax_vjp(f"native_cuda.{op}", gx, want, g, f"{op} VJP {shape}", axis)
        return
    (wx,) = H.reference_vjp(op)((x,), want, g, axis=axis)
    H.assert_ulps(gx, wx, 1, f"{op} VJP {shape} axis={axis}", abs_floor=_floor(wx))


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("op, capsule", S.CAPSULES)
def test_softmax_special_rows_follow_the_ieee_formula(op, capsule):
    """A NaN or +inf entry, or a row of -inf, makes the row NaN; -inf entries beside a finite max
    give exact zeros; a huge spread keeps subnormal outputs (--ftz=false)."""
    inf, nan = np.inf, np.nan
    x = np.array([[1.0, nan, 2.0, 3.0], [1.0, inf, 2.0, 3.0], [-inf, -inf, -inf, -inf],
                  [-inf, 0.0, -inf, 1.0], [0.0, -90.0, -95.0, -100.0],
                  [3e38, -3e38, 0.0, 1.0]], np.float32)
    out = S.handler(capsule).forward(H.cupy().asarray(x), axis=-1)
    S.assert_forward(capsule, out, x, f"{capsule} special rows")
    got = out.get()
    assert np.all(np.isnan(got[:3]))
    if op == "softmax":
        assert got[3, 0] == 0 and got[3, 2] == 0
        assert 0 < got[4, 3] < np.finfo(np.float32).tiny     # a subnormal probability survives


@pytest.mark.capsules("native_cuda.hard_masked_softmax")
def test_hard_masked_softmax_regressions_and_blocked_rows():
    cp = H.cupy()
    h = H.native_handler("hard_masked_softmax")
    scores = np.array([[1000, -1000, 3, 4], [-5000, 10, 0, 0], [1, 2, 3, 4]], np.float32)
    mask = np.array([[False, True, False, False], [True, False, False, False], [False] * 4])
    out = h.forward(cp.asarray(scores), mask=cp.asarray(mask), axis=-1)
    # Only key 1 participates: exactly [0, 1, 0, 0]; the allowed -5000 beats the blocked 10;
    # a row with no participant is +0 everywhere (never a finite sentinel).
    H.assert_bitwise(out, np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32),
                     "hard-masked softmax regressions")
    g = np.arange(12, dtype=np.float32).reshape(3, 4)
    (gx,) = h.vjp((cp.asarray(scores),), out, cp.asarray(g), mask=cp.asarray(mask), axis=-1)
    H.assert_bitwise(gx, np.zeros((3, 4), np.float32), "a single participant has zero gradient")


@pytest.mark.capsules("native_cuda.hard_masked_softmax")
@pytest.mark.parametrize("shape, axis", [((6, 200), -1), ((4, 7, 5), 1), ((9, 1030), -1)])
def test_hard_masked_softmax_forward_and_vjp(shape, axis):
    cp = H.cupy()
    r = np.random.default_rng(8)
    x = (r.standard_normal(shape) * 5).astype(np.float32)
    mask = r.random(shape) < 0.6
    np.moveaxis(mask, axis, -1)[0] = False             # one fully blocked row
    x[~mask] = np.nan                                   # blocked entries never enter
    h, dev, dparams, out, want = _pair("hard_masked_softmax", x, mask=mask, axis=axis)
    H.assert_ulps(out, want, 1, "hard_masked_softmax forward")
    got = out.get()
    assert np.all(got[~mask] == 0) and not np.any(np.isnan(got))
    g = r.standard_normal(shape).astype(np.float32)
    (gx,) = h.vjp(dev, cp.asarray(want), cp.asarray(g), **dparams)
    (wx,) = H.reference_vjp("hard_masked_softmax")((x,), want, g, mask=mask, axis=axis)
    H.assert_ulps(gx, wx, 1, "hard_masked_softmax VJP", abs_floor=_floor(wx))
    assert np.all(gx.get()[~mask] == 0)


def _norm_case(op, shape, seed, offset=0.0):
    r = np.random.default_rng(seed)
    x = (r.standard_normal(shape) * 3 + offset).astype(np.float32)
    c = shape[-1] if op == "layer_norm" else shape[1]
    gamma = r.uniform(0.5, 2, c).astype(np.float32)
    beta = r.standard_normal(c).astype(np.float32)
    return x, gamma, beta, r.standard_normal(shape).astype(np.float32)


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op, shape", [("layer_norm", (37, 300)), ("layer_norm", (1000, 64)),
                                       ("layer_norm", (2, 3, 1025)), ("layer_norm", (5,)),
                                       ("batch_norm", (8, 6, 5, 7)), ("batch_norm", (300, 3)),
                                       ("batch_norm", (2, 4, 1000)),
                                       # the split path (several blocks per channel)
                                       ("batch_norm", (4, 3, 64, 64)),
                                       ("batch_norm", (64, 5, 300)),
                                       ("batch_norm", (3, 2, 9001))])
def test_norm_forward_and_vjp(op, shape):
    """One forward and one backward kernel: values, dx, dgamma and dbeta; two-pass statistics
    keep an offset of 1000 (variance small beside the mean) as accurate as the reference."""
    cp = H.cupy()
    for offset in (0.0, 1000.0):
        x, gamma, beta, g = _norm_case(op, shape, 5, offset)
        h, dev, _, out, want = _pair(op, x, gamma, beta, eps=EPS)
        H.assert_ulps(out, want, 1, f"{op} forward {shape} offset={offset}",
                      abs_floor=_floor(want))
        got = h.vjp(dev, out, cp.asarray(g), eps=EPS)
        ref = H.reference_vjp(op)((x, gamma, beta), want, g, eps=EPS)
        for name, gv, wv in zip(("dx", "dgamma", "dbeta"), got, ref):
            H.assert_ulps(gv, wv, 1, f"{op} {name} {shape} offset={offset}",
                          abs_floor=_floor(wv))


@pytest.mark.capsules("native_cuda.layer_norm")
@pytest.mark.parametrize("shape", [(4096, 256), (8192, 768), (16, 512, 1024), (300, 4500)])
def test_layer_norm_vjp_at_benchmark_sizes(shape):
    """The gpt2 shapes (rows >> columns: many blocks' partials per column), a 1024-wide case and
    the wide path; dgamma and dbeta sum thousands of rows, so a lost or doubled partial shows."""
    cp = H.cupy()
    x, gamma, beta, g = _norm_case("layer_norm", shape, 11, offset=5.0)
    h, dev, _, out, want = _pair("layer_norm", x, gamma, beta, eps=EPS)
    got = h.vjp(dev, out, cp.asarray(g), eps=EPS)
    ref = H.reference_vjp("layer_norm")((x, gamma, beta), want, g, eps=EPS)
    for name, gv, wv in zip(("dx", "dgamma", "dbeta"), got, ref):
        H.assert_ulps(gv, wv, 1, f"layer_norm {name} {shape}", abs_floor=_floor(wv))


@pytest.mark.capsules("native_cuda.layer_norm")
@pytest.mark.parametrize("shape", [(3000, 96), (4096, 256), (8192, 768), (300, 4500)])
def test_layer_norm_backward_is_bitwise_repeatable(shape):
    cp = H.cupy()
    x, gamma, beta, g = _norm_case("layer_norm", shape, 9)
    h = H.native_handler("layer_norm")
    dev = tuple(cp.asarray(a) for a in (x, gamma, beta))
    out = h.forward(*dev, eps=EPS)
    first = [a.get() for a in h.vjp(dev, out, cp.asarray(g), eps=EPS)]
    for _ in range(3):
        again = h.vjp(dev, out, cp.asarray(g), eps=EPS)
        for a, b in zip(first, again):
            H.assert_bitwise(b, a, "layer_norm VJP repeat")


@pytest.mark.capsules("native_cuda.batch_norm")
@pytest.mark.parametrize("shape", [(4, 3, 64, 64), (64, 5, 300), (8, 6, 5, 7)])
def test_batch_norm_split_and_block_paths_are_bitwise_repeatable(shape):
    """The split path's order is fixed by the shape (its chunk count reads nothing else), so
    forward and VJP repeat bit for bit; the first two shapes take it, the third does not."""
    from engine.providers.native_cuda.norm import _bn_chunks, _bn_view
    assert (_bn_chunks(*_bn_view(shape)) > 1) == (shape != (8, 6, 5, 7))
    cp = H.cupy()
    x, gamma, beta, g = _norm_case("batch_norm", shape, 11, 3.0)
    h = H.native_handler("batch_norm")
    dev = tuple(cp.asarray(a) for a in (x, gamma, beta))
    out = h.forward(*dev, eps=EPS)
    first = [out.get()] + [a.get() for a in h.vjp(dev, out, cp.asarray(g), eps=EPS)]
    for _ in range(3):
        again = [h.forward(*dev, eps=EPS)] + list(h.vjp(dev, out, cp.asarray(g), eps=EPS))
        for a, b in zip(first, again):
            H.assert_bitwise(b, a, f"batch_norm repeat {shape}")


@pytest.mark.capsules("native_cuda.batch_norm")
def test_batch_norm_split_path_propagates_nan():
    cp = H.cupy()
    x, gamma, beta, _ = _norm_case("batch_norm", (4, 3, 64, 64), 12)
    x[2, 1, 5, 7] = np.nan
    out = H.native_handler("batch_norm").forward(*(cp.asarray(a) for a in (x, gamma, beta)),
                                                 eps=EPS).get()
    assert np.all(np.isnan(out[:, 1])) and not np.any(np.isnan(out[:, [0, 2]]))


@pytest.mark.capsules("native_cuda.layer_norm", "native_cuda.batch_norm")
def test_norms_propagate_nan_and_handle_empty_batches():
    cp = H.cupy()
    x = np.ones((4, 8), np.float32)
    x[1, 3] = np.nan
    ones, zeros = np.ones(8, np.float32), np.zeros(8, np.float32)
    out = H.native_handler("layer_norm").forward(cp.asarray(x), cp.asarray(ones),
                                                 cp.asarray(zeros), eps=EPS).get()
    assert np.all(np.isnan(out[1])) and np.all(out[[0, 2, 3]] == 0)
    h = H.native_handler("layer_norm")
    empty = cp.zeros((0, 8), cp.float32)
    dx, dgamma, dbeta = h.vjp((empty, cp.asarray(ones), cp.asarray(zeros)), empty, empty, eps=EPS)
    assert dx.shape == (0, 8)
    H.assert_bitwise(dgamma, zeros, "dgamma of no rows")
    H.assert_bitwise(dbeta, zeros, "dbeta of no rows")
