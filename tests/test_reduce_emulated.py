"""reduce.cu's column sums (tl_reduce_cols) and short-row sums (tl_reduce_rows_group) on the
CPU through a host emulation (tests/emulated/reduce_host.cpp), driven by reduce.py's own host
code (sum_plan and sum_axes: chunk choice, default mode's atomics, deterministic mode's partial
passes, reduce_mean's division): deterministic mode bit for bit a NumPy model of the documented
order (per chunk and column, float32 left folds over runs of rows, the runs' sums folded in run
order; the chunks' sums reduced again the same way), the float4 path and the scalar path equal
bit for bit, default mode within reduce_sum's declared gamma_n sum|x|, and a mean the sum
divided by the count in float, bit for bit, whether the row launch divides or a launch of its
own. The GPU tests (tests/test_cuda_native_ops.py, tests/test_cuda_fast_paths.py) run the same
code at the benchmark sizes."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from emulated.host_build import build, require

U = 2.0 ** -24


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    built = build(tmp_path_factory.mktemp("reduce_emulation"), "reduce.cu", "reduce_host.cpp",
                  ("-w",))
    require(built)
    return built


class _Host(np.ndarray):
    """A NumPy array with CuPy's .data.ptr, so reduce.py's alignment check reads it."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _host(a):
    return a.view(_Host)


class _Fill:
    """tl_neg_zeros on the host: float32 -0.0 at the address given."""

    def launch(self, blocks, out, n):
        np.ctypeslib.as_array((ctypes.c_float * n).from_address(out))[:] = -0.0


