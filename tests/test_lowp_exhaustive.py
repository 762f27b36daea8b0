"""bfloat16 and float16 audits (conformance/lowp/): the formats' rounding, the certified correctly
rounded references, and exhaustive sweeps over all 2^16 inputs that pass honest kernels and
catch each buggy one for its reason (fixtures/plugins/low_precision.py)."""
from __future__ import annotations

import time
import warnings

import mpmath
import numpy as np
import pytest

from conformance.lowp.derivatives import DERIVATIVES
from conformance.lowp.formats import BFLOAT16, FLOAT16, FORMATS
from conformance.lowp.refs import FUNCTIONS, MP_PREC, _round_mp, reference
from conformance.lowp.kernel import LowpKernel
from conformance.lowp.sweep import LowpKernelError, sweep
from fixtures.plugins.low_precision import BUGGY, HONEST

ml_dtypes = pytest.importorskip("ml_dtypes")
BOTH = list(FORMATS.values())


def _wide(rng, n):
    """float64 values over every binade both formats have, and past them."""
    return rng.standard_normal(n) * np.exp2(rng.uniform(-150, 130, n))


def test_float16_rounding_is_numpys_correctly_rounded_cast():
    x = _wide(np.random.default_rng(1), 200_000)
    with np.errstate(over="ignore"):
        assert np.array_equal(FLOAT16.round(x), x.astype(np.float16).astype(np.float64))


def test_bfloat16_rounding_of_float32_values_is_ml_dtypes_cast():
    with np.errstate(over="ignore"):
        x = _wide(np.random.default_rng(2), 200_000).astype(np.float32)
    assert np.array_equal(BFLOAT16.round(x.astype(np.float64)),
                          x.astype(ml_dtypes.bfloat16).astype(np.float64))


@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_every_pattern_decodes_encodes_and_rounds_to_itself(fmt):
    bits = fmt.all_bits()
    x = fmt.decode(bits)
    finite = np.isfinite(x)
    assert np.array_equal(fmt.round(x)[finite], x[finite])
    assert np.array_equal(fmt.encode(x[finite]), bits[finite])
    # NaN: every pattern of the top exponent with a nonzero significand, both signs
    assert np.isnan(x).sum() == 2 * (2 ** (fmt.precision - 1) - 1)
    assert x[finite].max() == fmt.max_finite and x[x > 0].min() == fmt.min_subnormal
    assert np.array_equal(fmt.to_numpy(bits).astype(np.float64)[finite], x[finite])


@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_the_mpmath_rounding_agrees_with_the_float64_one(fmt):
    """Two independent roundings (refs._round_mp decides in mpmath) on values near midpoints."""
    rng = np.random.default_rng(3)
    x = fmt.decode(rng.integers(0, 1 << 16, 3000, dtype=np.uint32).astype(np.uint16))
    x = x[np.isfinite(x) & (x != 0)]
    y = x + np.copysign(fmt.ulp(x) / 2, x) * rng.choice([1.0, 1 - 2 ** -30, 1 + 2 ** -30],
                                                        x.size)   # midpoints and next to them
    with mpmath.workprec(MP_PREC):
        by_mp = np.array([_round_mp(fmt, mpmath.mpf(float(v))) for v in y])
    with np.errstate(over="ignore"):
        assert np.array_equal(by_mp, fmt.round(y))


def _against_mpmath(fmt, name, table, seed, extra=lambda x, finite: finite[:0]):
    """The certified references of `table` at 150 random finite inputs, at every input mpmath
    decided and at `extra(x, finite)`, against mpmath at 120 bits rounded to the format."""
    x = fmt.decode(fmt.all_bits())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rounded, y, _ = reference(fmt, name, x, table)
        plain, _, _ = reference(fmt, name, x, {name: (table[name][0], None)})
    finite = np.flatnonzero(np.isfinite(x))
    decided = np.flatnonzero(np.isfinite(x) & (rounded != plain))   # where mpmath changed it
    pick = np.concatenate([np.random.default_rng(seed).choice(finite, 150, replace=False),
                           decided, extra(x, finite)])
    mp = table[name][1]
    with mpmath.workprec(2000):     # the oracle: far past any tie the reference must decide
        for i in pick:
            v = mpmath.mpf(float(x[i]))
            if (name in ("log", "sqrt", "rsqrt") and v < 0) or \
                    (name in ("log", "sqrt", "rsqrt") and v == 0):
                continue   # NaN and the infinities: IEEE's, checked by the sweeps
            want = _round_mp(fmt, mp(v))
            assert rounded[i] == want or (want == 0 and rounded[i] == 0), (name, x[i])


@pytest.mark.parametrize("name", sorted(n for n, (_, mp) in FUNCTIONS.items() if mp))
@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_references_are_correctly_rounded(fmt, name):
    _against_mpmath(fmt, name, FUNCTIONS, 4)


def test_a_float64_midpoint_is_decided_by_mpmath():
    """gelu of a bfloat16 subnormal x is x/2 in float64, a midpoint; the exact value is a
    little above it, so it rounds away from zero, not to even."""
    x = np.array([3 * BFLOAT16.min_subnormal])
    rounded, _, n_mp = reference(BFLOAT16, "gelu", x)
    assert n_mp == 1 and rounded[0] == 2 * BFLOAT16.min_subnormal


