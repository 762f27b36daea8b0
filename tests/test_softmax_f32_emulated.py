"""softmax.cu's float32 forwards (tl_softmax_f32.cuh: the plain capsules native_cuda.softmax and
native_cuda.log_softmax) on the CPU through a host emulation of the real source
(tests/emulated/softmax_host.cpp, built with g++: a thread per CUDA thread, real shuffles and
barriers), with expf moved up to libdevice's 2 ulp from the correctly rounded value: every
register form the capsules launch (scalar and float4, a warp or a block per row, full and partial
rows) within the derived bound against a float64 evaluation (tests/softmax_checks.py) on rows
with wide dynamic ranges, many tiny terms (log_softmax's scaled second pass), ties, sums on
either side of log_softmax's T = 2^-12 switch and the IEEE special rows. The GPU runs the same
checks (tests/test_cuda_softmax_f32.py)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import softmax_checks as S
import test_cuda_softmax_f32 as gpu
from emulated.host_build import build, require
from engine.providers.native_cuda import softmax

F32 = np.float32
BLOCK = 256


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    built = build(tmp_path_factory.mktemp("softmax_emulation"), "softmax.cu", "softmax_host.cpp",
                  ("-w",))
    require(built)
    built.emu_forward.restype = built.emu_vjp.restype = ctypes.c_int
    return built


def _run(lib, symbol: str, x: np.ndarray, ulps: int = 2, seed: int = 1) -> np.ndarray:
    """`symbol` over the rows of x (C-contiguous, 16-byte aligned) as softmax.py launches it."""
    rows, n = x.shape
    threads = BLOCK if "_b" in symbol.rsplit("_f32", 1)[1] else 32
    per_block = BLOCK // threads
    x = np.ascontiguousarray(x, F32)
    assert x.ctypes.data % 16 == 0
    out = np.full_like(x, np.nan)
    lib.emu_set_expf(ctypes.c_int(ulps), ctypes.c_uint(seed))
    rc = lib.emu_forward(symbol.encode(), ctypes.c_uint((rows + per_block - 1) // per_block),
                         ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                         ctypes.c_uint(rows), ctypes.c_uint(n))
    assert rc == 0, f"{symbol}: not in the emulation's kernel table"
    return out


def _rows(op: str, n: int) -> np.ndarray:
    """Wide-range rows, tiny terms, the special rows and (log_softmax) T near 2^-12."""
    tiny = np.full((4, n), -100.0, F32)
    tiny[1] = -95.0
    tiny[2, ::3] = -101.5
    tiny[3] = -200.0
    tiny[:, 0] = 0.0
    tiny[2, n - 1] = 0.0                      # a tie: the first max carries the 1
    special = S.special_rows(n, rows=8)
    special[6, :] = 1.0
    special[6, 0], special[6, 1] = 3e38, -3e38
    special[7, 1] = 2.5
    # T = e^-a around 2^-12 (a = 8.318): both passes; T = e^-28 (2^-40): 1 + T in double keeps
    # only 13 of T's bits (the second pass's reason); a tie beside e^-3 in the common pass
    switch = np.full((6, n), -np.inf, F32)
    switch[:, 0] = 0.0
    switch[:, n - 1] = (-8.3, -8.3178, -8.34, -3.0, -28.0, -20.0)
    switch[3, n // 2] = 0.0
    switch[5, 1:n - 1:2] = -33.0
    wide = gpu._wide_rows(n, n)[:4 if n > 1024 else None]   # a block per row: fewer rows
    return np.concatenate([wide, tiny, special, switch]).astype(F32)


# (n, what it exercises): the symbol is the one the capsule picks for an aligned array
WIDTHS = {7: "w2 partial", 100: "wv2 partial", 256: "wv2 full", 1000: "wv8 partial",
          1024: "wv8 full", 1023: "w32 (scalar)", 2048: "bv2 full", 3000: "bv4 partial",
          4100: "bv8 partial", 8192: "bv8 full", 5001: "b32 (scalar)"}


@pytest.mark.parametrize("n", list(WIDTHS))
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_every_register_form_is_within_the_derived_bound(lib, op, n):
    capsule = f"native_cuda.{op}"
    symbol = softmax.FAST_FORWARD[softmax.Op(op)].pick(n, 1)
    assert symbol.endswith("_" + WIDTHS[n].split()[0]), (n, symbol)
    x = _rows(op, n)
    worst = 0.0
    first_special = x.shape[0] - 14
    for ulps, seed in ((2, 1), (1, 2)):
        got = _run(lib, symbol, x, ulps, seed)
        worst = max(worst, S.assert_forward(capsule, got, x, f"{symbol} n={n} expf+-{ulps}"))
        assert np.all(np.isnan(got[first_special:first_special + 3])), "NaN, +inf, all -inf"
    assert worst > 0.5   # the moved expf really reaches the outputs


def test_misaligned_and_odd_rows_take_the_scalar_forms(lib):
    """The same row read through the scalar form (a misaligned view, or n % 4 != 0 beside it)
    stays within the bound: the float4 and scalar forms differ only in which thread holds
    which entry (the sums' order), not in the arithmetic."""
    for op in ("softmax", "log_softmax"):
        kern = softmax.FAST_FORWARD[softmax.Op(op)]
        x = _rows(op, 1024)
        vec = _run(lib, kern.pick(1024, 1), x)
        sca = _run(lib, kern.pick(1024, 1, aligned=False), x)
        for got in (vec, sca):
            S.assert_forward(f"native_cuda.{op}", got, x, f"{op} 1024")
        assert np.array_equal(np.isnan(vec), np.isnan(sca)), op


@pytest.mark.parametrize("n", [33, 256, 1000, 2048, 8192])
def test_log_softmax_vjp_with_expf_is_within_the_derived_rule(lib, n):
    """The plain log_softmax capsule's VJP register variants (exp(y) by expf, moved up to 2 ulp
    here) against the float64 value of g - exp(y) sum g, y the float32 forward output, under the
    derived rule's terms (tests/softmax_checks.py): rows with cancelling cotangents (sum g ~ 0
    and large), y down to -inf and a NaN output."""
    symbol = softmax._RowKernels("tl_log_softmax_bwd", softmax._VJP_VARIANTS,
                                 "tl_log_softmax_bwd_f32", arrays=3).pick(n, 1)
    decl = next(d for d in softmax.DECLS if d.op is softmax.Op.log_softmax and d.variant is None)
    assert symbol in decl.vjp_symbols, symbol
    r = np.random.default_rng(n)
    rows = 5 if n > 1024 else 20
    x = (r.standard_normal((rows, n)) * 6).astype(F32)
    x[1, ::2] = -np.inf
    g = r.standard_normal((rows, n)).astype(F32)
    g[2] -= F32(np.mean(g[2]))            # sum g ~ 0: gx ~ g
    g[3] = F32(1e30)                       # sum g huge: g - exp(y) S cancels for the max
    y = _run(lib, softmax.FAST_FORWARD[softmax.Op.log_softmax].pick(n, 1), x)
    y[4, n // 2] = np.nan
    threads = BLOCK if "_b" in symbol.rsplit("_f32", 1)[1] else 32
    per_block = BLOCK // threads
    gx = np.full_like(y, np.nan)
    for ulps, seed in ((2, 3), (1, 4)):
        lib.emu_set_expf(ctypes.c_int(ulps), ctypes.c_uint(seed))
        assert lib.emu_vjp(symbol.encode(), ctypes.c_uint((rows + per_block - 1) // per_block),
                           ctypes.c_void_p(y.ctypes.data), ctypes.c_void_p(g.ctypes.data),
                           ctypes.c_void_p(gx.ctypes.data), ctypes.c_uint(rows),
                           ctypes.c_uint(n)) == 0
        worst = S.assert_log_softmax_vjp("native_cuda.log_softmax", gx, y, g,
                                         f"{symbol} n={n} expf+-{ulps}")
        assert np.isnan(gx[4, n // 2]) and np.isfinite(np.delete(gx[4], n // 2)).all(), \
            "a NaN output gives a NaN gradient there only (sum g does not read y)"
    assert worst > 0.01   # the moved expf is visible against the allowance


def _naive_breakers(rng):
    """Rows that break a naive float32 version, each at its own width (so several forms run):
    x - max inexact, subnormal and many tiny terms (an unscaled sum of n subnormal exp(-100)
    would miss log_softmax's max entry by hundreds of ulps), an offset of 1000."""
    yield np.concatenate([[0.0], np.full(200, -100.0)]).astype(F32)    # subnormal terms
    yield np.concatenate([[0.0], np.full(299, -95.0)]).astype(F32)
    yield np.concatenate([[0.0], rng.uniform(-104, 0, 299)]).astype(F32)
    yield (np.where(rng.random(257) < 0.5, -1, 1) * 10.0 ** rng.uniform(-4, 2, 257)).astype(F32)
    yield (1000 + rng.uniform(-30, 0, 100)).astype(F32)
    yield rng.standard_normal(64).astype(F32) * F32(6)
    yield np.linspace(-88, -103.9, 52).astype(F32)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_rows_that_break_a_naive_float32_version(lib, op):
    rng = np.random.default_rng(17)
    kern = softmax.FAST_FORWARD[softmax.Op(op)]
    worst = 0.0
    for row in _naive_breakers(rng):
        x = np.repeat(row[None, :], 3, axis=0)
        got = _run(lib, kern.pick(row.size, 1), x)
        worst = max(worst, S.assert_forward(f"native_cuda.{op}", got, x,
                                            f"{op} n={row.size} ({kern.pick(row.size, 1)})"))
    assert worst > 0.5   # the moved expf's 1-2 ulp really reach the outputs
