"""elementwise.cu's activation kernels (sigmoid, softplus and gelu forward; their VJPs and tanh's
and exp's) on the CPU through a host emulation (tests/emulated/activations_host.cpp, the real
source built with g++), under every admissible result of PTX rcp.approx.f32 (1 ulp either way):
within 1 ulp of the float64 formulas of docs/OPS.md on a strided sweep of float32 bit patterns
(every exponent, both signs, the fast ranges' thresholds and their neighbours, +-0, subnormals,
+-inf, NaN: fast and tail elements side by side in one float4), and the float4 loop and the
scalar loop (a misaligned view) bit for bit. The GPU runs the same checks for real
(tests/test_cuda_elementwise_fast_path.py)."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest

import cuda_helpers as H
from emulated.host_build import GELU_TABLE_WIDE, RCP_APPROX_F32, compile_shared
import test_cuda_elementwise_fast_path as gpu

HOST = Path(__file__).parent / "emulated" / "activations_host.cpp"
_ASM = 'asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rf) : "f"(f));'
_ASM_F32 = RCP_APPROX_F32[0]        # tl_act_f32.cuh's
_ASM_WIDE = GELU_TABLE_WIDE[0]      # its gelu table's offset
# emu_fwd's op numbers, in order: the accurate variants' float64 kernels, then the float32 ones
FORWARD = ("sigmoid", "softplus", "gelu", "sigmoid_f32", "softplus_f32", "gelu_f32")
VJP = ("sigmoid", "softplus", "gelu", "tanh", "exp", "gelu_f32")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_host_lib(tmp_path_factory)


def build_host_lib(tmp_path_factory):
    """activations_host.cpp over elementwise.cu's loader text, its asm statements replaced (the
    fixture here and tests/test_cuda_act_f32.py's); skips without g++."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    from engine.runtime import loader
    text = loader.source_text("elementwise.cu")
    assert text.count(_ASM) == 1, "tl_rcp_1_2's rcp.approx statement changed: update the builder"
    assert text.count(_ASM_F32) == 1, "tl_rcp_approx's statement changed: update the builder"
    assert text.count(_ASM_WIDE) == 1, "tl_gelu_v32_at's statement changed: update the builder"
    out = tmp_path_factory.mktemp("activations_emulation")
    text = text.replace(_ASM, "rf = emu_rcp_approx(f);").replace(*RCP_APPROX_F32)
    text = text.replace(*GELU_TABLE_WIDE)
    (out / "source.cu").write_text(text)
    lib = compile_shared(out / "libactivations_host.so", HOST,
                         (f'TL_KERNEL_SOURCE="{out / "source.cu"}"',), std="c++17")
    if isinstance(lib, str):
        pytest.fail(lib)
    return lib


def _sweep() -> np.ndarray:
    bits = np.arange(0, 0x7F800001, 16411, dtype=np.uint32)
    v = bits.view(np.float32)
    edges = np.concatenate([gpu._around(t, 4) for t in (64.0, 32.0, 8.0, 2.0 ** -126)])
    root = np.float32(-0.7517916) + np.arange(-300, 300, dtype=np.float32) * np.float32(6e-8)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)
    return np.concatenate([v, -v, edges, root, special]).astype(np.float32)


