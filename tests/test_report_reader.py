"""The report's reader against every kind of corrupt evidence file: each one survived, named,
counted and failing the command (exit 1), and no wrong type anywhere in a record gets past the
reader. Split from tests/test_reports.py, whose helpers and fixtures it shares."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from reports.builder import build_report
from reports.current import FixedBuild
from reports.render import main as report_main
from reports.writer import write_report
from test_reports import FIX, copy_dir, fixed_build


# --- corrupt evidence: survived, named, counted ---------------------------------------------------

def _doc(name: str, change=None, where: str = "cpu") -> str:
    doc = json.loads((FIX / where / name).read_text())
    if change is not None:
        change(doc)
    return json.dumps(doc)


def _set(path, value):
    """A change that sets the field at `path` (a dotted string, or a tuple where a key holds a
    dot; list items by number)."""
    def change(doc):
        keys = path if isinstance(path, tuple) else path.split(".")
        *head, last = [int(k) if isinstance(k, str) and k.isdigit() else k for k in keys]
        for k in head:
            doc = doc[k]
        if value is _DELETE:
            del doc[last]
        else:
            doc[last] = value
    return change


_DELETE = object()


def _json_error(text: str) -> str:
    """What the reader says about this cut-off JSON (json's own position and message)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        msg = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
        return f"is not valid JSON ({msg} at line {exc.lineno} column {exc.colno}; cut short or " \
               "damaged)"
    raise AssertionError("the text parses")
RERUN = ("rerun `torchlean-conformance run --capsule {} --fresh --device cpu "
         "--evidence-dir {{dir}}`")
STATUS_ENUM = ("one of 'passed', 'failed', 'harness-error', 'crashed', 'timed-out', "
               "'interrupted', 'unsupported'")
# kind -> (file, content, what is wrong, what to do); {dir} is the evidence directory
CORRUPT = {
    "truncated": ("reference.add.json", _doc("reference.add.json")[:300],
                  _json_error(_doc("reference.add.json")[:300]), RERUN.format("reference.add")),
    "empty": ("reference.exp.json", "", "is empty", RERUN.format("reference.exp")),
    "array": ("reference.matmul.json", "[]", "is an array, expected a JSON object",
              RERUN.format("reference.matmul")),
    "string": ("reference.layer_norm.json", '"text"', "is a string, expected a JSON object",
               RERUN.format("reference.layer_norm")),
    "not-utf8": ("reference.sin.json", b"\xff\xfe{}", "is not UTF-8 text (byte 0xff at offset 0)",
                 RERUN.format("reference.sin")),
    "bare-header": ("reference.relu.json",
                    '{"schema": "torchlean-conformance-evidence", "schema_version": 2}',
                    "the evidence record has no `capsule`, `status`, `settings`, `error_model` "
                    "and 8 more (required fields missing)", RERUN.format("reference.relu")),
    "cases-not-object": ("reference.add.json", _doc("reference.add.json", _set("cases", "18")),
                         "`cases` is a string, expected an object", RERUN.format("reference.add")),
    "status-not-string": ("reference.add.json", _doc("reference.add.json", _set("status", 3)),
                          f"`status` is an integer, expected {STATUS_ENUM}",
                          RERUN.format("reference.add")),
    "status-unknown": ("reference.add.json",
                       _doc("reference.add.json", _set("status", "exploded")),
                       f"`status` is 'exploded', expected {STATUS_ENUM}",
                       RERUN.format("reference.add")),
    "counterexamples-not-list": ("reference.exp.json",
                                 _doc("reference.exp.json", _set("counterexamples", {"a": 1})),
                                 "`counterexamples` is an object, expected an array",
                                 RERUN.format("reference.exp")),
    "stats-missing": ("reference.add.json", _doc("reference.add.json", _set("stats", _DELETE)),
                      "the evidence record has no `stats` (required field missing)",
                      RERUN.format("reference.add")),
    "class-run-not-int": ("reference.add.json",
                          _doc("reference.add.json", _set("cases.by_class.normal.run", "2")),
                          "`cases.by_class.normal.run` is a string, expected an integer",
                          RERUN.format("reference.add")),
    "element-not-list": ("reference.exp.json", _doc("reference.exp.json", _set(
        "counterexamples.0.failures.0.element", "3,1")),
        "`counterexamples[0].failures[0].element` is a string, expected an array",
        RERUN.format("reference.exp")),
    "name-not-string": ("reference.add.json",
                        _doc("reference.add.json", _set("capsule.name", 7)),
                        "`capsule.name` is an integer, expected a string",
                        RERUN.format("reference.add")),
    "unknown-schema-version": ("reference.add.json",
                               _doc("reference.add.json", _set("schema_version", 3)),
                               "schema_version 3 is not one this report reads (1, 2)",
                               RERUN.format("reference.add")[:-1] + "` with this checkout (or "
                               "read it with the torchlean-conformance that wrote it)"),
    "trust-truncated": ("trust.json", _doc("trust.json")[:100],
                        _json_error(_doc("trust.json")[:100]),
                        "rerun `torchlean-conformance export-trust --device cpu --evidence-dir "
                        "{dir} --tests JUNIT_XML`, or delete it"),
    "trust-array": ("trust.json", "[]", "is an array, expected a JSON object",
                    "rerun `torchlean-conformance export-trust --device cpu --evidence-dir {dir} "
                    "--tests JUNIT_XML`, or delete it"),
    "trust-bare-header": ("trust.json",
                          '{"format": "torchlean-conformance-trust", "version": 2}',
                          "the trust export has no `device`, `generated`, `capsules` (required "
                          "fields missing)",
                          "rerun `torchlean-conformance export-trust --device cpu --evidence-dir "
                          "{dir} --tests JUNIT_XML`, or delete it"),
    "trust-earned-unknown": ("trust.json", _doc("trust.json", _set(
        ("capsules", "reference.add", "earned"), "super")),
        "`capsules.reference.add.earned` is 'super', expected one of 'verified', 'checked', "
        "'fuzzed', 'trusted-external' or null",
        "rerun `torchlean-conformance export-trust --device cpu --evidence-dir {dir} --tests "
        "JUNIT_XML`, or delete it"),
    "trust-version": ("trust.json", _doc("trust.json", _set("version", 9)),
                      "trust export version 9 is not one this report reads (1, 2)",
                      "rerun `torchlean-conformance export-trust --device cpu --evidence-dir "
                      "{dir} --tests JUNIT_XML`, or delete it"),
    "suite-truncated": ("suite-guards.json", _doc("suite-guards.json")[:50],
                        _json_error(_doc("suite-guards.json")[:50]),
                        "rerun `torchlean-conformance run --suite guards --device cpu "
                        "--evidence-dir {dir}`, or delete it"),
    "suite-outcomes-not-list": ("suite-guards.json",
                                _doc("suite-guards.json", _set("outcomes", "none")),
                                "`outcomes` is a string, expected an array",
                                "rerun `torchlean-conformance run --suite guards --device cpu "
                                "--evidence-dir {dir}`, or delete it"),
    "suite-string": ("suite-determinism.json", '"text"', "is a string, expected a JSON object",
                     "rerun `torchlean-conformance run --suite determinism --device cpu "
                     "--evidence-dir {dir}`, or delete it"),
    "not-evidence": ("other.json", '{"hello": 1}',
                     "is neither an evidence record, a suite record nor a trust export",
                     "delete it, or move it out of the evidence directory"),
    "duplicate": ("reference.add.copy.json", _doc("reference.add.json"),
                  "a second record for `reference.add` (the report reads reference.add.json)",
                  "delete it"),
}
# the table's rows: the capsules with records (reference.reduce_sum has none: listed apart)
ROWS = {"reference.add", "reference.exp", "reference.matmul", "reference.layer_norm",
        "reference.sin", "reference.relu", "native_cuda.add", "cublas.matmul",
        "native_cuda.scatter_add"}


def _write(path: Path, content) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


@pytest.fixture
def fixed_registry(monkeypatch):
    """`report` as a user runs it, with current_build.json standing in for the registry."""
    monkeypatch.setattr("reports.current.RegistryBuild", fixed_build)


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_each_corrupt_file_is_named_and_fails_the_command(kind, tmp_path, capsys,
                                                          fixed_registry):
    file, content, what, todo = CORRUPT[kind]
    d = copy_dir(FIX / "cpu", tmp_path / "cpu")
    _write(d / file, content)
    out = tmp_path / "out"
    assert report_main(["--evidence-dir", str(d), str(FIX / "h200"), "--out", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    todo = todo.format(dir=d)
    assert err == [f"torchlean-conformance report: warning: {d / file}: {what}; {todo}"]
    index = (out / "index.html").read_text()
    assert set(re.findall(r'<tr id="capsule-([\w.]+)"', index)) == ROWS
    assert f"<code>{d / file}</code>: " in index             # the warning row names the file
    assert 'id="unusable">1 evidence file could not be used' in index
    report = build_report([d, FIX / "h200"], fixed_build())
    evidenced = {r.info.name for r in report.rows if r.evidence}
    good = {p.stem for p in (FIX / "cpu").glob("reference.*.json")} | \
        {"native_cuda.add", "cublas.matmul", "native_cuda.scatter_add"}
    if file.startswith("reference.") and kind != "duplicate":
        lost = json.loads(_doc("reference.add.json"))["capsule"]["name"] \
            if kind == "name-not-string" else Path(file).stem
        assert evidenced == good - {lost}
        row = next(r for r in report.rows if r.info.name == lost)
        assert row.cells[0].absent == "unusable record" and row.cells[0].unusable.what == what
        cell = index.split(f'id="capsule-{lost}"')[1].split("</tr>")[0]
        assert 'class="first unusable">unusable record' in cell
    else:
        assert evidenced == good


def test_every_corrupt_kind_at_once(tmp_path, capsys, fixed_registry):
    """One of each kind of file-level damage in one directory: each named once on stderr and on
    the index, exit 1, and every capsule with a good record still rendered."""
    d = copy_dir(FIX / "cpu", tmp_path / "cpu")
    picks = ["truncated", "empty", "array", "string", "not-utf8", "bare-header",
             "trust-earned-unknown", "suite-outcomes-not-list", "suite-string", "not-evidence"]
    for kind in picks:
        _write(d / CORRUPT[kind][0], CORRUPT[kind][1])
    (d / "reference.extra.json").write_text(_doc("reference.add.json", _set("schema_version", 7)))
    out = tmp_path / "out"
    assert report_main(["--evidence-dir", str(d), str(FIX / "h200"), "--out", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(picks) + 1
    assert all(line.startswith("torchlean-conformance report: warning: ") for line in err)
    named = sorted(line.split(": ")[2] for line in err)
    assert named == sorted([str(d / CORRUPT[k][0]) for k in picks] +
                           [str(d / "reference.extra.json")])
    assert not any("report defect" in line for line in err)
    index = (out / "index.html").read_text()
    # reference.reduce_sum has no record, and no usable record says the directory audits the
    # cpu: it is listed under the capsules no directory covers, not tabulated
    assert set(re.findall(r'<tr id="capsule-([\w.]+)"', index)) == ROWS - {"reference.reduce_sum"}
    folded = index.split('id="not-audited-here"')[1].split("</details>")[0]
    assert 'id="capsule-reference.reduce_sum"' in folded
    assert "11 evidence files could not be used" in index
    assert index.count('<tr class="warn"><td>unusable</td>') == 11
    report = build_report([d, FIX / "h200"], fixed_build())
    assert {r.info.name for r in report.rows if r.evidence} == \
        {"native_cuda.add", "cublas.matmul", "native_cuda.scatter_add"}
    assert report.directories[0].trust is None            # its trust.json was unusable
    for name in ("reference.add", "reference.exp", "reference.relu"):
        assert (out / f"capsule-{name}.html").exists()


def test_good_directories_exit_0_and_say_nothing(tmp_path, capsys, fixed_registry):
    out = tmp_path / "out"
    assert report_main(["--evidence-dir", *map(str, (FIX / "cpu", FIX / "h200")),
                        "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.strip() == str(out / "index.html")
    assert 'id="unusable"' not in (out / "index.html").read_text()


def _paths(doc, prefix=()):
    """Every field path of a parsed document (the first item of each array)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list) and doc:
        yield prefix + (0,)
        yield from _paths(doc[0], prefix + (0,))


WRONG = (None, [], {}, "x", 1.5, True)


# (directory, file, the top-level fields to vary: all of them, or only those this file adds to
# what another parameter already covers)
@pytest.mark.parametrize("files", [("cpu", "reference.exp.json", None),
                                   ("cpu", "reference.relu.json", ("harness_errors", "cases")),
                                   ("h200", "native_cuda.scatter_add.json", None),
                                   ("cpu", "suite-guards.json", None),
                                   ("cpu", "suite-allocator-cap.json", None),
                                   ("h200", "suite-determinism.json", None),
                                   ("h200", "trust.json", None)], ids=lambda f: f[1])
def test_no_wrong_type_anywhere_gets_past_the_reader(files, tmp_path):
    """Every field of a record (v1 and v2), suite record and trust export set to each JSON
    type in turn: either the reader names the file as unusable, or the builder and the
    templates render it. Nothing raises, and the builder's safety net never fires."""
    where, name, fields = files
    doc = json.loads((FIX / where / name).read_text())
    d = tmp_path / "ev"
    d.mkdir()
    if name == "trust.json":          # a record that the export decides for
        shutil.copy(FIX / where / "cublas.matmul.json", d)
    build = FixedBuild([], {})
    rejected = rendered = 0
    for path in _paths(doc):
        if fields is not None and path[0] not in fields:
            continue
        for wrong in WRONG:
            changed = json.loads(json.dumps(doc))
            node = changed
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = wrong
            (d / name).write_text(json.dumps(changed))
            report = build_report([d], build)
            assert not any("report defect" in u.todo for u in report.unusable), path
            if report.unusable:
                assert [u.file for u in report.unusable] == [str(d / name)]
                rejected += 1
            else:
                write_report(report, tmp_path / "out", "G")
                rendered += 1
    assert rejected > 0 and rendered > 0
