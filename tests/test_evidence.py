"""Evidence records follow the schema; export-trust turns them into earned trust for the current
fingerprint only; the gate with require_evidence rejects a capsule claiming more than it earned."""
import json

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the records; "
                                                      "install the test extra")

from conformance import evidence
from conformance.campaign import Settings
from conformance.runner import Target, run_targets
from conformance.trust import TrustFileError, export_trust, load_earned_trust
from engine.errors import GateRejectedError
from engine.profile import CHECKED_CPU, BackendProfile
from engine.registry import registry
from engine.types import BackendOp as Op, TrustLevel

QUICK = {**Settings.for_run(None, 0, True).to_json(), "shrink_budget": 10}
PLUGIN = "fixtures.plugins.numpy_kernels:ENTRIES"


@pytest.fixture(scope="module")
def evidence_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("evidence")
    targets = [Target("reference.add"), Target("reference.relu"), Target("reference.matmul"),
               Target("user.naive_softplus", PLUGIN)]
    run_targets(targets, QUICK, out, "cpu", jobs=2, timeout_s=120)
    return out


def _targets(names):
    reg = registry()
    return [reg.get(n) for n in names]


def test_every_record_validates_against_the_schema(evidence_dir):
    records = evidence.load_records(evidence_dir)
    assert {r["capsule"]["name"] for r in records} == {
        "reference.add", "reference.relu", "reference.matmul", "user.naive_softplus"}
    for rec in records:
        evidence.validate(rec)
        assert rec["schema_version"] == evidence.SCHEMA_VERSION
        assert len(rec["fingerprint"]["value"]) == 64
        assert rec["environment"]["numpy"] and "git_commit" in rec["environment"]
    failing = next(r for r in records if r["capsule"]["name"] == "user.naive_softplus")
    assert failing["status"] == "failed" and failing["counterexamples"][0]["replay_command"]


def test_schema_rejects_a_record_missing_its_fingerprint(evidence_dir):
    rec = evidence.load_record(evidence_dir / "reference.add.json")
    del rec["fingerprint"]
    with pytest.raises(jsonschema.ValidationError, match="fingerprint"):
        evidence.validate(rec)


TINY_TESTS = """
import pytest

@pytest.mark.capsules("reference.add", "reference.relu")
def test_add_and_relu():
    assert True
"""


def _junit_of_this_checkout(tmp_path):
    """A real JUnit report with its manifest: a tiny test run through the project's plugin."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    (tmp_path / "test_tiny.py").write_text(TINY_TESTS)
    junit = tmp_path / "junit.xml"
    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                    "no:xdist", "-p", "conformance.pytest_manifest", f"--junitxml={junit}",
                    str(tmp_path / "test_tiny.py")], cwd=tmp_path, check=True, timeout=120,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(repo)})
    return junit


def test_export_trust_earns_fuzzed_then_checked_with_a_passing_test_suite(evidence_dir, tmp_path):
    from conformance.cli import main
    from conformance.junit_evidence import load_test_evidence
    targets = _targets(["reference.add", "reference.relu", "reference.sub"])
    doc = export_trust(evidence_dir, tmp_path / "trust.json", targets, "cpu")
    earned = {n: e["earned"] for n, e in doc["capsules"].items()}
    assert earned == {"reference.add": "fuzzed", "reference.relu": "fuzzed", "reference.sub": None}
    assert doc["capsules"]["reference.sub"]["reason"] == "no evidence record"
    assert main(["run", "--suite", "guards", "--evidence-dir", str(evidence_dir)]) == 0
    tests = load_test_evidence(_junit_of_this_checkout(tmp_path))
    doc = export_trust(evidence_dir, tmp_path / "trust.json", targets, "cpu", tests)
    assert doc["capsules"]["reference.add"]["earned"] == "checked"
    assert doc["capsules"]["reference.add"]["tests"] == {"passed": 1, "failed": 0, "skipped": 0}
    assert doc["test_suite"]["passed"] == 1 and doc["guards"]["status"] == "passed"
    assert load_earned_trust(tmp_path / "trust.json") == {
        "reference.add": TrustLevel.checked, "reference.relu": TrustLevel.checked,
        "reference.sub": None}
    (evidence_dir / "suite-guards.json").unlink()     # later tests expect no guard verdict


def test_failing_or_stale_evidence_earns_nothing(evidence_dir, tmp_path):
    from conformance.isolation.describe import describe_plugin
    plugin = describe_plugin(PLUGIN, "cpu")   # as export-trust sees a plugin: never imported
    stale_dir = tmp_path / "stale"
    stale_dir.mkdir()
    rec = evidence.load_record(evidence_dir / "reference.relu.json")
    rec["fingerprint"]["value"] = "0" * 64          # made for another build
    evidence.write_atomic(stale_dir / "reference.relu.json", rec)
    doc = export_trust(stale_dir, tmp_path / "t.json", _targets(["reference.relu"]), "cpu")
    assert doc["capsules"]["reference.relu"]["earned"] is None
    assert doc["capsules"]["reference.relu"]["reason"].startswith("stale")
    doc = export_trust(evidence_dir, tmp_path / "t.json", [plugin["user.naive_softplus"]], "cpu")
    assert doc["capsules"]["user.naive_softplus"]["earned"] is None
    assert "failed" in doc["capsules"]["user.naive_softplus"]["reason"]


def test_gate_rejects_a_capsule_claiming_more_than_it_earned(evidence_dir, tmp_path):
    path = tmp_path / "trust.json"
    export_trust(evidence_dir, path, _targets(["reference.add", "reference.relu"]), "cpu")
    earned = load_earned_trust(path)          # fuzzed: no test-suite report was given
    strict = BackendProfile(**{**CHECKED_CPU.__dict__,
                               "assurance": CHECKED_CPU.assurance.with_evidence_required()})
    with pytest.raises(GateRejectedError, match=r"reference\.add \[evidence\]: claims `checked`, "
                                                r"earned `fuzzed`: it claims more than it earned"):
        strict.accept_graph([Op.add], earned_trust=earned)
    with pytest.raises(GateRejectedError, match=r"reference\.sub \[evidence\].*earned nothing"):
        strict.accept_graph([Op.sub], earned_trust=earned)
    earned["reference.add"] = TrustLevel.checked
    assert strict.accept_graph([Op.add], earned_trust=earned).kernel(Op.add)


def test_load_earned_trust_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(TrustFileError, match="is not a trust export"):
        load_earned_trust(tmp_path / "x.json")
    with pytest.raises(TrustFileError, match="run `torchlean-conformance export-trust` first"):
        load_earned_trust(tmp_path / "missing.json")
