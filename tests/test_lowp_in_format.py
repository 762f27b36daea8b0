"""16-bit kernels that declare accumulation in their own format (accumulate.in_format_error):
the bfloat16-accumulated sum and float16-accumulated matmul that fail while claiming float32 pass
when they declare what they do, a kernel that skips a term fails all the same, the bound stays
valid past k u >= 1 (where gamma(k) has none), and a declaration the harness has no model for
(an unknown format, or a unary op declaring one) is refused at load. The other ops and formats:
tests/test_lowp_accumulation_formats.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.lowp import accumulate
from conformance.lowp.formats import BFLOAT16

pytest.importorskip("ml_dtypes")
from fixtures.plugins import low_precision as lp   # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _lowp(out: Path, spec: str, seed: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--plugin", spec,
                           "--seed", str(seed), "--evidence-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("seed", range(4))
def test_declared_in_format_pass_and_a_skipped_term_fails(tmp_path, seed):
    proc = _lowp(tmp_path, "fixtures.plugins.low_precision_in_format:SUM_AND_MATMUL", seed)
    recs = {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in tmp_path.glob("lowp-*.json")}
    assert recs["declared_bf16_sum"]["status"] == "passed", recs["declared_bf16_sum"]
    assert recs["declared_f16_matmul"]["status"] == "passed", recs["declared_f16_matmul"]
    assert recs["declared_bf16_sum"]["accumulation"] == "bfloat16"
    assert recs["skipping_bf16_sum"]["status"] == "failed" and proc.returncode == 1


def test_the_same_kernels_claiming_float32_still_fail(tmp_path):
    _lowp(tmp_path, "fixtures.plugins.low_precision:BUGGY_ACCUMULATING", 0)
    recs = {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in tmp_path.glob("lowp-*.json")}
    assert recs["bf16_accumulated_sum"]["status"] == "failed"
    assert recs["f16_accumulated_matmul"]["status"] == "failed"


def test_the_bound_holds_where_gamma_has_none():
    x = np.ones((1, 4096))           # bfloat16 sums of ones stall at 256: an error of 3840
    got = BFLOAT16.decode(lp.bf16_accumulated_sum(BFLOAT16.to_numpy(BFLOAT16.encode(x)))
                          .view(np.uint16))
    assert got[0] == 256.0
    err, partial = accumulate.in_format_error("sum", BFLOAT16, [x])
    assert np.isfinite(err[0]) and err[0] >= 4096 - 256 and partial[0] >= 4096
    reason, _, _ = accumulate.judge("sum", BFLOAT16, [x], got, "bfloat16")
    assert reason[0] == ""
    assert accumulate.judge("sum", BFLOAT16, [x], got)[0][0] == "exceeds-bound"   # float32


@pytest.mark.parametrize("attr, says", [
    ("UNKNOWN_FORMAT", ["f16_softmax_in_tf32", "'tensorfloat32'", "expected one of bfloat16, "
                        "float16, float32, float64", "declare the format every intermediate"]),
    ("UNARY_DECLARING", ["f16_exp_declaring_bf16", "declares accumulation 'bfloat16'",
                         "leave a unary or binary kernel's accumulation at float32"])])
def test_a_declaration_without_a_model_is_refused_at_load(tmp_path, attr, says):
    proc = _lowp(tmp_path, f"fixtures.plugins.low_precision_in_format:{attr}", 0)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for part in says:
        assert part in proc.stderr, (part, proc.stderr)
    assert not list(tmp_path.glob("lowp-*.json"))
