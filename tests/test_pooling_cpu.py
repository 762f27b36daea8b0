"""max_pool, avg_pool and smooth_max_pool on the CPU through engine.ops and the tape: hand-computed
values (tie-breaking, NaN, padding rules, empty outputs), smooth max at 1e30 with beta 0.5,
TorchLean's avgpool2d backward 17x17 k3 s1 p1, the layers, and the reference provider against the
mpmath references."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.references import get
from engine import nn, ops
from engine.autograd import backward
from engine.errors import ParameterValueError, ShapeError, UInt32OverflowError
from engine.tensor import tensor

F32 = np.float32


def _grad(fn, x, g=None):
    t = tensor(np.asarray(x, F32), requires_grad=True)
    y = fn(t)
    seed = np.ones(y.shape, F32) if g is None else np.asarray(g, F32)
    backward(ops.reduce_sum(ops.mul(y, tensor(seed))))
    return y.numpy(), t.grad.numpy()


@pytest.mark.capsules("reference.max_pool")
def test_max_pool_first_maximum_wins_and_takes_the_whole_gradient():
    x = [[[1, 5, 2, 7], [5, 0, 7, 7], [-1, -2, -3, -4], [9, 1, 1, 9]]]
    y, dx = _grad(lambda t: ops.max_pool(t, 2), x, [[[10, 20], [30, 40]]])
    assert y.tolist() == [[[5, 7], [9, 9]]]
    want = np.zeros((1, 4, 4), F32)
    want[0, 0, 1], want[0, 0, 3], want[0, 3, 0], want[0, 3, 3] = 10, 20, 30, 40
    assert dx.tobytes() == want.tobytes()


@pytest.mark.capsules("reference.max_pool")
def test_max_pool_ties_between_zeros_keep_the_first_and_its_sign():
    x = np.array([[[-0.0, 0.0], [0.0, -0.0]]], F32)
    y = ops.max_pool(tensor(x), 2).numpy()
    assert y.reshape(-1)[0] == 0 and np.signbit(y.reshape(-1)[0])


@pytest.mark.capsules("reference.max_pool")
def test_max_pool_nan_propagates_and_its_first_nan_takes_the_gradient():
    x = [[[1, np.nan, np.nan, 3]]]          # rank 1: (N, C, L)
    y, dx = _grad(lambda t: ops.max_pool(t, (4,)), x, [[[2.0]]])
    assert np.isnan(y).all()
    assert dx.tolist() == [[[0, 2, 0, 0]]]


@pytest.mark.capsules("reference.max_pool")
def test_max_pool_overlapping_windows_sum_their_gradients():
    x = [[0, 0, 9, 0, 0]]                   # (C, L); k 3 s 1: the 9 is max of three windows
    y, dx = _grad(lambda t: ops.max_pool(t, (3,), stride=1), x)
    assert y.tolist() == [[9, 9, 9]]
    assert dx.tolist() == [[0, 0, 3, 0, 0]]


@pytest.mark.capsules("reference.max_pool", "reference.avg_pool", "reference.smooth_max_pool")
def test_padding_is_minus_inf_for_max_and_zero_for_avg_and_smooth_max():
    x = np.full((1, 1, 2), -5.0, F32)        # (N, C, L)
    assert ops.max_pool(tensor(x), (2,), stride=(1,), padding=1).numpy().tolist() == \
        [[[-5, -5, -5]]]
    # avg divides by the full window: padding counts as 0 and is counted
    assert ops.avg_pool(tensor(x), (2,), stride=(1,), padding=1).numpy().tolist() == \
        [[[-2.5, -5, -2.5]]]
    # smooth max with a padded 0: log(exp(0.5 * 0) + exp(0.5 * -5)) / 0.5 over pivot 0
    got = ops.smooth_max_pool(tensor(x), (2,), 0.5, stride=(1,), padding=1).numpy()
    edge = np.log1p(np.exp(-2.5)) / 0.5
    assert got[0, 0, 0] == F32(edge) and got[0, 0, 2] == F32(edge)
    assert got[0, 0, 1] == F32(-5 + np.log(2) / 0.5)


def test_a_window_of_padding_only_gives_minus_inf_and_no_gradient():
    y, dx = _grad(lambda t: ops.max_pool(t, (2,), stride=1, padding=1, dilation=2), [[3.0]])
    assert y.tolist() == [[-np.inf]]
    assert dx.tolist() == [[0.0]]


@pytest.mark.parametrize("kw, shape", [
    ({"padding": 2}, (1, 0, 0)),             # p > k/2: an empty output, not an error
    ({"padding": 0}, (1, 0, 0)),             # a 3x3 window over 2x2: no phantom window
])
def test_empty_outputs(kw, shape):
    x = tensor(np.ones((1, 2, 2), F32))
    for fn in (ops.max_pool, ops.avg_pool):
        assert fn(x, 3, **kw).shape == shape
    assert ops.smooth_max_pool(x, 3, 0.5, **kw).shape == shape


def test_output_extent_formula_with_stride_and_dilation():
    x = tensor(np.zeros((2, 3, 11, 7), F32))
    # axis 0: (11 + 2 - 2*2 - 1) // 3 + 1 = 3; axis 1: (7 + 0 - 1*3 - 1) // 2 + 1 = 2
    assert ops.avg_pool(x, (3, 4), stride=(3, 2), padding=(1, 0), dilation=(2, 1)).shape == \
        (2, 3, 3, 2)


@pytest.mark.capsules("reference.avg_pool")
def test_avg_pool_17x17_k3_s1_p1_backward_is_the_window_count_over_9():
    # TorchLean's deterministic avgpool2d case: g = 1, each cell gets (windows holding it) / 9
    _, dx = _grad(lambda t: ops.avg_pool(t, 3, stride=1, padding=1), np.zeros((1, 17, 17)))
    edge = np.array([2] + [3] * 15 + [2], np.float64)
    assert dx[0].tobytes() == (np.outer(edge, edge) / 9).astype(F32).tobytes()


@pytest.mark.capsules("reference.smooth_max_pool")
def test_smooth_max_pool_at_overflow_scale_inputs_with_beta_half():
    x = np.full((1, 4, 4), 1e30, F32)
    x[0, 0, 0] = -1e30
    y, dx = _grad(lambda t: ops.smooth_max_pool(t, 2, 0.5), x)
    assert y.tobytes() == np.full((1, 2, 2), 1e30, F32).tobytes()
    # the window with -1e30: three equal maxima share the gradient, the -1e30 gets exactly 0
    assert dx[0, 0, 0] == 0 and dx[0, 0, 1] == F32(1 / 3) and dx[0, 1, 1] == F32(1 / 3)
    assert dx[0, 2, 2] == F32(0.25)


@pytest.mark.capsules("reference.smooth_max_pool")
def test_smooth_max_pool_negative_beta_is_a_smooth_min():
    x = [[[1.0, 3.0]]]
    y, dx = _grad(lambda t: ops.smooth_max_pool(t, (2,), -2.0), x)
    w = np.exp(-2.0 * np.array([0.0, 2.0]))
    assert y[0, 0, 0] == F32(1 + np.log(w.sum()) / -2.0)
    assert dx[0, 0].tolist() == (w / w.sum()).astype(F32).tolist()


@pytest.mark.parametrize("beta", [0.0, float("inf"), float("nan"), 1e-50, -1e39])
def test_smooth_max_pool_rejects_beta_that_is_not_finite_and_nonzero_in_float32(beta):
    with pytest.raises(ParameterValueError, match="beta must be finite and nonzero"):
        ops.smooth_max_pool(tensor(np.ones((1, 2, 2), F32)), 2, beta)


def test_geometry_guards_name_the_parameter():
    x = tensor(np.ones((1, 4, 4), F32))
    with pytest.raises(ParameterValueError, match=r"stride \(0, 0\) has 0"):
        ops.max_pool(x, 2, stride=0)
    with pytest.raises(ShapeError, match="spatial rank of 3"):
        ops.avg_pool(x, (1, 1, 1))
    with pytest.raises(UInt32OverflowError, match="input spatial extents"):
        ops.max_pool(tensor(np.ones((0, 2 ** 16, 2 ** 16), F32)), 1)


def test_layers_call_the_ops():
    x = tensor(np.arange(16, dtype=F32).reshape(1, 4, 4))
    assert nn.MaxPool(2)(x).numpy().tolist() == [[[5, 7], [13, 15]]]
    assert nn.AvgPool(2)(x).numpy().tolist() == [[[2.5, 4.5], [10.5, 12.5]]]
    assert nn.SmoothMaxPool(2, 1e4)(x).numpy().tolist() == [[[5, 7], [13, 15]]]
    assert nn.MaxPool(2).parameters() == []


@pytest.mark.capsules("reference.{op}")
@pytest.mark.parametrize("op", ["max_pool", "avg_pool", "smooth_max_pool"])
def test_reference_provider_matches_the_mpmath_reference(op):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 7)).astype(F32)
    x[0, 0, :3, :3] = 1.0                      # an all-equal window
    params = {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (1, 2)}
    kw = {"beta": 0.5} if op == "smooth_max_pool" else {}
    t = tensor(x, requires_grad=True)
    fn = getattr(ops, op)
    y = fn(t, params["kernel_size"], *kw.values(), **{k: v for k, v in params.items()
                                                     if k != "kernel_size"})
    g = rng.standard_normal(y.shape).astype(F32)
    backward(ops.reduce_sum(ops.mul(y, tensor(g))))
    ref = get(op)
    fwd = ref.forward([x], **params, **kw)
    (dref,) = ref.vjp([x], g, **params, **kw)
    if op == "max_pool":
        assert y.numpy().tobytes() == fwd.value.tobytes()
    else:   # float64 once: the correctly rounded value, or its neighbour on a near-tie
        assert np.all(np.abs(y.numpy() - fwd.value) <= np.spacing(np.abs(fwd.value)))
    # the gradient: float64 sums rounded once (max, avg exact or within one rounding)
    assert np.all(np.abs(t.grad.numpy() - dref.value) <= np.spacing(np.abs(dref.value)))