def _run(lib, forward: bool, op: str, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    from engine.providers.native_cuda.elementwise import _ew_blocks
    out = np.full(x.shape, np.nan, np.float32)
    p = lambda a: ctypes.c_void_p(a.ctypes.data)  # noqa: E731
    grid, n = ctypes.c_uint(_ew_blocks(x.size)), ctypes.c_uint(x.size)
    if forward:
        lib.emu_fwd(FORWARD.index(op), grid, p(x), p(out), n)
    else:
        lib.emu_bwd(VJP.index(op), grid, p(x), p(g), p(out), n)
    return out


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
@pytest.mark.parametrize("forward,op", [(True, o) for o in FORWARD[:3]] +
                         [(False, o) for o in VJP[:5]])
def test_within_one_ulp_and_both_loops_agree(lib, rcp_ulps, forward, op):
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = _sweep()
    g = (np.random.default_rng(4).standard_normal(x.shape) * 2.0).astype(np.float32)
    g[g == 0] = 1.0
    got = _run(lib, forward, op, x, g)
    with np.errstate(all="ignore"):
        want = (gpu._forward_ref(op, x.astype(np.float64)) if forward else
                gpu._vjp_ref(op, x.astype(np.float64), g.astype(np.float64))).astype(np.float32)
    what = f"{op} {'forward' if forward else 'VJP'}, rcp {rcp_ulps:+d} ulp"
    H.assert_ulps(got, want, 1.0, what)
    # the scalar loop: a view one element in (4-byte aligned only), the same bits
    xs, gs = np.empty(x.size + 1, np.float32), np.empty(x.size + 1, np.float32)
    xs[1:], gs[1:] = x, g
    H.assert_bitwise(_run(lib, forward, op, xs[1:], gs[1:]), got, what + ", scalar loop")


# ---- the float32 kernels of the plain capsules (tl_act_f32.cuh) ---------------------------------
# glibc is not involved: these kernels call no libm function (their exp and log1p are their own
# polynomials and table, their one approximate instruction rcp.approx is emulated at every
# admissible result), so the host runs the very arithmetic the GPU does, each float operation
# and fma rounded once (-ffp-contract=off as --fmad=false). The declared bound is 2 ulp of the
# rounded reference (engine/providers/native_cuda/elementwise.py F32_ACT); the float64 formula
# rounded to float32 stands for that reference (it is within 2^-40 relative of the exact value).

def _f32_sweep() -> np.ndarray:
    """Every 4099th float32 bit pattern (each exponent, subnormals), both signs; the clamp at
    |x| = 110, gelu's limits (|x| = 10, 10.8, 11.5), the subnormal-result thresholds (sigmoid
    and softplus near -87.3 and -103.3, gelu near -10), |x| < 30 densely, +-0, NaN, +-inf."""
    bits = np.arange(0, 0x7F800001, 4099, dtype=np.uint32)
    v = bits.view(np.float32)
    edges = np.concatenate([gpu._around(t, 4) for t in (110.0, 87.33655, 103.27893, 10.0, 10.5,
                                                        10.8, 11.5, 2.0 ** -126)])
    dense = np.linspace(-30.0, 30.0, 400_001, dtype=np.float32)
    deep = np.linspace(-110.0, -80.0, 60_001, dtype=np.float32)
    root = np.float32(-0.7517916) + np.arange(-300, 300, dtype=np.float32) * np.float32(6e-8)
    # the tanh formula's VJP factor vanishes at -0.7524614 (the erf form's at -0.7517916), and
    # tl_act_f32.cuh's interval [-1, -0.625] switches the VJP's evaluation at its ends
    tanh_root = gpu._around(-0.7524614, 300)
    ends = np.concatenate([gpu._around(t, 4) for t in (-1.0, -0.625)])
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)
    return np.concatenate([v, -v, edges, dense, deep, root, tanh_root, ends,
                           special]).astype(np.float32)


F32_BOUND_ULPS = 2.0


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
@pytest.mark.parametrize("op", ["sigmoid", "softplus", "gelu"])
def test_f32_forward_within_declared_bound_and_both_loops_agree(lib, rcp_ulps, op):
    from engine.providers.native_cuda.elementwise import F32_ACT
    assert F32_ACT.ulps == F32_BOUND_ULPS
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = _f32_sweep()
    got = _run(lib, True, op + "_f32", x, x)
    with np.errstate(all="ignore"):
        want = gpu._forward_ref(op, x.astype(np.float64)).astype(np.float32)
    what = f"{op} float32 forward, rcp {rcp_ulps:+d} ulp"
    worst = H.assert_ulps(got, want, F32_BOUND_ULPS, what)
    # signed zeros and the limits exactly (docs/OPS.md)
    H.assert_bitwise(got[x == 0], want[x == 0], what + ", signed zeros")
    inf = np.isinf(x)
    H.assert_bitwise(got[inf], want[inf], what + ", infinities")
    xs = np.empty(x.size + 1, np.float32)
    xs[1:] = x
    H.assert_bitwise(_run(lib, True, op + "_f32", xs[1:], xs[1:]), got, what + ", scalar loop")
    print(f"{what}: worst {worst} ulp")


