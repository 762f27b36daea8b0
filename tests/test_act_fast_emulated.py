"""The activations' fast float64 path (engine/csrc/cuda/tl_act_fast.cuh and the functors of
elementwise.cu that use it) replayed operation for operation on the host: each fma rounded once
through exact rationals, each double * and + by Python's own IEEE double arithmetic, the float
fma through exact rationals, the integer bit operations as written. PTX rcp.approx.f32 is only
specified to 1 ulp, so every test runs with the correctly rounded float reciprocal and with it
one float ulp off either way (every admissible MUFU.RCP result). Against mpmath at 80 bits, each
function's relative error before the final rounding must stay under the figure its comment
states (the header's budget: under 2^-31 for every activation, so 0.5 + 2^-7 float32 ulp after
the rounding). The constants are read from the sources, so a changed constant is tested; the
integer-built conversions are checked bit for bit against numpy's."""
import random
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from mpmath import mp, mpf

CUDA = Path(__file__).resolve().parent.parent / "engine/csrc/cuda"
HEADER = (CUDA / "tl_act_fast.cuh").read_text()
SOURCE = (CUDA / "elementwise.cu").read_text()
_NUM = r"([0-9.]+e[+-][0-9]+|[0-9.]+)"


def _body(name: str) -> str:
    return HEADER.split(f" {name}(", 1)[1].split("\n}\n", 1)[0]


def _horner(name: str, var: str) -> list[float]:
    body = _body(name)
    first = re.search(rf"double p = {_NUM};", body).group(1)
    return [float(first)] + [float(c) for c in re.findall(rf"p = fma\(p, {var}, {_NUM}\);", body)]


def _constants() -> dict:
    red = _body("tl_exp_reduced")
    t01 = re.search(rf"t01 = \(n & 1\) \? {_NUM} : {_NUM};", red).groups()
    t23 = re.search(rf"t23 = \(n & 1\) \? {_NUM} : {_NUM};", red).groups()
    fast, fast_d = _body("tl_exp_fast"), _body("tl_exp_fast_d")
    gelu = {k: float(re.search(rf"#define TL_GELU_{k} {_NUM}", SOURCE).group(1))
            for k in ("2C", "2CK", "6CK")}
    return {
        "P": _horner("tl_exp_reduced", "r"), "R": _horner("tl_log1p_01", "w"),
        "T": [float(t01[1]), float(t01[0]), float(t23[1]), float(t23[0])],
        "k4f": float(np.float32(re.search(rf"fmaf\(y, {_NUM}f, 12582912.0f\)", fast).group(1))),
        "ln2_4": float(re.search(rf"fma\(-nd, {_NUM}, tl_f2d_bits\(y\)\)", fast).group(1)),
        "k4d": float(re.search(rf"fma\(y, {_NUM}, 6755399441055744.0\)", fast_d).group(1)),
        "ln2_4d": float(re.search(rf"6755399441055744.0\), {_NUM}, y\)", fast_d).group(1)),
        **gelu,
    }


C = _constants()


def _fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _f2d_bits(b: int) -> float:
    """tl_f2d_bits's integer operations on a float's bits."""
    hi = (b & 0x80000000) | (((b & 0x7FFFFFFF) >> 3) + 0x38000000)
    return float(np.uint64((hi << 32) | ((b << 29) & 0xFFFFFFFF)).view(np.float64))


def _f2d(a: float) -> float:
    return _f2d_bits(int(np.float32(a).view(np.uint32)))


RCP_ULPS = [0]   # the float reciprocal's offset from the correctly rounded one, in float ulps


def _exp_reduced(n: int, r: float) -> float:
    p = C["P"][0]
    for c in C["P"][1:]:
        p = _fma(p, r, c)
    q = p * r
    s = C["T"][n & 3] * 2.0 ** (n >> 2)
    return _fma(s, q, s)


def _exp_fast(y: float) -> float:
    t = round(Fraction(y) * Fraction(C["k4f"]) + 12582912)   # the float fma: ulp 1 there
    assert 2 ** 23 <= t < 2 ** 24
    n = t - 12582912
    return _exp_reduced(n, _fma(-float(n), C["ln2_4"], _f2d(y)))


def _exp_fast_d(y: float) -> float:
    shifted = _fma(y, C["k4d"], 6755399441055744.0)
    n = int(shifted - 6755399441055744.0)
    return _exp_reduced(n, _fma(-float(n), C["ln2_4d"], y))


def _rcp(d: float) -> float:
    f = np.float32(np.floor(d * 2.0 ** 20) / 2.0 ** 20)   # d's leading 20 fraction bits
    rf = np.float32(1.0) / f
    for _ in range(abs(RCP_ULPS[0])):
        rf = np.nextafter(rf, np.float32(np.inf if RCP_ULPS[0] > 0 else 0))
    rb = int(np.float32(rf).view(np.uint32))   # widened by the header's bit operations
    hi, lo = ((rb >> 3) + 0x38000000) & 0xFFFFFFFF, (rb << 29) & 0xFFFFFFFF
    y0 = float(np.uint64((hi << 32) | lo).view(np.float64))
    assert y0 == float(rf)
    return _fma(y0, _fma(-d, y0, 1.0), y0)


