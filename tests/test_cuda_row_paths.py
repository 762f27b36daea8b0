"""Every path of the native row kernels (softmax.cu, norm.cu): the register variants (a warp, a
quarter block or a block per row) at each threshold and one past it, the general kernel beyond and
for inner axes, odd widths, many rows (grid-stride past 2^20 blocks), special rows, masks, and
bitwise repeatability, against the reference provider under the bounds of
tests/test_cuda_softmax_norm.py (1 ulp, plus 2^-40 of the largest magnitude where outputs cancel);
the softmax / log_softmax forwards of the plain (fast float32) capsules under their derived bounds
(tests/softmax_checks.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
import softmax_checks as S
from test_cuda_softmax_norm import EPS, _floor, _norm_case, _pair

pytestmark = pytest.mark.cuda

# Widths at each variant's threshold and one past it (softmax.py / norm.py's tables), plus the
# odd ones (not a multiple of 4 or of a warp).
SOFTMAX_N = (1, 3, 31, 32, 33, 64, 65, 256, 257, 1000, 1024, 1025, 2048, 2049, 8192, 8193)
# 260, 516, 1020 (and 512, 768, 1024): the warp float4 forwards (v4, v8), full and partly filled lanes
LN_FWD_D = (1, 31, 32, 33, 256, 257, 260, 516, 1020, 1024, 1025, 2048, 2049, 8192, 8193)
LN_BWD_D = (1, 33, 256, 257, 512, 513, 768, 1024, 1025, 2048, 2049, 4096, 4097)


def _rows_for(n: int) -> int:
    return 19 if n > 1024 else 83   # not a multiple of the rows a block takes


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("n", SOFTMAX_N)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family_every_width(op, n):
    cp = H.cupy()
    r = np.random.default_rng(n)
    x = (r.standard_normal((_rows_for(n), n)) * 6).astype(np.float32)
    h, dev, _, out, want = _pair(op, x, axis=-1)
    S.assert_forward(f"native_cuda.{op}", out, x, f"{op} forward n={n}")
    g = r.standard_normal(x.shape).astype(np.float32)
    (gx,) = h.vjp(dev, cp.asarray(want), cp.asarray(g), axis=-1)
    if op == "log_softmax":   # the plain capsule's VJP takes exp(y) from expf (softmax.cu)
        S.assert_log_softmax_vjp(f"native_cuda.{op}", gx, want, g, f"{op} VJP n={n}")
        return
    (wx,) = H.reference_vjp(op)((x,), want, g, axis=-1)
    H.assert_ulps(gx, wx, 1, f"{op} VJP n={n}", abs_floor=_floor(wx))


@pytest.mark.capsules("native_cuda.hard_masked_softmax")
@pytest.mark.parametrize("n", SOFTMAX_N)
def test_hard_masked_softmax_every_width(n):
    cp = H.cupy()
    r = np.random.default_rng(100 + n)
    shape = (_rows_for(n), n)
    x = (r.standard_normal(shape) * 5).astype(np.float32)
    mask = r.random(shape) < 0.6
    mask[0] = False                     # a row with no participant: all +0
    mask[1] = True                      # a row where all participate
    x[~mask] = np.nan                   # blocked entries never enter, not even as NaN
    h, dev, dparams, out, want = _pair("hard_masked_softmax", x, mask=mask, axis=-1)
    H.assert_ulps(out, want, 1, f"hard_masked_softmax forward n={n}")
    H.assert_bitwise(out[~cp.asarray(mask)], np.zeros(int((~mask).sum()), np.float32),
                     "blocked entries are exactly +0")
    g = r.standard_normal(shape).astype(np.float32)
    g[~mask] = np.inf                   # a blocked g takes no part either
    (gx,) = h.vjp(dev, cp.asarray(want), cp.asarray(g), **dparams)
    gm = np.where(mask, g, 0).astype(np.float32)
    (wx,) = H.reference_vjp("hard_masked_softmax")((x,), want, gm, mask=mask, axis=-1)
    H.assert_ulps(gx, wx, 1, f"hard_masked_softmax VJP n={n}", abs_floor=_floor(wx))
    H.assert_bitwise(gx[~cp.asarray(mask)], np.zeros(int((~mask).sum()), np.float32),
                     "blocked gradients are exactly +0")


@pytest.mark.capsules("native_cuda.hard_masked_softmax")
@pytest.mark.parametrize("n", (5, 300, 3000))
def test_masked_softmax_rows_applies_the_scale(n):
    """Composed attention's entry: softmax of scale * x; scale = 2^-3 keeps scale * x exact in
    float32, so the reference of the scaled scores is the exact target."""
    from engine.providers.native_cuda.softmax import masked_softmax_rows
    cp = H.cupy()
    r = np.random.default_rng(n)
    x = (r.standard_normal((7, n)) * 40).astype(np.float32)
    mask = r.random(x.shape) < 0.7
    mask[2] = False
    out = masked_softmax_rows(cp.asarray(x), cp.asarray(mask).view(np.uint8), 0.125)
    want = H.reference_forward("hard_masked_softmax")(x * np.float32(0.125), mask=mask, axis=-1)
    H.assert_ulps(out, want, 1, f"masked_softmax_rows scale n={n}")
    nomask = masked_softmax_rows(cp.asarray(x), None, 0.125)
    H.assert_ulps(nomask, H.reference_forward("softmax")(x * np.float32(0.125), axis=-1), 1,
                  f"masked_softmax_rows without a mask n={n}")


@pytest.mark.capsules("native_cuda.softmax", "native_cuda.log_softmax")
@pytest.mark.parametrize("n", (4, 300, 3000, 9000))
def test_special_rows_on_every_path(n):
    """NaN or +inf entry, all -inf: the row is NaN; -inf beside a finite max: exact zeros; the
    first of two equal maxima carries log_softmax's 1 (the rest stays tiny and accurate)."""
    x = S.special_rows(n)
    for op in ("softmax", "log_softmax"):
        _, _, _, out, want = _pair(op, x, axis=-1)
        S.assert_forward(f"native_cuda.{op}", out, x, f"{op} special rows n={n}")
        got = out.get()
        assert np.all(np.isnan(got[:3])), f"{op} n={n}: NaN rows"
    _, _, _, out, _ = _pair("softmax", x, axis=-1)
    got = out.get()
    assert np.all(got[3, 1:n - 1] == 0) and not np.signbit(got[3, 1:n - 1]).any()


