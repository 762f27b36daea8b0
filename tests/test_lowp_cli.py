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
    unary = {k: r["status"] for k, r in recs.items() if "patterns" in r}
    assert unary == {
        "honest_bf16_gelu": "passed", "honest_f16_gelu": "passed", "honest_f16_exp": "passed",
        "honest_bf16_sqrt": "passed", "honest_f16_sqrt": "passed",
        "twice_rounded_bf16_gelu": "failed", "flushing_f16_exp": "failed",
        "erf_form_vjp_f16_gelu": "failed", "truncating_bf16_sqrt": "failed"}
    assert recs["erf_form_vjp_f16_gelu"]["failure_reasons"].get("vjp-exceeds-bound", 0) > 0
    assert recs["honest_bf16_gelu"]["vjp"]["failed"] == 0
    assert recs["twice_rounded_bf16_gelu"]["failure_reasons"]["exceeds-bound"] > 0
    assert recs["flushing_f16_exp"]["failure_reasons"] == {"flushed-subnormal": 846}
    assert recs["truncating_bf16_sqrt"]["failure_reasons"] == {"not-correctly-rounded": 16446}
    assert all(r["patterns"] == 65536 for r in recs.values() if r["op"] in ("gelu", "exp", "sqrt"))
    assert "15 16-bit kernel(s): 9 swept over all 2^16 inputs, 6 audited" in proc.stdout


def test_only_honest_kernels_exit_0(tmp_path):
    proc = _lowp("fixtures.plugins.low_precision:HONEST", tmp_path)
    assert proc.returncode == 0 and proc.stdout.count(" passed") == 8, proc.stdout + proc.stderr


@pytest.mark.parametrize("attr, statuses, says", [
    ("EXITING", {"exiting_f16_exp": "crashed", "never_reached_f16_exp": "crashed"},
     "exited with status 0 during exiting_f16_exp's audit"),
    ("PEEKING", {"peeking_f16_exp": "failed"},
     "may not import the judge's module `conformance.lowp.refs`"),
    ("WRONG_TYPE", {"float32_f16_exp": "failed"},
     "returned a float32 array of shape [65536]; expected a float16 array"),
    ("STALE", {"stale_f16_sum": "failed"}, "exceeds-bound"),
    ("NOISY", {"noisy_f16_exp": "failed"}, "not-repeatable"),
    ("MUTATING", {"mutating_f16_exp": "failed"}, "mutating_f16_exp wrote into its input 0"),
])
def test_hostile_kernels_never_pass(tmp_path, attr, statuses, says):
    proc = _lowp(f"fixtures.plugins.low_precision_hostile:{attr}", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = _records(tmp_path)
    assert {k: r["status"] for k, r in recs.items()} == statuses
    assert says in proc.stdout
    if attr == "MUTATING":
        assert recs["mutating_f16_exp"]["failure_reasons"] == {"mutated-input": 1}


def test_a_plugin_that_declares_no_16_bit_kernels_is_a_usage_error(tmp_path):
    proc = _lowp("fixtures.plugins.numpy_kernels:ENTRIES", tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is not a non-empty list of LowpKernel" in proc.stderr
    assert not list(tmp_path.glob("lowp-*.json"))


def test_the_accumulating_fixtures_honest_pass_buggy_fail_for_their_reason(tmp_path):
    proc = _lowp("fixtures.plugins.low_precision:ALL", tmp_path)
    recs = _records(tmp_path)
    for name in ("honest_bf16_sum", "honest_f16_softmax", "honest_f16_matmul"):
        assert recs[name]["status"] == "passed", recs[name]
        assert recs[name]["run"]["seed_source"] == "random"
    assert recs["bf16_accumulated_sum"]["failure_reasons"].get("exceeds-bound", 0) > 0
    assert recs["unshifted_f16_softmax"]["failure_reasons"].get("nan-mismatch", 0) > 0
    assert recs["f16_accumulated_matmul"]["failure_reasons"].get("exceeds-bound", 0) > 0
    seed = recs["bf16_accumulated_sum"]["run"]["seed"]
    assert f"run seed {seed} (random; --seed {seed} draws them again)" in proc.stdout


def test_a_given_seed_draws_the_same_cases(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--plugin",
                        "fixtures.plugins.low_precision:BUGGY_ACCUMULATING", "--evidence-dir",
                        str(out), "--seed", "11"], cwd=REPO, capture_output=True, timeout=300)
    ra, rb = _records(a), _records(b)
    assert ra.keys() == rb.keys() and len(ra) == 3
    for k in ra:
        assert ra[k]["failure_reasons"] == rb[k]["failure_reasons"] and \
            ra[k]["counterexamples"] == rb[k]["counterexamples"]


def test_the_report_shows_the_16_bit_page(tmp_path):
    ev, out = tmp_path / "ev", tmp_path / "out"
    _lowp("fixtures.plugins.low_precision:ALL", ev)
    proc = subprocess.run([sys.executable, "-m", "reports", "report", "--evidence-dir", str(ev),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    page = (out / "lowp.html").read_text()
    assert page.count('<tr class="fail"') == 7 and page.count('<tr class=""') == 8
    assert "flushed-subnormal</span> (846)" in page and "all 65536 inputs" in page
    assert 'href="lowp.html"' in (out / "index.html").read_text()


def test_a_file_named_like_a_16_bit_record_that_is_not_one_is_named(tmp_path):
    from reports.builder import build_report
    from reports.current import RegistryBuild
    (tmp_path / "lowp-forged.json").write_text(json.dumps({"format": "something else"}))
    (tmp_path / "lowp-cut.json").write_text('{"format": ')
    page = build_report([tmp_path], RegistryBuild()).lowp
    (section,) = page.sections
    assert section.kernels == [] and section.unusable[1] == (
        "lowp-forged.json: not a 16-bit kernel's record; rerun `torchlean-conformance lowp` or "
        "delete it")
    assert section.unusable[0].startswith("lowp-cut.json: cannot be read (")