def _log1p01(e: float) -> float:
    v = e * _rcp(_fma(e, 0.5, 1.0))
    w = v * v
    p = C["R"][0]
    for c in C["R"][1:]:
        p = _fma(p, w, c)
    return _fma(v * w, p, v)


def _pair(e: float, nonneg: bool) -> tuple[float, float]:
    y = _rcp(1.0 + e)
    ey = e * y
    return (y, ey) if nonneg else (ey, y)


def _gelu_parts(a: float) -> tuple[float, float, float, float]:
    x = _f2d(a)
    x2 = x * x
    z = x * _fma(x2, C["2CK"], C["2C"])
    xdu = x * _fma(x2, C["6CK"], C["2C"])
    s, c = _pair(_exp_fast_d(-abs(z)), a >= 0)
    return x, s, c, xdu


# The functors' values before their one rounding (elementwise.cu), and the exact functions.
def _sigmoid(a):
    return _pair(_exp_fast(-abs(a)), a >= 0)[0]


def _softplus(a):
    lp = _log1p01(_exp_fast(-abs(a)))
    return lp + _f2d(a) if a > 0 else lp


def _gelu(a):
    x, s, _, _ = _gelu_parts(a)
    return x * s


def _dsigmoid(a):
    s, c = _pair(_exp_fast(-abs(a)), True)
    return s * c


def _dtanh(a):
    e = _exp_fast(float(np.float32(-2.0 * abs(a))))
    y = _rcp(1.0 + e)
    return 4.0 * e * y * y


def _dsoftplus(a):
    return _pair(_exp_fast(-abs(a)), a >= 0)[0]


def _dgelu(a):
    _, s, c, xdu = _gelu_parts(a)
    f = _fma(xdu, c, 1.0)
    return s * f if abs(f) >= 2.0 ** -8 else None   # smaller f: the libdevice path


def _sig_exact(x):
    return 1 / (1 + mp.exp(-x))


def _u(x):
    return mp.sqrt(2 / mp.pi) * (x + mpf("0.044715") * x ** 3)


_EXACT = {
    _sigmoid: _sig_exact,
    _softplus: lambda x: mp.log1p(mp.exp(x)),
    _gelu: lambda x: x * _sig_exact(2 * _u(x)),
    _dsigmoid: lambda x: _sig_exact(x) * _sig_exact(-x),
    _dtanh: lambda x: mp.sech(x) ** 2,
    _dsoftplus: _sig_exact,
    _dgelu: lambda x: _sig_exact(2 * _u(x)) + 2 * x * _sig_exact(2 * _u(x)) * _sig_exact(-2 * _u(x))
    * mp.sqrt(2 / mp.pi) * (1 + 3 * mpf("0.044715") * x ** 2),
}


