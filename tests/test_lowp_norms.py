"""log_softmax, layer_norm, linear and attention in bfloat16 and float16 (conformance/lowp/
accumulate_norms.py, accumulate_attention.py, accumulate.py): certified references against
mpmath, float32 evaluations in several orders within the derived bounds, bounds that still tell
one rounding from two, and the fixtures (fixtures/plugins/low_precision_norms.py): honest ones
pass, buggy ones fail for their reason."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest

from conformance.lowp import accumulate, accumulate_attention, accumulate_norms
from conformance.lowp.audit import audit
from conformance.lowp.cases import classes, draw
from conformance.lowp.formats import BFLOAT16, FLOAT16
from conformance.lowp.kernel import ACCUMULATING, LowpKernel
from conformance.lowp.refs import _round_mp
from fixtures.plugins.low_precision_norms import BUGGY, HONEST

pytest.importorskip("ml_dtypes")
REPO = Path(__file__).resolve().parent.parent
F32 = np.float32
NEW = ("log_softmax", "layer_norm", "linear", "attention")
BOTH = (BFLOAT16, FLOAT16)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # NaN and inf cases, on purpose
        yield


def test_the_new_ops_are_declared_with_their_arity():
    assert set(NEW) <= set(ACCUMULATING)
    assert {op: accumulate.ARITY[op] for op in NEW} == {
        "log_softmax": 1, "layer_norm": 1, "linear": 3, "attention": 3}


def _mp_element(op, xs, idx):
    """The exact element by a direct mpmath formula (independent of the modules' exact_of)."""
    with mpmath.workprec(400):
        if op == "linear":
            x, w, b = xs
            i, j = idx
            return mpmath.fsum([mpmath.mpf(float(x[i, t])) * mpmath.mpf(float(w[j, t]))
                                for t in range(x.shape[1])] + [mpmath.mpf(float(b[j]))])
        if op == "attention":
            q, k, v = xs
            i, c = idx
            s = [mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in
                             zip(q[i], kj)) / mpmath.sqrt(q.shape[1]) for kj in k]
            e = [mpmath.exp(t - max(s)) for t in s]
            return mpmath.fsum(ej * mpmath.mpf(float(vj)) for ej, vj in zip(e, v[:, c])) / \
                mpmath.fsum(e)
        row = [mpmath.mpf(float(t)) for t in xs[0][idx[0]]]
        if op == "log_softmax":
            return row[idx[1]] - mpmath.log(mpmath.fsum(mpmath.exp(t) for t in row))
        mean = mpmath.fsum(row) / len(row)
        var = mpmath.fsum((t - mean) ** 2 for t in row) / len(row)
        return (row[idx[1]] - mean) / mpmath.sqrt(var + mpmath.mpf(1) / 100000)


@pytest.mark.parametrize("op", NEW)
@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_references_are_the_exact_value_rounded(fmt, op):
    """40 elements of each finite class, against mpmath at 400 bits rounded to the format."""
    rng = np.random.default_rng(5)
    checked = 0
    for cls in classes(op):
        if cls in ("special", "empty", "long"):
            continue
        xs = draw(op, fmt, cls, rng)
        ref, _ = accumulate.reference(op, fmt, xs)
        picks = rng.choice(ref.size, min(40, ref.size), replace=False)
        for flat in picks:
            idx = np.unravel_index(flat, ref.shape)
            with mpmath.workprec(400):
                want = _round_mp(fmt, _mp_element(op, xs, idx))
            assert ref[idx] == want, (op, cls, idx)
            checked += 1
    assert checked >= 90


def test_log_softmax_decides_a_midpoint_the_float64_sum_cannot_see():
    """bfloat16 [256, -1]: x_1 - m = -257, a midpoint between -256 and -258, and log-sum-exp
    adds exp(-257) ~ 2^-371: the exact value is past the midpoint, so -258 (ties to even: -256)."""
    x = np.array([[256.0, -1.0]])
    ref, y = accumulate.reference("log_softmax", BFLOAT16, [x])
    assert y[0, 1] == -257.0 and ref[0, 1] == -258.0 and ref[0, 0] == -0.0


