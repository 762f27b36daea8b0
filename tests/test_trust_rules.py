"""Earned trust cannot be faked and is not lost (issue 10): fingerprints are a pure function of
what runs, nothing is earned from nothing, test evidence counts only through this checkout's own
manifest, and only passed tests of that capsule on that device count."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import trust
from conformance.fingerprint import (capsule_fingerprint, checkout_digest, fingerprint,
                                      stable_identity)
from conformance.junit_evidence import TestEvidenceError, load_test_evidence
from engine.registry import registry

REPO = Path(__file__).resolve().parent.parent


def _fingerprints_in_a_fresh_process() -> dict:
    code = ("import json; from engine.registry import registry; "
            "from conformance.fingerprint import fingerprint; reg = registry(); "
            "print(json.dumps({c.name: fingerprint(c, reg.handler(c.name))['value'] "
            "for c in reg.capsules()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


def test_every_fingerprint_is_equal_in_two_fresh_processes():
    first, second = _fingerprints_in_a_fresh_process(), _fingerprints_in_a_fresh_process()
    assert len(first) == len(registry().capsules()) >= 82
    differ = sorted(n for n in first if first[n] != second[n])
    assert differ == [], f"fingerprints differ between processes: {differ}"


def test_stable_identity_holds_no_object_address():
    def with_genexpr(xs):
        return sum(x for x in xs)

    text = stable_identity(with_genexpr)
    assert " at 0x" not in text and "genexpr" in text
    assert stable_identity(frozenset({"b", "a"})) == "frozenset('a','b')"


def test_a_vjp_kernel_file_is_part_of_the_fingerprint(tmp_path, monkeypatch):
    """native_cuda.broadcast's VJP runs reduce.cu: editing it (in a copy) makes evidence stale."""
    from engine.runtime import loader
    cap, handler = registry().get("native_cuda.broadcast")
    before = capsule_fingerprint(cap, handler)
    assert "engine/csrc/cuda/reduce.cu" in before["inputs"]
    assert "engine/csrc/cuda/shape.cu" in before["inputs"]
    copy = tmp_path / "cuda"
    shutil.copytree(loader.CSRC_DIR, copy)
    monkeypatch.setattr(loader, "CSRC_DIR", copy)
    assert capsule_fingerprint(cap, handler)["value"] == before["value"]
    (copy / "reduce.cu").write_text((copy / "reduce.cu").read_text() + "\n// edited\n")
    assert capsule_fingerprint(cap, handler)["value"] != before["value"]


# --- nothing is earned from nothing ------------------------------------------------------------

def _passing_record(name: str, run_per_class: int = 2) -> dict:
    from conformance import generators
    from conformance.campaign import Settings
    from conformance.evidence import make_record
    cap, handler = registry().get(name)
    by_class = {c: {"run": run_per_class, "failed": 0, "skipped": 0, "harness_errors": 0}
                for c in generators.classes_for(cap.op)}
    campaign = {"status": "passed", "settings": Settings.for_run(None, 0, True).to_json(),
                "cases": {"total": run_per_class * len(by_class), "failed": 0, "skipped": 0,
                          "by_class": by_class},
                "vjp_checked": True, "identity": {"failed": 0}}
    return make_record(cap, campaign, fingerprint(cap, handler), "cpu")


@pytest.mark.parametrize("change, why", [
    (lambda r: r["cases"]["by_class"].update({c: {"run": 0, "failed": 0, "skipped": 2}
                                             for c in r["cases"]["by_class"]}), "too few cases"),
    (lambda r: r["cases"]["by_class"].pop("normal"), "too few cases: class `normal` judged 0"),
    (lambda r: r["settings"].update(poison=False), "without allocation poisoning"),
    (lambda r: r["settings"].update(harness="0" * 64), "another version of the harness"),
    (lambda r: r["fingerprint"].update(value="0" * 64), "stale"),
    (lambda r: r.update(status="harness-error"), "campaign status `harness-error`"),
    (lambda r: r.update(vjp_checked=False), "the VJP was not checked"),
])
def test_an_incomplete_record_earns_nothing(change, why):
    cap, handler = registry().get("reference.add")
    rec = _passing_record("reference.add")
    assert trust.earned_for(rec, cap, handler)[0] == "fuzzed"
    change(rec)
    earned, reason, _ = trust.earned_for(rec, cap, handler)
    assert earned is None and why in reason, reason


# --- test evidence: this checkout's own run, passed tests of that capsule -----------------------

TESTS = textwrap.dedent('''
    import pytest

    @pytest.mark.capsules("reference.add")
    def test_add_passes():
        assert True

    @pytest.mark.capsules("reference.sub")
    def test_sub_is_skipped():
        pytest.skip("not today")

    @pytest.mark.capsules("reference.mul")
    @pytest.mark.xfail(reason="known")
    def test_mul_xfails():
        assert False

    @pytest.mark.capsules("reference.relu")
    def test_relu_fails():
        assert False

    @pytest.mark.capsules("reference.relu", "reference.ex{kind}")
    @pytest.mark.parametrize("kind", ["p"])
    def test_relu_and_exp_pass(kind):
        assert True

    @pytest.mark.cuda
    @pytest.mark.capsules("reference.log")
    def test_log_on_the_wrong_device():
        assert True
''')


