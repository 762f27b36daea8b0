"""CI's quick campaign: every reference capsule fuzzed against its mpmath reference, forward and
VJP, under its declared policy; every one must pass and leave a schema-valid evidence record."""
import json

import pytest

from conformance.cli import main


@pytest.mark.capsules("reference.*")
def test_quick_campaign_over_every_reference_capsule(tmp_path, capsys):
    from engine.registry import registry
    names = {c.name for c in registry().capsules() if c.provider.label == "reference"}
    code = main(["run", "--suite", "campaign", "--quick", "--no-progress", "--jobs", "2",
                 "--evidence-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    records = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("reference.*.json")}
    from engine.providers.reference import OPS
    assert set(records) == names == {f"reference.{op.label}" for op in OPS}
    for name, rec in records.items():
        assert rec["status"] == "passed", (name, rec.get("failure_reasons"))
        assert rec["cases"]["total"] > 0 and rec["cases"]["failed"] == 0
    assert f"{len(names)} of {len(names)} capsules without failures" in out


def test_every_reference_op_has_its_capsule():
    """The campaign test's registry check alone: scripts/check.sh leaves the campaign itself to
    its suites stage, which runs whatever capsules the registry has."""
    from engine.providers.reference import OPS
    from engine.registry import registry
    names = {c.name for c in registry().capsules() if c.provider.label == "reference"}
    assert names == {f"reference.{op.label}" for op in OPS} and len(names) == len(OPS) > 50