def gelu_dense(stride: int) -> np.ndarray:
    """Every stride-th float32 of [-11, 11] (by bit pattern, both signs): where gelu is computed."""
    v = np.arange(0, np.float32(11.0).view(np.uint32), stride, dtype=np.uint32).view(np.float32)
    return np.concatenate([v, -v])


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
def test_f32_gelu_forward_within_its_derived_error(lib, rcp_ulps):
    """tl_act_f32.cuh's derivation of GeluF32, not only the declared 2 ulp: the value before its
    one rounding is within 1.07u |gelu(x)| + 2^-172 of gelu(x), so |g - gelu(x)| <= 0.5 ulp(g)
    + 1.07u |gelu(x)| (+ 2^-171), on the sweep and every 997th float of [-11, 11] (2.2M inputs),
    the float64 formula standing for gelu(x) (2^-40 relative added for it). A kernel that drops
    one small term (lo' = fl(hi p + lo), without lo p: up to 0.34u) fails it on 8 inputs, where
    the declared 2 ulp still holds."""
    from conformance.error_terms import U
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = np.concatenate([_f32_sweep(), gelu_dense(997)])
    x = x[np.abs(x) <= 10.8]                          # NaN and the limits: the tests above
    got = _run(lib, True, "gelu_f32", x, x)
    with np.errstate(all="ignore"):
        exact = gpu._forward_ref("gelu", x.astype(np.float64))
    half_ulp = 0.5 * np.spacing(np.abs(got)).astype(np.float64)
    bound = half_ulp + (1.07 * U + 2.0 ** -40) * np.abs(exact) + 2.0 ** -171
    err = np.abs(got.astype(np.float64) - exact)
    bad = np.flatnonzero(~(err <= bound))
    assert bad.size == 0, (f"gelu float32 forward, rcp {rcp_ulps:+d}: {bad.size} beyond the "
                           f"derivation; x = {x[bad[0]]!r}: {got[bad[0]]!r} vs {exact[bad[0]]!r}")
    v = exact.astype(np.float32)
    ulp_v = np.spacing(np.abs(v)).astype(np.float64)
    print(f"gelu float32 forward, rcp {rcp_ulps:+d}: worst {np.max(err / ulp_v):.3f} ulp of the "
          f"exact value (derived: under 1.57)")


def _gelu_vjp_bound(x: np.ndarray, g: np.ndarray, exact: np.ndarray,
                    capsule: str | None = "native_cuda.gelu") -> np.ndarray:
    """The absolute bound the harness judges native_cuda.gelu's VJP by (the capsule's own rule,
    conformance/families/elementwise.py, GELU_F32; capsule None: the op's rule for the float32 tanh formula),
    plus error_models.bound_array's four half subnormal spacings."""
    from types import SimpleNamespace
    from conformance import families
    from conformance.error_terms import HALF_SUB, U
    from engine.types import BackendOp
    ctx = SimpleNamespace(inputs=(x,), g=g, fwd_ref=SimpleNamespace(exact=exact), params={})
    rule = families.rule_for(BackendOp.gelu, capsule, vjp=True)
    return rule.bound(SimpleNamespace(exact=exact), ctx, U) + 4 * HALF_SUB


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
def test_f32_gelu_vjp_within_the_harness_rule(lib, rcp_ulps):
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = _f32_sweep()
    g = (np.random.default_rng(5).standard_normal(x.shape) * 2.0).astype(np.float32)
    got = _run(lib, False, "gelu_f32", x, g).astype(np.float64)
    with np.errstate(all="ignore"):
        want = gpu._vjp_ref("gelu", x.astype(np.float64), g.astype(np.float64))
    live = np.isfinite(x)
    bound = _gelu_vjp_bound(x[live].astype(np.float64), g[live].astype(np.float64), want[live])
    err = np.abs(got[live] - want[live])
    bad = np.flatnonzero(~(err <= bound))
    assert bad.size == 0, (f"gelu float32 VJP, rcp {rcp_ulps:+d}: {bad.size} beyond the rule; "
                           f"x = {x[live][bad[0]]!r}: {got[live][bad[0]]!r} vs {want[live][bad[0]]!r}")
    # the limits and NaN
    dead = ~live
    H.assert_bitwise(got[dead].astype(np.float32), want[dead].astype(np.float32),
                     "gelu float32 VJP, NaN and infinities")
    # and far tighter than the rule away from the factor's zero (|x + 0.7518| > 0.2: f = 1 + X
    # amplifies X's few-u error at most |X/f| < 4 times) and from subnormal results (|x| < 9.5):
    # 8 ulp of float64's value
    far = live & (np.abs(x.astype(np.float64) + 0.7518) > 0.2) & (np.abs(x) < 9.5)
    H.assert_ulps(got[far].astype(np.float32), want[far].astype(np.float32), 8.0,
                  "gelu float32 VJP away from its zero")