@pytest.fixture(scope="module")
def junit(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("junit")
    (d / "test_tiny.py").write_text(TESTS)
    xml = d / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                    "conformance.pytest_manifest", f"--junitxml={xml}", "-p", "no:xdist",
                    "-W", "ignore::pytest.PytestUnknownMarkWarning", str(d / "test_tiny.py")],
                   cwd=d, capture_output=True, text=True, timeout=120,
                   env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert xml.is_file() and (d / "junit.xml.manifest.json").is_file()
    return xml


def test_only_passed_tests_of_the_capsule_on_its_device_count(junit):
    ev = load_test_evidence(junit)
    assert ev.counts == {"passed": 3, "skipped": 1, "xfailed": 1, "failed": 1}
    assert ev.for_capsule("reference.add", "cpu").to_json() == {"passed": 1, "failed": 0,
                                                                "skipped": 0}
    assert ev.for_capsule("reference.sub", "cpu").to_json()["passed"] == 0
    assert ev.for_capsule("reference.mul", "cpu").to_json() == {"passed": 0, "failed": 0,
                                                                "skipped": 1}
    assert ev.for_capsule("reference.relu", "cpu").to_json() == {"passed": 1, "failed": 1,
                                                                 "skipped": 0}
    assert ev.for_capsule("reference.exp", "cpu").passed == 1        # `{kind}` was filled in
    assert ev.for_capsule("reference.log", "cpu").passed == 0        # a cuda test: not on cpu
    assert ev.for_capsule("reference.log", "cuda").passed == 1


@pytest.mark.parametrize("name, earned, why", [
    ("reference.add", "checked", "1 test(s) of this capsule passed"),
    ("reference.sub", "fuzzed", "no test exercising `reference.sub` on cpu passed (1 skipped"),
    ("reference.mul", "fuzzed", "no test exercising `reference.mul` on cpu passed"),
    ("reference.relu", "fuzzed", "1 test(s) of this capsule failed"),
    ("reference.log", "fuzzed", "no test exercising `reference.log` on cpu passed"),
])
def test_checked_needs_a_passed_test_of_that_capsule(junit, name, earned, why):
    cap, handler = registry().get(name)
    got, reason, _ = trust.earned_for(_passing_record(name), cap, handler,
                                      load_test_evidence(junit), {"status": "passed"})
    assert got == earned and why in reason, reason


def test_checked_needs_the_guard_suite(junit):
    cap, handler = registry().get("reference.add")
    got, reason, _ = trust.earned_for(_passing_record("reference.add"), cap, handler,
                                      load_test_evidence(junit), {"status": "missing",
                                                                  "note": "no suite"})
    assert got == "fuzzed" and "guard suite missing" in reason


def test_a_foreign_or_altered_or_missing_report_is_refused(junit, tmp_path):
    with pytest.raises(TestEvidenceError, match="no such file"):
        load_test_evidence(tmp_path / "nonexistent.xml")
    foreign = tmp_path / "foreign.xml"
    foreign.write_text('<testsuite tests="1" skipped="1"><testcase name="t"><skipped/>'
                       '</testcase></testsuite>')
    with pytest.raises(TestEvidenceError, match="has no manifest"):
        load_test_evidence(foreign)
    altered = tmp_path / "altered.xml"
    altered.write_text(junit.read_text().replace("test_relu_fails", "test_relu_fine"))
    shutil.copy(f"{junit}.manifest.json", f"{altered}.manifest.json")
    with pytest.raises(TestEvidenceError, match="changed after its manifest was written"):
        load_test_evidence(altered)
    other = tmp_path / "other.xml"
    shutil.copy(junit, other)
    manifest = json.loads(Path(f"{junit}.manifest.json").read_text())
    manifest["checkout"]["digest"] = "f" * 64
    Path(f"{other}.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TestEvidenceError, match="tested another checkout"):
        load_test_evidence(other)


def test_the_manifest_is_bound_to_this_checkout(junit):
    manifest = json.loads(Path(f"{junit}.manifest.json").read_text())
    assert manifest["checkout"]["digest"] == checkout_digest()
    cap, handler = registry().get("reference.add")
    assert manifest["fingerprints"]["cpu"]["reference.add"] == \
        capsule_fingerprint(cap, handler)["value"]


def test_export_trust_refuses_a_missing_tests_file(tmp_path):
    (tmp_path / "ev").mkdir()
    out = subprocess.run([sys.executable, "-m", "conformance.cli", "export-trust",
                          "--evidence-dir", str(tmp_path / "ev"), "--tests",
                          str(tmp_path / "nonexistent.xml")], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "nonexistent.xml: no such file" in out.stderr
    assert not (tmp_path / "ev" / "trust.json").exists()
