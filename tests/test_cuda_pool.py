"""native_cuda max_pool, avg_pool and smooth_max_pool on the GPU: forward and both backward modes
against the mpmath references under the capsules' own error models (the harness's judgement), the
2-D fast path bitwise equal to the N-D kernels, deterministic mode bitwise repeatable, the local
tape rule on CUDA equal to the capsule's VJP, and TorchLean's avgpool2d backward 17x17 k3 s1 p1."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
from conformance import error_models
from conformance.references import get
from engine.types import BackendOp as Op

pytestmark = pytest.mark.cuda

F32 = np.float32
OPS = ("max_pool", "avg_pool", "smooth_max_pool")
GEOMETRIES = (
    ((2, 3, 9, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((4, 8, 33, 31), (2, 2), (2, 2), (0, 0), (1, 1)),
    ((2, 7, 10), (2, 3), (3, 1), (1, 1), (2, 1)),
    ((1, 1, 1), (2, 2), (1, 1), (1, 1), (2, 2)),
    ((3, 1025), (4,), (2,), (2,), (1,)),
    ((2, 2, 4, 5, 3), (3, 2, 2), (1, 2, 1), (1, 1, 0), (1, 1, 2)),
    ((1, 2, 2, 3, 2, 2, 2, 2, 3), (2, 1, 2, 2, 1, 2, 1, 2), (1,) * 8, (1, 0, 1, 0, 0, 1, 0, 1),
     (1,) * 8),
    ((2, 3, 3), (3, 3), (1, 1), (2, 2), (1, 1)),
)


def _params(op, k, s, p, d, beta=0.5):
    params = {"kernel_size": k, "stride": s, "padding": p, "dilation": d}
    if op == "smooth_max_pool":
        params["beta"] = beta
    return params


def _judge(op, x, params, got, g=None):
    from engine.registry import registry
    cap = registry().get(f"native_cuda.{op}")[0]
    ref = get(op)
    fwd = ref.forward([x], **params)
    ctx = error_models.BoundContext(Op[op], (x,), params, cap.numerical_policy)
    if g is None:
        return error_models.compare(error_models.forward_model(cap, fwd.kind), fwd, got, ctx)
    (dref,) = ref.vjp([x], g, **params)
    ctx.g, ctx.fwd_ref = g, fwd
    return error_models.compare(error_models.vjp_model(cap, dref.kind), dref, got, ctx)


def _modes():
    from engine.runtime.deterministic import deterministic_reductions
    return {"atomic": deterministic_reductions(False),
            "deterministic": deterministic_reductions(True)}


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
def test_native_pool_meets_the_error_models_in_both_modes(op, geometry):
    cp = H.cupy()
    shape, k, s, p, d = geometry
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(F32)
    x.reshape(-1)[:: 7] = np.round(x.reshape(-1)[:: 7])          # some ties
    params = _params(op, k, s, p, d)
    h = H.native_handler(op)
    y = H.to_host(h.forward(cp.asarray(x), **params))
    verdict = _judge(op, x, params, y)
    assert verdict.passed, verdict.reasons()
    g = rng.standard_normal(y.shape).astype(F32)
    for name, mode in _modes().items():
        with mode:
            (dx,) = h.vjp((cp.asarray(x),), cp.asarray(y), cp.asarray(g), **params)
            dx = H.to_host(dx)
            if name == "deterministic":
                for _ in range(2):
                    (again,) = h.vjp((cp.asarray(x),), cp.asarray(y), cp.asarray(g), **params)
                    H.assert_bitwise(again, dx, f"{op} deterministic backward, repeated")
        verdict = _judge(op, x, params, dx, g)
        assert verdict.passed, (name, verdict.reasons())


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", OPS)
def test_2d_fast_path_equals_the_nd_kernels(op):
    """The same 2-D geometry through the _2d and _nd kernels: the same expression in the same order,
    so bitwise equal (forward, and the deterministic backward)."""
    cp = H.cupy()
    from engine.providers.native_cuda import launch, pool
    rng = np.random.default_rng(5)
    x = cp.asarray(rng.standard_normal((3, 5, 19, 23)).astype(F32))
    k, s, p, d = (3, 2), (2, 1), (1, 1), (1, 2)
    planes, _, n_out, shape, geo2 = pool._view(x, k, s, p, d)
    # the N-D geometry of the same window: _view builds it for rank != 2, so build it by hand
    host = np.zeros(48, np.int64)
    from engine.pool_windows import out_spatial
    for i, vals in enumerate(((19, 23), out_spatial((19, 23), k, s, p, d), k, s, p, d)):
        host[8 * i:8 * i + 2] = vals
    geon = (np.int32(2), cp.asarray(host))
    stem = {"max_pool": "tl_max_pool", "avg_pool": "tl_avg_pool",
            "smooth_max_pool": "tl_smooth_max_pool"}[op]
    extra = {"max_pool": (), "avg_pool": (np.uint32(6),),
             "smooth_max_pool": (np.float64(0.5),)}[op]
    outs = []
    for suffix, geo in (("2d", geo2), ("nd", geon)):
        y = launch.empty(shape)
        launch.kernel("pool.cu", f"{stem}_{suffix}")(launch.grid(y.size),
                                                     (x, y, np.uint32(planes)) + extra + geo)
        outs.append(y.get())
    H.assert_bitwise(outs[0], outs[1], f"{op}: 2-D fast path vs N-D kernel")


@pytest.mark.capsules("native_cuda.avg_pool")
def test_default_and_deterministic_backward_agree_within_the_sum_bound():
    cp = H.cupy()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 16, 64, 64)).astype(F32)
    params = _params("avg_pool", (3, 3), (1, 1), (1, 1), (1, 1))
    h = H.native_handler("avg_pool")
    g = rng.standard_normal(x.shape).astype(F32)
    grads = {}
    for name, mode in _modes().items():
        with mode:
            grads[name] = H.to_host(h.vjp((cp.asarray(x),), None, cp.asarray(g), **params)[0])
    # up to nine terms per cell, the sum then one division: each mode within gamma_10 of the
    # exact sum|g| / 9 (k = n + 1), so the two within 2 gamma_10 of it (assert_sum_bound's 2)
    abs_terms = H.to_host(h.vjp((cp.asarray(x),), None, cp.asarray(np.abs(g)), **params)[0])
    H.assert_sum_bound(grads["atomic"], grads["deterministic"], abs_terms, 10,
                       "avg_pool backward, atomic vs deterministic")


@pytest.mark.capsules("native_cuda.avg_pool")
def test_torchlean_avgpool2d_backward_17x17_k3_s1_p1_is_deterministic():
    """TorchLean's check: the deterministic backward of avgpool2d on 17x17, k 3, s 1, p 1 repeats
    bit for bit; with g = 1 it is each cell's window count / 9."""
    cp = H.cupy()
    h = H.native_handler("avg_pool")
    x = cp.zeros((1, 17, 17), cp.float32)
    params = _params("avg_pool", (3, 3), (1, 1), (1, 1), (1, 1))
    g = cp.ones((1, 17, 17), cp.float32)
    with _modes()["deterministic"]:
        first = H.to_host(h.vjp((x,), None, g, **params)[0])
        for _ in range(4):
            H.assert_bitwise(h.vjp((x,), None, g, **params)[0], first, "avgpool2d backward")
    edge = np.array([2] + [3] * 15 + [2], np.float64)
    H.assert_bitwise(first[0], (np.outer(edge, edge) / 9).astype(F32), "window counts / 9")


