"""scripts/check.sh runs only the tests marked `capsules` (the test evidence export-trust counts;
scripts/test.sh runs the rest), and a capsule without such a test earns `fuzzed` at most. So every
capsule of the registry, on each device, must be named by at least one marked test that this job
runs: a test of its own (the CPU's), or one marked `cuda` (the GPU's). The quick campaign test
that check.sh deselects (its suites stage runs that campaign) does not count."""
from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from pathlib import Path

from engine.registry import registry

REPO = Path(__file__).resolve().parent.parent
DESELECTED = "tests/test_reference_campaign.py::test_quick_campaign_over_every_reference_capsule"

# a pytest plugin (written to a file) that prints each selected test's device and patterns
COLLECTOR = '''
import json
from conformance.pytest_manifest import PROPERTY

def pytest_collection_finish(session):
    for item in session.items:
        props = dict(item.user_properties)
        print("CAPSULE-TEST " + json.dumps([item.nodeid, json.loads(props[PROPERTY])]))
'''


def test_every_capsule_has_a_test_the_main_job_runs(tmp_path):
    (tmp_path / "capsule_test_collector.py").write_text(COLLECTOR)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p",
         "no:cacheprovider", "-p", "capsule_test_collector", "-m", "capsules",
         "--deselect", DESELECTED, "tests/"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{REPO}"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
             if line.startswith("CAPSULE-TEST ")]
    assert len(tests) > 200 and all(nodeid != DESELECTED for nodeid, _ in tests)
    missing = []
    for capsule in registry().capsules():
        device = capsule.device.label
        if not any(t["device"] == device and any(fnmatch.fnmatchcase(capsule.name, p)
                                                 for p in t["capsules"]) for _, t in tests):
            missing.append(f"{capsule.name} ({device})")
    assert missing == [], f"capsules no test of check.sh names: {missing}"
