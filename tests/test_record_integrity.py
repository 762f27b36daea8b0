"""Records that cannot be edited into trust, readers that cannot be hung, writes that cannot cut a
page (issue 34): export-trust and the report recompute a record's status from its counts and
refuse a record that contradicts itself, names another capsule, op or device than its place, or
is not a regular file inside its directory; pages and exports are written atomically, and a full
disk is an environment failure (exit 4) that leaves the previous files whole."""
import builtins
import errno
import io
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import evidence, record_integrity, trust
from conformance.evidence_dir import EvidenceLock
from conformance.exit_codes import EXIT_ENVIRONMENT, EnvironmentFailure
from conformance.fingerprint import fingerprint
from conformance.formats import EVIDENCE_SCHEMA
from conformance.jsonfile import (MAX_JSON_DEPTH, RefusedFile, UnusableFileError, read_object,
                                  read_regular)
from engine.registry import registry
from reports import names
from reports.builder import build_report
from reports.current import FixedBuild, RegistryBuild
from reports.render import main as report_main
from reports.render import render_report

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
MEMORY_CAP = 2 * 2 ** 30     # a reader that slurps /dev/zero or a sparse 4 GB file hits this


def cli(*args, timeout=120, cwd=REPO):
    """The command in a child process with its memory capped, so a reader that would hang or
    exhaust memory fails the test instead of the machine."""
    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap_memory, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> dict:
    """reference.add's record from a real quick campaign of this build, written as the worker
    writes it: fresh, passed, and earning `fuzzed` as it is."""
    from conformance.campaign import Settings, run_campaign
    cap, handler = registry().get("reference.add")
    campaign = run_campaign(cap, handler, Settings.for_run(None, 0, True))
    rec = evidence.make_record(cap, campaign, fingerprint(cap, handler), "cpu")
    assert rec["status"] == "passed" and rec["cases"]["total"] > 0
    return rec


def _copy(rec: dict) -> dict:
    return json.loads(json.dumps(rec))


def _target(name: str):
    cap, handler = registry().get(name)
    return cap, handler


def _export(d: Path, names=("reference.add",)) -> dict:
    return trust.export_trust(d, d / "trust.json", [_target(n) for n in names], "cpu")


# --- trust recomputed from raw data ---------------------------------------------------------------

def _passed_without_cases(r):
    r["cases"]["total"] = 0


def _passed_with_failures(r):
    r["cases"]["failed"] = 7
    r["failure_reasons"] = {"exceeds-bound": 7}


def _worst_far_over_bound(r):
    r["stats"]["forward"]["worst_ratio"] = 1e6


