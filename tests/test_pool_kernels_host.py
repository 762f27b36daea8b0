"""pool.cu's kernels, built as host C++ (tests/pool_host_kernels.py), judged on the CPU as the harness
judges the native_cuda capsules: against the mpmath references under the capsules' own error models,
forward and both backward modes; the 2-D fast path bitwise equal to the N-D form; the gather
(deterministic) backward equal to its own rerun. The real CUDA run is tests/test_cuda_pool.py."""
from __future__ import annotations

import numpy as np
import pytest

from conformance import error_models
from conformance.references import get
from engine.providers.native_cuda import capsules
from engine.types import BackendOp as Op
from pool_host_kernels import CXX, HostPool, library

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ is not on PATH: the host build of "
                                                     "pool.cu needs it")

F32 = np.float32
OPS = ("max_pool", "avg_pool", "smooth_max_pool")

# (x shape, kernel, stride, padding, dilation): 2-D (both forms) and N-D geometries
GEOMETRIES = (
    ((2, 3, 9, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 17, 17), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 7, 10), (2, 3), (3, 1), (1, 1), (2, 1)),
    ((1, 1, 1), (2, 2), (1, 1), (1, 1), (2, 2)),     # every window cell padding
    ((3, 11), (4,), (2,), (2,), (1,)),
    ((2, 2, 4, 5, 3), (3, 2, 2), (1, 2, 1), (1, 1, 0), (1, 1, 2)),
    ((1, 2, 2, 3, 2, 2, 2, 2, 3), (2, 1, 2, 2, 1, 2, 1, 2), (1,) * 8, (1, 0, 1, 0, 0, 1, 0, 1),
     (1,) * 8),
    ((2, 3, 3), (3, 3), (1, 1), (2, 2), (1, 1)),     # p > k/2: empty
)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return library(str(tmp_path_factory.mktemp("pool_host")))


def _values(rng, shape, kind):
    if kind == "ties":
        return rng.integers(-2, 3, size=shape).astype(F32)
    x = rng.standard_normal(shape).astype(F32)
    if kind == "special" and x.size > 4:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -np.inf]
    if kind == "huge":
        x = (x * F32(1e30)).astype(F32)
    if kind == "below-padding":   # pivot 0 from the padding, rest = exp(-30 |v|) below 2^-53
        x = (-1.0 - np.abs(x)).astype(F32)
    return x


def _judge(op, x, params, got, g=None):
    cap = capsules.capsule(capsules.DECLARATIONS[Op[op]])
    ref = get(op)
    fwd = ref.forward([x], **params)
    ctx = error_models.BoundContext(Op[op], (x,), params, cap.numerical_policy)
    if g is None:
        model = error_models.forward_model(cap, fwd.kind)
        return error_models.compare(model, fwd, got, ctx)
    (dref,) = ref.vjp([x], g, **params)
    ctx.g, ctx.fwd_ref = g, fwd
    model = error_models.vjp_model(cap, dref.kind)
    return error_models.compare(model, dref, got, ctx)


def _params(op, k, s, p, d, beta):
    params = {"kernel_size": k, "stride": s, "padding": p, "dilation": d}
    if op == "smooth_max_pool":
        params["beta"] = beta
    return params


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize("kind", ("normal", "ties", "special", "huge", "below-padding"))
def test_host_kernels_meet_the_capsule_error_models(lib, op, geometry, kind):
    shape, k, s, p, d = geometry
    rng = np.random.default_rng(len(shape) * 7 + len(kind))
    beta = float(F32({"special": -2.0, "below-padding": 30.0}.get(kind, 0.5)))
    x = _values(rng, shape, kind)
    params = _params(op, k, s, p, d, beta)
    forms = ("2d", "nd") if len(k) == 2 else ("nd",)
    outs = {}
    g = None
    for form in forms:
        host = HostPool(lib, shape, k, s, p, d, form)
        y = host.forward(op, x, beta)
        verdict = _judge(op, x, params, y)
        assert verdict.passed, (form, verdict.reasons(), np.nanmax(verdict.ratio))
        g = rng.standard_normal(y.shape).astype(F32) if g is None else g
        for mode in ("atomic", "gather"):
            dx = host.backward(op, x, g, mode, beta)
            verdict = _judge(op, x, params, dx, g)
            assert verdict.passed, (form, mode, verdict.reasons(), np.nanmax(verdict.ratio))
            outs[form, mode] = dx
            again = host.backward(op, x, g, mode, beta)
            assert again.tobytes() == dx.tobytes()
        outs[form] = y
    if len(forms) == 2:   # the fast path is the same expression in the same order
        for key in ("2d", ("2d", "atomic"), ("2d", "gather")):
            other = "nd" if key == "2d" else ("nd", key[1])
            assert outs[key].tobytes() == outs[other].tobytes()


def test_host_max_pool_ties_nan_and_padding_by_hand(lib):
    # window [[1, 5], [5, 0]]: the first 5 wins; [[nan, 7], [2, nan]]: the first NaN wins
    x = np.array([[[1, 5, np.nan, 7], [5, 0, 2, np.nan]]], F32)
    host = HostPool(lib, x.shape, (2, 2), (2, 2), (0, 0), (1, 1), "2d")
    y = host.forward("max_pool", x)
    assert y[0, 0, 0] == 5 and np.isnan(y[0, 0, 1])
    g = np.array([[[10.0, 20.0]]], F32)
    for mode in ("atomic", "gather"):
        dx = host.backward("max_pool", x, g, mode)
        want = np.zeros_like(x)
        want[0, 0, 1], want[0, 0, 2] = 10, 20
        assert dx.tobytes() == want.tobytes()
    # a window of padding only: -inf, and its gradient goes nowhere
    one = np.array([[3.0]], F32)
    host = HostPool(lib, one.shape, (2,), (1,), (1,), (2,), "nd")
    assert host.forward("max_pool", one)[0, 0] == -np.inf
    assert host.backward("max_pool", one, np.ones((1, 1), F32), "gather")[0, 0] == 0


def test_host_avg_pool_17x17_k3_s1_p1_gather_is_the_exact_count(lib):
    # TorchLean's deterministic case: with g = 1 every input cell gets (its window count) / 9
    x = np.zeros((1, 17, 17), F32)
    host = HostPool(lib, x.shape, (3, 3), (1, 1), (1, 1), (1, 1), "2d")
    g = np.ones(host.y_shape, F32)
    dx = host.backward("avg_pool", x, g, "gather")
    edge = np.array([2] + [3] * 15 + [2], np.float64)
    want = (np.outer(edge, edge) / 9).astype(F32)
    assert dx[0].tobytes() == want.tobytes()
