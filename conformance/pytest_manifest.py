"""A pytest plugin that binds a test run's JUnit report to the checkout and build it tested.

Tests say which capsules they exercise with `@pytest.mark.capsules("reference.add", ...)`
(globs; `{param}` is filled from the test's parameters, an enum parameter by its label), on a test,
a class or a module (`pytestmark`). A test marked `cuda` runs on the cuda device, any other on cpu.
When the run writes a JUnit file (`--junitxml F`), this plugin writes F.manifest.json beside it:
the checkout digest and commit, every capsule's build fingerprint on every device this machine
runs, each test's outcome (passed | failed | error | skipped | xfailed | xpassed), device and
capsule patterns, and the JUnit file's sha256. `torchlean-conformance export-trust --tests F`
accepts test evidence only through that manifest (conformance/test_evidence.py).

Registered by tests/conftest.py (`pytest_plugins`).
"""
from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import json
from pathlib import Path

import pytest

from conformance.formats import MANIFEST_FORMAT
from conformance.junit_evidence import manifest_path

PROPERTY = "torchlean_capsules"


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "capsules(*patterns): the capsules (globs, `{param}` filled from the test's "
                   "parameters) whose values this test checks; read by export-trust")
    if not hasattr(config, "workerinput"):   # the controller (or a run without xdist)
        # the collector's plugin name, not the manifest's format tag (formats.MANIFEST_FORMAT)
        config.pluginmanager.register(_Collector(config), "torchlean-test-manifest-collector")


def _param_text(value) -> str:
    if isinstance(value, enum.Enum):
        return str(getattr(value, "label", value.name))
    return str(value)


def _patterns(item) -> list[str]:
    params = getattr(getattr(item, "callspec", None), "params", {})
    out: list[str] = []
    for mark in item.iter_markers("capsules"):
        for pattern in mark.args:
            try:
                out.append(str(pattern).format(**{k: _param_text(v) for k, v in params.items()}))
            except (KeyError, IndexError, ValueError):
                out.append(str(pattern))   # a brace that is no placeholder stays as written
    return sorted(set(out))


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        device = "cuda" if item.get_closest_marker("cuda") else "cpu"
        item.user_properties.append(
            (PROPERTY, json.dumps({"device": device, "capsules": _patterns(item)})))


class _Collector:
    """Outcomes per test from the reports (which xdist forwards with their user_properties)."""

    def __init__(self, config) -> None:
        self.config = config
        self.tests: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests.setdefault(report.nodeid, {"outcome": None, "device": "cpu",
                                                      "capsules": []})
        for name, value in report.user_properties:
            if name == PROPERTY:
                entry.update(json.loads(value))
        outcome = _phase_outcome(report)
        if outcome is not None and _RANK[outcome] > _RANK.get(entry["outcome"], -1):
            entry["outcome"] = outcome

    @pytest.hookimpl(trylast=True)   # after junitxml's own sessionfinish has written the file
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        xml = getattr(self.config.option, "xmlpath", None)
        if not xml or not Path(xml).is_file():
            return
        write_manifest(Path(xml), self.tests, int(exitstatus))


# The outcome a test keeps is the worst of its phases.
_RANK = {"passed": 0, "xpassed": 1, "skipped": 2, "xfailed": 3, "failed": 4, "error": 5}


def _phase_outcome(report) -> str | None:
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "failed"
    if report.failed:
        return "error"
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    return None


def _fingerprints() -> dict[str, dict[str, str]]:
    """device -> capsule -> build fingerprint, for every device this machine can run."""
    from conformance.fingerprint import fingerprint
    from engine.registry import registry
    from engine.runtime.native import native_available
    devices = {"cpu"} | ({"cuda"} if native_available() else set())
    out: dict[str, dict[str, str]] = {d: {} for d in sorted(devices)}
    reg = registry()
    for cap in reg.capsules():
        if cap.device.label in devices:
            out[cap.device.label][cap.name] = fingerprint(cap, reg.handler(cap.name))["value"]
    return out


def write_manifest(junit_xml: Path, tests: dict, exitstatus: int) -> Path:
    from conformance.evidence import environment
    from conformance.fingerprint import checkout_digest
    from conformance.jsonfile import write_atomic
    fps = _fingerprints()
    env = environment("cuda" if "cuda" in fps else "cpu")
    doc = {"format": MANIFEST_FORMAT, "version": 1,
           "junit": junit_xml.name,
           "junit_sha256": hashlib.sha256(junit_xml.read_bytes()).hexdigest(),
           "checkout": {"digest": checkout_digest(), "commit": env.get("git_commit")},
           "environment": {k: env.get(k) for k in ("gpu", "driver", "cuda_runtime", "python")},
           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "exitstatus": exitstatus, "fingerprints": fps, "tests": tests}
    path = manifest_path(junit_xml)
    write_atomic(path, doc)
    return path
