"""The tape's local VJP rules on CUDA arrays keep gradual underflow and agree with the NumPy tape
(engine/ops/*.py through engine/csrc/cuda/tape.cu, issue 10).

- float32/float64 arithmetic rules: the CUDA gradient equals the NumPy gradient bit for bit.
- exp, softplus, sin, cos: a float64 transcendental decides (libdevice on the GPU, NumPy's libm or
  SIMD code on the host, a few double ulps apart): within 1 float32 ulp of NumPy, and bit for bit
  equal to the NumPy formula evaluated with the device's own exp/sin/cos values.
- gelu: bit for bit equal to the NumPy formula evaluated with the device's pow(x, 3) and tanh
  (1 - t^2 and 1 + t cancel near |a| ~ 5, so a tanh a few ulps apart may move the float32
  gradient by more than an ulp; the formula itself is what must agree).
- reduce_mean, mse_loss, gather and the data-movement rules: bit for bit, subnormals included.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuda_helpers as H
import tape_cases as C
from engine.ops import LOCAL_VJP
from engine.ops.elementwise import gelu_slope
from engine.types import BackendOp as Op

pytestmark = pytest.mark.cuda

BITWISE = ["add", "sub", "mul", "max", "min", "scale", "abs", "sqrt", "clamp", "relu",
           "sigmoid", "tanh", "log", "inv", "safe_log"]
LIBM = ["exp", "softplus", "sin", "cos"]

_PROBE = r"""
extern "C" __global__ void tl_test_f64(const double* x, double* out, unsigned n, int which) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double v = x[i];
    out[i] = which == 0 ? exp(v) : which == 1 ? sin(v) : which == 2 ? cos(v)
           : which == 3 ? tanh(v) : pow(v, 3.0);
}
"""
_WHICH = {"exp": 0, "sin": 1, "cos": 2, "tanh": 3, "pow3": 4}
_probe_kernel = None


def _device_f64(name: str, x: np.ndarray) -> np.ndarray:
    """libdevice's float64 `name` of each x, compiled with the loader's OPTIONS (no contraction),
    as tape.cu's kernels call it."""
    global _probe_kernel
    cp = H.cupy()
    if _probe_kernel is None:
        from engine.runtime import loader
        _probe_kernel = cp.RawKernel(_PROBE, "tl_test_f64", options=loader.OPTIONS)
    xd = cp.asarray(np.ascontiguousarray(x, np.float64))
    out = cp.empty_like(xd)
    n = xd.size
    if n:
        _probe_kernel(((n + 255) // 256,), (256,), (xd, out, np.uint32(n), np.int32(_WHICH[name])))
    return out.get()


def _rule(label):
    return LOCAL_VJP[Op.parse(label)]


def _both(label, seed, params):
    """(NumPy gradients, CUDA gradients, host inputs) of one rule on the mixed inputs."""
    cp = H.cupy()
    a, b = C.pair(seed)
    y, g = C.mixed(seed + 1), C.mixed(seed + 2)
    inputs = (a, b) if label in C.BINARY else (a,)
    with np.errstate(all="ignore"):
        want = _rule(label)(inputs, y, g, **params)
    dev_inputs = tuple(cp.asarray(x) for x in inputs)
    got = _rule(label)(dev_inputs, cp.asarray(y), cp.asarray(g), **params)
    for x, dx in zip(inputs, dev_inputs):   # the rule never writes its inputs
        H.assert_bitwise(dx, x, f"{label}: input after the rule")
    return want, got, (a, b, y, g)


@pytest.mark.parametrize("label", BITWISE)
def test_arithmetic_rules_match_the_numpy_tape_bit_for_bit(label):
    for seed in (3, 40):
        for params in C.PARAMS.get(label, [{}]):
            want, got, _ = _both(label, seed, params)
            assert len(got) == len(want)
            for i, (x, w) in enumerate(zip(got, want)):
                assert type(x).__module__.startswith("cupy"), f"{label}: a host array came back"
                H.assert_bitwise(x, w, f"{label} {params} gradient {i} (seed {seed})")


def _with_device_functions(label, a, g):
    """The rule's NumPy formula with the device's float64 transcendental in place of NumPy's."""
    g64, a64 = g.astype(np.float64), a.astype(np.float64)
    with np.errstate(all="ignore"):
        if label == "exp":
            d = np.where((g64 == 0) & (a64 < np.inf), g64, g64 * _device_f64("exp", a64))
        elif label == "softplus":
            d = g64 * (1.0 / (1.0 + _device_f64("exp", -a64)))
        elif label == "sin":
            d = g64 * _device_f64("cos", a64)
        else:   # cos
            d = -g64 * _device_f64("sin", a64)
        return d.astype(np.float32)


@pytest.mark.parametrize("label", LIBM)
def test_transcendental_rules_are_the_numpy_formula_and_within_one_ulp(label):
    for seed in (5, 50):
        want, got, (a, _, _, g) = _both(label, seed, {})
        H.assert_bitwise(got[0], _with_device_functions(label, a, g),
                         f"{label}: the NumPy formula with the device's transcendental")
        # One float32 ulp: both float64 values are within a few double ulps of the truth, so
        # their roundings to float32 differ by at most one step.
        H.assert_ulps(got[0], want[0], 1, f"{label}: CUDA tape vs NumPy tape")


def test_gelu_rule_is_the_numpy_formula_with_the_devices_pow_and_tanh():
    a, g = C.mixed(61), C.mixed(62)
    x, g64 = a.astype(np.float64), g.astype(np.float64)
    with np.errstate(all="ignore"):
        u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * _device_f64("pow3", x))
        d = gelu_slope(x, _device_f64("tanh", u))
        d = np.where(np.isneginf(x), -0.0, np.where(np.isposinf(x), 1.0, d))
        want = (g64 * d).astype(np.float32)
    cp = H.cupy()
    (got,) = _rule("gelu")((cp.asarray(a),), None, cp.asarray(g))
    H.assert_bitwise(got, want, "gelu: the NumPy formula with the device's pow and tanh")


def _one(label, a, g, b=None, **params):
    cp = H.cupy()
    inputs = (cp.asarray(np.array([a], np.float32)),)
    if b is not None:
        inputs += (cp.asarray(np.array([b], np.float32)),)
    y = cp.asarray(np.array([0.5], np.float32))
    out = _rule(label)(inputs, y, cp.asarray(np.array([g], np.float32)), **params)
    return [float(o.get()[0]) for o in out]


def test_named_subnormal_cases_keep_gradual_underflow():
    tiny, sub = C.TINY, 2.0 ** -140
    assert _one("relu", tiny, 1.0) == [1.0]                   # a positive subnormal input
    assert _one("relu", -tiny, 1.0) == [0.0]
    assert _one("mul", tiny, 1.0, b=1.0) == [1.0, tiny]       # g * a keeps the subnormal
    assert _one("mul", 1.0, sub, b=1.0) == [sub, sub]         # g * b with a subnormal g
    assert _one("exp", 0.0, sub) == [sub]
    assert _one("log", 1.0, sub) == [sub]
    assert _one("cos", np.float32(np.pi / 2), sub) == [-sub]  # -g sin(a) rounds back to -g
    assert _one("sigmoid", 0.0, 4 * sub) == [sub]             # g * y (1 - y), y = 0.5
    assert _one("softplus", 0.0, 2 * sub) == [sub]            # g * sigmoid(0)
    assert _one("max", tiny, 1.0, b=2 * tiny) == [0.0, 1.0]   # distinct subnormals, not a tie
    assert _one("sub", 0.0, -tiny, b=0.0) == [-tiny, tiny]


def test_reduce_mean_mse_and_gather_match_the_numpy_tape_bit_for_bit():
    cp = H.cupy()
    a = C.mixed(71, 3 * 40 * 5).reshape(3, 40, 5)
    g = C.mixed(72, 3 * 5).reshape(3, 5)
    for axes, keep, gs in (((1,), False, g), ((1,), True, g.reshape(3, 1, 5)),
                           (None, False, np.asarray(C.TINY * 3, np.float32))):
        with np.errstate(all="ignore"):
            (want,) = _rule("reduce_mean")((a,), None, gs, axes=axes, keepdims=keep)
        (got,) = _rule("reduce_mean")((cp.asarray(a),), None, cp.asarray(gs), axes=axes,
                                      keepdims=keep)
        H.assert_bitwise(got, want, f"reduce_mean axes={axes} keepdims={keep}")
    p, t = C.mixed(73, 777), C.mixed(74, 777)
    for g0 in (np.asarray(1.0, np.float32), np.asarray(C.TINY, np.float32)):
        with np.errstate(all="ignore"):
            want = _rule("mse_loss")((p, t), None, g0)
        got = _rule("mse_loss")((cp.asarray(p), cp.asarray(t)), None, cp.asarray(g0))
        for w, x, name in zip(want, got, ("d pred", "d target")):
            H.assert_bitwise(x, w, f"mse_loss {name}, g={float(g0)!r}")
    idx = np.array([3, 0, 3, 3, 1, 0, 39, 3], dtype=np.int64)
    gg = C.mixed(75, 3 * 8 * 5).reshape(3, 8, 5)
    gg[:, :4, :] = C.TINY                                     # subnormal sums in index order
    with np.errstate(all="ignore"):
        (want,) = _rule("gather")((a,), None, gg, axis=1, indices=idx)
    (got,) = _rule("gather")((cp.asarray(a),), None, cp.asarray(gg), axis=1,
                             indices=cp.asarray(idx))
    H.assert_bitwise(got, want, "gather's scatter of g")


def test_data_movement_rules_keep_subnormals_bit_for_bit():
    # The rules that are not routed and not declared in TAPE_FLUSHES_ON_CUDA: CuPy copies only.
    cp = H.cupy()
    a = C.mixed(81, 4 * 6 * 5).reshape(4, 6, 5)
    b = C.mixed(82, 4 * 3 * 5).reshape(4, 3, 5)
    # Distinct subnormals k * 2^-149 (k < 2^23): every one a flush-to-zero would lose.
    sub = (np.float32(C.TINY) * np.arange(1, a.size + 1, dtype=np.float32)).reshape(a.shape)
    cases = [
        ("reshape", (a,), sub.reshape(-1), {"shape": (a.size,)}),
        ("permute", (a,), sub.transpose(2, 0, 1).copy(), {"perm": (2, 0, 1)}),
        ("concat", (a, b), np.concatenate([sub, sub[:, :3]], axis=1), {"axis": 1}),
        ("slice", (a,), sub[:, 1:4].copy(), {"axis": 1, "start": 1, "stop": 4}),
        ("reduce_sum", (a,), sub.sum(axis=1), {"axes": (1,), "keepdims": False}),
        ("scatter_add", (a, b), sub, {"axis": 1, "indices": np.array([5, 0, 5])}),
    ]
    for label, inputs, g, params in cases:
        with np.errstate(all="ignore"):
            want = _rule(label)(inputs, None, g, **params)
        dparams = dict(params)
        if "indices" in dparams:
            dparams["indices"] = cp.asarray(dparams["indices"])
        got = _rule(label)(tuple(cp.asarray(x) for x in inputs), None, cp.asarray(g), **dparams)
        for i, (x, w) in enumerate(zip(got, want)):
            H.assert_bitwise(x, w, f"{label} gradient {i}")


def test_empty_arrays_launch_nothing_and_keep_their_shapes():
    cp = H.cupy()
    e = cp.empty((0, 3), cp.float32)
    for label in C.UNARY + C.BINARY:
        inputs = (e, e) if label in C.BINARY else (e,)
        for params in C.PARAMS.get(label, [{}])[:1]:
            out = _rule(label)(inputs, e, e, **params)
            assert all(o.shape == (0, 3) for o in out), label
