"""The fast float64 paths of elementwise.cu (tl_act_fast.cuh's tl_exp_fast, tl_rcp_1_2,
tl_log1p_01 and its integer-built conversions: sigmoid, softplus and gelu forward, the
exp/sigmoid/softplus/tanh/gelu VJPs; Newton reciprocals and square roots: the sqrt and inv VJPs)
and the two-float4 schedule, on the GPU. The float64 forwards of sigmoid, softplus and gelu and
gelu's float64 VJP are the accurate variants' (native_cuda.<op>.accurate); the plain capsules'
float32 kernels have their own tests (tests/test_cuda_act_f32.py).

The fast path claims, for |exp argument| <= 64 (gelu: |x| <= 8), a result within 0.5 + 2^-7 ulp
of the exact value (under 2^-31 relative before the one rounding; tests/test_act_fast_emulated.py
proves that on the host; gelu's VJP where its factor f is >= 2^-8, smaller f takes the libdevice
path). A float64 evaluation of the same formula rounded to float32 is within 0.5 + 2^-40 ulp of
it, so the two are at most 1 ulp apart (their distance is a whole number of ulps under 1.01): the
tolerance here. The sweeps are dense across the range, through the branch thresholds (|x| = 64,
32, 8, 2^-60 and their float neighbours), gelu's cancellation near x = -0.7518, signed zeros,
subnormals, infinities and NaN, and strided over every float32 exponent.
"""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

_C, _K = 0.7978845608028654, 0.044715


def _around(t: float, k: int = 8) -> np.ndarray:
    """t and its k float32 neighbours on each side, both signs."""
    t32 = np.float32(t)
    up = [t32]
    down = [t32]
    for _ in range(k):
        up.append(np.nextafter(up[-1], np.float32(np.inf)))
        down.append(np.nextafter(down[-1], np.float32(-np.inf)))
    v = np.array(up + down, np.float32)
    return np.concatenate([v, -v])


def _sweep(limit: float) -> np.ndarray:
    dense = np.linspace(-1.25 * limit, 1.25 * limit, 200_003, dtype=np.float32)
    tiny = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, 1e-30, -1e-30,
                     np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 100.0, -100.0, -90.0, -103.0],
                    np.float32)
    edges = np.concatenate([_around(t) for t in (64.0, 32.0, 8.0, 1.0, 0.5, 2.0 ** -60)])
    root = np.float32(-0.7517916) + np.arange(-2000, 2000, dtype=np.float32) * np.float32(6e-8)
    return np.concatenate([dense, tiny, edges, root]).astype(np.float32)


def _sig(z):
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _forward_ref(op, x):
    with np.errstate(all="ignore"):
        if op == "sigmoid":
            return _sig(x)
        if op == "softplus":
            return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)
        z = 2.0 * _C * (x + _K * x * x * x)
        out = x * _sig(z)
        return np.where(np.isinf(x), np.where(x < 0, -0.0, x), out)


def _vjp_ref(op, x, g):
    with np.errstate(all="ignore"):
        if op == "exp":
            d = np.exp(x)
        elif op == "sqrt":
            d = 1.0 / (2.0 * np.sqrt(x))
        elif op == "inv":
            d = -1.0 / (x * x)
        elif op == "sigmoid":
            e = np.exp(-np.abs(x)); d = e / (1.0 + e) ** 2
        elif op == "softplus":
            d = _sig(x)
        elif op == "tanh":
            e = np.exp(-2.0 * np.abs(x)); d = 4.0 * e / (1.0 + e) ** 2
        else:   # gelu
            z = 2.0 * _C * (x + _K * x * x * x)
            du = _C * (1.0 + 3.0 * _K * x * x)
            d = _sig(z) + 2.0 * x * _sig(z) * _sig(-z) * du
            d = np.where(np.isinf(x), np.where(x < 0, -0.0, 1.0), d)
        return g * d


def _finite_range(op, x):
    """Where the float64 formula above is a valid reference (the handlers' exact limits and
    special values are the existing tests' business: test_cuda_native_ops.py)."""
    if op in ("sqrt", "inv"):
        return np.isfinite(x) & (x != 0) & ((x > 0) | (op == "inv"))
    return np.isfinite(x) & (np.abs(x) <= 80.0)