def _floats(limit: float, count: int, seed: int) -> list[float]:
    """count random floats in [-limit, limit] (uniform and log-uniform magnitudes), the range's
    ends and their float neighbours, +-0, the smallest normal and a subnormal, and the points
    where exp's n = rint(4 y / ln 2) changes (its reduced argument at its extreme)."""
    rng = random.Random(seed)
    pts = [rng.uniform(-limit, limit) for _ in range(count // 2)]
    pts += [rng.choice([-1, 1]) * limit * 2.0 ** -rng.uniform(0, 40) for _ in range(count // 2)]
    top = np.float32(limit)
    pts += [float(v) for v in (top, np.nextafter(top, np.float32(0)), -top)]
    pts += [0.0, -0.0, 2.0 ** -126, -(2.0 ** -126), 1e-45, -1e-45, 2.0 ** -60, -(2.0 ** -60)]
    for k in range(0, int(limit * 5.78), max(1, int(limit) // 4)):
        mid = np.float32((k + 0.5) * 0.17328679513998632)
        pts += [float(v) for v in (mid, np.nextafter(mid, np.float32(0)), -mid)]
    return [float(np.float32(p)) for p in pts if abs(np.float32(p)) <= limit]


def _worst(fn, points) -> mpf:
    exact = _EXACT[fn]
    worst = mpf(0)
    for a in points:
        got = fn(a)
        if got is None:
            continue
        ref = exact(mpf(a))
        if ref == 0:
            assert got == 0
            continue
        worst = max(worst, abs((mpf(got) - ref) / ref))
    return worst


@pytest.fixture(autouse=True, params=[0, -1, 1], ids=["rcp_rn", "rcp_down", "rcp_up"])
def _precision_and_rcp(request):
    RCP_ULPS[0] = request.param
    with mp.workprec(80):
        yield
    RCP_ULPS[0] = 0


def test_exp_float_entry_under_2_to_minus_41():
    pts = _floats(64.0, 1500, 1)
    worst = max(abs((mpf(_exp_fast(y)) - mp.exp(mpf(y))) / mp.exp(mpf(y))) for y in pts)
    assert worst < mpf(2) ** -41, float(mp.log(worst, 2))


def test_exp_double_entry_under_2_to_minus_41():
    rng = random.Random(2)
    pts = [-rng.uniform(0, 64.0) for _ in range(1000)] + [0.0, -64.0, -49.3, -0.08664339756999316]
    worst = max(abs((mpf(_exp_fast_d(y)) - mp.exp(mpf(y))) / mp.exp(mpf(y))) for y in pts)
    assert worst < mpf(2) ** -41, float(mp.log(worst, 2))


def test_reciprocal_under_2_to_minus_39_4():
    rng = random.Random(3)
    pts = [1.0 + rng.random() for _ in range(1500)] + [1.0, 2.0, 1.5, np.nextafter(2.0, 0)]
    pts += [1.0 + (k + 1) * 2.0 ** -20 - 2.0 ** -52 for k in range(0, 2 ** 20, 2 ** 14)]
    worst = max(abs(mpf(_rcp(d)) * mpf(d) - 1) for d in pts)
    assert worst < mpf(2) ** -39.4, float(mp.log(worst, 2))


def test_log1p_under_2_to_minus_31_2():
    rng = random.Random(4)
    pts = [rng.random() for _ in range(800)] + [2.0 ** -rng.uniform(0, 93) for _ in range(400)]
    pts += [1.0, 2.0 ** -93, 0.5, np.nextafter(1.0, 0)]
    worst = max(abs((mpf(_log1p01(e)) - mp.log1p(mpf(e))) / mp.log1p(mpf(e))) for e in pts)
    assert worst < mpf(2) ** -31.2, float(mp.log(worst, 2))


@pytest.mark.parametrize("fn,limit,budget", [
    (_sigmoid, 64.0, -38.5), (_softplus, 64.0, -31.0), (_gelu, 8.0, -37.5),
    (_dsigmoid, 64.0, -37.5), (_dtanh, 32.0, -37.5), (_dsoftplus, 64.0, -38.5),
    (_dgelu, 8.0, -31.0)], ids=lambda v: getattr(v, "__name__", str(v)).strip("_"))
def test_activation_before_its_rounding(fn, limit, budget):
    """Each fast path (forward, or the VJP's f'(a) before the product with g, which adds one
    double rounding) on its whole range: under its budget, all of them under 2^-31."""
    pts = _floats(limit, 700, 5)
    if fn in (_gelu, _dgelu):   # gelu's cancellation near -0.7518 and the forward's tiny branch
        pts = [p for p in pts if abs(p) >= 2.0 ** -60 or fn is _dgelu]
        pts += [float(np.float32(-0.7517916 + k * 2e-4)) for k in range(-100, 100)]
    worst = _worst(fn, pts)
    assert worst < mpf(2) ** budget, float(mp.log(worst, 2))


def _d2f_normal(v: float) -> float:
    """tl_d2f_normal's integer operations on v's bits."""
    u = int(np.float64(v).view(np.uint64))
    u = (u + 0x0FFFFFFF + ((u >> 29) & 1)) & (2 ** 64 - 1)
    sign = (u >> 32) & 0x80000000
    bits = sign | (((u >> 29) & 0xFFFFFFFF) - 0xC0000000) % 2 ** 32
    return float(np.uint32(bits).view(np.float32))


def test_integer_conversions_match_ieee_rounding_bit_for_bit():
    rng = np.random.default_rng(6)
    v = rng.uniform(-1, 1, 4000) * 2.0 ** rng.integers(-125, 127, 4000)
    base = v.astype(np.float32).astype(np.float64)
    half = np.abs(np.nextafter(base.astype(np.float32), np.float32(np.inf)).astype(np.float64)
                  - base) / 2
    v = np.concatenate([v, base + half, base - half, base,   # ties both ways, exact floats
                        [2.0 ** -126, 1.0, np.nextafter(2.0, 0), 3.4028234663852886e38, -1.0]])
    for x in v:
        if 2.0 ** -126 <= abs(np.float32(x)) < np.inf:
            got, want = np.float32(_d2f_normal(float(x))), np.float32(x)
            assert got.view(np.uint32) == want.view(np.uint32), (x, got, want)
    bits = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([bits, np.array([0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
                                           0xFF7FFFFF, 0x3F800000], np.uint32)])
    for b, f in zip(bits, bits.view(np.float32)):
        if np.isfinite(f):
            got = _f2d_bits(int(b))
            assert np.copysign(1, got) == np.copysign(1, f), b
            if abs(f) >= 2.0 ** -126:
                assert got == float(f), b
            else:   # zero and subnormal: the stand-in of the header's comment
                assert 2.0 ** -127 <= abs(got) < 2.0 ** -126, b
