"""Shared helpers of the GPU tests (tests/test_cuda_*.py): the CUDA session fixture, the
reference provider on the host, and float32 error measures with tolerances derived from the
capsules' numerical policies.

Every GPU test module sets `pytestmark = pytest.mark.cuda`; tests/conftest.py skips those, with
the probe's reason, unless a native CUDA runtime is present. Nothing here imports CuPy at
import time, so collection works on the CPU.
"""
from __future__ import annotations

import numpy as np

U = 2.0 ** -24   # unit roundoff of float32


def gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u)."""
    return k * U / (1 - k * U)


def cupy():
    import cupy as cp
    return cp


def native_handler(op_label: str):
    from engine.registry import registry
    return registry().handler(f"native_cuda.{op_label}")


def reference_forward(op_label: str):
    from engine.registry import registry
    return registry().handler(f"reference.{op_label}").forward


def reference_vjp(op_label: str):
    """The local VJP rule the reference provider's tape uses (engine/ops/*.py)."""
    import engine.ops  # noqa: F401  (fills LOCAL_VJP)
    from engine.ops._dispatch import LOCAL_VJP
    from engine.types import BackendOp
    return LOCAL_VJP[BackendOp.parse(op_label)]


def to_host(x) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _ordered(x: np.ndarray) -> np.ndarray:
    """float32 bits mapped to integers that count ulps across zero (+0 and -0 both map to 0)."""
    i = np.ascontiguousarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(x, y) -> np.ndarray:
    """Ulps between float32 arrays; 0 where both are NaN, a huge number where only one is."""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    d = np.abs(_ordered(x) - _ordered(y)).astype(np.float64)
    nx, ny = np.isnan(x), np.isnan(y)
    d[nx & ny] = 0
    d[nx ^ ny] = np.inf
    return d


def assert_bitwise(got, want, what: str) -> None:
    """Bit-for-bit equal, signed zero included; NaNs compare by position only."""
    got, want = np.asarray(to_host(got), np.float32), np.asarray(to_host(want), np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"{what}: NaN positions differ"
    gb, wb = got[~gn].view(np.uint32), want[~wn].view(np.uint32)
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, (f"{what}: {bad.size} elements differ in bits; first at {bad[0]}: "
                           f"{got[~gn][bad[0]]!r} vs {want[~wn][bad[0]]!r}")


def assert_ulps(got, want, ulps: float, what: str, abs_floor=None) -> float:
    """Within `ulps` float32 ulps elementwise, or (where given) within abs_floor[i] absolutely.
    Returns the largest ulp distance seen."""
    got, want = np.asarray(to_host(got), np.float32), np.asarray(to_host(want), np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    d = ulp_distance(got, want)
    ok = d <= ulps
    if abs_floor is not None:
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        ok |= diff <= np.broadcast_to(abs_floor, diff.shape)
    bad = np.flatnonzero(~ok.reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} elements beyond {ulps} ulps; worst "
                           f"{np.nanmax(np.where(ok, 0, d))} ulps at {bad[0]}: "
                           f"{got.reshape(-1)[bad[0]]!r} vs {want.reshape(-1)[bad[0]]!r}")
    return float(np.max(d[np.isfinite(d)], initial=0.0))


def assert_sum_bound(got, want, abs_terms, k: int, what: str) -> None:
    """|got - want| <= 2 gamma_k sum|terms| + one ulp of want: our sum and the reference's sum
    each within gamma_k * sum|terms| of the exact value (any order, k = number of terms)."""
    got = np.asarray(to_host(got), np.float64)
    want = np.asarray(want, np.float64)
    bound = 2 * gamma(max(k, 1)) * np.asarray(abs_terms, np.float64) + \
        np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got - want)
    bad = np.flatnonzero(~(err <= bound).reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} sums outside 2 gamma_{k} sum|x|; first at "
                           f"{bad[0]}: {got.reshape(-1)[bad[0]]} vs {want.reshape(-1)[bad[0]]}, "
                           f"bound {np.broadcast_to(bound, err.shape).reshape(-1)[bad[0]]}")


def cuda_session():
    """A context manager: a CUDA session is current inside it."""
    from engine.session import Session, use_session
    return use_session(Session("cuda"))