# The capsule whose float64 kernel each op's check runs: the accurate variant where the plain
# capsule is the float32 kernel (sigmoid, softplus and gelu forward; gelu's VJP).
_F64_FWD = {"sigmoid": "sigmoid.accurate", "softplus": "softplus.accurate",
            "gelu": "gelu.accurate"}
_F64_VJP = {"gelu": "gelu.accurate"}


def _handler(cap: str):
    from engine.registry import registry
    return registry().handler(f"native_cuda.{cap}")


def _exponents() -> np.ndarray:
    """Every 1021st float32 bit pattern from +0 to +inf (each exponent, subnormals included),
    both signs, the fast paths' thresholds 2^-126 and 2^126 with their neighbours, NaN and the
    infinities."""
    bits = np.arange(0, 0x7F800001, 1021, dtype=np.uint32)
    v = bits.view(np.float32)
    edges = np.concatenate([_around(t) for t in (2.0 ** -126, 2.0 ** 126)])
    return np.concatenate([v, -v, edges, np.array([np.nan, np.inf, -np.inf], np.float32)])


@pytest.mark.capsules("native_cuda.{cap}")
@pytest.mark.parametrize("cap", sorted(_F64_FWD.values()))
def test_fast_forward_within_one_ulp_of_float64_formula(cap):
    cp = H.cupy()
    op = cap.split(".")[0]
    x = _sweep(8.0 if op == "gelu" else 64.0)
    out = H.to_host(_handler(cap).forward(cp.asarray(x)))
    keep = _finite_range(op, x)
    want = _forward_ref(op, x.astype(np.float64)).astype(np.float32)
    H.assert_ulps(out[keep], want[keep], 1.0, f"{op} forward")
    again = H.to_host(_handler(cap).forward(cp.asarray(x)))
    H.assert_bitwise(again, out, f"{op} forward repeated")


@pytest.mark.capsules("native_cuda.{cap}")
@pytest.mark.parametrize("cap", ["exp", "sigmoid", "softplus", "tanh", "gelu.accurate", "sqrt",
                                 "inv"])
def test_fast_vjp_within_one_ulp_of_float64_formula(cap):
    cp = H.cupy()
    op = cap.split(".")[0]
    x = _exponents() if op in ("sqrt", "inv") else _sweep({"tanh": 32.0, "gelu": 8.0}.get(op, 64.0))
    r = np.random.default_rng(3)
    g = (r.standard_normal(x.shape) * 2.0).astype(np.float32)
    h = _handler(cap)
    dx = cp.asarray(x)
    out = h.forward(dx)
    (ga,) = h.vjp((dx,), out, cp.asarray(g))
    ga = H.to_host(ga)
    with np.errstate(over="ignore"):   # inv's -g/a^2 beyond float range: excluded below
        want = _vjp_ref(op, x.astype(np.float64), g.astype(np.float64)).astype(np.float32)
    keep = _finite_range(op, x) & np.isfinite(want)
    H.assert_ulps(ga[keep], want[keep], 1.0, f"{op} VJP")
    (again,) = h.vjp((dx,), out, cp.asarray(g))
    H.assert_bitwise(again, ga, f"{op} VJP repeated")


def _bit_sweep() -> np.ndarray:
    """Every 4099th float32 bit pattern from +0 to +inf (each exponent, subnormals included),
    both signs, the fast paths' thresholds (|x| = 64, 32, 8, 2^-60, 2^-126) with their float
    neighbours, gelu's cancellation near -0.7518, +-0, NaN and the infinities."""
    bits = np.arange(0, 0x7F800001, 4099, dtype=np.uint32)
    v = bits.view(np.float32)
    edges = np.concatenate([_around(t, 4) for t in (64.0, 32.0, 8.0, 2.0 ** -60, 2.0 ** -126)])
    root = np.float32(-0.7517916) + np.arange(-500, 500, dtype=np.float32) * np.float32(6e-8)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)
    return np.concatenate([v, -v, edges, root, special]).astype(np.float32)


