"""conv and conv_transpose on the CPU: values against hand-computed cases and an independent direct
loop in float64 (every output element summed tap by tap), parameter combinations, empty cases,
the VJP against the loop's adjoint, the guards with their exact messages, and the layer."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from engine import ops
from engine.errors import ParameterTypeError, ParameterValueError, ShapeError, UInt32OverflowError
from engine.tensor import tensor

F32 = np.float32


def direct_conv(x, w, b, stride, padding, dilation, groups):
    """y[n, co, o] = b[co] + sum_{ci in group, t} x[n, ci, o s - p + t d] w[co, ci', t], summed
    one term at a time in float64 (taps outside x skipped)."""
    n, c_in = x.shape[:2]
    c_out, cg = w.shape[:2]
    inp, k = x.shape[2:], w.shape[2:]
    out = [max(0, (i + 2 * p - d * (kk - 1) - 1) // s + 1) if i + 2 * p >= d * (kk - 1) + 1
           else 0 for i, kk, s, p, d in zip(inp, k, stride, padding, dilation)]
    og = c_out // groups
    y = np.zeros([n, c_out] + out)
    for nn, co in itertools.product(range(n), range(c_out)):
        for o in itertools.product(*(range(m) for m in out)):
            acc = 0.0 if b is None else float(b[co])
            for c in range(cg):
                ci = (co // og) * cg + c
                for t in itertools.product(*(range(kk) for kk in k)):
                    i = [oo * s - p + tt * d for oo, tt, s, p, d in
                         zip(o, t, stride, padding, dilation)]
                    if all(0 <= ii < e for ii, e in zip(i, inp)):
                        acc += float(x[(nn, ci) + tuple(i)]) * float(w[(co, c) + t])
            y[(nn, co) + o] = acc
    return y


def direct_conv_transpose(x, w, b, stride, padding, dilation, groups):
    """y[n, co, i] = b[co] + sum over (ci, t, o) with o s - p + t d = i of x[n, ci, o] w[ci, co', t],
    scattered one term at a time in float64."""
    n, c_in = x.shape[:2]
    cog = w.shape[1]
    c_out = cog * groups
    inp, k = x.shape[2:], w.shape[2:]
    out = [max(0, (i - 1) * s - 2 * p + d * (kk - 1) + 1)
           for i, kk, s, p, d in zip(inp, k, stride, padding, dilation)]
    cg = c_in // groups
    y = np.zeros([n, c_out] + out)
    if b is not None:
        y += np.asarray(b, np.float64).reshape((1, c_out) + (1,) * len(k))
    for nn, ci in itertools.product(range(n), range(c_in)):
        for o in itertools.product(*(range(m) for m in inp)):
            for c in range(cog):
                co = (ci // cg) * cog + c
                for t in itertools.product(*(range(kk) for kk in k)):
                    i = [oo * s - p + tt * d for oo, tt, s, p, d in
                         zip(o, t, stride, padding, dilation)]
                    if all(0 <= ii < e for ii, e in zip(i, out)):
                        y[(nn, co) + tuple(i)] += float(x[(nn, ci) + o]) * float(w[(ci, c) + t])
    return y


CASES = [   # (batch, C_in, C_out, groups, spatial, kernel, stride, padding, dilation, bias)
    (2, 2, 3, 1, (7,), (3,), (1,), (0,), (1,), True),
    (1, 2, 2, 1, (9,), (2,), (4,), (1,), (1,), False),        # stride above the kernel
    (None, 1, 2, 1, (6,), (3,), (1,), (2,), (2,), True),      # padding at the limit d (k - 1)
    (2, 4, 6, 2, (5, 6), (3, 2), (2, 1), (1, 1), (1, 2), True),
    (1, 3, 3, 3, (6, 5), (3, 3), (1, 1), (1, 1), (1, 1), True),   # depthwise
    (1, 2, 2, 1, (4, 3, 5), (2, 2, 3), (1, 2, 1), (1, 0, 2), (1, 1, 1), True),
    (None, 1, 1, 1, (2, 2, 2, 2), (2, 1, 2, 1), (1,) * 4, (0, 1, 0, 1), (1,) * 4, True),
    (1, 1, 1, 1, (2,) * 8, (1, 2) * 4, (1,) * 8, (0,) * 8, (1,) * 8, True),   # rank 8
]


def _arrays(rng, case, transpose):
    batch, ci, co, g, spatial, k, s, p, d, bias = case
    lead = () if batch is None else (batch,)
    x = rng.standard_normal(lead + (ci,) + spatial).astype(F32)
    wshape = (ci, co // g) + k if transpose else (co, ci // g) + k
    w = rng.standard_normal(wshape).astype(F32)
    b = rng.standard_normal(co).astype(F32) if bias else None
    return x, w, b, {"stride": s, "padding": p, "dilation": d, "groups": g}


def _batched(a, rank):
    return a if a.ndim == rank + 2 else a[None]


def _bound(terms: int, magnitude):
    """gamma_k * sum|terms| with k = terms, plus half an ulp for the reference's one rounding."""
    k = terms
    return k * 2.0 ** -24 / (1 - k * 2.0 ** -24) * magnitude + 2.0 ** -24 * magnitude


@pytest.mark.capsules("reference.conv")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"r{len(c[4])}")
def test_conv_matches_the_direct_loop(case):
    rng = np.random.default_rng(len(case[4]) * 7 + case[1])
    x, w, b, prm = _arrays(rng, case, False)
    rank = w.ndim - 2
    want = direct_conv(_batched(x, rank), w, b, **prm)
    want = want if x.ndim == rank + 2 else want[0]
    got = ops.conv(tensor(x), tensor(w), None if b is None else tensor(b), **prm).numpy()
    assert got.shape == want.shape
    mag = np.abs(direct_conv(np.abs(_batched(x, rank)), np.abs(w), None if b is None else
                             np.abs(b), **prm)).reshape(want.shape)
    terms = w.shape[1] * math.prod(w.shape[2:]) + 1
    assert np.all(np.abs(got - want) <= _bound(terms, mag) + 1e-45)


@pytest.mark.capsules("reference.conv_transpose")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"r{len(c[4])}")
def test_conv_transpose_matches_the_direct_loop(case):
    rng = np.random.default_rng(len(case[4]) * 11 + case[2])
    x, w, b, prm = _arrays(rng, case, True)
    rank = w.ndim - 2
    want = direct_conv_transpose(_batched(x, rank), w, b, **prm)
    want = want if x.ndim == rank + 2 else want[0]
    got = ops.conv_transpose(tensor(x), tensor(w), None if b is None else tensor(b),
                             **prm).numpy()
    assert got.shape == want.shape
    mag = np.abs(direct_conv_transpose(np.abs(_batched(x, rank)), np.abs(w), None if b is None
                                       else np.abs(b), **prm)).reshape(want.shape)
    terms = w.shape[0] * math.prod(w.shape[2:]) + 1
    assert np.all(np.abs(got - want) <= _bound(terms, mag) + 1e-45)


