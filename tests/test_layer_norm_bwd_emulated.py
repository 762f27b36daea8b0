"""norm.cu's layer_norm backward on the CPU through a host emulation (tests/emulated/norm_host.cpp:
a thread per CUDA thread, a barrier per block, real warp shuffles, shared arrays shared): every
backward variant writes one column partial per block (its row groups added through shared memory)
and tl_layer_norm_bwd_cols adds the blocks' partials in the documented order. Small grids and rows
(each block runs 256 host threads); the GPU tests (tests/test_cuda_softmax_norm.py) run the same
kernels at the benchmark sizes."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from emulated.host_build import build, require

F64_FLOOR = 2.0 ** -40    # as tests/test_cuda_softmax_norm.py: float64-sized cancellation term
EPS = float(np.float32(1e-5))
VARIANTS = {"wide": 0, "w8": 1, "q4": 2, "q8": 3, "b8": 4, "b16": 5}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    built = build(tmp_path_factory.mktemp("norm_emulation"), "norm.cu", "norm_host.cpp", ("-w",))
    require(built)
    return built


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


def _reference(x, gamma, g):
    """dx, dgamma, dbeta in float64 (docs/OPS.md's formulas)."""
    x, gamma, g = (a.astype(np.float64) for a in (x, gamma, g))
    mu = x.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + EPS)
    xhat = (x - mu) * rstd
    h = g * gamma
    dx = rstd * (h - h.mean(axis=1, keepdims=True) - xhat * (h * xhat).mean(axis=1, keepdims=True))
    return dx, (g * xhat).sum(axis=0), g.sum(axis=0), np.abs(g * xhat).sum(axis=0), \
        np.abs(g).sum(axis=0)


def _within_one_ulp(got, want, floor, what):
    got = np.asarray(got, np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    bad = np.abs(got - want) > ulp + floor
    assert not bad.any(), f"{what}: {int(bad.sum())} beyond 1 ulp, first at {np.argwhere(bad)[0]}"


def _bwd(lib, variant, blocks, rows, d, seed):
    r = np.random.default_rng(seed)
    x = (r.standard_normal((rows, d)) * 3 + 10).astype(np.float32)
    gamma = r.uniform(0.5, 2, d).astype(np.float32)
    g = r.standard_normal((rows, d)).astype(np.float32)
    dx = np.full((rows, d), np.nan, np.float32)
    pg = np.full((blocks, d), np.nan)
    pb = np.full((blocks, d), np.nan)
    assert lib.emu_ln_bwd(ctypes.c_uint(VARIANTS[variant]), ctypes.c_uint(blocks), _p(x),
                          _p(gamma), _p(g), _p(dx), _p(pg), _p(pb), ctypes.c_uint(rows),
                          ctypes.c_uint(d), ctypes.c_float(EPS)) == 0
    return (x, gamma, g), dx, pg, pb


def _cols(lib, pg, pb, blocks):
    parts, d = pg.shape
    dgamma, dbeta = np.full(d, np.nan, np.float32), np.full(d, np.nan, np.float32)
    lib.emu_ln_cols(ctypes.c_uint(blocks), _p(pg), _p(pb), _p(dgamma), _p(dbeta),
                    ctypes.c_uint(parts), ctypes.c_uint(d))
    return dgamma, dbeta


# (variant, blocks, rows, d): partial last row steps (rows not a multiple of the rows per step),
# blocks with one step or several, d below the variant's widest and at it.
CASES = [("w8", 3, 37, 256), ("w8", 2, 9, 100), ("q4", 3, 11, 300), ("q8", 2, 7, 768),
         ("b8", 2, 3, 1500), ("b16", 2, 3, 4096), ("wide", 3, 5, 4500)]


@pytest.mark.parametrize("variant,blocks,rows,d", CASES,
                         ids=[f"{v}-{b}x{r}x{d}" for v, b, r, d in CASES])
def test_block_partials_and_column_sums(lib, variant, blocks, rows, d):
    (x, gamma, g), dx, pg, pb = _bwd(lib, variant, blocks, rows, d, seed=d + rows)
    want_dx, want_dg, want_db, mag_g, mag_b = _reference(x, gamma, g)
    _within_one_ulp(dx, want_dx, F64_FLOOR * np.abs(want_dx).max(), f"{variant} dx")
    # every block wrote every column once, and the blocks' partials hold the whole column sum
    assert np.isfinite(pg).all() and np.isfinite(pb).all(), "a partial was never written"
    assert np.all(np.abs(pg.sum(axis=0) - want_dg) <= 2.0 ** -45 * mag_g)
    assert np.all(np.abs(pb.sum(axis=0) - want_db) <= 2.0 ** -45 * mag_b)
    dgamma, dbeta = _cols(lib, pg, pb, 1)
    _within_one_ulp(dgamma, want_dg, F64_FLOOR * mag_g.max(), f"{variant} dgamma")
    _within_one_ulp(dbeta, want_db, F64_FLOOR * mag_b.max(), f"{variant} dbeta")
    # the same launch again gives the same bits (no order left to the scheduler)
    _, dx2, pg2, pb2 = _bwd(lib, variant, blocks, rows, d, seed=d + rows)
    assert dx2.tobytes() == dx.tobytes() and pg2.tobytes() == pg.tobytes() \
        and pb2.tobytes() == pb.tobytes()


def _cols_model(part):
    """tl_layer_norm_bwd_cols's order: warp w adds parts w, w + 8, ... in turn, then the eight
    warp sums are added in warp order; rounded once to float32."""
    warps = [np.zeros(part.shape[1]) for _ in range(8)]
    for p in range(part.shape[0]):
        warps[p % 8] = warps[p % 8] + part[p]
    total = warps[0]
    for w in range(1, 8):
        total = total + warps[w]
    return total.astype(np.float32)


@pytest.mark.parametrize("parts,d,blocks", [(1, 5, 1), (7, 32, 1), (8, 33, 2), (33, 70, 1), (64, 40, 1), (65, 40, 1),
                                             (264, 96, 2), (61, 256, 8)])
def test_column_sums_follow_the_documented_order(lib, parts, d, blocks):
    """Bit for bit the model's order, for part counts below, at and above the eight warps (and
    the eight-part unrolled step), partial column tiles, and grid-stride over tiles (blocks <
    tiles). Each column holds +2^60 and -2^60 among terms near 1: the terms added while a
    running sum holds 2^60 vanish (its ulp is 2^8), so another order changes the float32 result."""
    r = np.random.default_rng(parts * 1000 + d)

    def part():
        a = r.standard_normal((parts, d))
        if parts > 2:
            cols = np.arange(d)
            at = np.argsort(r.random((parts, d)), axis=0)[:2]
            a[at[0], cols] = 2.0 ** 60
            a[at[1], cols] = -(2.0 ** 60)
        return a
    pg, pb = part(), part()
    dgamma, dbeta = _cols(lib, pg, pb, blocks)
    assert dgamma.tobytes() == _cols_model(pg).tobytes()
    assert dbeta.tobytes() == _cols_model(pb).tobytes()


class _Kernel:
    """An emulated launch with launch.Kernel's call shape: (grid, args)."""

    def __init__(self, lib, symbol, calls):
        self.lib, self.symbol, self.calls = lib, symbol, calls

    def __call__(self, grid, args, shared_mem=0):
        assert len(grid) == 1 and shared_mem == 0, (self.symbol, grid, shared_mem)
        self.calls.append((self.symbol, grid[0]))
        a = [_p(v) if isinstance(v, np.ndarray) else v for v in args]
        if self.symbol == "tl_layer_norm_bwd_cols":
            pg, pb, dgamma, dbeta, parts, d = a
            assert args[0].shape == (int(parts), int(d))
            self.lib.emu_ln_cols(ctypes.c_uint(grid[0]), pg, pb, dgamma, dbeta,
                                 ctypes.c_uint(int(parts)), ctypes.c_uint(int(d)))
            return
        x, gamma, g, dx, pg, pb, rows, d, eps = a
        assert args[4].shape == (grid[0], int(d)), "one partial row per block"
        variant = VARIANTS[self.symbol.removeprefix("tl_layer_norm_bwd").lstrip("_") or "wide"]
        assert self.lib.emu_ln_bwd(ctypes.c_uint(variant), ctypes.c_uint(grid[0]), x, gamma, g,
                                   dx, pg, pb, ctypes.c_uint(int(rows)), ctypes.c_uint(int(d)),
                                   ctypes.c_float(float(eps))) == 0


class _Cupy:
    float64 = np.float64

    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, np.nan, dtype)