@pytest.fixture
def sum_axes(lib, monkeypatch):
    """reduce.sum_axes with tl_reduce_cols emulated, a grid of at most 3 blocks (grid-stride
    loops run), and launches recorded as (r, chunks, seg, atomic, vec). The launches get
    addresses, as the prepared path hands them to the driver; every buffer is a NumPy array of
    this test, so each address is checked to be one of them."""
    from engine.providers.native_cuda import reduce as red
    calls: list = []
    buffers: dict = {}

    def out(shape, n):
        a = _host(np.full(shape, np.nan, np.float32))
        buffers[a.ctypes.data] = a
        return a

    class Cols:
        def launch(self, blocks, x, dst, outer, r, inner, chunks, seg, atomic, vec, lg):
            assert x in buffers and dst in buffers and dst != x
            assert not vec or (inner % 4 == 0 and x % 16 == 0)
            calls.append((r, chunks, seg, atomic, vec))
            lib.emu_reduce_cols(ctypes.c_uint(blocks), ctypes.c_void_p(x), ctypes.c_void_p(dst),
                                *map(ctypes.c_uint, (outer, r, inner, chunks, seg)),
                                ctypes.c_int(atomic), ctypes.c_int(vec), ctypes.c_uint(lg))

    class Group:
        def launch(self, blocks, x, dst, rows, r, lg, vec, d):
            assert x in buffers and dst in buffers and dst != x
            assert not vec or (r % 4 == 0 and x % 16 == 0)
            calls.append(("group", r, lg, vec, d))
            lib.emu_reduce_rows_group(ctypes.c_uint(blocks), ctypes.c_void_p(x),
                                      ctypes.c_void_p(dst), *map(ctypes.c_uint, (rows, r, lg)),
                                      ctypes.c_int(vec), ctypes.c_float(d))

    class Div:      # tl_div_f32: IEEE float division, as NumPy's float32 division
        def launch(self, blocks, x, dst, n, d):
            assert x in buffers and dst in buffers
            calls.append(("div", n, d))
            src = np.ctypeslib.as_array((ctypes.c_float * n).from_address(x))
            out = np.ctypeslib.as_array((ctypes.c_float * n).from_address(dst))
            out[:] = src / np.float32(d)

    monkeypatch.setattr(red, "_cols_kernel", Cols())
    monkeypatch.setattr(red, "_group_kernel", Group())
    monkeypatch.setattr(red, "_div32_kernel", Div())
    monkeypatch.setattr(red, "_neg_zeros_kernel", _Fill())
    monkeypatch.setattr(red, "grid", lambda work: (min(-(-work // 256), 3),))
    monkeypatch.setattr(red, "new_array", out)
    mode = {"det": True}
    monkeypatch.setattr(red, "get_deterministic_reductions", lambda: mode["det"])
    red.sum_plan.cache_clear()       # plans hold the kernels and grids patched here

    def run(x, axes, det, mean=False):
        mode["det"] = det
        calls.clear()
        buffers.clear()
        buffers[x.ctypes.data] = x
        return np.asarray(red.sum_axes(_host(x), axes, mean=mean)), list(calls)
    yield run
    red.sum_plan.cache_clear()


def _model(x3):
    """Deterministic mode's order on x viewed as [outer][r][inner]: per chunk, S = 256 / LQ runs
    of ceil(len / S) rows each left-folded from -0, the runs' sums left-folded in run order; the
    chunks' sums reduced again the same way."""
    from engine.providers.native_cuda.reduce import col_chunks, col_lanes_log2
    outer, r, inner = x3.shape
    chunks, seg = col_chunks(outer, r, inner)
    n_runs = 256 >> col_lanes_log2(inner)
    part = np.empty((outer, chunks, inner), np.float32)
    for c in range(chunks):
        rows = range(c * seg, min(r, (c + 1) * seg))
        per = -(-len(rows) // n_runs)
        total = None
        for w in range(n_runs):
            acc = np.full((outer, inner), -0.0, np.float32)
            for row in rows[w * per:(w + 1) * per]:
                acc = acc + x3[:, row, :]      # float32 + float32: one IEEE rounding
            total = acc if total is None else total + acc
        part[:, c, :] = total
    return part.reshape(-1) if chunks == 1 else _model(part)


# (shape, axis): the gpt2 bias-gradient shape at a quarter of its rows, inner not a multiple of
# four (scalar path, a short last quad), outer > 1, one chunk, a chunk count that leaves a short
# last chunk
CASES = [((1024, 256), 0), ((300, 29), 0), ((3, 100, 12), 1), ((20, 64), 0), ((4001, 8), 0)]


@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_deterministic_mode_follows_the_documented_order(sum_axes, shape, axis):
    r = np.random.default_rng(sum(shape))
    # magnitudes over 2^-20 .. 2^20: another order of float32 adds rounds differently
    x = (r.standard_normal(shape) * np.exp2(r.integers(-20, 20, shape))).astype(np.float32)
    got, calls = sum_axes(x, (axis,), det=True)
    outer = int(np.prod(shape[:axis]))
    want = _model(x.reshape(outer, shape[axis], -1))
    assert got.tobytes() == want.tobytes()
    assert all(atomic == 0 for _, _, _, atomic, _ in calls)
    assert calls[0][4] == int(shape[-1] % 4 == 0 and axis != len(shape) - 1)


def test_float4_and_scalar_paths_agree_bit_for_bit(sum_axes):
    """The same values at a 16-byte-aligned and at a misaligned address: vec 1 and vec 0, the
    same bits (alignment never changes a result)."""
    r = np.random.default_rng(7)
    vals = (r.standard_normal((515, 256)) * np.exp2(r.integers(-20, 20, (515, 256)))
            ).astype(np.float32)
    def at(offset):   # vals copied to a fresh buffer, starting `offset` floats past 16 bytes
        buf = np.empty(vals.size + 8, np.float32)
        start = (-buf.ctypes.data % 16) // 4 + offset
        view = buf[start:start + vals.size].reshape(vals.shape)
        view[...] = vals
        return view
    aligned, shifted = at(0), at(1)
    got_v, calls_v = sum_axes(aligned, (0,), det=True)
    got_s, calls_s = sum_axes(shifted, (0,), det=True)
    assert calls_v[0][4] == 1 and calls_s[0][4] == 0
    assert got_v.tobytes() == got_s.tobytes()


@pytest.mark.parametrize("shape,axis", CASES[:3], ids=[f"{s}-{a}" for s, a in CASES[:3]])
def test_default_mode_within_the_declared_bound(sum_axes, shape, axis):
    r = np.random.default_rng(3 + sum(shape))
    x = r.standard_normal(shape).astype(np.float32)
    got, calls = sum_axes(x, (axis,), det=False)
    exact = x.astype(np.float64).sum(axis=axis).reshape(-1)
    n = shape[axis]
    gamma = n * U / (1 - n * U)
    assert np.all(np.abs(got - exact) <= gamma * np.abs(x.astype(np.float64)).sum(axis=axis)
                  .reshape(-1))
    assert len(calls) == 1 and (calls[0][1] == 1 or calls[0][3] == 1)


@pytest.mark.parametrize("r_len", (2, 3, 33, 768, 1024, 4095, 4096))
@pytest.mark.parametrize("det", (False, True), ids=("atomic", "deterministic"))
def test_a_row_mean_divides_in_the_row_launch_bit_for_bit(sum_axes, r_len, det):
    """reduce_mean over rows up to GROUP_ROW_MAX: one launch, which divides its row sums by the
    count; the bits are the row sums' divided by the count in float (what tl_div_f32 gave in a
    launch of its own), signed zeros, NaN and inf included."""
    r = np.random.default_rng(r_len)
    x = (r.standard_normal((67, r_len)) * np.exp2(r.integers(-20, 20, (67, r_len)))
         ).astype(np.float32)
    x[5] = -0.0
    x[6, 0] = np.inf
    x[7, -1] = np.nan
    sums, sum_calls = sum_axes(x, (1,), det)
    means, mean_calls = sum_axes(x, (1,), det, mean=True)
    assert [c[0] for c in mean_calls] == ["group"] and mean_calls[0][4] == float(r_len)
    assert sum_calls[0][4] == 1.0            # a sum divides by nothing
    want = sums / np.float32(r_len)
    assert means.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert np.signbit(means[5]) and means[5] == 0 and means[6] == np.inf and np.isnan(means[7])


@pytest.mark.parametrize("det", (False, True), ids=("atomic", "deterministic"))
def test_a_column_mean_divides_after_the_sum(sum_axes, det):
    """reduce_mean over columns: the column sums, then one division launch over them."""
    r = np.random.default_rng(11)
    x = r.standard_normal((1024, 256)).astype(np.float32)
    means, calls = sum_axes(x, (0,), det, mean=True)
    assert calls[-1] == ("div", 256, 1024.0) and all(c[0] != "group" for c in calls)
    if det:                                  # the same sums again: the same bits
        sums, _ = sum_axes(x, (0,), det)
        assert means.tobytes() == (sums / np.float32(1024)).tobytes()
    exact = x.astype(np.float64).sum(axis=0) / 1024
    gamma = 1025 * U / (1 - 1025 * U)
    assert np.all(np.abs(means - exact) <= gamma * np.abs(x.astype(np.float64)).sum(axis=0) / 1024)


def test_a_plan_is_made_once_per_shape_axes_and_mode(sum_axes):
    from engine.providers.native_cuda import reduce as red
    x = np.ones((300, 29), np.float32)
    sum_axes(x, (0,), True)
    before = red.sum_plan.cache_info()
    sum_axes(x, (0,), True)
    after = red.sum_plan.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    sum_axes(x, (0,), False)                 # another mode: another plan
    assert red.sum_plan.cache_info().misses == before.misses + 1