def test_hand_computed_conv2d_with_padding_and_bias():
    x = np.arange(1, 10, dtype=F32).reshape(1, 3, 3)          # 1 2 3 / 4 5 6 / 7 8 9
    w = np.ones((1, 1, 2, 2), F32)
    y = ops.conv2d(tensor(x), tensor(w), tensor(np.array([0.5], F32)), stride=2,
                   padding=1).numpy()
    # windows at (-1, -1), (-1, 1), (1, -1), (1, 1): corners 1; 2 + 3; 4 + 7; 5 + 6 + 8 + 9
    assert y.tolist() == [[[1.5, 5.5], [11.5, 28.5]]]


def test_hand_computed_conv_transpose_spreads_each_input():
    x = np.array([[1.0, 2.0]], F32)                           # (C_in 1, length 2)
    w = np.array([[[1.0, 10.0, 100.0]]], F32)                 # (C_in 1, C_out 1, k 3)
    y = ops.conv_transpose(tensor(x), tensor(w), stride=2).numpy()
    # out = (2 - 1) 2 + 3 = 5: x0 w at 0..2, x1 w at 2..4
    assert y.tolist() == [[1.0, 10.0, 102.0, 20.0, 200.0]]


def test_out_of_range_taps_take_no_part_even_facing_inf():
    x = np.ones((1, 2), F32)
    w = np.array([[[np.inf, 1.0, 2.0]]], F32)
    # output 0 reads x[-1] (padding) through the inf tap: skipped, so 1 + 2
    y = ops.conv(tensor(x), tensor(w), padding=1).numpy()
    assert y[0, 0] == 3.0 and np.isinf(y[0, 1])