def test_layer_norm_of_a_constant_row_is_zero_and_eps_scales_a_small_one():
    ref, _ = accumulate.reference("layer_norm", FLOAT16, [np.full((1, 8), 3.0)])
    assert np.all(ref == 0)
    x = FLOAT16.round(np.array([[1e-3, -1e-3]]))                  # var 1e-6, eps 1e-5
    ref, y = accumulate.reference("layer_norm", FLOAT16, [x])
    assert y[0, 0] == pytest.approx(x[0, 0] / np.sqrt(x[0, 0] ** 2 + 1e-5), rel=1e-12)
    assert 0.29 < ref[0, 0] < 0.31


def _log_softmax_any_order(x):
    x32 = x.astype(F32)
    m = x32.max(-1, keepdims=True)
    return x32 - (m + np.log(np.exp(x32 - m).sum(-1, keepdims=True, dtype=F32)))


def _welford_layer_norm(x):
    """Welford's update in float32, then x rstd - mean rstd (PyTorch's CPU form)."""
    x32 = x.astype(F32)
    mean, m2 = np.zeros(x.shape[:-1] + (1,), F32), np.zeros(x.shape[:-1] + (1,), F32)
    for k in range(x.shape[-1]):
        xk = x32[..., k:k + 1]
        delta = xk - mean
        mean = mean + delta / F32(k + 1)
        m2 = m2 + delta * (xk - mean)
    rstd = F32(1) / np.sqrt(m2 / F32(x.shape[-1]) + F32(1e-5))
    return x32 * rstd - mean * rstd


def _late_normalized_attention(q, k, v):
    """FlashAttention's order, without its 16-bit weights: sum e v, then divide by sum e."""
    s = (q.astype(F32) @ k.astype(F32).T) / F32(np.sqrt(q.shape[1]))
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e @ v.astype(F32)) / e.sum(-1, keepdims=True, dtype=F32)


def _bias_first_linear(x, w, b):
    acc = np.broadcast_to(b.astype(F32), (x.shape[0], w.shape[0])).copy()
    for t in range(x.shape[1]):
        acc = acc + x[:, t:t + 1].astype(F32) * w[:, t].astype(F32)
    return acc