@pytest.fixture
def host_vjp(lib, monkeypatch):
    """norm.py's _layer_norm_vjp on NumPy arrays, its kernels emulated, on a 2-SM device."""
    from engine.providers.native_cuda import norm
    calls: list = []
    monkeypatch.setattr(norm, "_LN_BWD", tuple((_Kernel(lib, k.symbol, calls), t, most)
                                               for k, t, most in norm._LN_BWD))
    monkeypatch.setattr(norm, "_ln_bwd", _Kernel(lib, "tl_layer_norm_bwd", calls))
    monkeypatch.setattr(norm, "_ln_cols", _Kernel(lib, "tl_layer_norm_bwd_cols", calls))
    monkeypatch.setattr(norm, "empty", lambda shape: np.full(shape, np.nan, np.float32))
    monkeypatch.setattr(norm, "zeros", lambda shape: np.zeros(shape, np.float32))
    monkeypatch.setattr(norm, "contiguous", np.ascontiguousarray)
    monkeypatch.setattr(norm, "cupy", lambda: _Cupy)
    monkeypatch.setattr(norm, "sm_count", lambda: 2)
    return norm._layer_norm_vjp, calls


# (rows, d, kernel, blocks on 2 SMs): the grid is one wave (blocks per SM by the variant's
# registers) or fewer blocks when the rows run out
HOST = [(40, 200, "tl_layer_norm_bwd_w8", 4), (9, 200, "tl_layer_norm_bwd_w8", 2),
        (5, 700, "tl_layer_norm_bwd_q8", 3), (5, 2000, "tl_layer_norm_bwd_b8", 2),
        (3, 4100, "tl_layer_norm_bwd", 3)]


@pytest.mark.parametrize("rows,d,symbol,blocks", HOST, ids=[f"{r}x{d}" for r, d, _, _ in HOST])
def test_host_code_launches_one_wave_and_the_column_pass(host_vjp, rows, d, symbol, blocks):
    vjp, calls = host_vjp
    r = np.random.default_rng(rows * d)
    x = r.standard_normal((rows, d)).astype(np.float32)
    gamma = r.uniform(0.5, 2, d).astype(np.float32)
    g = r.standard_normal((rows, d)).astype(np.float32)
    dx, dgamma, dbeta = vjp((x, gamma, np.zeros(d, np.float32)), None, g, eps=EPS)
    assert calls == [(symbol, blocks), ("tl_layer_norm_bwd_cols", -(-d // 32))]
    want_dx, want_dg, want_db, mag_g, mag_b = _reference(x, gamma, g)
    _within_one_ulp(dx, want_dx, F64_FLOOR * np.abs(want_dx).max(), "dx")
    _within_one_ulp(dgamma, want_dg, F64_FLOOR * mag_g.max(), "dgamma")
    _within_one_ulp(dbeta, want_db, F64_FLOOR * mag_b.max(), "dbeta")
