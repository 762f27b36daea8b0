"""The softmax family's forward checks for the GPU tests: a float64 evaluation of docs/OPS.md's
formula (exact to ~2^-40 relative for these rows) and the error each capsule's derivation allows
against it, in float32 ulps of the exact value.

A capsule declaring B ulp of the rounded reference v (the harness's measure) is checked at
|got - exact| <= (B - 0.5) ulp(exact): the fast forwards' derivations (tl_softmax_f32.cuh) give
|got - exact| <= (delta/u + 1) ulp = 9.003 (softmax, B = 10) and 5.004 (log_softmax, B = 6),
and B adds 0.5 for v; the accurate variants round a float64 value once: 0.5 + 2^-20 ulp
(B = 1). RTOL covers this reference's own float64 error.
"""
from __future__ import annotations

import numpy as np

from conformance.rounding import ulp_array

RTOL = 2.0 ** -36   # the float64 reference: exp, log1p and sums of up to 50257 terms
# (op, capsule) of the forwards checked here: the plain (fast float32) and the accurate variant
CAPSULES = [(op, f"native_cuda.{op}{v}") for op in ("softmax", "log_softmax")
            for v in ("", ".accurate")]


def declared_ulps(capsule: str) -> float:
    from engine.registry import registry
    return registry().get(capsule)[0].value_contract.declared_bound.ulps


def handler(capsule: str):
    from engine.registry import registry
    return registry().handler(capsule)


def exact(op: str, x: np.ndarray) -> np.ndarray:
    """softmax / log_softmax of float32 rows (last axis) in float64, as docs/OPS.md states them:
    a NaN or +inf entry or a row of -inf gives a NaN row; log_softmax subtracts log1p of the sum
    without the first max entry's 1 (no cancellation for tiny sums)."""
    a = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        m = np.max(a, axis=-1, keepdims=True)
        bad = ~np.isfinite(m)
        d = a - m
        e = np.exp(d)
        if op == "softmax":
            out = e / np.sum(e, axis=-1, keepdims=True)
        else:
            first = np.argmax(a, axis=-1)[..., None]
            ex = e.copy()
            np.put_along_axis(ex, first, 0.0, axis=-1)
            rest = np.sum(ex, axis=-1, keepdims=True)
            out = d - np.log1p(rest)
    return np.where(bad, np.nan, out)


def check_ulps(capsule: str) -> float:
    """The allowed |got - exact| in ulps of the exact value (module docstring)."""
    b = declared_ulps(capsule)
    return 0.5 + 2.0 ** -20 if b == 1.0 else b - 0.5


def worst_ulps(got, want64) -> float:
    """The largest |got - exact| / ulp(exact) over finite exact values (special values must match:
    asserted by assert_forward)."""
    got = np.asarray(got, np.float64)
    fin = np.isfinite(want64)
    if not fin.any():
        return 0.0
    err = np.abs(got[fin] - want64[fin]) / ulp_array(want64[fin])
    return float(np.nanmax(err, initial=0.0))


def assert_forward(capsule: str, got, x: np.ndarray, what: str, axis: int = -1) -> float:
    """`got` (the capsule's forward of x along `axis`) within check_ulps(capsule) of the float64
    value, NaN where it is NaN, the same infinity where it is infinite; returns the worst ulps."""
    op = capsule.split(".")[1]
    got = np.moveaxis(got.get() if hasattr(got, "get") else np.asarray(got), axis, -1)
    x = np.moveaxis(np.asarray(x), axis, -1)
    want = exact(op, x)
    assert got.shape == want.shape, what
    nan_w, nan_g = np.isnan(want), np.isnan(got)
    assert np.array_equal(nan_w, nan_g), f"{what}: NaN positions differ " \
        f"({int((nan_w ^ nan_g).sum())} entries)"
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = want.astype(np.float32)   # an exact value beyond the float32 range: +-inf
    inf_w = np.isinf(rounded)
    assert np.array_equal(got[inf_w], rounded[inf_w]), f"{what}: infinities differ"
    live = ~nan_w & ~inf_w
    w = want[live]
    err = np.abs(got[live].astype(np.float64) - w)
    bound = check_ulps(capsule) * ulp_array(w) + RTOL * np.abs(w)
    bad = np.flatnonzero(~(err <= bound))
    worst = worst_ulps(got[live], w)
    assert bad.size == 0, (f"{what}: {bad.size} entries beyond {check_ulps(capsule)} ulp; "
                           f"worst {worst:.3f} ulp; first: got {got[live][bad[0]]!r}, exact "
                           f"{w[bad[0]]!r}")
    return worst


def special_rows(n: int, rows: int = 6) -> np.ndarray:
    """Rows of n entries the kernels must treat as the reference does: [0] a NaN entry, [1] a
    +inf entry, [2] all -inf, [3] -inf beside a finite max, [4] two equal maxima, [5] a wide
    range; further rows (up to `rows`) are all -inf for the caller to fill."""
    x = np.full((rows, n), -np.inf, np.float32)
    x[0, :] = 0.5
    x[0, n // 2] = np.nan
    x[1, :] = 0.5
    x[1, n - 1] = np.inf
    x[3, 0] = 1.0
    x[3, n - 1] = -3.0
    x[4, :] = -100.0
    x[4, n // 3] = x[4, n - 1] = 7.0
    x[5, :] = np.linspace(-60, 0, n, dtype=np.float32)
    return x


def assert_log_softmax_vjp(capsule: str, gx, y: np.ndarray, g: np.ndarray, what: str,
                           axis: int = -1) -> float:
    """A log_softmax VJP gx = g - exp(y) sum g (y: the float32 forward output it was given) within
    its capsule's allowance against the float64 value of that formula: the accurate variant's
    one rounding (0.5 ulp + RTOL); the plain capsule's expf-based VJP the derived rule's terms
    without inheritance (y is exact input here): E_REL exp(y) |sum g| (expf's 2 ulp) + 0.5 ulp of
    the result + RTOL of |g| + exp(y) sum|g|. Returns the worst error in units of the allowance."""
    gx = np.moveaxis(gx.get() if hasattr(gx, "get") else np.asarray(gx), axis, -1)
    y64 = np.moveaxis(np.asarray(y, np.float64), axis, -1)
    g64 = np.moveaxis(np.asarray(g, np.float64), axis, -1)
    with np.errstate(all="ignore"):
        e = np.exp(y64)
        s = np.sum(g64, -1, keepdims=True)
        want = g64 - e * s
        mag = np.abs(g64) + e * np.sum(np.abs(g64), -1, keepdims=True)
    fin = np.isfinite(want)
    assert np.array_equal(np.isnan(gx), np.isnan(want)), f"{what}: NaN positions differ"
    err = np.abs(gx[fin].astype(np.float64) - want[fin])
    allow = 0.5 * ulp_array(want[fin]) + RTOL * mag[fin]
    if declared_ulps(capsule) != 1.0:   # the plain capsule: expf within 2 ulp (E_REL = 2^-22)
        allow = allow + 2.0 ** -22 * (e * np.abs(s) * np.ones_like(e))[fin]
    bad = np.flatnonzero(~(err <= allow))
    assert bad.size == 0, (f"{what}: {bad.size} entries beyond the allowance; first: got "
                           f"{gx[fin][bad[0]]!r}, exact {want[fin][bad[0]]!r}")
    return float(np.max(err / allow, initial=0.0))