def _gelu_vjp_mp(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """g gelu'(x) of the tanh formula in mpmath (50 digits): near the factor's root, where the
    float64 formula's absolute 2^-54 is a visible part of the relative bound."""
    import mpmath as mp
    mp.mp.dps = 50
    c, k = mp.sqrt(2 / mp.pi), mp.mpf("0.044715")
    out = []
    for xi, gi in zip(x.tolist(), g.tolist()):
        xm = mp.mpf(xi)
        s = 1 / (1 + mp.exp(-2 * c * (xm + k * xm ** 3)))
        out.append(float(mp.mpf(gi) * (s + 2 * xm * s * (1 - s) * c * (1 + 3 * k * xm * xm))))
    return np.array(out)


def check_gelu_vjp_interval(run, what: str) -> None:
    """Every float32 x in [-1, -0.625] (6.3 million), where the VJP factor's root is, through
    run(x, g) (g = 1): within the capsule rule's relative bound (2^-24.93 + 4.85u) of g gelu'(x),
    where the op's absolute rule admitted ~1e7 ulp. The 400 floats nearest the root against
    mpmath (the float64 formula's absolute 2^-54 is a visible part of the bound there)."""
    from conformance.families import elementwise as R
    from conformance.error_terms import U
    lo, hi = np.float32(R.GELU_VJP_LO), np.float32(R.GELU_VJP_HI)
    x = np.arange(hi.view(np.uint32), lo.view(np.uint32) + 1, dtype=np.uint32).view(np.float32)
    g = np.ones(x.shape, np.float32)
    got = run(x, g).astype(np.float64)
    with np.errstate(all="ignore"):
        want = gpu._vjp_ref("gelu", x.astype(np.float64), g.astype(np.float64))
    near = np.argsort(np.abs(x.astype(np.float64) + 0.7524614220710163))[:400]
    want[near] = _gelu_vjp_mp(x[near].astype(np.float64), g[near].astype(np.float64))
    rel = np.abs(got - want) / np.abs(want)
    limit = (R.GELU_ROOT_FIT_REL + R.GELU_ROOT_UNITS * U) * (1 + 4 * U)
    bad = np.flatnonzero(~(rel <= limit))
    assert bad.size == 0, (f"{what} in [{lo}, {hi}]: {bad.size} beyond {limit / U:.2f}u "
                           f"relative; x = {x[bad[0]]!r}: {got[bad[0]]!r} vs {want[bad[0]]!r}")
    print(f"{what} in [{lo}, {hi}]: worst {rel.max() / U:.2f}u relative (bound {limit / U:.2f}u)")


def test_f32_gelu_vjp_every_float_of_the_cancelling_interval(lib):
    check_gelu_vjp_interval(lambda x, g: _run(lib, False, "gelu_f32", x, g),
                            "gelu float32 VJP (host emulation)")


def test_the_harness_holds_native_cuda_gelu_to_its_own_vjp_rule():
    """rule_for picks gelu's record's rule for the capsule (not the accurate variant, which
    declares its bound), and near the root it is a relative bound: ~1e7 times the op's there."""
    from conformance import families
    from conformance.families import elementwise
    from engine.types import BackendOp
    assert families.rule_for(BackendOp.gelu, "native_cuda.gelu", vjp=True) is \
        elementwise.GELU_F32.vjp
    assert families.rule_for(BackendOp.gelu, "native_cuda.gelu.accurate", vjp=True) is \
        families.OP_SPECS[BackendOp.gelu].vjp_rule
    x = np.array([-0.75246143, -1.2, -0.3, 2.0], np.float64)
    g = np.ones_like(x)
    with np.errstate(all="ignore"):
        exact = gpu._vjp_ref("gelu", x, g)
    ours = _gelu_vjp_bound(x, g, exact)
    ops = _gelu_vjp_bound(x, g, exact, capsule=None)
    assert ours[0] < 1e-6 * ops[0], (ours, ops)
    assert np.all(ours <= ops), (ours, ops)


def test_f32_gelu_limits_bit_for_bit_as_the_reference(lib):
    """tests/test_cuda_native_ops.py's specials on the host: gelu(-inf) = -0, gelu(+inf) = +inf,
    the VJP factor -0 at -inf, 1 at +inf and +0 for huge negative finite inputs (the reference
    rule's float64 tanh formula), signed zeros kept."""
    lib.emu_set_rcp_ulps(0)
    a = np.array([-np.inf, np.inf, np.nan, -1e30, 1e30, -3.4e38, 0.0, -0.0], np.float32)
    H.assert_bitwise(_run(lib, True, "gelu_f32", a, a), H.reference_forward("gelu")(a),
                     "gelu float32 at specials")
    for sign in (1.0, -1.0):
        g = np.full(a.shape, sign * 0.85, np.float32)
        (want,) = H.reference_vjp("gelu")((a,), None, g)
        H.assert_bitwise(_run(lib, False, "gelu_f32", a, g), want,
                         f"gelu float32 VJP at specials, g sign {sign}")


def test_f32_gelu_constants_are_the_derivations():
    """tl_act_f32.cuh's GeluF32 constants against mpmath, as its derivation uses them: P0H on
    the grid of 2^-15 (so P0H - ph is exact), the splits of P0 = 2C 32/ln2 and P1 = 2CK 32/ln2
    within 2^-41 and 2^-48, the table's V_j = 2^(j/32)/(1 + j/32) with hi to 18 bits, hi + lo
    within 2^-43 and Vf = fl(V_j), and the degree-3 fit within 2^-32.8 of e^(L r) - 1 on |r| <=
    0.502 (4001 points)."""
    import re
    import mpmath as mp
    from engine.runtime import loader
    text = (loader.CSRC_DIR / "tl_act_f32.cuh").read_text()
    mp.mp.dps = 40

    def define(name: str) -> mp.mpf:
        return mp.mpf(float(np.float32(re.search(rf"#define {name} (\S+)f", text).group(1))))

    C, K, L = mp.sqrt(2 / mp.pi), mp.mpf("0.044715"), mp.log(2) / 32
    p0h, p0l, p1h, p1l = (define(n) for n in ("TL_GELU_P0H", "TL_GELU_P0L", "TL_GELU_P1H",
                                               "TL_GELU_P1L"))
    assert p0h * 2 ** 15 == int(p0h * 2 ** 15)
    assert abs(p0h + p0l - 2 * C / L) < mp.mpf(2) ** -41
    assert abs(p1h + p1l - 2 * C * K / L) < mp.mpf(2) ** -48
    body = text[text.index("tl_gelu_v32[32] = {"):]
    rows = re.findall(r"\{([-\d.e]+)f, ([-\d.e]+)f, ([-\d.e]+)f, 0\.0f\}", body)[:32]
    assert len(rows) == 32
    for j, row in enumerate(rows):
        hi, lo, vf = (np.float32(v) for v in row)
        v = mp.mpf(2) ** (mp.mpf(j) / 32) / (1 + mp.mpf(j) / 32)
        assert int(hi.view(np.uint32)) & 0x3F == 0, (j, hi)          # 18 significant bits
        assert abs(mp.mpf(float(hi)) + mp.mpf(float(lo)) - v) < mp.mpf(2) ** -43, j
        assert vf == np.float32(float(v)), j
    coef = re.search(r"r \* fmaf\(fmaf\(r, (\S+)f, (\S+)f\), r, (\S+)f\)", text).groups()
    a3, a2, a1 = (mp.mpf(float(np.float32(c))) for c in coef)
    worst = max(abs(r * (a1 + r * (a2 + r * a3)) - mp.expm1(L * r))
                for r in (mp.mpf(i - 2000) / 2000 * mp.mpf("0.502") for i in range(4001)))
    assert worst < mp.mpf(2) ** -32.8, float(mp.log(worst, 2))


# ---- gelu's float32 VJP against its own derivation (tl_act_f32.cuh, GeluBF32) ------------------
# s and c within 2.07u each (tl_gelu_ee's E' within 1.06u, the reciprocal pair's 2^-44, one
# rounding), x z' within 4u: X = x z' c within 6.07u, and s f within (2.07 + 3)u |f| with f's,
# d's and g d's roundings. The harness's rule (conformance/families/elementwise.py (GELU_F32)) assumes 2.2u for
# s and c: the units below must stay inside its own.
VJP_S_UNITS = 2.07
VJP_X_UNITS = 4.0 + VJP_S_UNITS
VJP_F_UNITS = VJP_S_UNITS + 3.0


def gelu_vjp_dense(stride: int) -> np.ndarray:
    """Every stride-th float32 of [-11.5, 10] by bit pattern (where GeluBF32 computes s f), the
    ends of both and of [-1, -0.625] with their neighbours, the tanh formula's root x0 (300 floats
    either side), -10 and 10 (s and c turn subnormal), +-0, subnormals, +-inf and NaN."""
    pos = np.arange(0, np.float32(10.0).view(np.uint32) + 1, stride, dtype=np.uint32)
    neg = np.arange(0, np.float32(11.5).view(np.uint32) + 1, stride, dtype=np.uint32)
    ends = np.concatenate([gpu._around(t, 8) for t in (10.0, 11.5, 1.0, 0.625, 9.7, 10.3)])
    sub = np.array([1, 2, 0x1234, 0x7FFFFF, 0x800000], np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)
    return np.concatenate([pos.view(np.float32), -neg.view(np.float32), ends, sub, -sub,
                           gpu._around(-0.7524614, 300), special]).astype(np.float32)


def _gelu_vjp_derived_bound(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """GeluBF32's derived bound outside [-1, -0.625], |x| <= 11.5: |g| s (6.07u |X| + 5.07u |f|)
    (1 + 4u, the second order) + |g| (|f| 2^-149 + 2^-150) (subnormal s: fl(ee w1)'s and s's
    roundings, d's) + 2^-150 (g d's) + 2^-40 |g| s (1 + |X|) for the float64 reference."""
    from conformance.families import elementwise as R
    from conformance.error_terms import U
    s, big_x, f = R.gelu_f32_parts(x)
    ag = np.abs(g)
    return (ag * s * (VJP_X_UNITS * U * np.abs(big_x) + VJP_F_UNITS * U * np.abs(f)) * (1 + 4 * U)
            + ag * (np.abs(f) * 2.0 ** -149 + 2.0 ** -150) + 2.0 ** -150
            + 2.0 ** -40 * ag * s * (1 + np.abs(big_x)))


def test_gelu_vjp_derivation_within_the_harness_rule():
    from conformance.families import elementwise as R
    assert VJP_X_UNITS <= R.GELU_X_UNITS and VJP_F_UNITS <= R.GELU_F_UNITS


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
def test_f32_gelu_vjp_dense_within_its_derivation(lib, rcp_ulps):
    """Every 1021st float of [-11.5, 10] (2.1M) and the specials through tl_gelu_bwd_f32's host
    emulation: outside [-1, -0.625] within GeluBF32's derived bound (above; the float64 formula
    the reference), inside it within the capsule rule's relative bound (the 600 floats nearest
    the root against mpmath), d = 1 exactly on (10, 11.5] (ga = g), g/2 exactly at zero and
    subnormal x, the limits and NaN bit for bit as the reference rule's; the float4 and the
    scalar loop bit for bit."""
    from conformance.families import elementwise as R
    from conformance.error_terms import U
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = gelu_vjp_dense(1021)
    g = (np.random.default_rng(7).standard_normal(x.shape) * 2.0).astype(np.float32)
    g[g == 0] = 1.0
    got = _run(lib, False, "gelu_f32", x, g)
    what = f"gelu float32 VJP, rcp {rcp_ulps:+d}"
    xd, gd, gotd = x.astype(np.float64), g.astype(np.float64), got.astype(np.float64)
    with np.errstate(all="ignore"):
        want = gpu._vjp_ref("gelu", xd, gd)
    inside = (xd >= R.GELU_VJP_LO) & (xd <= R.GELU_VJP_HI)
    near = np.flatnonzero(inside)[np.argsort(np.abs(xd[inside] + 0.7524614220710163))[:600]]
    want[near] = _gelu_vjp_mp(xd[near], gd[near])
    live = np.isfinite(xd) & (np.abs(xd) <= 11.5)
    far = live & ~inside
    err = np.abs(gotd - want)
    bound = _gelu_vjp_derived_bound(xd[far], gd[far])
    bad = np.flatnonzero(~(err[far] <= bound))
    assert bad.size == 0, (f"{what}: {bad.size} beyond GeluBF32's derivation; x = "
                           f"{x[far][bad[0]]!r}: {got[far][bad[0]]!r} vs {want[far][bad[0]]!r}")
    rel_limit = (R.GELU_ROOT_FIT_REL + R.GELU_ROOT_UNITS * U) * (1 + 4 * U)
    rel = err[inside] / np.abs(want[inside])
    assert np.all(rel <= rel_limit), (what, float(rel.max() / U))
    top = (xd > 10.0) & (xd <= 11.5)
    H.assert_bitwise(got[top], g[top], what + ", d = 1 on (10, 11.5]")
    tiny = np.abs(xd) < 2.0 ** -126
    H.assert_bitwise(got[tiny], g[tiny] * np.float32(0.5), what + ", zero and subnormal x")
    dead = ~np.isfinite(xd)
    H.assert_bitwise(got[dead], want[dead].astype(np.float32), what + ", infinities and NaN")
    # finite |x| > 11.5: g (x > 0) and g +0 (x < 0: the reference rule's tanh formula's 0 there)
    beyond = np.isfinite(xd) & (np.abs(xd) > 11.5)
    H.assert_bitwise(got[beyond], g[beyond] * (xd[beyond] > 0).astype(np.float32),
                     what + ", finite |x| > 11.5")
    # the float4 loop (ew_2_1_one's 32-bit index) and the scalar loop (a view one element in)
    xs, gs = np.empty(x.size + 1, np.float32), np.empty(x.size + 1, np.float32)
    xs[1:], gs[1:] = x, g
    H.assert_bitwise(_run(lib, False, "gelu_f32", xs[1:], gs[1:]), got, what + ", scalar loop")
    v = want[far].astype(np.float32)
    normal = (np.abs(v) >= 2.0 ** -126) & (R.gelu_f32_parts(xd[far])[0] >= 2.0 ** -126)
    ulps = err[far][normal] / np.spacing(np.abs(v[normal])).astype(np.float64)
    print(f"{what}: {x.size} inputs, worst {np.max(err[far] / bound):.3f} of the derived bound "
          f"outside [-1, -0.625], {ulps.max():.2f} ulp of the float64 value there (s and the "
          f"result normal), {rel.max() / U:.2f}u relative inside (bound {rel_limit / U:.2f}u)")


@pytest.mark.parametrize("rcp_ulps", [0, -1, 1])
def test_f32_gelu_vjp_sigmoid_pair_within_its_derivation(lib, rcp_ulps):
    """tl_gelu_sc, the VJP's s = s(z) and c = s(-z) on their own (activations_host.cpp's
    emu_gelu_sc), on the dense sweep's |x| <= 11.5: each within 2.07u relative (+ 2^-149 where
    subnormal; 2^-40 relative for the float64 reference, whose z is 2^-52 |z| off) of the exact
    pair. A kernel whose reciprocal pair dropped w1 from either quotient fails it (1 ulp of
    rcp.approx left uncorrected: ~2u more); the derived rule at the output would not see it."""
    from conformance.error_terms import U
    lib.emu_set_rcp_ulps(rcp_ulps)
    x = gelu_vjp_dense(1021)
    x = x[np.isfinite(x) & (np.abs(x) <= 11.5)]
    s, c = np.full(x.shape, np.nan, np.float32), np.full(x.shape, np.nan, np.float32)
    p = lambda a: ctypes.c_void_p(a.ctypes.data)  # noqa: E731
    lib.emu_gelu_sc(p(x), p(s), p(c), ctypes.c_uint(x.size))
    xd = x.astype(np.float64)
    z = 2.0 * gpu._C * (xd + gpu._K * xd ** 3)
    e = np.exp(-np.abs(z))
    big, small = 1.0 / (1.0 + e), e / (1.0 + e)
    want_s, want_c = np.where(xd >= 0, big, small), np.where(xd >= 0, small, big)
    worst = []
    for name, got, want in (("s", s, want_s), ("c", c, want_c)):
        err = np.abs(got.astype(np.float64) - want)
        bound = (VJP_S_UNITS * U + 2.0 ** -40) * want + 2.0 ** -149
        bad = np.flatnonzero(~(err <= bound))
        assert bad.size == 0, (f"gelu VJP's {name}, rcp {rcp_ulps:+d}: {bad.size} beyond "
                               f"{VJP_S_UNITS}u; x = {x[bad[0]]!r}: {got[bad[0]]!r} vs "
                               f"{want[bad[0]]!r}")
        normal = want >= 2.0 ** -126
        worst.append(f"{name} {np.max(err[normal] / want[normal]) / U:.3f}u")
    print(f"gelu VJP's s and c, rcp {rcp_ulps:+d}, {x.size} inputs: worst relative "
          f"{', '.join(worst)} (derived {VJP_S_UNITS}u)")