@pytest.mark.capsules("native_cuda.{cap}")
@pytest.mark.parametrize("cap", sorted(_F64_FWD.values()))
def test_forward_over_every_exponent_within_one_ulp(cap):
    """The fast path, the libdevice tails and the limits together: within 1 ulp of the float64
    formula of docs/OPS.md (NaN exactly where it is NaN, infinities equal) and repeatable."""
    cp = H.cupy()
    op = cap.split(".")[0]
    x = _bit_sweep()
    out = H.to_host(_handler(cap).forward(cp.asarray(x)))
    with np.errstate(all="ignore"):
        want = _forward_ref(op, x.astype(np.float64)).astype(np.float32)
    H.assert_ulps(out, want, 1.0, f"{op} forward, bit sweep")
    again = H.to_host(_handler(cap).forward(cp.asarray(x)))
    H.assert_bitwise(again, out, f"{op} forward, bit sweep repeated")


@pytest.mark.capsules("native_cuda.{cap}")
@pytest.mark.parametrize("cap", ["exp", "sigmoid", "softplus", "tanh", "gelu.accurate"])
def test_vjp_over_every_exponent_within_one_ulp(cap):
    cp = H.cupy()
    op = cap.split(".")[0]
    x = _bit_sweep()
    r = np.random.default_rng(4)
    g = (r.standard_normal(x.shape) * 2.0).astype(np.float32)
    g[g == 0] = 1.0   # g * exp(a) with g = 0 is the handler's exact 0, not 0 * inf
    h = _handler(cap)
    dx = cp.asarray(x)
    (ga,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
    ga = H.to_host(ga)
    with np.errstate(all="ignore"):
        want = _vjp_ref(op, x.astype(np.float64), g.astype(np.float64)).astype(np.float32)
    H.assert_ulps(ga, want, 1.0, f"{op} VJP, bit sweep")
    (again,) = h.vjp((dx,), h.forward(dx), cp.asarray(g))
    H.assert_bitwise(again, ga, f"{op} VJP, bit sweep repeated")


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["add", "mul", "max", "neg_via_sub", "relu"])
@pytest.mark.parametrize("n,offset", [(1, 0), (7, 0), (8, 0), (9, 1), (4099, 0), (4099, 1),
                                      (1 << 20, 0), ((1 << 20) + 13, 3)])
def test_two_float4_schedule_bit_for_bit(op, n, offset):
    """Every element written once with f of its own inputs, for sizes around the unroll's and
    the tail's boundaries and for misaligned views (the scalar path): numpy's float32 result bit
    for bit, forward and (for the binary ops) the vectorised ew_3_2 VJP."""
    cp = H.cupy()
    r = np.random.default_rng(n + offset)
    a = (r.standard_normal(n + offset) * 3).astype(np.float32)
    b = (r.standard_normal(n + offset) * 3).astype(np.float32)
    b[::5] = a[::5]   # ties for max's VJP
    g = r.standard_normal(n + offset).astype(np.float32)
    da, db, dg = (cp.asarray(v)[offset:] for v in (a, b, g))
    a, b, g = a[offset:], b[offset:], g[offset:]
    label = "sub" if op == "neg_via_sub" else op
    h = H.native_handler(label)
    if op == "relu":
        H.assert_bitwise(h.forward(da), np.where(a > 0, a, np.float32(0)), "relu forward")
        return
    out = h.forward(da, db)
    want = {"add": a + b, "mul": a * b, "max": np.maximum(a, b), "neg_via_sub": a - b}[op]
    H.assert_bitwise(out, want, f"{op} forward")
    ga, gb = h.vjp((da, db), out, dg)
    if op == "mul":
        H.assert_bitwise(ga, g * b, "mul VJP a"); H.assert_bitwise(gb, g * a, "mul VJP b")
    elif op == "max":
        half = g * np.float32(0.5)
        H.assert_bitwise(ga, np.where(a == b, half, np.where(a > b, g, 0)).astype(np.float32), "max VJP a")
        H.assert_bitwise(gb, np.where(a == b, half, np.where(a > b, 0, g)).astype(np.float32), "max VJP b")
    elif op == "neg_via_sub":
        H.assert_bitwise(gb, -g, "sub VJP b")