@pytest.mark.capsules("native_cuda.max_pool")
def test_max_pool_ties_and_nan_on_cuda():
    cp = H.cupy()
    h = H.native_handler("max_pool")
    x = np.array([[[1, 5, np.nan, 7], [5, 0, 2, np.nan]]], F32)
    params = _params("max_pool", (2, 2), (2, 2), (0, 0), (1, 1))
    y = H.to_host(h.forward(cp.asarray(x), **params))
    assert y[0, 0, 0] == 5 and np.isnan(y[0, 0, 1])
    g = np.array([[[10.0, 20.0]]], F32)
    want = np.zeros_like(x)
    want[0, 0, 1], want[0, 0, 2] = 10, 20
    for mode in _modes().values():
        with mode:
            (dx,) = h.vjp((cp.asarray(x),), None, cp.asarray(g), **params)
        H.assert_bitwise(dx, want, "max_pool: first maximum / first NaN takes g")


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", OPS)
def test_the_tape_rule_on_cuda_runs_the_capsules_backward(op):
    cp = H.cupy()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 12, 12)).astype(F32)
    params = _params(op, (3, 3), (2, 2), (1, 1), (1, 1))
    h = H.native_handler(op)
    y = h.forward(cp.asarray(x), **params)
    g = cp.asarray(rng.standard_normal(y.shape).astype(F32))
    with _modes()["deterministic"]:
        (native,) = h.vjp((cp.asarray(x),), y, g, **params)
        (tape,) = H.reference_vjp(op)((cp.asarray(x),), y, g, **params)
    H.assert_bitwise(tape, native, f"{op}: tape rule on CUDA vs the capsule's VJP")


@pytest.mark.capsules("native_cuda.smooth_max_pool")
def test_smooth_max_pool_at_overflow_scale_inputs_on_cuda():
    cp = H.cupy()
    h = H.native_handler("smooth_max_pool")
    x = np.full((1, 4, 4), 1e30, F32)
    x[0, 0, 0] = -1e30
    params = _params("smooth_max_pool", (2, 2), (2, 2), (0, 0), (1, 1), beta=0.5)
    y = H.to_host(h.forward(cp.asarray(x), **params))
    H.assert_bitwise(y, np.full((1, 2, 2), 1e30, F32), "smooth max of 1e30 windows")
