"""Kernels the rest of the GPU suite never launched (the sanitizer's kernel log of the H200 run of
2026-12-02: 256 of 261 reached; evidence/h200-runs/2026-12-02/): the `.accurate` log_softmax VJP's
register variants past a warp's 64 columns (softmax.cu tl_log_softmax_bwd_w8, _b4, _b8, _b32: the
plain capsule's VJP runs the float32 forms) and reduce_mean's quotient in double for a count past
2^24 (reduce.cu tl_div_f64). Each width sits at a variant's threshold or one past it
(softmax.py's _VJP_VARIANTS), so every kernel runs; scripts/sanitize_kernels.py `select` then
finds them for the sanitizers too."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
from test_cuda_softmax_norm import _floor

pytestmark = pytest.mark.cuda

WIDTHS = (64, 65, 256, 257, 1024, 1025, 2048, 2049, 8192)


def _handler(name: str):
    from engine.registry import registry
    return registry().handler(name)


@pytest.mark.capsules("native_cuda.{op}.accurate")
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_accurate_variant_every_vjp_width(op, n):
    """The accurate capsules evaluate forward and VJP in float64 and round once: within 1 ulp of
    the reference provider (plus its float64 floor where the gradient cancels), as
    tests/test_cuda_row_paths.py holds the double softmax VJP."""
    cp = H.cupy()
    h = _handler(f"native_cuda.{op}.accurate")
    r = np.random.default_rng(7000 + n)
    x = (r.standard_normal((19 if n > 1024 else 83, n)) * 6).astype(np.float32)
    out = h.forward(cp.asarray(x), axis=-1)
    want = H.reference_forward(op)(x, axis=-1)
    H.assert_ulps(out, want, 1, f"{op}.accurate forward n={n}")
    g = r.standard_normal(x.shape).astype(np.float32)
    (gx,) = h.vjp((cp.asarray(x),), cp.asarray(want), cp.asarray(g), axis=-1)
    (wx,) = H.reference_vjp(op)((x,), want, g, axis=-1)
    H.assert_ulps(gx, wx, 1, f"{op}.accurate VJP n={n}", abs_floor=_floor(wx))


@pytest.mark.capsules("native_cuda.reduce_mean")
def test_reduce_mean_divides_in_double_past_two_to_the_24():
    """count = 2^24 + 3 is not a float32: the quotient is taken in double from the exact count
    and rounded once. One nonzero term keeps the sum exact, so the mean is the correctly
    rounded 3 / (2^24 + 3), which dividing by float32(count) = 2^24 + 4 would miss."""
    from fractions import Fraction
    cp = H.cupy()
    count = (1 << 24) + 3
    x = np.zeros(count, np.float32)
    x[count // 2] = 3.0
    got = float(H.to_host(H.native_handler("reduce_mean").forward(cp.asarray(x)))
                .reshape(()))
    exact = Fraction(3, count)
    want = np.float32(3.0 / count)          # float64 quotient (0.5 ulp of 2^-53) rounded once
    assert abs(Fraction(float(want)) - exact) <= Fraction(float(np.spacing(want))) / 2
    assert got == float(want), (got, float(want), float(np.float32(3.0) / np.float32(count)))