def test_empty_cases_have_the_output_extent_rule():
    cases = [((0, 2, 5, 5), (3, 2, 3, 3), (0, 3, 5, 5), {"padding": 1}),     # batch 0
             ((2, 4), (3, 2, 5), (3, 0), {}),                              # no window fits
             ((1, 0, 5), (3, 0, 3), (1, 3, 3), {})]                        # no input channels
    for xs, ws, want, prm in cases:
        b = tensor(np.arange(ws[0], dtype=F32))
        y = ops.conv(tensor(np.ones(xs, F32)), tensor(np.ones(ws, F32)), b, **prm)
        assert y.shape == want
    y = ops.conv(tensor(np.ones((1, 0, 5), F32)), tensor(np.ones((3, 0, 3), F32)),
                 tensor(np.arange(3, dtype=F32))).numpy()
    assert y.tolist() == [[[0.0] * 3, [1.0] * 3, [2.0] * 3]]      # only the bias term
    t = ops.conv_transpose(tensor(np.ones((2, 0), F32)), tensor(np.ones((2, 1, 3), F32)))
    assert t.shape == (1, 2)        # (0 - 1) 1 + 2 + 1 = 2 positions, no term reaches them


def _loss_grads(fn, arrays, prm, cot):
    ts = [tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts, **prm)
    out.backward(tensor(cot))
    return [t.grad.numpy() for t in ts]


@pytest.mark.capsules("reference.conv")
@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: f"r{len(c[4])}")
def test_conv_vjp_is_the_adjoint_of_the_direct_loop(case):
    """<conv(x + e_i), g> - <conv(x), g> is exact for a linear map: dx[i] = <conv(e_i), g>, and
    likewise for w and b, from the direct float64 loop."""
    rng = np.random.default_rng(3)
    x, w, b, prm = _arrays(rng, case, False)
    b = b if b is not None else rng.standard_normal(w.shape[0]).astype(F32)
    rank = w.ndim - 2
    y = ops.conv(tensor(x), tensor(w), tensor(b), **prm)
    g = rng.standard_normal(y.shape).astype(F32)
    dx, dw, db = _loss_grads(ops.conv, (x, w, b), prm, g)
    gb = _batched(g, rank).astype(np.float64)

    def probe(xv, wv, bv):
        return float((direct_conv(_batched(xv, rank), wv, bv, **prm) * gb).sum())
    for idx in list(np.ndindex(x.shape))[:12]:
        e = np.zeros(x.shape, np.float64)
        e[idx] = 1
        assert dx[idx] == pytest.approx(probe(e, w, None), rel=1e-5, abs=1e-5)
    for idx in list(np.ndindex(w.shape))[:12]:
        e = np.zeros(w.shape, np.float64)
        e[idx] = 1
        assert dw[idx] == pytest.approx(probe(x, e, None), rel=1e-5, abs=1e-5)
    assert db == pytest.approx(gb.sum(axis=(0,) + tuple(range(2, gb.ndim))), rel=1e-5)


