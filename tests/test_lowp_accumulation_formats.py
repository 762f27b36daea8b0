"""16-bit accumulating kernels that declare the format their arithmetic is rounded to
(conformance/lowp/accumulate_rounded.py, accumulate_rounded_norms.py): softmax, log_softmax,
layer_norm and attention in their own format, float16 storage in bfloat16 arithmetic, float64.
Honest kernels pass declaring what they do (in several orders and forms) and fail claiming
float32; buggy ones fail under the model they declare, each for its reason; float16 arithmetic
overflows where float32 would not, and the model accepts that while float32's does not; where a
bound is vacuous the range is still checked; declarations without a model are refused."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.isolation.remote import PluginLoadError
from conformance.lowp import accumulate, accumulate_rounded
from conformance.lowp.audit import audit
from conformance.lowp.formats import BFLOAT16, FLOAT16, UnknownAccumulationError
from conformance.lowp.remote import AccumulationDeclarationError, _described

pytest.importorskip("ml_dtypes")
from fixtures.plugins import low_precision_in_format as in_format   # noqa: E402
from fixtures.plugins.low_precision_in_format_forms import FORMS   # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _lowp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def _run(kernel, x: np.ndarray) -> np.ndarray:
    """The kernel on the values x of its format: its result's values."""
    fmt = kernel.fmt
    return fmt.decode(kernel.call_bits(fmt.encode(x)))


@pytest.mark.parametrize("seed", range(3))
def test_declared_kernels_pass_and_buggy_ones_fail_for_their_reason(seed):
    for k in in_format.HONEST + FORMS:
        rec = audit(k, seed)
        assert rec["status"] == "passed", (k.name, rec["failure_reasons"])
    for k, why in in_format.BUGGY:
        rec = audit(k, seed)
        assert rec["status"] == "failed" and rec["failure_reasons"].get(why, 0) > 0, \
            (k.name, rec["failure_reasons"])


@pytest.mark.parametrize("seed", (0, 5))
def test_the_same_kernels_claiming_float32_fail(seed):
    for k in in_format.CLAIMING_FLOAT32:
        rec = audit(k, seed)
        assert rec["accumulation"] == "float32"
        assert rec["status"] == "failed" and rec["failure_reasons"].get("exceeds-bound", 0) > 0, \
            (k.name, rec["failure_reasons"])


def _bf16_sum_in_f16(x):
    return in_format._sum(x.astype(in_format.F16), in_format.F16).astype(x.dtype)


def test_float16_arithmetic_overflows_where_float32_would_not():
    # bfloat16 values whose sum, 80383, is past float16's range and inside bfloat16's
    x = np.array([[40192.0, 40192.0, -1.0]])
    got = BFLOAT16.decode(BFLOAT16.encode(_bf16_sum_in_f16(BFLOAT16.to_numpy(BFLOAT16.encode(x)))
                                          .astype(np.float64)))
    assert np.isposinf(got[0]) and accumulate_rounded.overflow_threshold(FLOAT16) == 65520.0
    assert accumulate.judge("sum", BFLOAT16, [x], got, "float16")[0][0] == ""
    assert accumulate.judge("sum", BFLOAT16, [x], got, "float32")[0][0] == "inf-mismatch"
    assert accumulate.judge("sum", BFLOAT16, [x], got, "bfloat16")[0][0] == "inf-mismatch"
    # a kernel that did not overflow is within the bound all the same
    assert accumulate.judge("sum", BFLOAT16, [x], np.array([80384.0]), "float16")[0][0] == ""


def test_an_input_past_the_accumulation_range_leaves_no_finite_result():
    x = np.array([[99840.0, -99328.0]])               # bfloat16 values past float16's range
    exact = 512.0
    assert accumulate.judge("sum", BFLOAT16, [x], np.array([np.nan]), "float16")[0][0] == ""
    assert accumulate.judge("sum", BFLOAT16, [x], np.array([exact]), "float16")[0][0] == \
        "exceeds-bound"
    assert accumulate.judge("sum", BFLOAT16, [x], np.array([exact]), "float32")[0][0] == ""