def test_gelu_of_every_bfloat16_subnormal_is_rounded_as_mpmath_at_2000_bits_rounds_it():
    """gelu(x) = x/2 (1 + u), u near 2^-133 relative: exactly a midpoint in float64 AND at 120
    bits, so the reference must raise mpmath's precision until the tie is decided (above it for
    x > 0, below it in magnitude for x < 0). At 120 bits alone, x = 1, 5, 9, ... least
    subnormals rounded down and -3, -7, ... up."""
    k = np.arange(1, 128)
    x = np.concatenate([k, -k]) * BFLOAT16.min_subnormal
    rounded, _, _ = reference(BFLOAT16, "gelu", x)
    with mpmath.workprec(2000):
        want = np.array([_round_mp(BFLOAT16, FUNCTIONS["gelu"][1](mpmath.mpf(float(v))))
                         for v in x])
    assert np.array_equal(rounded, want) and np.array_equal(np.signbit(rounded), np.signbit(want))
    assert rounded[0] == BFLOAT16.min_subnormal and rounded[4] == 3 * BFLOAT16.min_subnormal
    assert rounded[127 + 2] == -BFLOAT16.min_subnormal    # -3 q: -1.5 q (1 - u) rounds to -q


def test_a_midpoint_below_a_power_of_two_or_above_zero_is_decided_in_mpmath():
    """The midpoint below 1 in bfloat16 is 1 - 2^-9 (the spacing below 1 is 2^-8, half the one
    above), and between 0 and the least subnormal q it is q/2: float64 values within their error
    of either are decided by the exact value, not by rounding the float64 one."""
    from conformance.lowp.refs import round_certified
    q = BFLOAT16.min_subnormal
    y = np.array([(1 - 2.0 ** -9) * (1 + 2.0 ** -45), q / 2 * (1 + 2.0 ** -45)])
    with mpmath.workprec(MP_PREC):
        exact = [mpmath.mpf(1 - 2.0 ** -9) * (1 - mpmath.mpf(2) ** -60),     # below the
                 mpmath.mpf(q / 2) * (1 - mpmath.mpf(2) ** -60)]             # midpoints
        rounded, decided = round_certified(BFLOAT16, y.copy(), 2.0 ** -40 * np.abs(y),
                                           lambda idx: exact[idx[0]])
    assert sorted(int(i[0]) for i in decided) == [0, 1]
    assert rounded[0] == 1 - 2.0 ** -8 and rounded[1] == 0.0    # the float64 y rounds to 1, q


UNARY_HONEST = [k for k in HONEST if k.op in FUNCTIONS]
UNARY_BUGGY = [(k, r) for k, r in BUGGY if k.op in FUNCTIONS]


@pytest.mark.parametrize("kernel", UNARY_HONEST, ids=lambda k: k.name)
def test_honest_kernels_pass_over_all_inputs(kernel):
    t0 = time.process_time()   # CPU time: the cost, however busy the cores
    rec = sweep(kernel)
    assert time.process_time() - t0 < 10          # a few seconds even on slow cores
    assert rec["status"] == "passed" and rec["failure_reasons"] == {}, rec["counterexamples"]
    assert rec["patterns"] == 65536 and rec["max_ulps_passing"] <= kernel.bound_ulps


@pytest.mark.parametrize("kernel, reason", UNARY_BUGGY, ids=lambda k: getattr(k, "name", ""))
def test_buggy_kernels_fail_for_their_reason(kernel, reason):
    rec = sweep(kernel)
    assert rec["status"] == "failed" and rec["failure_reasons"].get(reason, 0) > 0, rec
    assert any(c["reason"] == reason for c in rec["counterexamples"]) or \
        len(rec["counterexamples"]) == 5


def test_a_kernel_returning_another_dtype_is_named():
    k = LowpKernel("float32_exp", "exp", FLOAT16, lambda x: np.abs(x.astype(np.float32)))
    with pytest.raises(LowpKernelError, match="float32_exp raised TypeError: a float16 kernel "
                                              "returned a float32 array; expected float16"):
        sweep(k)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accumulating_kernels_honest_pass_buggy_fail_for_their_reason(seed):
    """sum, softmax and matmul declared float32 inside: the float32 kernels pass on every class,
    a 16-bit accumulator or a softmax without the max shift fails for its reason."""
    from conformance.lowp.audit import audit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for kernel in HONEST:
            if kernel.op not in FUNCTIONS:
                rec = audit(kernel, seed)
                assert rec["status"] == "passed", (kernel.name, rec["counterexamples"])
        for kernel, reason in BUGGY:
            if kernel.op not in FUNCTIONS:
                rec = audit(kernel, seed)
                assert rec["failure_reasons"].get(reason, 0) > 0, (kernel.name, rec)


@pytest.mark.parametrize("name", sorted(n for n, (_, mp) in DERIVATIVES.items() if mp))
@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_vjp_references_are_correctly_rounded(fmt, name):
    """f'(x), and around gelu's root, where the two terms of its derivative cancel."""
    near_root = (lambda x, finite: finite[np.abs(x[finite] + 0.7517916) < 0.01]) \
        if name == "gelu" else (lambda x, finite: finite[:0])
    _against_mpmath(fmt, name, DERIVATIVES, 6, near_root)


def test_a_kernel_returning_another_shape_is_named():
    """A sweep and an audit name the inputs the wrong shape came back for."""
    from conformance.lowp.audit import audit
    k = LowpKernel("short_exp", "exp", FLOAT16, lambda x: np.exp(x[:10].astype(np.float32))
                   .astype(np.float16), bound_ulps=1)
    with pytest.raises(LowpKernelError, match=r"short_exp returned uint16\[10\] for all 65536 "
                                              r"inputs; expected float16\[65536\]"):
        sweep(k)
    s = LowpKernel("flat_sum", "sum", FLOAT16, lambda x: x.reshape(-1)[:1].copy())
    with pytest.raises(LowpKernelError, match=r"flat_sum returned uint16\[1\] for normal\[0\]; "
                                              r"expected float16\[8\]"):
        audit(s, 0)