@pytest.mark.capsules("reference.conv_transpose")
@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: f"r{len(c[4])}")
def test_conv_transpose_vjp_is_conv_and_the_swapped_kernel_grad(case):
    rng = np.random.default_rng(5)
    x, w, b, prm = _arrays(rng, case, True)
    b = b if b is not None else rng.standard_normal(w.shape[1] * prm["groups"]).astype(F32)
    y = ops.conv_transpose(tensor(x), tensor(w), tensor(b), **prm)
    g = rng.standard_normal(y.shape).astype(F32)
    dx, dw, db = _loss_grads(ops.conv_transpose, (x, w, b), prm, g)
    # dx = conv(g, w): the transposed op's input gradient is the forward conv
    assert np.array_equal(dx, ops.conv(tensor(g), tensor(w), **prm).numpy())
    # <conv_transpose(x, w), g> = <x, conv(g, w)> = sum over w of w * dw
    rank = w.ndim - 2
    lhs = float((direct_conv_transpose(_batched(x, rank), w, None, **prm)
                 * _batched(g, rank)).sum())
    assert float((w.astype(np.float64) * dw).sum()) == pytest.approx(lhs, rel=1e-5, abs=1e-5)
    gb = _batched(g, rank).astype(np.float64)
    assert db == pytest.approx(gb.sum(axis=(0,) + tuple(range(2, gb.ndim))), rel=1e-5)


def test_conv2d_entry_points_are_the_same_op():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(F32), rng.standard_normal((4, 3, 3, 3))
    w = w.astype(F32)
    a = ops.conv2d(tensor(x), tensor(w), stride=2, padding=1).numpy()
    assert np.array_equal(a, ops.conv(tensor(x), tensor(w), stride=(2, 2), padding=1).numpy())
    wt = rng.standard_normal((3, 2, 3, 3)).astype(F32)
    c = ops.conv_transpose2d(tensor(x), tensor(wt), padding=1).numpy()
    assert np.array_equal(c, ops.conv_transpose(tensor(x), tensor(wt), padding=(1, 1)).numpy())
    with pytest.raises(ShapeError, match=r"conv2d: wants a kernel \[C_out, C_in, kh, kw\]"):
        ops.conv2d(tensor(x[0]), tensor(w[0]))


def _ones(*shape):
    return tensor(np.ones(shape, F32))


