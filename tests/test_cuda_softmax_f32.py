"""The softmax / log_softmax forwards of both capsules, the fast float32 plain one
(tl_softmax_f32.cuh) and the float64 accurate variant, against a float64 evaluation under the
error each derivation allows (tests/softmax_checks.py): every register variant's width and one
past it, the float64 fallback (n > 8192), wide dynamic ranges (x - max down to -104 and beyond:
subnormal and vanishing terms), inexact differences x - max, sums of many tiny terms, the
IEEE special rows, subnormal results and bitwise repeatability in both reduction modes."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
import softmax_checks as S

pytestmark = pytest.mark.cuda

WIDTHS = (1, 2, 7, 31, 32, 33, 64, 65, 255, 256, 257, 1024, 1025, 2048, 2049, 4096, 4097, 8192,
          8193, 50257,
          68, 100, 260, 1000, 1028, 3000, 4100)   # the float4 forms, partial rows (n % 4 == 0)


def _wide_rows(n: int, seed: int) -> np.ndarray:
    """Rows whose x - max spans [-104, 0] (the whole range where exp is a nonzero float32), one
    with magnitudes 1e-4 .. 100 of both signs (x - max inexact in float32, down to -200), one at
    an offset of 1000, and a normal one."""
    r = np.random.default_rng(seed)
    rows = 4 if n > 8192 else 11
    x = np.empty((rows, n), np.float32)
    for i in range(rows):
        kind = i % 4
        if kind == 0:
            x[i] = r.uniform(-104, 0, n) + r.standard_normal()
        elif kind == 1:
            x[i] = np.where(r.random(n) < 0.5, -1, 1) * 10.0 ** r.uniform(-4, 2, n)
        elif kind == 2:
            x[i] = 1000 + r.uniform(-30, 0, n)
        else:
            x[i] = r.standard_normal(n) * 6
    return x


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("op, capsule", S.CAPSULES)
def test_forward_within_the_derived_bound_at_every_width(op, capsule, n):
    cp = H.cupy()
    x = _wide_rows(n, n)
    got = S.handler(capsule).forward(cp.asarray(x), axis=-1)
    S.assert_forward(capsule, got, x, f"{capsule} n={n}")


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("n", (2, 33, 1024, 4096, 8192))
@pytest.mark.parametrize("op, capsule", S.CAPSULES)
def test_many_tiny_terms_keep_log_softmax_accurate(op, capsule, n):
    """One max and n - 1 terms exp(-100) (subnormal in float32) or exp(-95): their sum T decides
    log_softmax's max entry (-log1p(T) ~ -T); summed unscaled, each subnormal term's rounding
    would move T by up to 2^-6 relative. -200 (terms below float32's range) and a max tied
    twice complete it."""
    cp = H.cupy()
    x = np.full((5, n), -100.0, np.float32)
    x[1] = -95.0
    x[2] = -120.0
    x[3] = -200.0
    x[4, ::3] = -101.5
    x[:, 0] = 0.0
    x[4, n - 1] = 0.0   # a tie: the first max carries the 1, the other is a term
    got = S.handler(capsule).forward(cp.asarray(x), axis=-1)
    S.assert_forward(capsule, got, x, f"{capsule} tiny terms n={n}")


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("n", (4, 33, 300, 1024, 3000, 8192, 9000))
@pytest.mark.parametrize("op, capsule", S.CAPSULES)
def test_special_rows_match_the_ieee_formula(op, capsule, n):
    """NaN or +inf entry, all -inf: the row is NaN; -inf beside a finite max: exact zeros
    (log: -inf); x - max beyond the float32 range: 0 (log: -inf); one finite entry: exactly 1
    (log: exactly 0)."""
    cp = H.cupy()
    x = S.special_rows(n, rows=8)
    x[6, :] = 1.0
    x[6, 0], x[6, 1] = 3e38, -3e38
    x[7, 1] = 2.5
    got = S.handler(capsule).forward(cp.asarray(x), axis=-1)
    S.assert_forward(capsule, got, x, f"{capsule} special rows n={n}")
    g = got.get()
    assert np.all(np.isnan(g[:3])), "NaN rows"
    if op == "softmax":
        assert np.all(g[3, 1:n - 1] == 0) and not np.signbit(g[3, 1:n - 1]).any()
        assert g[6, 1] == 0 and g[7, 1] == 1.0 and np.all(g[7, 2:] == 0)
    else:
        assert np.all(g[3, 1:n - 1] == -np.inf) and g[6, 1] == -np.inf
        assert g[7, 1] == 0 and not np.signbit(g[7, 1])


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("n", (4, 300, 3000, 8192))
@pytest.mark.parametrize("capsule", ["native_cuda.softmax", "native_cuda.softmax.accurate"])
def test_subnormal_probabilities_stay_gradual(capsule, n):
    """exp(-88 .. -103.9) / S is subnormal: kept (no flush; --ftz=false, libdevice expf), within
    the bound on the subnormal grid."""
    cp = H.cupy()
    x = np.full((3, n), -50.0, np.float32)
    x[:, 0] = 0.0
    x[0, 1:] = np.linspace(-88, -103.9, n - 1, dtype=np.float32)
    x[1, 1:4] = (-90.0, -95.0, -100.0)
    x[2, 1:] = -102.0   # exp = 2.7 subnormal ulps: expf's 2 ulp cannot make it 0
    got = S.handler(capsule).forward(cp.asarray(x), axis=-1)
    S.assert_forward(capsule, got, x, f"{capsule} subnormal results n={n}")
    g = got.get()
    tiny = np.finfo(np.float32).tiny
    assert 0 < g[1, 3] < tiny and 0 < g[2, 1] < tiny, "subnormal probabilities survive"


@pytest.mark.capsules("{capsule}")
@pytest.mark.parametrize("n", (7, 255, 1000, 1024, 2049, 4097, 8192))
@pytest.mark.parametrize("op, capsule", S.CAPSULES)
def test_forward_is_bitwise_repeatable_in_both_modes(op, capsule, n):
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    x = cp.asarray(_wide_rows(n, 7 * n))
    h = S.handler(capsule)
    first = h.forward(x, axis=-1)
    for det in (False, True):
        with deterministic_reductions(det):
            for _ in range(2):
                H.assert_bitwise(h.forward(x, axis=-1), first, f"{capsule} n={n} det={det}")


@pytest.mark.capsules("native_cuda.softmax", "native_cuda.log_softmax")
def test_fast_forward_takes_the_float64_kernel_on_inner_axes():
    """axis not last: the plain capsule runs the float64 general kernel, bit for bit the
    accurate variant's."""
    cp = H.cupy()
    x = cp.asarray((np.random.default_rng(2).standard_normal((5, 300, 7)) * 8)
                   .astype(np.float32))
    for op in ("softmax", "log_softmax"):
        fast = S.handler(f"native_cuda.{op}").forward(x, axis=1)
        accurate = S.handler(f"native_cuda.{op}.accurate").forward(x, axis=1)
        H.assert_bitwise(fast, accurate, f"{op} axis=1")


@pytest.mark.capsules("native_cuda.softmax", "native_cuda.log_softmax")
@pytest.mark.parametrize("n", (256, 1024, 4096))
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_misaligned_rows_take_the_scalar_forms_within_the_bound(op, n):
    """A view starting one float into its buffer cannot take 16-byte loads: the capsule picks
    the scalar form (softmax.py's alignment test), within the same bound; the aligned copy takes
    the float4 form. T near log_softmax's 2^-12 switch and a tiny T are among the rows."""
    from engine.providers.native_cuda import softmax
    cp = H.cupy()
    x = _wide_rows(n, 3 * n)
    x[0, :] = -np.inf
    x[0, 0], x[0, n - 1] = 0.0, -8.3178   # T = e^-8.3178 ~ 2^-12
    x[1, :] = -30.0
    x[1, 0] = 0.0                          # T = (n - 1) e^-30: 1 + T keeps few of T's bits
    buf = cp.empty(x.size + 1, cp.float32)
    view = buf[1:].reshape(x.shape)
    view[...] = cp.asarray(x)
    assert view.data.ptr % 16 == 4 and not view.flags.owndata
    kern = softmax.FAST_FORWARD[softmax.Op(op)]
    assert kern.pick(n, 1, aligned=False) != kern.pick(n, 1)
    h = S.handler(f"native_cuda.{op}")
    for arr, what in ((view, "misaligned"), (cp.asarray(x), "aligned")):
        S.assert_forward(f"native_cuda.{op}", h.forward(arr, axis=-1), x, f"{op} {what} n={n}")
