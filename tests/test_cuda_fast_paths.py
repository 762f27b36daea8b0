"""The roofline fast paths of the sum, mse, index and data-movement kernels (reduce.cu, loss.cu,
index.cu, shape.cu with tl_runs.cuh) and their fallbacks, at the thresholds where the Python side
switches: lane-group row sums vs chunked rows, 16-byte vs scalar paths (aligned vs misaligned
buffers), the row copy / broadcast column / tiled transpose vs the generic strided kernel.

Copies are checked on random bit patterns (NaN payloads, subnormals, signed zeros) as integers,
so a copy that changed one bit fails. Sums are checked against float64 within the derived
gamma_n bound and, because the kernels add in an order fixed by the shape alone, bit for bit
between an aligned and a misaligned copy of the same input and between repeated runs."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

# strided.py / reduce.py switch at these: rows <= GROUP_ROW_MAX take one lane-group pass, longer
# rows are chunked by ROW_SEGMENT; runs of >= RUN_MIN floats take the row copy kernels.
ROW_LENGTHS = (2, 3, 5, 31, 32, 33, 127, 128, 129, 1023, 1024, 1025, 4095, 4096, 4097, 8192,
               8193, 20001)


def _bits(r, shape) -> np.ndarray:
    """Random float32 bit patterns: every class of value, NaN payloads included."""
    return r.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _device(x, misaligned: bool):
    """x on the device; misaligned: a C-contiguous view starting 4 bytes past a 256-byte
    boundary, so every 16-byte path must fall back to scalar loads."""
    cp = H.cupy()
    if not misaligned:
        return cp.asarray(x)
    buf = cp.empty(x.size + 1, np.float32)
    view = buf[1:].reshape(x.shape)
    view[...] = cp.asarray(x)
    assert view.data.ptr % 16 == 4 and view.flags.c_contiguous
    return view


def _assert_same_bits(got, want: np.ndarray, what: str) -> None:
    got = np.ascontiguousarray(H.to_host(got), np.float32)
    want = np.ascontiguousarray(want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, f"{what}: {bad.size} elements differ in bits, first at {bad[0]}"


# --- sums -----------------------------------------------------------------------------------

@pytest.mark.capsules("native_cuda.reduce_sum", "native_cuda.reduce_mean")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("r_len", ROW_LENGTHS)
def test_row_sums_at_every_threshold(r_len, deterministic):
    from engine.runtime.deterministic import deterministic_reductions
    r = np.random.default_rng(r_len)
    rows = 5 if r_len > 4096 else 67
    x = (r.standard_normal((rows, r_len)) * 3).astype(np.float32)
    want = x.astype(np.float64).sum(axis=1)
    abs_sum = np.abs(x.astype(np.float64)).sum(axis=1)
    h = H.native_handler("reduce_sum")
    with deterministic_reductions(deterministic):
        aligned = h.forward(_device(x, False), axes=(1,), keepdims=False)
        misaligned = h.forward(_device(x, True), axes=(1,), keepdims=False)
        again = h.forward(_device(x, False), axes=(1,), keepdims=False)
        mean = H.native_handler("reduce_mean").forward(_device(x, True), axes=(1,),
                                                       keepdims=True)
    H.assert_sum_bound(aligned, want.astype(np.float32), abs_sum, r_len, f"row sums R={r_len}")
    H.assert_sum_bound(mean, (want / r_len).astype(np.float32)[:, None], abs_sum[:, None] / r_len,
                       r_len + 1, f"row means R={r_len}")
    if deterministic or r_len <= 8192:   # no chunk partials added by atomics
        _assert_same_bits(misaligned, H.to_host(aligned), f"16-byte vs scalar order R={r_len}")
        _assert_same_bits(again, H.to_host(aligned), f"repeated run R={r_len}")


@pytest.mark.capsules("native_cuda.reduce_sum")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("r_len", (2, 33, 1024, 4097, 20001))
def test_row_sums_keep_signed_zero_nan_and_inf(r_len, deterministic):
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    x = np.full((4, r_len), -0.0, np.float32)
    x[1, r_len // 2] = np.nan
    x[2, -1] = np.inf
    x[3, 0] = 5e-45                      # a subnormal alone in a row of -0 terms
    with deterministic_reductions(deterministic):
        out = H.to_host(H.native_handler("reduce_sum").forward(cp.asarray(x), axes=(1,),
                                                              keepdims=False))
    assert np.signbit(out[0]) and out[0] == 0, "a row of -0 sums to -0"
    assert np.isnan(out[1]) and out[2] == np.inf
    if deterministic or r_len <= 8192:   # atomics (default mode, chunked rows) flush subnormals
        assert out[3] == np.float32(5e-45)


@pytest.mark.capsules("native_cuda.reduce_sum", "native_cuda.broadcast")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("shape, axis", [((64, 1 << 16), 0), ((1 << 16, 64), 1),
                                         ((512, 512), 0), ((512, 512), 1), ((0, 1024), 1),
                                         ((7, 0), 1)])
def test_skinny_and_empty_sums_and_their_vjp(shape, axis, deterministic):
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(3)
    x = r.standard_normal(shape).astype(np.float32)
    h = H.native_handler("reduce_sum")
    with deterministic_reductions(deterministic):
        out = h.forward(cp.asarray(x), axes=(axis,), keepdims=False)
        g = r.standard_normal(out.shape).astype(np.float32)
        (gx,) = h.vjp((cp.asarray(x),), out, cp.asarray(g), axes=(axis,), keepdims=False)
    H.assert_sum_bound(out, x.astype(np.float64).sum(axis=axis).astype(np.float32),
                       np.abs(x.astype(np.float64)).sum(axis=axis), shape[axis], f"{shape}")
    _assert_same_bits(gx, np.broadcast_to(np.expand_dims(g, axis), shape), "sum VJP broadcast")


@pytest.mark.capsules("native_cuda.reduce_mean")
@pytest.mark.parametrize("shape, axes, keepdims", [
    ((67, 768), (1,), False), ((67, 4096), (1,), True), ((5, 4097), (1,), False),
    ((8192, 768), (0,), False), ((3, 100, 12), (1,), True), ((6, 1, 5), (1,), False),
    ((4, 6, 33), None, False), ((40, 2, 30), (0, 2), True)],
    ids=["rows-768", "rows-4096-keep", "chunked-rows", "cols", "middle-keep", "unit-axis", "all",
         "two-axes"])
def test_a_mean_is_the_sum_divided_by_the_count_in_float(shape, axes, keepdims):
    """reduce_mean's bits are reduce_sum's divided by the count in float (IEEE division) in
    deterministic mode (sums repeatable), whichever launch divides: the row kernel itself
    (rows up to 4096), a division launch after chunked rows, columns, several axes, or a unit
    axis's copy. Signed zeros, inf and NaN rows included."""
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(sum(shape))
    x = (r.standard_normal(shape) * np.exp2(r.integers(-20, 20, shape))).astype(np.float32)
    flat = x.reshape(-1)
    flat[:7] = -0.0
    flat[-1] = np.inf
    flat[len(flat) // 2] = np.nan
    ax = tuple(range(len(shape))) if axes is None else axes
    count = int(np.prod([shape[d] for d in ax]))
    with deterministic_reductions(True):
        s = H.native_handler("reduce_sum").forward(cp.asarray(x), axes=axes, keepdims=keepdims)
        m = H.native_handler("reduce_mean").forward(cp.asarray(x), axes=axes, keepdims=keepdims)
    want = np.asarray(H.to_host(s) / np.float32(count), np.float32)
    got = H.to_host(m)
    assert got.shape == np.mean(x, axis=axes, keepdims=keepdims).shape
    # NaN where the sum is NaN; its payload is the GPU division's canonical one, NumPy's keeps
    # the input's (a unit axis's sum is a copy of x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"mean {shape} {axes}: NaN elsewhere"
    _assert_same_bits(np.where(nan, 0, got), np.where(nan, 0, want).reshape(got.shape),
                      f"mean {shape} {axes}")


# --- mse_loss -------------------------------------------------------------------------------

@pytest.mark.capsules("native_cuda.mse_loss")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("n", (3, 4, 8191, 8192, 8193, (1 << 20) + 3))
def test_mse_vector_and_scalar_paths_agree(n, deterministic):
    from engine.runtime.deterministic import deterministic_reductions
    r = np.random.default_rng(n)
    p = r.standard_normal(n).astype(np.float32)
    t = r.standard_normal(n).astype(np.float32)
    h = H.native_handler("mse_loss")
    g = H.cupy().asarray(np.float32(0.3))
    with deterministic_reductions(deterministic):
        fast = h.forward(_device(p, False), _device(t, False))
        slow = h.forward(_device(p, True), _device(t, True))
    d2 = ((p.astype(np.float64) - t) ** 2).sum()
    H.assert_sum_bound(fast, np.float32(d2 / n), d2 / n, n + 2, f"mse n={n}")
    if deterministic or n <= 8192:
        _assert_same_bits(slow, H.to_host(fast), f"mse 16-byte vs scalar order n={n}")
    gp, gt = h.vjp((_device(p, False), _device(t, False)), fast, g)
    sp, st = h.vjp((_device(p, True), _device(t, True)), fast, g)
    scale = 2.0 * np.float64(np.float32(0.3)) / n          # tl_mse_bwd's double arithmetic
    want = ((p.astype(np.float64) - t.astype(np.float64)) * scale).astype(np.float32)
    _assert_same_bits(gp, want, f"mse VJP n={n} (float64 inside, rounded once)")
    _assert_same_bits(sp, H.to_host(gp), "mse VJP scalar path")
    _assert_same_bits(gt, -want, "mse VJP target")
    _assert_same_bits(st, -want, "mse VJP target, scalar path")


# --- data movement --------------------------------------------------------------------------

@pytest.mark.capsules("native_cuda.slice")
@pytest.mark.parametrize("shape, axis, start, stop", [
    ((9, 64), 1, 0, 32), ((9, 64), 1, 1, 33), ((9, 64), 1, 3, 64), ((9, 70), 1, 4, 20),
    ((5, 6, 40), 1, 2, 5), ((3, 2000), 1, 7, 1999), ((40, 33), 0, 3, 17), ((9, 64), 1, 5, 5),
])
def test_slice_fast_and_generic_paths_copy_bits(shape, axis, start, stop):
    cp = H.cupy()
    x = _bits(np.random.default_rng(1), shape)
    h = H.native_handler("slice")
    out = h.forward(cp.asarray(x), axis=axis, start=start, stop=stop)
    _assert_same_bits(out, np.take(x, range(start, stop), axis=axis), f"slice {shape}")
    g = _bits(np.random.default_rng(2), out.shape)
    (gx,) = h.vjp((cp.asarray(x),), out, cp.asarray(g), axis=axis, start=start, stop=stop)
    want = np.zeros(shape, np.float32)
    index = [slice(None)] * len(shape)
    index[axis] = slice(start, stop)
    want[tuple(index)] = g
    _assert_same_bits(gx, want, f"slice VJP {shape}")


@pytest.mark.capsules("native_cuda.concat")
@pytest.mark.parametrize("widths, axis", [((16, 17, 64), 1), ((4, 32), 1), ((3, 5), 0),
                                          ((1000, 24), 1)])
def test_concat_fast_and_generic_paths_copy_bits(widths, axis):
    cp = H.cupy()
    r = np.random.default_rng(4)
    shapes = [(7, w) if axis == 1 else (w, 48) for w in widths]
    xs = [_bits(r, s) for s in shapes]
    h = H.native_handler("concat")
    out = h.forward(*(cp.asarray(x) for x in xs), axis=axis)
    want = np.concatenate(xs, axis=axis)
    _assert_same_bits(out, want, f"concat {widths}")
    grads = h.vjp(tuple(cp.asarray(x) for x in xs), out, cp.asarray(want), axis=axis)
    for gx, x in zip(grads, xs):
        _assert_same_bits(gx, x, "concat VJP slices")


@pytest.mark.capsules("native_cuda.concat")
@pytest.mark.parametrize("lead, axis", [((), 0), ((1,), 1), ((1, 1), 2)])
def test_concat_vjp_along_the_outermost_axis_is_views_of_g(lead, axis):
    """Where every axis before `axis` is 1, each input's gradient is a contiguous run of g: the
    VJP hands back views of g (no kernel), with g's bits."""
    cp = H.cupy()
    r = np.random.default_rng(5)
    widths = (3, 5, 1)
    xs = [cp.asarray(_bits(r, lead + (w, 48))) for w in widths]
    h = H.native_handler("concat")
    out = h.forward(*xs, axis=axis)
    g = cp.asarray(_bits(r, out.shape))
    grads = h.vjp(tuple(xs), out, g, axis=axis)
    at = 0
    for gx, w in zip(grads, widths):
        assert gx.shape == lead + (w, 48) and gx.flags.c_contiguous
        assert gx.data.ptr == g.data.ptr + at * 48 * 4, "a view of g at the run's offset"
        _assert_same_bits(gx, g.get().reshape(-1, 48)[at:at + w].reshape(gx.shape),
                          f"concat VJP run {at}")
        at += w


@pytest.mark.capsules("native_cuda.broadcast")
@pytest.mark.parametrize("src, dst", [((1, 15), (9, 15)), ((1, 16), (9, 16)), ((17,), (5, 17)),
                                      ((1024,), (33, 1024)), ((9, 1), (9, 15)), ((9, 1), (9, 16)),
                                      ((9, 1), (9, 1030)), ((3, 1, 40), (3, 5, 40)),
                                      ((4, 5, 1), (4, 5, 64))])
def test_broadcast_rows_and_columns_copy_bits(src, dst):
    cp = H.cupy()
    x = _bits(np.random.default_rng(6), src)
    out = H.native_handler("broadcast").forward(cp.asarray(x), shape=dst)
    _assert_same_bits(out, np.broadcast_to(x, dst), f"broadcast {src}->{dst}")


@pytest.mark.capsules("native_cuda.permute")
@pytest.mark.parametrize("shape, perm", [((8, 8), (1, 0)), ((31, 33), (1, 0)), ((100, 64), (1, 0)),
                                         ((3, 40, 70), (0, 2, 1)), ((7, 5, 9), (0, 2, 1)),
                                         ((6, 4, 48, 32), (1, 0, 3, 2)), ((5, 6, 7), (2, 1, 0)),
                                         ((20, 3, 36), (1, 0, 2))])
def test_permute_transpose_rows_and_generic_copy_bits(shape, perm):
    cp = H.cupy()
    x = _bits(np.random.default_rng(8), shape)
    h = H.native_handler("permute")
    out = h.forward(cp.asarray(x), perm=perm)
    want = np.transpose(x, perm)
    _assert_same_bits(out, want, f"permute {shape} {perm}")
    (gx,) = h.vjp((cp.asarray(x),), out, cp.asarray(want), perm=perm)
    _assert_same_bits(gx, x, f"permute VJP {shape} {perm}")


# --- gather / scatter -----------------------------------------------------------------------

@pytest.mark.capsules("native_cuda.gather")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("shape, axis", [((50, 256), 0), ((50, 768), 0), ((50, 17), 0),
                                         ((50, 15), 0), ((3, 50, 64), 1), ((8, 50), 1)])
def test_embedding_gather_and_its_scatter(shape, axis, deterministic):
    from engine.runtime.deterministic import deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(10)
    idx = r.integers(0, shape[axis], 300)       # many duplicates
    table = _bits(r, shape)
    h = H.native_handler("gather")
    out = h.forward(cp.asarray(table), axis=axis, indices=idx)
    _assert_same_bits(out, np.take(table, idx, axis=axis), f"gather {shape}")
    g = r.standard_normal(out.shape).astype(np.float32)
    x = r.standard_normal(shape).astype(np.float32)
    with deterministic_reductions(deterministic):
        (gx,) = h.vjp((cp.asarray(x),), out, cp.asarray(g), axis=axis, indices=idx)
    want = np.zeros(shape, np.float32)
    moved = np.moveaxis(want, axis, 0)
    np.add.at(moved, idx, np.moveaxis(g, axis, 0))
    if deterministic:
        _assert_same_bits(gx, want, "gather VJP: left fold in index order")
    else:
        abs_want = np.zeros(shape, np.float64)
        np.add.at(np.moveaxis(abs_want, axis, 0), idx, np.abs(np.moveaxis(g, axis, 0)))
        H.assert_sum_bound(gx, want, abs_want, len(idx), "gather VJP (atomic adds)")