@pytest.mark.parametrize("call,error,message", [
    (lambda: ops.conv(_ones(2, 5), _ones(3, 2)), ShapeError,
     "conv: the kernel has shape (3, 2) (spatial rank 0); wants rank 3..10"),
    (lambda: ops.conv(_ones(3, 5), _ones(2, 2, 3)), ShapeError,
     "conv: x has 3 channels but the kernel (2, 2, 3) with groups=1 takes 2 x 1 = 2"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), stride=0), ParameterValueError,
     "conv: stride (0,) must be positive on every axis (stride 0 has no next window)"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), padding=-1), ParameterValueError,
     "conv: padding (-1,) must be non-negative on every axis"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), dilation=(0,)), ParameterValueError,
     "conv: dilation (0,) must be positive on every axis"),
    (lambda: ops.conv(_ones(2, 5), _ones(3, 1, 3), groups=2), ParameterValueError,
     "conv: groups=2 must divide both channel counts, got C_in=2 and C_out=3"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), _ones(3)), ShapeError,
     "conv: bias has shape (3,), expected (2,) (one per output channel) or None"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), stride=True), ParameterTypeError,
     "conv: stride must be an int or a sequence of 1 ints, got bool True"),
    (lambda: ops.conv_transpose(_ones(3, 5), _ones(2, 2, 3)), ShapeError,
     "conv_transpose: x has 3 channels but the kernel (2, 2, 3) takes 2"),
    (lambda: ops.conv(_ones(2, 5), _ones(2, 2, 3), padding=2**32), UInt32OverflowError,
     "conv: padding 4294967296 is over the UInt32 limit 4294967295; use a smaller value"),
])
def test_guards_raise_named_errors_with_exact_messages(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(message)


def test_a_zero_channel_count_does_not_hide_an_overflowing_spatial_product():
    from engine.runtime.buffer import AnyBuffer
    from engine.tensor import Tensor
    x = Tensor(AnyBuffer(np.zeros(0, F32), tensor(np.zeros(1, F32)).device), (0, 2**16, 2**16))
    with pytest.raises(UInt32OverflowError, match=r"spatial product of x \(65536, 65536\) is "
                                                  r"4294967296"):
        ops.conv(x, _ones(2, 0, 1, 1))


def test_the_conv_layer_initialises_like_pytorch_and_runs():
    from engine.nn import Conv
    layer = Conv(4, 6, 3, padding=1, groups=2, seed=7)
    assert layer.weight.shape == (6, 2, 3, 3) and layer.bias.shape == (6,)
    bound = 1 / math.sqrt(2 * 9)
    w = layer.weight.numpy()
    assert np.all(np.abs(w) <= bound) and np.abs(w).max() > 0.8 * bound
    again = Conv(4, 6, 3, padding=1, groups=2, seed=7)
    assert np.array_equal(w, again.weight.numpy())
    x = tensor(np.ones((2, 4, 5, 5), F32))
    y = layer(x)
    assert y.shape == (2, 6, 5, 5)
    assert np.array_equal(y.numpy(), ops.conv(x, layer.weight, layer.bias, padding=1,
                                              groups=2).numpy())
    assert Conv(2, 2, (1, 3), bias=False, seed=1).bias is None


def _fold(terms):
    """A float32 left fold from -0 over `terms` (a list of (values [N, n_out], in range [n_out]))."""
    acc = None
    for vals, ok in terms:
        if acc is None:
            acc = np.full(vals.shape, F32(-0.0), F32)
        acc = np.where(ok[None, :], (acc + vals).astype(F32), acc)
    return acc


@pytest.mark.parametrize("case", [
    ((2, 4, 6, 2), (7, 5), (3, 2), (1, 1), (1, 0), (1, 2)),
    ((1, 3, 5, 1), (6, 6), (3, 3), (1, 1), (2, 1), (1, 1)),     # padding at the limit
    ((1, 2, 2, 2), (5, 4), (2, 3), (1, 1), (0, 2), (2, 1)),
])
def test_the_flipped_forward_folds_dinput_in_the_gather_order(case):
    """The native dInput at stride 1 runs the tiled forward on the flipped, transposed kernel
    (engine/providers/native_cuda/conv.py `flipped`): emulated in float32 here, that fold equals
    the gather's (output channel ascending, taps in reverse row-major order) bit for bit."""
    from conformance.references._conv import adjoint_taps, forward_taps
    from engine.convolution import Geometry, conv_extent
    from engine.providers.native_cuda.conv import flipped
    (n, ci, co, g), inp, k, s, p, d = case
    rng = np.random.default_rng(0)
    out = tuple(conv_extent(*a) for a in zip(inp, k, s, p, d))
    geo = Geometry(n, ci, co, g, inp, out, k, s, p, d)
    gy = rng.standard_normal((n, co, math.prod(out))).astype(F32)
    w = rng.standard_normal((co, ci // g, math.prod(k))).astype(F32)
    og, cg, taps = co // g, ci // g, math.prod(k)
    idx, ok = adjoint_taps(geo)
    gather = np.empty((n, ci, math.prod(inp)), F32)
    for c in range(ci):
        terms = [((gy[:, (c // cg) * og + o, idx[:, t]] * w[(c // cg) * og + o, c % cg, t])
                  .astype(F32), ok[:, t]) for o in range(og) for t in reversed(range(taps))]
        gather[:, c] = _fold(terms)
    flip = flipped(geo)
    assert flip is not None and flip.out == inp
    wf = np.empty((ci, og, taps), F32)
    for o in range(co):
        for c in range(cg):
            wf[(o // og) * cg + c, o % og, ::-1] = w[o, c]
    fidx, fok = forward_taps(flip)
    tiled = np.empty_like(gather)
    for c in range(ci):
        base = (c // cg) * og
        terms = [((gy[:, base + o, fidx[:, t]] * wf[c, o, t]).astype(F32), fok[:, t])
                 for o in range(og) for t in range(taps)]
        tiled[:, c] = _fold(terms)
    assert np.array_equal(tiled.view(np.uint32), gather.view(np.uint32))
    from engine import convolution as C
    want = C.input_grad64(geo, gy.reshape((n, co) + out), w.reshape((co, cg) + k))
    assert np.allclose(gather.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