@pytest.mark.capsules("native_cuda.softmax", "native_cuda.log_softmax")
def test_many_rows_take_a_grid_stride():
    """2^23 + 5 rows of one entry: more warps than 2^20 blocks hold, so the warp path strides;
    a row of one finite entry is exactly 1 (log: exactly 0)."""
    cp = H.cupy()
    rows = (1 << 23) + 5
    x = cp.random.standard_normal((rows, 1), dtype=cp.float32)
    for op, value in (("softmax", 1.0), ("log_softmax", 0.0)):
        out = H.native_handler(op).forward(x, axis=-1)
        assert bool(cp.all(out == value)), f"{op}: every row of one entry is {value}"
    x = cp.asarray(np.random.default_rng(1).standard_normal((70001, 3)).astype(np.float32))
    _, _, _, out, want = _pair("softmax", x.get(), axis=-1)
    S.assert_forward("native_cuda.softmax", out, x.get(), "softmax 70001 rows")


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "hard_masked_softmax"])
@pytest.mark.parametrize("n", (33, 257, 1024, 2049, 8192, 8193))
def test_softmax_paths_are_bitwise_repeatable(op, n):
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(n)
    x = cp.asarray((r.standard_normal((300, n)) * 4).astype(np.float32))
    g = cp.asarray(r.standard_normal((300, n)).astype(np.float32))
    kw = {"mask": cp.asarray(r.random((300, n)) < 0.5)} if op == "hard_masked_softmax" else {}
    h = H.native_handler(op)
    out = h.forward(x, axis=-1, **kw)
    (gx,) = h.vjp((x,), out, g, axis=-1, **kw)
    for det in (False, True):
        with deterministic_reductions(det):
            H.assert_bitwise(h.forward(x, axis=-1, **kw), out, f"{op} n={n} forward repeat")
            H.assert_bitwise(h.vjp((x,), out, g, axis=-1, **kw)[0], gx, f"{op} n={n} VJP repeat")


