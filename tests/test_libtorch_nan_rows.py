"""libtorch.sdpa_forward's NaN rows (engine/providers/libtorch.py `nan_rows`), checked on the CPU
with NumPy arrays: PyTorch 2.11's SDPA returns zeros for a query row whose participating scores
are all -inf, where docs/OPS.md (and our reference) make the row NaN; found on an H100 by the
campaign's edge rows of special values (evidence/h100-runs/2026-12-06). The rows the function
marks must be exactly the rows the mpmath reference makes NaN."""
import numpy as np
import pytest

from conformance.references.scaled_dot_product_attention import forward as reference_forward
from engine.providers.libtorch import nan_rows

F32 = np.float32


def _reference_nan_rows(q, k, v, mask, scale):
    out = reference_forward((q, k, v), mask=mask, scale=scale).value
    return np.isnan(out).all(axis=-1)


def test_the_h100_counterexample():
    # q rows [nan, inf], [-inf, 0.287], [nan, inf], [-inf, 0.0074] against one key: rows 1 and 3
    # score -inf alone (torch: zeros), rows 0 and 2 NaN (torch: NaN too)
    q = np.array([[np.nan, np.inf], [-np.inf, 0.287], [np.nan, np.inf], [-np.inf, 0.00737]], F32)
    k = np.array([[0.4, 0.109]], F32)
    v = np.array([[-0.354, 0.584]], F32)
    scale = float(F32(0.70710677))
    assert nan_rows(np, q, k, None, scale).tolist() == [True] * 4
    assert _reference_nan_rows(q, k, v, None, scale).tolist() == [True] * 4


@pytest.mark.parametrize("seed", range(6))
def test_marked_rows_are_the_references_nan_rows(seed):
    rng = np.random.default_rng(seed)
    b, lq, lk, d = 2, 5, 4, 3
    q = rng.standard_normal((b, lq, d)).astype(F32)
    k = rng.standard_normal((b, lk, d)).astype(F32)
    v = rng.standard_normal((b, lk, d)).astype(F32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0], F32)
    for x in (q, k):
        hit = rng.random(x.shape) < 0.25
        x[hit] = rng.choice(specials, size=int(hit.sum()))
    mask = rng.random((b, lq, lk)) < 0.7
    mask[0, 0] = False                       # a fully blocked row: zeros, not NaN
    for m in (None, mask):
        got = nan_rows(np, q, k, m, 0.5)
        want = _reference_nan_rows(q, k, v, m, 0.5)
        assert got.tolist() == want.tolist(), (seed, m is None)
    assert not nan_rows(np, q, k, mask, 0.5)[0, 0]
