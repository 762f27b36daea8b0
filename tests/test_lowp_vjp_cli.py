"""The VJPs of accumulating 16-bit kernels through `torchlean-conformance lowp` (kernel process,
records, replays, earned trust, the report's view): a VJP's part lives in its kernel's record
beside the forward, its failures replay, a `passed` record that hides a VJP failure earns nothing,
and a VJP the harness has no model for is refused at load."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ml_dtypes")
from conformance.lowp import trust   # noqa: E402
from conformance.lowp.audit_vjp import classes   # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "fixtures.plugins.low_precision_vjp"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("vjp")
    proc = _cli("lowp", "--plugin", f"{PLUGIN}:FEW", "--seed", "3", "--evidence-dir", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return out, proc.stdout


def _records(out: Path) -> dict:
    return {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in out.glob("lowp-*.json")}


def test_the_vjp_part_sits_beside_the_forward_in_one_record(run):
    out, stdout = run
    recs = _records(out)
    assert {k: r["status"] for k, r in recs.items()} == {
        "vjp_bf16_sum": "passed", "vjp_bf16_matmul": "passed", "vjp_f16_linear": "passed",
        "zero_plus_g_bf16_sum": "failed", "bf16_accumulated_vjp_matmul": "failed",
        "wrong_axis_vjp_f16_linear": "failed"}
    honest = recs["vjp_f16_linear"]
    assert honest["cases"]["failed"] == 0 and honest["vjp"]["failed"] == 0
    assert set(honest["vjp"]["cases"]["by_class"]) == set(classes("linear"))
    assert honest["vjp"]["cases"]["total"] == 3 * len(classes("linear"))
    assert "18 cases, 498 elements; VJP 30 cases" in stdout
    assert set(recs["zero_plus_g_bf16_sum"]["failure_reasons"]) == {"vjp-signed-zero"}
    assert set(recs["bf16_accumulated_vjp_matmul"]["failure_reasons"]) == {"vjp-exceeds-bound"}
    wrong = recs["wrong_axis_vjp_f16_linear"]
    assert wrong["failure_reasons"] == {"vjp-raised": 1}
    assert "a float16[6] gradient for input 2" in wrong["message"] and "float16[5]" in \
        wrong["message"]
    assert "gradient da element" in stdout and "gradient dx element" in stdout


def test_every_vjp_counterexample_replays_and_a_fixed_kernel_passes(run, tmp_path):
    out, _ = run
    files = sorted((out / "replays").glob("*.json"))
    docs = {f.name: json.loads(f.read_text()) for f in files}
    assert len(docs) == 2 and all(d["kind"] == "accumulating-vjp" and d["reproduced"]
                                  for d in docs.values())
    name = "lowp-bf16_accumulated_vjp_matmul-vjp-exceeds-bound.json"
    doc = docs[name]
    # cut to what the element reads: one row of a (da) or one column of g (db)
    assert doc["element"][0] in (0, 1) and min(doc["inputs"][0]["shape"]) == 1, doc["inputs"]
    proc = _cli("lowp", "--replay", str(out / "replays" / name))
    assert proc.returncode == 1 and proc.stdout.startswith("still fails: ") and \
        "vjp-exceeds-bound" in proc.stdout, proc.stdout + proc.stderr
    doc.update(plugin=f"{PLUGIN}:ALL", kernel="vjp_bf16_matmul")
    (tmp_path / "fixed.json").write_text(json.dumps(doc))
    proc = _cli("lowp", "--replay", str(tmp_path / "fixed.json"))
    assert proc.returncode == 0 and proc.stdout.startswith("passes now: vjp_bf16_matmul"), \
        proc.stdout + proc.stderr


def test_passed_audits_with_their_vjp_are_fuzzed_and_say_so(run):
    out, _ = run
    proc = _cli("export-trust", "--lowp", str(out))
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads((out / "trust-lowp.json").read_text())["kernels"]
    assert {k for k, v in kernels.items() if v["earned"] == "fuzzed"} == {
        "vjp_bf16_sum", "vjp_bf16_matmul", "vjp_f16_linear"}
    assert kernels["vjp_f16_linear"]["reason"].startswith(
        "passed over 18 cases of run seed 3 and its VJP's 30")


def _edited(run, tmp_path, name: str, edit) -> dict:
    rec = json.loads((run[0] / f"lowp-{name}.json").read_text())
    edit(rec)
    (tmp_path / f"lowp-{name}.json").write_text(json.dumps(rec))
    return trust.export_lowp_trust(tmp_path, trust.machine_environment())["kernels"][name]


def _hide_vjp_failure(rec):
    rec["vjp"]["failure_reasons"] = {"vjp-exceeds-bound": 2}
    rec["vjp"]["cases"]["failed"] = 1


def _skip_a_vjp_class(rec):
    rec["vjp"]["cases"]["by_class"]["cotangent-special"]["run"] = 0


@pytest.mark.parametrize("edit, says", [
    (_hide_vjp_failure, "contradicts itself: its VJP audit lists failures"),
    (_skip_a_vjp_class, "not enough coverage: no VJP case of some class ran"),
])
def test_a_record_that_hides_its_vjp_earns_nothing(run, tmp_path, edit, says):
    got = _edited(run, tmp_path, "vjp_bf16_matmul", edit)
    assert got["earned"] is None and says in got["reason"], got


def test_the_report_names_the_vjp_and_the_gradient(run):
    from reports.lowp import _view
    recs = _records(run[0])
    assert "its VJP's 27 cases" in _view(recs["vjp_bf16_matmul"]).judged
    assert "gradient da element" in _view(recs["bf16_accumulated_vjp_matmul"]).example


def test_a_vjp_without_an_error_model_is_refused_at_load(tmp_path):
    proc = _cli("lowp", "--plugin", f"{PLUGIN}:UNJUDGEABLE", "--evidence-dir", str(tmp_path))
    assert proc.returncode == 2 and "declared a VJP the harness cannot judge" in proc.stderr \
        and "under float32 accumulation" in proc.stderr, proc.stderr