EDITS = {
    "passed, 0 cases": (_passed_without_cases, "cases.total is 0 but its classes"),
    "passed, 7 failures": (_passed_with_failures, "status is `passed` but cases.failed is 7; "
                                                  "failure_reasons lists `exceeds-bound` x7"),
    "worst error 1e6 x bound": (_worst_far_over_bound, "status is `passed` but its forward "
                                                       "worst error is 1000000.0 times the bound"),
    "capsule.name": (lambda r: r["capsule"].update(name="reference.sub"),
                     "it names capsule `reference.sub` but its file is reference.add.json"),
    "capsule.op": (lambda r: r["capsule"].update(op="sub"),
                   "it names op `sub` but capsule `reference.add` has op `add`"),
    "capsule.device": (lambda r: r["capsule"].update(device="cuda"),
                       "it names device `cuda` but capsule `reference.add` has device `cpu`"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_record_earns_nothing_and_the_report_refuses_it(edit, genuine, tmp_path):
    change, contradiction = EDITS[edit]
    d = tmp_path / "cpu"          # named after its device, as reports/evidence/<device>/ are
    d.mkdir()
    path = d / "reference.add.json"
    evidence.write_atomic(path, genuine)
    honest = _export(d)
    assert honest["capsules"]["reference.add"]["earned"] == "fuzzed" and not honest["unusable"]
    row = next(r for r in build_report([d], RegistryBuild()).rows
               if r.info.name == "reference.add")
    assert row.cells[0].evidence.status == "passed"

    rec = _copy(genuine)
    change(rec)
    evidence.write_atomic(path, rec)
    doc = _export(d)
    entry = doc["capsules"]["reference.add"]
    assert entry["earned"] is None and contradiction in entry["reason"]
    assert doc["unusable"] == [entry["reason"]]
    assert entry["reason"].startswith(f"{path}: refused: the record ")
    report = build_report([d], RegistryBuild())
    [bad] = report.unusable
    assert bad.file == str(path) and contradiction in bad.what
    row = next(r for r in report.rows if r.info.name == "reference.add")
    assert row.cells[0].evidence is None and row.cells[0].absent == "unusable record"


def test_a_record_saved_as_another_capsule_with_its_published_fingerprint_is_refused(
        genuine, tmp_path):
    d = tmp_path / "cpu"
    d.mkdir()
    published = _export(d, ("reference.softmax",))["capsules"]["reference.softmax"]
    assert published["fingerprint"]            # what trust.json itself publishes
    rec = _copy(genuine)
    rec["fingerprint"]["value"] = published["fingerprint"]
    evidence.write_atomic(d / "reference.softmax.json", rec)
    doc = _export(d, ("reference.softmax",))
    entry = doc["capsules"]["reference.softmax"]
    assert entry["earned"] is None
    assert "it names capsule `reference.add` but its file is reference.softmax.json" in \
        entry["reason"]
    report = build_report([d], RegistryBuild())
    assert [u.file for u in report.unusable] == [str(d / "reference.softmax.json")]
    assert not any(r.evidence for r in report.rows)


def test_a_record_in_another_devices_directory_is_refused(genuine, tmp_path):
    """reports/evidence/<device>/ holds that device's records: a directory named after a device
    of the registered capsules refuses another device's record."""
    d = tmp_path / "cuda"
    d.mkdir()
    evidence.write_atomic(d / "reference.add.json", genuine)
    assert build_report([d], FixedBuild([], {})).unusable == []     # `cuda`: no known device
    cuda_only = [evidence.capsule_record(_target("native_cuda.add")[0])]
    [bad] = build_report([d], FixedBuild(cuda_only, {})).unusable
    assert "it names device `cpu` but the evidence directory holds cuda evidence" in bad.what


def test_every_honest_record_agrees_with_itself_and_its_place():
    """The fixtures and every record the GPU runs committed (flush-to-zero builds whose passing
    flushed elements lie far over the bound included) are refused for nothing."""
    checked = 0
    for p in [*FIX.rglob("*.json"), *(REPO / "evidence").rglob("*.json")]:
        doc = json.loads(p.read_text())
        if not isinstance(doc, dict) or doc.get("schema") != EVIDENCE_SCHEMA:
            continue
        assert record_integrity.refusal(doc, p) is None, p
        assert record_integrity.derived_status(doc) == doc["status"], p
        checked += 1
    assert checked >= 100


@pytest.mark.parametrize("rec, status", [
    ({"status": "passed", "cases": {"total": 3, "failed": 0}}, "passed"),
    ({"status": "passed", "cases": {"total": 0, "failed": 0}}, None),
    ({"status": "passed", "cases": {"total": 3, "failed": 0, "harness_errors": 1}},
     "harness-error"),
    ({"status": "passed", "cases": {"total": 3, "failed": 0},
      "stats": {"vjp": {"worst_ratio_failing": 4.0}}}, "failed"),
    ({"status": "passed", "cases": {"total": 3, "failed": 0}, "stats": {"forward": {
        "worst_ratio": 9.0}}, "error_model": {"forward": {"r": {"flush_allowed": True}}}},
     "passed"),
    ({"status": "failed", "cases": {"total": 3, "failed": 0}}, "passed"),
    ({"status": "crashed", "cases": {"total": 0, "failed": 0}}, "crashed"),
])
def test_the_status_is_derived_from_the_counts(rec, status):
    assert record_integrity.derived_status(rec) == status


def test_a_failed_record_without_a_failed_case_contradicts_itself():
    rec = {"status": "failed", "cases": {"total": 3, "failed": 0},
           "failure_reasons": {"exceeds-bound": 1}}
    assert record_integrity.contradictions(rec) == [
        "no case failed (cases.failed is 0) but failure_reasons lists `exceeds-bound` x1"]


# --- readers open only regular files inside the directory ---------------------------------------

def _evidence_copy(tmp_path: Path) -> Path:
    d = tmp_path / "cpu"
    shutil.copytree(FIX / "cpu", d)
    return d


def test_a_fifo_record_does_not_hang_run_report_or_export(tmp_path):
    d = _evidence_copy(tmp_path)
    os.mkfifo(d / "reference.abs.json")
    os.mkfifo(d / "exhaustive-reference.abs.json")      # the sweep page's reader too
    report = cli("report", "--evidence-dir", str(d), "--out", str(tmp_path / "out"), timeout=60)
    warning = f"{d / 'reference.abs.json'}: is a FIFO (named pipe), not a regular file"
    assert report.returncode == 1 and f"warning: {warning}; delete it" in report.stderr
    sweeps = (tmp_path / "out" / names.EXHAUSTIVE_PAGE).read_text()
    assert "exhaustive-reference.abs.json: cannot be read (is a FIFO (named pipe), not a " \
           "regular file)" in sweeps
    export = cli("export-trust", "--evidence-dir", str(d), timeout=60)
    assert export.returncode == 1 and f"warning: {warning}; rerun" in export.stderr
    assert "Traceback" not in report.stderr + export.stderr
    run = cli("run", "--suite", "campaign", "--quick", "--no-progress", "--capsule",
              "reference.abs", "--timeout", "60", "--evidence-dir", str(d), timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads((d / "reference.abs.json").read_text())["status"] == "passed"


def test_links_out_of_the_directory_are_refused_not_followed(genuine, tmp_path):
    d = _evidence_copy(tmp_path)
    (d / "reference.abs.json").symlink_to("/dev/zero")
    outside = tmp_path.resolve() / "elsewhere" / "reference.add.json"
    outside.parent.mkdir()
    evidence.write_atomic(outside, genuine)
    (d / "reference.add.json").unlink()
    (d / "reference.add.json").symlink_to(outside)
    report = cli("report", "--evidence-dir", str(d), "--out", str(tmp_path / "out"), timeout=60)
    assert report.returncode == 1 and "Traceback" not in report.stderr
    assert f"{d / 'reference.abs.json'}: is a symbolic link to /dev/zero, outside the " \
           f"directory {d}; delete it" in report.stderr
    assert f"{d / 'reference.add.json'}: is a symbolic link to {outside}, outside the " \
           f"directory {d}; delete it" in report.stderr
    export = cli("export-trust", "--evidence-dir", str(d), timeout=60)
    assert export.returncode == 1 and "Traceback" not in export.stderr   # not aborted
    doc = json.loads((d / "trust.json").read_text())
    add = doc["capsules"]["reference.add"]
    assert add["earned"] is None and f"is a symbolic link to {outside}, outside" in add["reason"]
    assert len(doc["capsules"]) > 2


@pytest.mark.parametrize("damage, problem", [
    ("nested", f"nests arrays and objects 200000 deep, more than the {MAX_JSON_DEPTH}"),
    ("sparse", "holds 4294967296 bytes, more than the 33554432 a harness file may hold"),
])
def test_a_deep_or_huge_record_is_named_not_a_traceback(damage, problem, tmp_path):
    d = tmp_path / "ev"
    d.mkdir()
    path = d / "reference.add.json"
    if damage == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)       # 400 KB
    else:
        with open(path, "wb") as f:
            f.truncate(4 * 2 ** 30)                          # sparse: no block is written
    out = cli("export-trust", "--evidence-dir", str(d), timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"warning: {path}: {problem}" in out.stderr
    assert json.loads((d / "trust.json").read_text())["capsules"]["reference.add"]["earned"] \
        is None


def test_read_regular_checks_kind_place_and_size_before_reading(tmp_path):
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(RefusedFile, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_regular(tmp_path / "pipe.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with pytest.raises(RefusedFile, match="is a character device, not a regular file"):
        read_regular(tmp_path / "zero.json")
    (tmp_path / "a.json").write_text('{"a": [1]}')
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "link.json").symlink_to(tmp_path / "a.json")
    assert read_regular(tmp_path / "inner" / "link.json") == b'{"a": [1]}'
    with pytest.raises(RefusedFile, match="outside the directory"):
        read_regular(tmp_path / "inner" / "link.json", inside=tmp_path / "inner")
    with pytest.raises(RefusedFile, match="holds 10 bytes, more than the 9"):
        read_regular(tmp_path / "a.json", limit=9)
    assert read_regular(tmp_path / "a.json", limit=10) == b'{"a": [1]}'
    # brackets in strings do not nest; an object holding 63 arrays is 64 deep: the cap
    (tmp_path / "deep.json").write_text('{"x": "[[[[", "y": ' + "[" * 63 + "]" * 63 + "}")
    assert read_object(tmp_path / "deep.json", "fix")["x"] == "[[[["
    (tmp_path / "deep.json").write_text('{"y": ' + "[" * 64 + "]" * 64 + "}")
    with pytest.raises(UnusableFileError, match="nests arrays and objects 65 deep, more than "
                                                "the 64"):
        read_object(tmp_path / "deep.json", "fix")


# --- writes: atomic, and a full disk is the environment's failure (exit 4) ---------------------

class _FullFile:
    """A file opened for writing on a full disk: the open worked (and truncated it), no byte
    can be written."""

    def __init__(self, f, err: int) -> None:
        self._f, self._err = f, err

    def write(self, data):
        if data:
            raise OSError(self._err, os.strerror(self._err))
        return 0

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def full_disk(monkeypatch, under: Path, err: int = errno.ENOSPC) -> None:
    """Every non-empty write to a file under `under` fails with `err` (ENOSPC: a full disk),
    through os.write or any file object: an empty probe file can still be made."""
    root = str(under.resolve())
    real_write, real_open = os.write, io.open

    def on_disk(target) -> bool:
        try:
            where = os.readlink(f"/proc/self/fd/{target}") if isinstance(target, int) else \
                os.path.realpath(target)
        except OSError:
            return False
        return where.startswith(root)

    def write(fd, data):
        if data and on_disk(fd):
            raise OSError(err, os.strerror(err))
        return real_write(fd, data)

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _FullFile(f, err) if set(mode) & set("wax+") and on_disk(file) else f
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(io, "open", open_)
    monkeypatch.setattr(builtins, "open", open_)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_a_full_disk_keeps_the_previous_report_and_exits_4(err, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    build = json.loads((FIX / "current_build.json").read_text())
    monkeypatch.setattr("reports.current.RegistryBuild",
                        lambda: FixedBuild(build["registered"], build["fingerprints"],
                                           build.get("earned")))
    args = ["--evidence-dir", str(FIX / "cpu"), "--out", str(out)]
    assert report_main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    full_disk(monkeypatch, out, err)
    assert report_main(args) == EXIT_ENVIRONMENT
    message = capsys.readouterr().err
    assert message.startswith("torchlean-conformance report: cannot write the report page `"
                              f"{out}/") and os.strerror(err) in message
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before    # whole, no temp left


def test_pages_are_replaced_whole(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "capsule-reference.gone.html").write_text("a capsule no longer reported")
    index = render_report([str(FIX / "cpu")], str(out), build=FixedBuild([], {}))
    assert index.read_text().startswith("<!DOCTYPE html>")
    assert not (out / "capsule-reference.gone.html").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_while_writing_the_lock_exits_4(tmp_path, monkeypatch, capsys):
    from conformance import cli as conformance_cli
    d = tmp_path / "ev"
    d.mkdir()
    full_disk(monkeypatch, d)
    with pytest.raises(EnvironmentFailure, match="cannot write the evidence directory's lock"):
        with EvidenceLock(d):
            pass
    assert conformance_cli.main(["run", "--suite", "campaign", "--quick", "--capsule",
                                 "reference.abs", "--evidence-dir", str(d)]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err
    assert "cannot write the evidence directory's lock" in err and "No space left" in err
    assert not (d / "reference.abs.json").exists()           # no work was done
    monkeypatch.undo()
    with EvidenceLock(d):      # released: a later run takes it
        pass


def test_export_trust_on_a_full_disk_exits_4_and_keeps_the_previous_export(tmp_path,
                                                                            monkeypatch, capsys):
    from conformance import cli as conformance_cli
    d, outdir = tmp_path / "ev", tmp_path / "out"
    d.mkdir()
    outdir.mkdir()
    (outdir / "trust.json").write_text('{"previous": true}')
    full_disk(monkeypatch, outdir)
    code = conformance_cli.main(["export-trust", "--evidence-dir", str(d), "--out",
                                 str(outdir / "trust.json")])
    err = capsys.readouterr().err
    assert code == EXIT_ENVIRONMENT, err
    assert f"cannot write `{outdir / 'trust.json'}`: No space left on device" in err
    monkeypatch.undo()
    assert [p.name for p in outdir.iterdir()] == ["trust.json"]
    assert json.loads((outdir / "trust.json").read_text()) == {"previous": True}


def test_export_trust_out_a_directory_is_a_usage_error(tmp_path):
    d = tmp_path / "ev"
    d.mkdir()
    out = cli("export-trust", "--evidence-dir", str(d), "--out", str(tmp_path), timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"--out {tmp_path} is a directory; export-trust writes one file: pass a file path, " \
           f"e.g. --out {tmp_path / 'trust.json'}" in out.stderr
    assert not (d / "trust.json").exists()


# --- the run field -------------------------------------------------------------------------------

def test_the_run_field_is_optional_and_checked_when_present(genuine):
    pytest.importorskip("jsonschema")
    import jsonschema
    evidence.validate(genuine)                                   # older records: no `run`
    run = {"nonce": "0123456789abcdef0123456789abcdef", "seed": 7, "seed_source": "given"}
    evidence.validate({**genuine, "run": run})
    for bad in ({**run, "nonce": "xyz"}, {**run, "seed_source": "guessed"},
                {"nonce": run["nonce"], "seed": 7}):
        with pytest.raises(jsonschema.ValidationError):
            evidence.validate({**genuine, "run": bad})
