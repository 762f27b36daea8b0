"""benchmarks/bench_kernels.py, the parts that need no GPU: the ulp measure against a reference,
the subsample rules (rows, columns, elements, a matmul block) fed to the harness's references,
and the table."""
from __future__ import annotations

import types

import numpy as np
import pytest

from benchmarks import bench_kernels as bk
from conformance import references
from engine.types import BackendOp as Op

HOST = types.SimpleNamespace(asnumpy=np.asarray, asarray=np.asarray)    # stands in for cupy: arrays are NumPy here


def _ref(values):
    return types.SimpleNamespace(value=np.asarray(values, dtype=np.float32))


def test_ulps_measure():
    one = np.float32(1)
    up = np.nextafter(one, np.float32(2))
    assert bk._ulps(np.array([1, 2], np.float32), _ref([1, 2])) == 0.0
    assert bk._ulps(np.array([up, 2], np.float32), _ref([1, 2])) == 1.0
    assert bk._ulps(np.array([np.nan], np.float32), _ref([np.nan])) == 0.0
    assert bk._ulps(np.array([np.nan], np.float32), _ref([0.0])) == float("inf")
    assert bk._ulps(np.array([0.0], np.float32), _ref([np.nan])) == float("inf")
    assert bk._ulps(np.array([], np.float32), _ref([])) == 0.0


def test_pick_spreads_and_keeps_ends():
    assert list(bk._pick(10, 3)) == [0, 4, 9]
    assert list(bk._pick(2, 5)) == [0, 1]


def _softmax_rows(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def test_row_subsample_errors_zero_when_exact_and_count_an_ulp():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 16)).astype(np.float32)
    case = bk.Case("40x16", (x,), {"axis": -1}, "rows")
    exact = _softmax_rows(x)
    assert bk.errors(HOST, Op.softmax, case, (x,), exact, None, None)[0] == 0.0
    off = exact.copy()
    off[39, 3] = np.nextafter(off[39, 3], np.float32(1))   # the last row is always in the subsample
    assert bk.errors(HOST, Op.softmax, case, (x,), off, None, None)[0] == 1.0


def test_column_subsample_of_a_sum_over_axis_0():
    x = np.random.default_rng(1).standard_normal((9, 20)).astype(np.float32)
    case = bk.Case("9x20 axis 0", (x,), {"axes": (0,)}, "cols")
    good = references.get("reduce_sum").forward([x], axes=(0,)).value
    assert bk.errors(HOST, Op.reduce_sum, case, (x,), good, None, None) == (0.0, None)
    bad = good.copy()
    bad[19] = np.nextafter(bad[19], np.float32(np.inf))
    bad[19] = np.nextafter(bad[19], np.float32(np.inf))
    assert bk.errors(HOST, Op.reduce_sum, case, (x,), bad, None, None)[0] == 2.0


def test_flat_subsample_with_gradient():
    x = np.random.default_rng(2).standard_normal(5000).astype(np.float32)
    g = np.ones_like(x)
    case = bk.Case("5000", (x,), {}, "flat")
    ref = references.get("exp")
    out, (dx,) = ref.forward([x]).value, tuple(r.value for r in ref.vjp([x], g))
    assert bk.errors(HOST, Op.exp, case, (x,), out, (dx,), g) == (0.0, 0.0)


def test_matmul_block_subsample():
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((12, 7)).astype(np.float32) for _ in range(2))
    b = b.T.copy()
    case = bk.Case("12x7x12", (a, b), {}, "mm", 2.0 * 12 * 7 * 12)
    good = references.get("matmul").forward([a, b]).value
    assert bk.errors(HOST, Op.matmul, case, (a, b), good, None, None) == (0.0, None)


def test_cases_without_a_subsample_rule_measure_no_error():
    x = np.zeros((2, 2), np.float32)
    assert bk.errors(HOST, Op.broadcast, bk.Case("c", (x,), {"shape": (2, 2)}), (x,), x,
                     None, None) == (None, None)


def test_table_rows_and_skips():
    row = {"capsule": "native_cuda.exp", "op": "exp", "case": "2^26", "fwd_ms": 0.125,
           "fwd_torch_ms": 0.25, "vjp_ms": None, "vjp_torch_ms": 0.5, "fwd_rate": "4295 GB/s",
           "fwd_torch_rate": "2147 GB/s", "vjp_rate": "-", "vjp_torch_rate": "1 GB/s",
           "fwd_ceiling_pct": 101.0, "fwd_ratio": 0.5, "vjp_ratio": None, "fwd_ulps": 1.0,
           "fwd_torch_ulps": 2.0, "vjp_ulps": None, "vjp_torch_ulps": None}
    text = bk.table([row, {"capsule": "native_cuda.conv", "skipped": "no case"}], 4000.0)
    assert "copy ceiling (device-to-device, read + written): 4000 GB/s" in text
    assert "| native_cuda.exp | 2^26 | 0.125 ms 4295 GB/s | 0.250 ms 2147 GB/s | 101 | 0.50 |" \
        in text
    assert "| 1 / 2 | - / - |" in text
    assert "| native_cuda.conv | - | no case |" in text


