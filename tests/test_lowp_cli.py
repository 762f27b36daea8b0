"""`torchlean-conformance lowp`: a plugin's 16-bit kernels swept in their kernel process, judged
here; honest kernels pass, buggy ones fail for their reason, and hostile ones (ending the process,
reading the judge's references, returning another dtype) never pass."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ml_dtypes")
REPO = Path(__file__).resolve().parent.parent


def _lowp(spec: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--plugin", spec,
                           "--evidence-dir", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def _records(out: Path) -> dict:
    return {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in sorted(out.glob("lowp-*.json"))}


def test_the_fixture_plugin_honest_pass_buggy_fail_for_their_reason(tmp_path):
    proc = _lowp("fixtures.plugins.low_precision:ALL", tmp_path)
    assert proc.returncode == 1, proc.stderr
    recs = _records(tmp_path)
    assert {k: r["status"] for k, r in recs.items()} == {
        "honest_bf16_gelu": "passed", "honest_f16_exp": "passed", "honest_bf16_sqrt": "passed",
        "honest_f16_sqrt": "passed", "twice_rounded_bf16_gelu": "failed",
        "flushing_f16_exp": "failed", "truncating_bf16_sqrt": "failed"}
    assert recs["twice_rounded_bf16_gelu"]["failure_reasons"]["exceeds-bound"] > 0
    assert recs["flushing_f16_exp"]["failure_reasons"] == {"flushed-subnormal": 846}
    assert recs["truncating_bf16_sqrt"]["failure_reasons"] == {"not-correctly-rounded": 16446}
    assert all(r["patterns"] == 65536 for r in recs.values())
    assert "7 16-bit kernel(s) swept over all 2^16 inputs" in proc.stdout


def test_only_honest_kernels_exit_0(tmp_path):
    proc = _lowp("fixtures.plugins.low_precision:HONEST", tmp_path)
    assert proc.returncode == 0 and proc.stdout.count(" passed") == 4, proc.stdout + proc.stderr


@pytest.mark.parametrize("attr, statuses, says", [
    ("EXITING", {"exiting_f16_exp": "crashed", "never_reached_f16_exp": "crashed"},
     "exited with status 0 during exiting_f16_exp's sweep"),
    ("PEEKING", {"peeking_f16_exp": "failed"},
     "may not import the judge's module `conformance.lowp.refs`"),
    ("WRONG_TYPE", {"float32_f16_exp": "failed"},
     "returned a float32 array of shape [65536]; expected a float16 array"),
])
def test_hostile_kernels_never_pass(tmp_path, attr, statuses, says):
    proc = _lowp(f"fixtures.plugins.low_precision_hostile:{attr}", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = _records(tmp_path)
    assert {k: r["status"] for k, r in recs.items()} == statuses
    assert says in proc.stdout


def test_a_plugin_that_declares_no_16_bit_kernels_is_a_usage_error(tmp_path):
    proc = _lowp("fixtures.plugins.numpy_kernels:ENTRIES", tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is not a non-empty list of LowpKernel" in proc.stderr
    assert not list(tmp_path.glob("lowp-*.json"))
