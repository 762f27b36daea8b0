"""Earned trust of 16-bit kernels (conformance/lowp/trust.py, `export-trust --lowp DIR`): an
exhaustive sweep that passed earns `verified`, a passed audit on seeded cases `fuzzed`; a failed,
edited, stale or foreign record earns nothing and says why; the report shows what was earned."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.lowp import trust

pytest.importorskip("ml_dtypes")
REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lowp")
    proc = _cli("lowp", "--plugin", "fixtures.plugins.low_precision:ALL", "--seed", "3",
                "--evidence-dir", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "export-trust --lowp" in proc.stdout
    return out


def _export(out: Path) -> dict:
    proc = _cli("export-trust", "--lowp", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "trust-lowp.json").read_text())


def test_passed_sweeps_are_verified_passed_audits_fuzzed_failures_nothing(swept):
    kernels = _export(swept)["kernels"]
    assert {k for k, v in kernels.items() if v["earned"] == "verified"} == {
        "honest_bf16_gelu", "honest_f16_gelu", "honest_f16_exp", "honest_bf16_sqrt",
        "honest_f16_sqrt"}
    assert {k for k, v in kernels.items() if v["earned"] == "fuzzed"} == {
        "honest_bf16_sum", "honest_f16_softmax", "honest_f16_matmul"}
    for name in ("twice_rounded_bf16_gelu", "bf16_accumulated_sum", "f16_accumulated_matmul"):
        assert kernels[name]["earned"] is None and kernels[name]["reason"] == "status `failed`"
    assert "all 2^16 inputs and its VJP's" in kernels["honest_bf16_gelu"]["reason"]


def _one(swept: Path, tmp_path: Path, name: str, edit) -> dict:
    rec = json.loads((swept / f"lowp-{name}.json").read_text())
    edit(rec)
    (tmp_path / f"lowp-{name}.json").write_text(json.dumps(rec))
    return trust.export_lowp_trust(tmp_path, trust.machine_environment())["kernels"][name]


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.update(status="passed", failure_reasons={"exceeds-bound": 3}, failed=3),
     "contradicts itself: failure_reasons lists `exceeds-bound` x3"),
    (lambda r: r.update(max_ulps_passing=7.5), "worst passing error, 7.5 ulp, is over its bound"),
    (lambda r: r.update(patterns=60000), "not enough coverage: 60000 of the 2^16 inputs"),
    (lambda r: r.update(harness="0" * 64), "stale: judged by another version of the harness"),
    (lambda r: r.update(plugin_source="0" * 64), "stale: the source of"),
    (lambda r: r.update(environment={"gpu": "NVIDIA Imaginary", "driver": "1",
                                     "cuda_runtime": "1"}), "made on another gpu"),
])
def test_an_edited_or_stale_record_earns_nothing(swept, tmp_path, edit, says):
    got = _one(swept, tmp_path, "honest_f16_exp", edit)
    assert got["earned"] is None and says in got["reason"], got


def test_an_edited_failure_stays_nothing(swept, tmp_path):
    def to_passed(r):
        r["status"] = "passed"
    got = _one(swept, tmp_path, "truncating_bf16_sqrt", to_passed)
    assert got["earned"] is None and "not-correctly-rounded" in got["reason"], got


def test_a_binary_sample_is_fuzzed_and_all_pairs_verified(tmp_path):
    proc = _cli("lowp", "--plugin", "fixtures.plugins.low_precision_binary:HONEST",
                "--pair-stride", "8191", "--evidence-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    kernels = _export(tmp_path)["kernels"]
    assert {v["earned"] for v in kernels.values()} == {"fuzzed"}
    assert "a sample of" in kernels["honest_float16_add"]["reason"]
    got = _one(tmp_path, tmp_path, "honest_float16_add",
               lambda r: r.update(pairs=1 << 32, exhaustive=True))
    assert got["earned"] == "verified" and "all 2^32 input pairs" in got["reason"], got


def test_the_report_shows_what_was_earned_and_a_stale_export(swept, tmp_path):
    from reports.lowp import build_lowp

    class _Dir:
        path, slug, label = str(swept), "lowp", "lowp"

    class _Report:
        directories = [_Dir()]
    _export(swept)
    views = {v.kernel: v for v in build_lowp(_Report()).sections[0].kernels}
    assert views["honest_f16_exp"].earned == "verified"
    assert views["bf16_accumulated_sum"].earned is None
    rec = json.loads((swept / "lowp-honest_f16_exp.json").read_text())
    rec["created"] = "2099-01-01T00:00:00+00:00"          # a newer run of the same kernel
    (swept / "lowp-honest_f16_exp.json").write_text(json.dumps(rec))
    views = {v.kernel: v for v in build_lowp(_Report()).sections[0].kernels}
    assert views["honest_f16_exp"].earned is None
    assert "predates this record" in views["honest_f16_exp"].earned_reason


def test_export_of_a_missing_directory_is_named(tmp_path):
    proc = _cli("export-trust", "--lowp", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "--lowp" in proc.stderr and "no such directory" in proc.stderr


def test_the_report_reads_a_directory_holding_its_trust_export_without_a_warning(swept, tmp_path):
    _export(swept)
    proc = _cli("report", "--evidence-dir", str(swept), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    assert "trust-lowp.json" not in proc.stderr, proc.stderr     # it was "neither an evidence
    assert (tmp_path / "report" / "index.html").exists()         # record ... nor a trust export"