def _small_case(op):
    rng = np.random.default_rng(list(Op).index(op))
    n = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    if op in bk.UNARY:
        x = n(300)
        return bk.Case("300", (np.abs(x) + np.float32(0.1) if op in bk.POSITIVE else x,),
                       bk.UNARY_PARAMS.get(op, {}), "flat")
    if op in bk.BINARY:
        return bk.Case("300", (n(300), n(300)), {}, "flat")
    if op is Op.layer_norm:
        return bk.Case("5x16", (n(5, 16), n(16), n(16)), {"eps": 1e-5}, "rows")
    if op is Op.hard_masked_softmax:
        return bk.Case("5x16", (n(5, 16),), {"mask": rng.random((5, 16)) < 0.8, "axis": -1},
                       "rows")
    return bk.Case("5x16", (n(5, 16),), {"axis": -1}, "rows")


@pytest.mark.parametrize("op", bk.UNARY + bk.BINARY + bk.ROWS, ids=lambda op: op.label)
def test_subsampled_reference_takes_the_benchmarks_parameters(op):
    """Each op the benchmark measures an error for: the reference accepts the case's parameters,
    and the correctly rounded result itself (forward and first gradient) measures 0 ulps."""
    case = _small_case(op)
    ref = references.get(op.label)
    out = ref.forward(list(case.arrays), **case.params).value
    g = np.random.default_rng(9).standard_normal(out.shape).astype(np.float32)
    d0 = ref.vjp(list(case.arrays), g, **case.params)[0].value
    assert bk.errors(HOST, op, case, case.arrays, out, (d0,), g) == (0.0, 0.0)


def test_a_returned_view_or_g_has_no_rate():
    buf = types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096), size=8)
    other = types.SimpleNamespace(data=types.SimpleNamespace(ptr=8192), size=8)
    assert bk.aliases((buf, buf), (buf,)) and not bk.aliases((other,), (buf,))
    case = bk.Case("c", ())
    assert bk.rate(case, 0.001, 10 ** 9, True, alias=True) == "no kernel (a view or g returned)"
    assert bk.rate(case, 1.0, 10 ** 9, False) == "1000 GB/s"


def test_bias_gelu_rows_subsample_measures_forward_and_dx():
    """bias_gelu's case (the fused entry, torch's counterpart gelu(x + b)): a row subsample of x
    with the whole b, forward and dx measured against the harness's reference."""
    from engine.types import RuntimeEntry
    rng = np.random.default_rng(2)
    x = rng.standard_normal((30, 12)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    g = rng.standard_normal((30, 12)).astype(np.float32)
    case = bk.Case("30x12", (x, b), {}, "rows")
    ref = references.get("bias_gelu")
    y, (dx, db) = ref.forward((x, b)).value, (r.value for r in ref.vjp((x, b), g))
    assert bk.errors(HOST, RuntimeEntry.bias_gelu, case, (x, b), y, (dx, db), g) == (0.0, 0.0)
    off = dx.copy()
    off[29, 5] = np.nextafter(off[29, 5], np.float32(np.inf))
    assert bk.errors(HOST, RuntimeEntry.bias_gelu, case, (x, b), y, (off, db), g)[1] == 1.0


def test_add_layer_norm_stacked_subsample_measures_both_halves_and_dx():
    """add_layer_norm's case ([s, y] stacked; torch's counterpart x + r, layer_norm, stacked for
    the comparison): rows of x and r with the whole gamma and beta, both halves of the output and
    dx measured against the harness's reference."""
    from engine.types import RuntimeEntry
    rng = np.random.default_rng(3)
    x, r = (rng.standard_normal((30, 12)).astype(np.float32) for _ in range(2))
    gamma, beta = (rng.standard_normal(12).astype(np.float32) for _ in range(2))
    g = rng.standard_normal((2, 30, 12)).astype(np.float32)
    arrays = (x, r, gamma, beta)
    case = bk.Case("30x12", arrays, {"eps": 1e-5}, "stacked")
    ref = references.get("add_layer_norm")
    out = ref.forward(arrays).value
    grads = tuple(v.value for v in ref.vjp(arrays, g))
    assert bk.errors(HOST, RuntimeEntry.add_layer_norm, case, arrays, out, grads, g) == (0.0, 0.0)
    off = out.copy()
    off[0, 29, 4] = np.nextafter(off[0, 29, 4], np.float32(np.inf))    # the sum's half
    assert bk.errors(HOST, RuntimeEntry.add_layer_norm, case, arrays, off, grads, g)[0] == 1.0
    dx = grads[0].copy()
    dx[29, 7] = np.nextafter(dx[29, 7], np.float32(-np.inf))
    assert bk.errors(HOST, RuntimeEntry.add_layer_norm, case, arrays, out, (dx,) + grads[1:],
                     g)[1] == 1.0