def test_a_vacuous_softmax_bound_still_checks_sign_and_range():
    rng = np.random.default_rng(0)
    x = BFLOAT16.round(rng.standard_normal((1, 2048)))
    _, exact = accumulate.reference("softmax", BFLOAT16, [x])
    b = accumulate_rounded.bounds("softmax", BFLOAT16, [x], exact)
    u = BFLOAT16.unit_roundoff
    assert np.all(b.hi > 2 * exact)                    # a relative bound past 1: vacuous...
    top = ((1 + u) ** 2 + BFLOAT16.min_subnormal / 2) * (1 + accumulate_rounded.WIDEN)
    assert np.all(b.lo > 0) and np.all(b.hi <= top) and np.max(b.hi) > 1   # ...but for these
    honest = in_format.softmax_in(in_format.BF16)
    got = BFLOAT16.decode(BFLOAT16.encode(honest(BFLOAT16.to_numpy(BFLOAT16.encode(x)))
                                          .astype(np.float64)))
    assert np.all(accumulate.judge("softmax", BFLOAT16, [x], got, "bfloat16")[0] == "")
    for wrong in (np.zeros_like(got), np.full_like(got, 1.015625), -got):
        reason = accumulate.judge("softmax", BFLOAT16, [x], wrong, "bfloat16")[0]
        assert np.all(reason[got != 0] != ""), reason


def test_log_softmax_in_its_format_is_never_positive():
    rng = np.random.default_rng(1)
    x = FLOAT16.round(rng.standard_normal((2, 2048)))
    ref, exact = accumulate.reference("log_softmax", FLOAT16, [x])
    b = accumulate_rounded.bounds("log_softmax", FLOAT16, [x], exact)
    assert np.all(b.hi <= 0) and np.all(b.lo < exact)
    near_zero = np.abs(ref) == np.min(np.abs(ref))
    wrong = np.where(near_zero, 2.0 ** -14, ref)
    reason = accumulate.judge("log_softmax", FLOAT16, [x], wrong, "float16")[0]
    assert np.all(reason[near_zero] == "exceeds-bound") and np.all(reason[~near_zero] == "")


def test_layer_norm_squares_overflow_float16_where_float32_would_not():
    rng = np.random.default_rng(2)
    x = FLOAT16.round(rng.uniform(-1000, 1000, (2, 64)))      # squares past 65504
    honest = [k for k in in_format.HONEST if k.name == "f16_layer_norm_in_f16"][0]
    got = _run(honest, x)
    assert np.all((got == 0) | np.isnan(got))        # rstd of an infinite variance: 0
    assert np.all(accumulate.judge("layer_norm", FLOAT16, [x], got, "float16")[0] == "")
    assert np.all(accumulate.judge("layer_norm", FLOAT16, [x], got, "float32")[0] != "")


def test_an_unknown_accumulation_is_refused_by_name():
    x = np.ones((1, 4))
    with pytest.raises(UnknownAccumulationError, match="'float8' is not a format the harness "
                       "models; expected one of bfloat16, float16, float32, float64"):
        accumulate.judge("sum", BFLOAT16, [x], np.array([4.0]), "float8")
    entry = {"name": "k", "op": "softmax", "format": "float16", "bound_ulps": 0.5,
             "accumulation": "float8", "has_vjp": False, "vjp_bound_ulps": 0.5}
    with pytest.raises(AccumulationDeclarationError, match="kernel `k` .softmax.: accumulation "
                       "'float8'.*declare the format every intermediate") as info:
        _described(entry, "m:ATTR")
    assert isinstance(info.value, PluginLoadError)
    for name in ("bfloat16", "float16", "float32", "float64"):
        assert _described({**entry, "accumulation": name}, "m:ATTR")[4] == name
    with pytest.raises(AccumulationDeclarationError, match="only the accumulating ops"):
        _described({**entry, "op": "exp", "accumulation": "float16"}, "m:ATTR")


def test_records_and_replays_judge_the_declared_format(tmp_path):
    proc = _lowp("--plugin", "fixtures.plugins.low_precision_in_format:SAMPLE", "--seed", "3",
                 "--evidence-dir", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in tmp_path.glob("lowp-*.json")}
    assert {n: (r["status"], r["storage"], r["accumulation"]) for n, r in recs.items()} == {
        "f16_matmul_in_bf16": ("passed", "float16", "bfloat16"),
        "f16_softmax_in_bf16": ("passed", "float16", "bfloat16"),
        "eps_free_bf16_layer_norm_in_bf16": ("failed", "bfloat16", "bfloat16")}
    replay = tmp_path / recs["eps_free_bf16_layer_norm_in_bf16"]["counterexamples"][0]["replay"]
    doc = json.loads(replay.read_text())
    assert doc["accumulation"] == "bfloat16" and doc["reproduced"] is True
    again = _lowp("--replay", str(replay))
    assert again.returncode == 1 and again.stdout.startswith("still fails"), again.stdout
    replay.write_text(json.dumps({**doc, "accumulation": "float8"}))
    refused = _lowp("--replay", str(replay))
    assert refused.returncode == 2 and "malformed fields" in refused.stderr, refused.stderr