@pytest.mark.capsules("native_cuda.layer_norm")
@pytest.mark.parametrize("d", sorted(set(LN_FWD_D) | set(LN_BWD_D)))
def test_layer_norm_every_width(d):
    cp = H.cupy()
    rows = 37 if d > 1024 else 203
    for offset in (0.0, 1000.0):
        x, gamma, beta, g = _norm_case("layer_norm", (rows, d), d, offset)
        h, dev, _, out, want = _pair("layer_norm", x, gamma, beta, eps=EPS)
        H.assert_ulps(out, want, 1, f"layer_norm forward d={d} offset={offset}",
                      abs_floor=_floor(want))
        got = h.vjp(dev, out, cp.asarray(g), eps=EPS)
        ref = H.reference_vjp("layer_norm")((x, gamma, beta), want, g, eps=EPS)
        for name, gv, wv in zip(("dx", "dgamma", "dbeta"), got, ref):
            H.assert_ulps(gv, wv, 1, f"layer_norm {name} d={d} offset={offset}",
                          abs_floor=_floor(wv))


@pytest.mark.capsules("native_cuda.layer_norm")
@pytest.mark.parametrize("shape", [(16384, 768), (8192, 1024), (70001, 33), (5, 4096)])
def test_layer_norm_large_is_accurate_and_repeatable(shape):
    cp = H.cupy()
    x, gamma, beta, g = _norm_case("layer_norm", shape, 11, 3.0)
    h, dev, _, out, want = _pair("layer_norm", x, gamma, beta, eps=EPS)
    H.assert_ulps(out, want, 1, f"layer_norm forward {shape}", abs_floor=_floor(want))
    got = h.vjp(dev, out, cp.asarray(g), eps=EPS)
    ref = H.reference_vjp("layer_norm")((x, gamma, beta), want, g, eps=EPS)
    for name, gv, wv in zip(("dx", "dgamma", "dbeta"), got, ref):
        H.assert_ulps(gv, wv, 1, f"layer_norm {name} {shape}", abs_floor=_floor(wv))
    H.assert_bitwise(h.forward(*dev, eps=EPS), out, f"layer_norm {shape} forward repeat")
    for a, b in zip(h.vjp(dev, out, cp.asarray(g), eps=EPS), got):
        H.assert_bitwise(a, b, f"layer_norm {shape} VJP repeat")


@pytest.mark.capsules("native_cuda.layer_norm")
def test_layer_norm_float4_forward_only_on_aligned_rows():
    """The warp float4 forward runs where d % 4 == 0 and every buffer is 16-byte aligned; an x one
    float off its allocation takes the block kernel instead, and both are within 1 ulp."""
    from engine.providers.native_cuda import norm
    cp = H.cupy()
    x, gamma, beta, _ = _norm_case("layer_norm", (64, 768), 768, 0.0)
    buf = cp.empty(64 * 768 + 1, cp.float32)
    shifted = buf[1:].reshape(64, 768)
    shifted[...] = cp.asarray(x)
    dev = [cp.asarray(a) for a in (x, gamma, beta)]
    assert norm._vector_variant(768, *dev, dev[0]).symbol == "tl_layer_norm_fwd_v8"
    assert norm._vector_variant(512, *dev, dev[0]).symbol == "tl_layer_norm_fwd_v4"
    assert norm._vector_variant(770, *dev, dev[0]) is None          # d % 4 != 0
    assert norm._vector_variant(256, *dev, dev[0]) is None          # the scalar warp's width
    assert norm._vector_variant(768, shifted, dev[1], dev[2], dev[0]) is None
    h, _, _, out, want = _pair("layer_norm", x, gamma, beta, eps=EPS)
    H.assert_bitwise(h.forward(*dev, eps=EPS), out, "layer_norm 64x768 forward repeat")
    for label, xin in (("aligned", dev[0]), ("one float off", shifted)):
        H.assert_ulps(h.forward(xin, dev[1], dev[2], eps=EPS), want, 1,
                      f"layer_norm forward 64x768 {label}", abs_floor=_floor(want))


@pytest.mark.capsules("native_cuda.layer_norm")
@pytest.mark.parametrize("d", (8, 300, 1000, 3000, 9000))
def test_layer_norm_nan_row_stays_in_its_row(d):
    cp = H.cupy()
    x = np.ones((9, d), np.float32)
    x[4, d // 2] = np.nan
    ones, zeros = np.ones(d, np.float32), np.zeros(d, np.float32)
    out = H.native_handler("layer_norm").forward(cp.asarray(x), cp.asarray(ones),
                                                 cp.asarray(zeros), eps=EPS).get()
    assert np.all(np.isnan(out[4])) and np.all(out[np.arange(9) != 4] == 0)
