"""Earned trust: what the evidence supports for the current build, exported for the engine's gate.

- A passing campaign (forward, and the VJP when the op has one) whose record's fingerprint matches
  the capsule's current build earns `fuzzed` for the value and VJP contracts.
- With runtime-guard evidence on the shape and layout contracts and a passing test suite (a pytest
  JUnit XML given as `--tests`), it supports `checked`.
- Stale (another fingerprint), failing, crashed, timed-out, unsupported or missing evidence earns
  nothing (null).
"""
from __future__ import annotations

import datetime as _dt
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance import evidence
from engine.types import Evidence, TrustLevel

TRUST_FORMAT = "torchlean-conformance-trust"


class TrustFileError(Exception):
    """A trust export that cannot be read."""


def tests_passed(junit_xml: Path | None) -> tuple[bool, str]:
    """Whether a pytest JUnit XML report shows tests run and none failed or errored."""
    if junit_xml is None:
        return False, "no test-suite report given (--tests junit.xml)"
    try:
        root = ET.parse(junit_xml).getroot()
    except (OSError, ET.ParseError) as exc:
        return False, f"cannot read test-suite report {junit_xml}: {exc}"
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    if tests == 0 or bad:
        return False, f"test suite: {tests} tests, {bad} failures/errors"
    return True, f"test suite: {tests} tests passed"


def earned_for(record: dict | None, capsule, handler, suite_ok: bool) -> tuple[str | None, str]:
    """(earned trust label or None, why) for one capsule."""
    if record is None:
        return None, "no evidence record"
    current = evidence.build_fingerprint(capsule, handler)["value"]
    if record.get("fingerprint", {}).get("value") != current:
        return None, "stale: the evidence was made for another build fingerprint"
    if record.get("status") != "passed":
        return None, f"campaign status `{record.get('status')}`"
    if capsule.op.needs_vjp and not record.get("vjp_checked"):
        return None, "the VJP was not checked"
    if (record.get("identity") or {}).get("failed"):
        return None, "the inner-product identity failed"
    guards = all(c.evidence is Evidence.runtime_guard
                 for c in (capsule.shape_contract, capsule.layout_contract))
    if guards and suite_ok:
        return TrustLevel.checked.label, "fuzz campaign passed; runtime guards; test suite passed"
    return TrustLevel.fuzzed.label, "fuzz campaign passed" + (
        "" if guards else "; shape/layout contracts are not runtime-guarded")


def export_trust(evidence_dir: Path, out_path: Path, targets: list[tuple], device: str,
                 junit_xml: Path | None = None) -> dict:
    """Write the trust each target (capsule, handler) earned; returns the document."""
    suite_ok, suite_note = tests_passed(junit_xml)
    capsules = {}
    for capsule, handler in targets:
        path = evidence.record_path(evidence_dir, capsule.name)
        try:
            record = evidence.load_record(path) if path.exists() else None
        except evidence.EvidenceError:
            record = None
        earned, why = earned_for(record, capsule, handler, suite_ok)
        capsules[capsule.name] = {
            "declared": capsule.trust_level.label, "earned": earned, "reason": why,
            "fingerprint": evidence.build_fingerprint(capsule, handler)["value"],
            "status": None if record is None else record.get("status")}
    doc = {"format": TRUST_FORMAT, "version": 1, "device": device, "test_suite": suite_note,
           "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "capsules": capsules}
    evidence.write_atomic(Path(out_path), doc)
    return doc


def load_earned_trust(path) -> dict[str, TrustLevel | None]:
    """Capsule name -> earned TrustLevel (None: earned nothing), for
    `BackendProfile.accept_graph(ops, earned_trust=...)` and `Session(earned_trust=...)`."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TrustFileError(f"cannot read trust export {path}: {exc}; run "
                             "`torchlean-conformance export-trust` first") from None
    if doc.get("format") != TRUST_FORMAT:
        raise TrustFileError(f"{path} is not a trust export (format={doc.get('format')!r})")
    return {name: (None if e.get("earned") is None else TrustLevel.parse(e["earned"]))
            for name, e in doc.get("capsules", {}).items()}
