"""Test-suite evidence for export-trust: a JUnit report counts only through the manifest this
project's own test run wrote beside it (conformance/pytest_manifest.py), only for this checkout,
and only tests that ran and passed (skipped, xfailed and xpassed are not passes) and that
exercise the capsule on its device."""
from __future__ import annotations

import fnmatch
import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from conformance.formats import MANIFEST_FORMAT
from conformance.jsonfile import UnusableFileError, read_tagged

RERUN = "run the tests with `scripts/test.sh --junitxml F` (or scripts/check.sh) and pass that F"


class TestEvidenceError(Exception):
    """A `--tests` file that is missing, foreign, altered, or made for another checkout."""
    __test__ = False   # a name pytest would otherwise try to collect


def manifest_path(junit_xml) -> Path:
    """Where the test run's manifest lies: beside its JUnit file."""
    return Path(f"{junit_xml}.manifest.json")


@dataclass
class CapsuleTests:
    passed: int = 0
    failed: int = 0            # failed or errored
    not_passed: int = 0        # skipped, xfailed, xpassed
    tests: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"passed": self.passed, "failed": self.failed, "skipped": self.not_passed}


@dataclass
class TestEvidence:
    __test__ = False
    junit: Path
    manifest: Path
    tests: dict                     # nodeid -> {outcome, device, capsules}
    fingerprints: dict              # device -> capsule -> fingerprint at test time
    counts: dict                    # outcome -> number of tests

    def for_capsule(self, name: str, device: str) -> CapsuleTests:
        out = CapsuleTests()
        for nodeid, t in self.tests.items():
            if t.get("device") != device or not any(fnmatch.fnmatchcase(name, p)
                                                    for p in t.get("capsules", [])):
                continue
            outcome = t.get("outcome")
            if outcome == "passed":
                out.passed += 1
            elif outcome in ("failed", "error"):
                out.failed += 1
                out.tests.append(nodeid)
            else:
                out.not_passed += 1
        return out

    def note(self) -> str:
        c = self.counts
        return (f"{self.junit}: {c.get('passed', 0)} passed, "
                f"{c.get('failed', 0) + c.get('error', 0)} failed or errored, "
                f"{c.get('skipped', 0) + c.get('xfailed', 0) + c.get('xpassed', 0)} skipped or "
                "xfailed (not counted as passes)")

    def to_json(self) -> dict:
        c = self.counts
        return {"file": str(self.junit), "manifest": str(self.manifest), "ok": True,
                "note": self.note(), "passed": c.get("passed", 0),
                "failed": c.get("failed", 0) + c.get("error", 0),
                "skipped": c.get("skipped", 0) + c.get("xfailed", 0) + c.get("xpassed", 0)}


def _junit_counts(path: Path) -> dict:
    """passed/failed/skipped testcases of a JUnit file (pytest's xunit1 or xunit2)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise TestEvidenceError(f"--tests {path} is not a readable JUnit XML file ({exc}); "
                                f"{RERUN}") from None
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def load_test_evidence(junit_xml) -> TestEvidence:
    """The tests behind a `--tests` file, or TestEvidenceError saying why they cannot count."""
    from conformance.fingerprint import checkout_digest
    junit = Path(junit_xml)
    if not junit.is_file():
        raise TestEvidenceError(f"--tests {junit}: no such file; {RERUN}")
    mpath = manifest_path(junit)
    if not mpath.is_file():
        raise TestEvidenceError(
            f"--tests {junit} has no manifest ({mpath.name}): it was not written by this "
            f"project's test run, so its results cannot be bound to this checkout; {RERUN}")
    try:
        manifest = read_tagged(mpath, "format", MANIFEST_FORMAT, "a test manifest", RERUN)
    except UnusableFileError as exc:
        raise TestEvidenceError(f"--tests {junit}: its manifest {exc}") from None
    digest = hashlib.sha256(junit.read_bytes()).hexdigest()
    if manifest.get("junit_sha256") != digest:
        raise TestEvidenceError(f"--tests {junit} was changed after its manifest was written "
                                f"(sha256 {digest[:12]} vs {str(manifest.get('junit_sha256'))[:12]}"
                                f"); {RERUN}")
    here = checkout_digest()
    there = (manifest.get("checkout") or {}).get("digest")
    if there != here:
        commit = (manifest.get("checkout") or {}).get("commit")
        raise TestEvidenceError(
            f"--tests {junit} tested another checkout (source digest {str(there)[:12]}, commit "
            f"{str(commit)[:12]}; this checkout is {here[:12]}): its results say nothing about "
            f"this code; {RERUN}")
    tests = manifest.get("tests")
    if not isinstance(tests, dict):
        raise TestEvidenceError(f"--tests {junit}: its manifest lists no tests; {RERUN}")
    counts: dict[str, int] = {}
    for t in tests.values():
        counts[t.get("outcome")] = counts.get(t.get("outcome"), 0) + 1
    xml = _junit_counts(junit)
    if xml["passed"] != counts.get("passed", 0) + counts.get("xpassed", 0):
        raise TestEvidenceError(
            f"--tests {junit} reports {xml['passed']} passed testcases but its manifest "
            f"{counts.get('passed', 0) + counts.get('xpassed', 0)}: the two do not describe one "
            f"run; {RERUN}")
    return TestEvidence(junit, mpath, tests, manifest.get("fingerprints") or {}, counts)