@pytest.mark.parametrize("op, fn", [("log_softmax", _log_softmax_any_order),
                                    ("layer_norm", _welford_layer_norm),
                                    ("attention", _late_normalized_attention),
                                    ("linear", _bias_first_linear)], ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_other_float32_orders_stay_within_the_derived_bound(fmt, op, fn):
    """The float32 value before its rounding, of an evaluation order the honest fixtures do not
    use, within float32_error of the exact value on every finite element of 8 seeds."""
    worst = 0.0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        for cls in classes(op):
            xs = draw(op, fmt, cls, rng)
            y32 = fn(*xs).astype(np.float64)
            _, exact = accumulate.reference(op, fmt, xs)
            bound = accumulate.float32_error(op, xs, exact)
            ok = np.isfinite(exact) & np.isfinite(y32) & (bound > 0)
            if ok.any():
                worst = max(worst, float(np.max(np.abs(y32 - exact)[ok] / bound[ok])))
    assert 0 < worst <= 1


@pytest.mark.parametrize("op", NEW)
def test_the_bounds_are_below_what_a_second_rounding_adds(op):
    """The median float32 error bound of the normal class, in float16 ulps of the exact value,
    below the half ulp a second rounding to the format can add: a kernel that rounds twice
    inside is not covered by the model on most elements."""
    rng = np.random.default_rng(0)
    xs = draw(op, FLOAT16, "normal", rng)
    _, exact = accumulate.reference(op, FLOAT16, xs)
    median = np.median(accumulate.float32_error(op, xs, exact) / FLOAT16.ulp(exact))
    assert 0 < median < 0.5


def _p16_attention(q, k, v):
    """The weights rounded to the format before P V, as FlashAttention's kernels do."""
    s = (q.astype(F32) @ k.astype(F32).T) * F32(1 / np.sqrt(q.shape[1]))
    e = np.exp(s - s.max(-1, keepdims=True))
    p16 = e.astype(q.dtype).astype(F32)
    return ((p16 @ v.astype(F32)) / e.sum(-1, keepdims=True, dtype=F32)).astype(q.dtype)


def _lse16_log_softmax(x):
    """The sum of exponentials and its log each rounded to the format (PyTorch's CPU kernel)."""
    x32 = x.astype(F32)
    m = x32.max(-1, keepdims=True)
    s = np.exp(x32 - m).sum(-1, keepdims=True, dtype=F32).astype(x.dtype).astype(F32)
    return (x32 - m - np.log(s).astype(x.dtype).astype(F32)).astype(x.dtype)


def _gemm_then_bias(x, w, b):
    y = (x.astype(F32) @ w.astype(F32).T).astype(x.dtype)
    return (y.astype(F32) + b.astype(F32)).astype(x.dtype)


@pytest.mark.parametrize("op, fn, cls", [("attention", _p16_attention, "normal"),
                                         ("log_softmax", _lse16_log_softmax, "normal"),
                                         ("linear", _gemm_then_bias, "cancellation")],
                         ids=("p16_attention", "lse16_log_softmax", "gemm_then_bias"))
@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_a_second_rounding_inside_is_caught(fmt, op, fn, cls):
    for seed in range(3):
        rec = audit(LowpKernel("twice", op, fmt, fn), seed)
        assert set(rec["failure_reasons"]) == {"exceeds-bound"}, rec["failure_reasons"]
        assert rec["cases"]["by_class"][cls]["failed"] == 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fixtures_honest_pass_buggy_fail_for_their_reason(seed):
    for kernel in HONEST:
        rec = audit(kernel, seed)
        assert rec["status"] == "passed" and rec["failure_reasons"] == {}, \
            (kernel.name, rec["counterexamples"])
    by_class = {}
    for kernel, reason in BUGGY:
        rec = audit(kernel, seed)
        assert rec["failure_reasons"].get(reason, 0) > 0, (kernel.name, rec)
        by_class[kernel.name] = {c: v["failed"] for c, v in rec["cases"]["by_class"].items()}
    # each fails where its bug lives, in every case of that class
    assert by_class["log_of_f16_softmax"]["large"] == 3            # softmax underflow: -inf
    assert by_class["bf16_moments_layer_norm"]["offset"] == 3      # E[x^2] - E[x]^2 cancels
    assert by_class["f16_accumulated_linear"]["long"] == 3         # 2048 float16 additions
    assert by_class["unshifted_bf16_attention"] == {               # exp(score > 88.7) = inf
        "normal": 0, "long": 0, "wide": 0, "large": 3, "special": 0}


def test_the_error_models_name_their_modules():
    assert accumulate._group("log_softmax") is accumulate_norms
    assert accumulate._group("layer_norm") is accumulate_norms
    assert accumulate._group("attention") is accumulate_attention
    assert accumulate._group("linear") is None and accumulate._group("sum") is None


def test_the_fixture_plugin_through_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--plugin",
                           "fixtures.plugins.low_precision_norms:ALL", "--evidence-dir",
                           str(tmp_path), "--seed", "3"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    import json
    recs = {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in tmp_path.glob("lowp-*.json")}
    assert {k: r["status"] for k, r in recs.items()} == {
        **{k.name: "passed" for k in HONEST}, **{k.name: "failed" for k, _ in BUGGY}}
    for kernel, reason in BUGGY:
        assert recs[kernel.name]["failure_reasons"].get(reason, 0) > 0
    assert "12 16-bit kernel(s)" in proc.stdout and "12 audited on cases of run seed 3" in proc.stdout


def test_relu_reference_follows_ops_md_at_the_infinities():
    """docs/OPS.md: relu(a) = a if a > 0 else +0, relu(NaN) = NaN."""
    from conformance.lowp.refs import FUNCTIONS
    y = FUNCTIONS["relu"][0](np.array([np.inf, -np.inf, -0.0, np.nan, 2.0]))
    assert y[0] == np.inf and y[1] == 0 and not np.signbit(y[1]) and not np.signbit(y[2])
    assert np.isnan(y[3]) and y[4] == 2.0


@pytest.mark.parametrize("op", ["sum", "linear"])
def test_a_sum_just_past_a_midpoint_rounds_away_from_it(op):
    """bfloat16 1 + 2^-8 + 2^-60: float64's fsum drops 2^-60 and lands on the midpoint between 1
    and 1 + 2^-7; mpmath's exact sum, rounded at its own 600 bits (not at 53), is past it."""
    terms = np.array([1.0, 2.0 ** -8, 2.0 ** -60])
    xs = [terms[None, :]] if op == "sum" else \
        [np.array([[1.0, 1.0]]), np.array([[1.0, 2.0 ** -8]]), np.array([2.0 ** -60])]
    ref, y = accumulate.reference(op, BFLOAT16, xs)
    assert y.reshape(-1)[0] == 1 + 2.0 ** -8 and ref.reshape(-1)[0] == 1 + 2.0 ** -7
