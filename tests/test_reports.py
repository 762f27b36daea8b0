"""The HTML report (reports/): gold pages from a fixed evidence set, escaping of hostile text,
counts, staleness, earned trust from trust exports, directory columns, suite pages, schema_version
1 and 2 records. Corrupt evidence files: tests/test_report_reader.py; the pieces beneath (names,
charts, formatting, the `report` command, the peers page): tests/test_report_pieces.py.

Gold pages live in fixtures/golden/, rendered from fixtures/evidence/{cpu,h200} with the build of
fixtures/evidence/current_build.json; only the footer (time and versions) is scrubbed. After an
intended change to the pages: `TORCHLEAN_UPDATE_GOLDEN=1 pytest tests/test_reports.py -k gold`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports import names
from reports.builder import build_report
from reports.current import FixedBuild, RegistryBuild
from reports.render import render_report
from reports.reader import DirectoryData
from reports.writer import num

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
GOLDEN = REPO / "fixtures" / "golden"
DIRS = ["fixtures/evidence/cpu", "fixtures/evidence/h200"]
GENERATED = re.compile(r'<p class="generated">[^<]*</p>')


def fixed_build(**changes) -> FixedBuild:
    doc = json.loads((FIX / "current_build.json").read_text())
    doc.update(changes)
    return FixedBuild(doc["registered"], doc["fingerprints"], doc.get("earned"))


def text_of(html: str) -> str:
    """A page's text as a reader copies it: no tags (the <wbr> joints and nowrap spans that keep
    names, paths and commands from breaking mid-word are markup, not text)."""
    return re.sub(r"<[^>]+>", "", html)


def scrub(text: str) -> str:
    return GENERATED.sub('<p class="generated">GENERATED</p>', text)


@pytest.fixture
def out(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(REPO)     # directory paths appear on the pages as given: keep them relative
    return render_report(DIRS, str(tmp_path / "out"), build=fixed_build()).parent


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(text: str) -> list[tuple[str, dict]]:
    p = _Tags()
    p.feed(text)
    return p.tags


# --- gold pages -----------------------------------------------------------------------------------

def test_gold_pages(out):
    pages = sorted(p.name for p in out.glob("*.html"))
    if os.environ.get("TORCHLEAN_UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        GOLDEN.mkdir(parents=True)
        for name in pages:
            (GOLDEN / name).write_text(scrub((out / name).read_text()))
    assert pages == sorted(p.name for p in GOLDEN.glob("*.html"))
    for name in pages:
        got = scrub((out / name).read_text())
        assert got == (GOLDEN / name).read_text(), f"{name} differs from fixtures/golden/{name}"


def test_footer_is_the_only_scrubbed_text(out):
    raw = (out / "index.html").read_text()
    assert re.search(r'<p class="generated">generated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 by '
                     r'torchlean-conformance report \S+ \(jinja2 \d', raw)
    assert len(GENERATED.findall(raw)) == 1
    assert (out / "style.css").read_text().startswith("/* TorchLean conformance report")


def test_fixture_records_follow_the_evidence_schema():
    pytest.importorskip("jsonschema")
    from conformance.evidence import schema, validate
    records = [p for d in DIRS for p in (REPO / d).glob("*.json")
               if not p.name.startswith("suite-") and p.name != "trust.json"]
    assert len(records) == 9
    versions = {json.loads(p.read_text())["schema_version"] for p in records}
    assert versions == {1, 2}         # the gold pages read both
    accepted = schema()["properties"]["schema_version"]
    accepted = accepted.get("enum") or [accepted.get("const")]
    checked = [p for p in records if json.loads(p.read_text())["schema_version"] in accepted]
    assert checked, "the writer's schema accepts none of the fixture records' versions"
    for p in checked:
        validate(json.loads(p.read_text()))


def test_fixture_directories_read_whole():
    for d in DIRS:
        data = DirectoryData(REPO / d)
        assert data.unusable == [], [u.line() for u in data.unusable]
        assert data.trust is not None and data.trust["version"] == 2
    assert len(DirectoryData(FIX / "cpu").records) == 6


# --- counts, grouping, columns --------------------------------------------------------------------

def test_counts_partition_the_capsules(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    c = report.counts
    # the headline counts what the directories audited: reference.reduce_sum has no record
    assert (c.capsules, c.passing, c.failing, c.stale, c.unaudited) == (9, 4, 2, 1, 3)
    assert (c.without_evidence, c.other_devices, c.unknown) == (1, 0, 0)
    assert c.passing + c.failing + c.unaudited == c.capsules
    outcome = {r.info.name: r.outcome for r in report.rows}
    assert outcome == {"reference.add": "passing", "reference.matmul": "passing",
                       "native_cuda.add": "passing", "cublas.matmul": "passing",
                       "reference.exp": "failing", "native_cuda.scatter_add": "failing",
                       "reference.layer_norm": "unaudited", "reference.reduce_sum": "unaudited",
                       "reference.sin": "unaudited", "reference.relu": "unaudited"}
    html = (out / "index.html").read_text()
    shown = re.findall(r'<span class="n">(\d+)</span><span class="what">([\w ]+)</span>', html)
    assert shown == [("9", "capsules audited"), ("4", "passing"), ("2", "failing"),
                     ("1", "stale"), ("3", "no verdict")]


def test_rows_grouped_by_op_with_reference_first():
    report = build_report([REPO / d for d in DIRS], fixed_build())
    groups = {g.op: [r.info.name for r in g.rows] for g in report.groups}
    assert groups["matmul"] == ["reference.matmul", "cublas.matmul"]
    assert groups["add"] == ["reference.add", "native_cuda.add"]
    assert [g.op for g in report.groups] == sorted(groups)


def test_each_directory_is_an_evidence_column_of_its_own_rows(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    assert [d.label for d in report.directories] == ["cpu", "h200"]
    assert report.directories[1].gpu == "NVIDIA H200"
    rows = {r.info.name: r for r in report.rows}
    ref, cuda = rows["reference.add"].cells, rows["native_cuda.add"].cells
    assert ref[0].evidence is not None and not ref[1].applicable
    assert cuda[1].evidence is not None and not cuda[0].applicable
    assert rows["reference.reduce_sum"].cells[0].absent == "no evidence"
    html = (out / "index.html").read_text()
    # one row per capsule and directory that audits its device: no placeholder cells for the
    # directories that audit other devices
    assert 'class="first na"' not in html and "column group" not in html
    row = html.split('id="capsule-reference.add"')[1].split("</tr>")[0]
    assert '<td class="dir">cpu</td>' in row and row.count('class="first"') == 1
    row = html.split('id="capsule-native_cuda.add"')[1].split("</tr>")[0]
    assert '<td class="dir">h200</td>' in row
    # a capsule without a record anywhere is listed after the table, not a row of it
    assert '<tr id="capsule-reference.reduce_sum"' not in html
    folded = html.split('<details id="no-evidence-here" class="folded">')[1].split("</details>")[0]
    assert '<a href="capsule-reference.reduce_sum.html" id="capsule-reference.reduce_sum">' \
        in folded


def test_capsules_no_directory_audits_are_folded_into_a_list(tmp_path):
    index = render_report([str(FIX / "cpu")], str(tmp_path / "out"), build=fixed_build())
    html = index.read_text()
    assert set(re.findall(r'<tr id="capsule-([\w.]+)"', html)) == \
        {"reference.add", "reference.exp", "reference.matmul", "reference.layer_norm",
         "reference.sin", "reference.relu"}
    assert '<td class="dir">' not in html             # one directory: no evidence column
    folded = html.split('<details id="not-audited-here" class="folded">')[1] \
        .split("</details>")[0]
    assert "3 capsules for devices no evidence directory here audits (cuda: 3)" in \
        " ".join(folded.split())
    assert folded.count('<a href="capsule-') == 3 and 'id="capsule-cublas.matmul"' in folded


def test_rows_say_what_to_do_about_their_record(out):
    html = (out / "index.html").read_text()

    def step(name):
        row = html.split(f'id="capsule-{name}"')[1].split("</tr>")[0]
        found = re.search(r'<span class="next">(.*?)</span></td>', row, re.S)
        return found and re.sub(r"<[^>]+>", "", found.group(1))
    assert step("reference.matmul") == ("made for another build, so it earns nothing; rerun: "
                                        "torchlean-conformance run --capsule reference.matmul "
                                        "--device cpu --evidence-dir fixtures/evidence/cpu")
    assert step("reference.exp") is None        # a failing row says why instead (below)
    row = html.split('id="capsule-reference.exp"')[1].split("</tr>")[0]
    why = re.sub(r"<[^>]+>", "", row.split('<span class="why-failed">')[1].split("</td>")[0])
    assert why == ("vjp-nan-mismatch × 1, vjp-inf-mismatch × 1replay: torchlean-conformance "
                   "replay reports/evidence/cpu/replays/reference.exp-wide-1.json")
    assert step("reference.sin") == "rerun; resume re-runs it"
    assert step("reference.add") is None                  # fresh, passed and `checked`


def test_numbers_are_short_with_every_digit_on_hover(out):
    page = (out / "capsule-native_cuda.scatter_add.html").read_text()
    shown = re.findall(r'<td class="num">(?:<span[^>]*>)*([-0-9.e+]+)<', page)
    assert shown and max(len(v.lstrip("-").replace(".", "").split("e")[0]) for v in shown) <= 6
    assert '<span class="tok" title="1.1754940705625946e-38">1.175e-38</span>' in page
    assert '<span class="muted tok" title="-1.1754943508222875e-38">-1.17549435e-38</span>' \
        in page
    assert num(0.9999999850988388) == "0.99999999" and num(1.0000001) == "1.0000001"
    assert num(1.0) == "1" and num(0.25) == "0.25"


def _failing(rec: dict) -> None:
    """A passed record made a failed one that agrees with itself (a status alone would be
    refused as a contradiction): one case of the `normal` class failed."""
    rec.update(status="failed", failure_reasons={"exceeds-bound": 1})
    rec["cases"]["failed"] = rec["cases"]["by_class"]["normal"]["failed"] = 1


def test_one_capsule_in_two_directories(tmp_path):
    a = copy_dir(FIX / "cpu", tmp_path / "a")
    b = copy_dir(FIX / "cpu", tmp_path / "b")
    edit(b / "reference.add.json", _failing)
    report = build_report([a, b], fixed_build())
    row = next(r for r in report.rows if r.info.name == "reference.add")
    assert [c.evidence.status for c in row.cells] == ["passed", "failed"]
    assert row.outcome == "failing"
    index = render_report([str(a), str(b)], str(tmp_path / "out"), build=fixed_build())
    page = (index.parent / "capsule-reference.add.html").read_text()
    assert 'id="evidence-a"' in page and 'id="evidence-b"' in page


def test_same_directory_names_get_distinct_labels(tmp_path):
    x = copy_dir(FIX / "cpu", tmp_path / "x" / "cpu")
    y = copy_dir(FIX / "cpu", tmp_path / "y" / "cpu")
    report = build_report([x, y], fixed_build())
    assert [d.label for d in report.directories] == ["x/cpu", "y/cpu"]
    assert len({d.slug for d in report.directories}) == 2


# --- staleness and earned trust -------------------------------------------------------------------

def _cell(report, name, i=0):
    return next(r for r in report.rows if r.info.name == name).cells[i].evidence


def test_stale_when_the_build_fingerprint_moved(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    stale = _cell(report, "reference.matmul")
    assert stale.freshness.state == "stale" and stale.earned is None
    assert stale.earned_why == "stale evidence earns nothing"
    fresh = _cell(report, "reference.add")
    assert fresh.freshness.state == "fresh" and fresh.freshness.recomputed
    html = (out / "index.html").read_text()
    row = html.split('id="capsule-reference.matmul"')[1].split("</tr>")[0]
    assert "fp-stale" in row
    page = (out / "capsule-reference.matmul.html").read_text()
    assert "badge fp-stale" in page


def test_fresh_again_when_fingerprints_agree():
    doc = json.loads((FIX / "current_build.json").read_text())
    rec = json.loads((FIX / "cpu" / "reference.matmul.json").read_text())
    fps = dict(doc["fingerprints"], **{"reference.matmul": rec["fingerprint"]["value"]})
    report = build_report([FIX / "cpu"], fixed_build(fingerprints=fps))
    assert _cell(report, "reference.matmul").freshness.state == "fresh"
    assert report.counts.stale == 0


def test_checked_from_the_trust_export_is_shown(out):
    """cpu/trust.json (version 2) was exported for the current build: reference.add earned
    `checked` there (tests and guards passed), and the index and its page say so."""
    report = build_report([REPO / d for d in DIRS], fixed_build())
    ev = _cell(report, "reference.add")
    assert ev.earned == "checked" and ev.earned_note is None
    assert ev.earned_why.startswith("fuzz campaign passed; 14 test(s) of this capsule passed")
    assert "trust.json exported 2026-11-30T16:45:12+00:00" in ev.earned_why
    assert (ev.capsule_tests.passed, ev.capsule_tests.failed, ev.capsule_tests.skipped) == \
        (14, 0, 0)
    row = (out / "index.html").read_text().split('id="capsule-reference.add"')[1] \
        .split("</tr>")[0]
    assert '<span class="trust tr-checked">checked</span></td>' in row
    page = (out / "capsule-reference.add.html").read_text()
    assert "<tr><th>earned trust</th><td>checked</td></tr>" in page
    assert "<tr><th>tests of this capsule (trust export)</th><td>14 passed, 0 failed, 0 skipped" \
        in page


def test_without_trust_json_earned_is_computed_here(tmp_path):
    d = copy_dir(FIX / "cpu", tmp_path / "cpu")
    (d / "trust.json").unlink()
    report = build_report([d], fixed_build())
    ev = _cell(report, "reference.add")
    assert ev.earned == "fuzzed"                        # current_build.json's earned
    assert "computed here without test evidence (no trust.json in this directory; " \
           "`torchlean-conformance export-trust --tests junit.xml` writes trust.json" \
        in ev.earned_why
    assert report.directories[0].trust is None
    index = render_report([str(d)], str(tmp_path / "out"), build=fixed_build())
    assert "no trust export: earned trust is computed here from the records alone, at most " \
        in index.read_text()


def test_trust_export_for_another_build_does_not_apply(tmp_path):
    d = copy_dir(FIX / "cpu", tmp_path / "cpu")
    edit(d / "trust.json", lambda t: t["capsules"]["reference.add"].update(fingerprint="e" * 64))
    ev = _cell(build_report([d], fixed_build()), "reference.add")
    assert ev.earned == "fuzzed"
    assert "exported 2026-11-30T16:45:12+00:00 for another build fingerprint (eeeeeee), so it " \
           "does not apply" in ev.earned_why
    # The export judged another record of this capsule (its record_fingerprint differs).
    d2 = copy_dir(FIX / "cpu", tmp_path / "cpu2")
    edit(d2 / "trust.json",
         lambda t: t["capsules"]["reference.add"].update(record_fingerprint="d" * 64))
    ev = _cell(build_report([d2], fixed_build()), "reference.add")
    assert ev.earned == "fuzzed" and "judged another record of this capsule" in ev.earned_why
    # ... or a record of the same build with another outcome (rerun since the export)
    d3 = copy_dir(FIX / "cpu", tmp_path / "cpu3")
    edit(d3 / "trust.json", lambda t: t["capsules"]["reference.add"].update(status="failed"))
    ev = _cell(build_report([d3], fixed_build()), "reference.add")
    assert ev.earned == "fuzzed" and "judged another record of this capsule" in ev.earned_why
    # where the fingerprint cannot be recomputed, such an export decides nothing
    h = copy_dir(FIX / "h200", tmp_path / "h200")
    edit(h / "trust.json", lambda t: t["capsules"]["cublas.matmul"].update(status="failed"))
    ev = _cell(build_report([h], fixed_build()), "cublas.matmul")
    assert ev.earned is None and ev.earned_why == (
        "trust.json exported 2026-11-30T16:50:00+00:00 judged another record of this capsule "
        "(status failed), and this machine cannot judge it: rerun export-trust where the record "
        "was made")


def test_trust_export_decides_where_no_fingerprint_can_be_computed(tmp_path, out):
    report = build_report([FIX / "h200"], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "fresh" and "trust.json" in ev.freshness.source
    assert not ev.freshness.recomputed
    assert ev.earned == "fuzzed"          # the H200 guard suite failed: not `checked`
    assert ev.earned_note == ("as exported on NVIDIA H200 at commit efa37c6; not recomputable "
                              "here")
    row = (out / "index.html").read_text().split('id="capsule-cublas.matmul"')[1] \
        .split("</tr>")[0]
    assert '<span class="note">as exported on NVIDIA H200 at commit efa37c6; not recomputable ' \
        'here</span>' in row
    # an export from a tree that differs from its commit names the checkout digest it saw
    dirty = copy_dir(FIX / "h200", tmp_path / "dirty")
    edit(dirty / "trust.json", lambda d: d["checkout"].update(commit="efa37c6" + "0" * 33 +
                                                                "+dirty", digest="5167b384" * 8))
    ev = _cell(build_report([dirty], fixed_build()), "cublas.matmul")
    assert ev.earned_note == ("as exported on NVIDIA H200 at commit efa37c6 with uncommitted "
                              "changes (checkout 5167b384); not recomputable here")
    # ... and so does one from a copy without git (no commit), e.g. a `git archive` on a GPU machine
    nogit = copy_dir(FIX / "h200", tmp_path / "nogit")
    edit(nogit / "trust.json", lambda d: d["checkout"].update(commit=None, digest="b8c626d5" * 8))
    ev = _cell(build_report([nogit], fixed_build()), "cublas.matmul")
    assert ev.earned_note == ("as exported on NVIDIA H200 from a checkout without git (checkout "
                              "b8c626d5); not recomputable here")
    h = copy_dir(FIX / "h200", tmp_path / "h200")
    edit(h / "trust.json", lambda d: d["capsules"]["cublas.matmul"].update(earned="checked"))
    ev = _cell(build_report([h], fixed_build()), "cublas.matmul")
    assert ev.earned == "checked"         # whatever the export says, for this fingerprint
    edit(h / "trust.json", lambda d: d["capsules"]["cublas.matmul"].update(fingerprint="f" * 64))
    report = build_report([h], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "stale" and ev.earned is None
    (h / "trust.json").unlink()
    report = build_report([h], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "unknown" and ev.earned is None
    assert ev.earned_why.startswith("unknown here: no trust.json in this directory, and ")
    assert report.counts.stale == 0


def test_version_1_trust_export_is_still_read(tmp_path):
    h = copy_dir(FIX / "h200", tmp_path / "h200")
    v1 = {"format": "torchlean-conformance-trust", "version": 1, "device": "cuda",
          "test_suite": "test suite: 412 tests passed", "generated": "2026-11-30T16:50:00+00:00",
          "capsules": {"cublas.matmul": {
              "declared": "checked", "earned": "checked", "reason": "fuzz campaign passed",
              "fingerprint": json.loads((h / "cublas.matmul.json").read_text())
              ["fingerprint"]["value"], "status": "passed"}}}
    (h / "trust.json").write_text(json.dumps(v1))
    report = build_report([h], fixed_build())
    t = report.directories[0].trust
    assert (t.version, t.suite_line, t.guards_line) == (
        1, "test suite: 412 tests passed", "guards: not recorded (a version 1 export)")
    ev = _cell(report, "cublas.matmul")
    assert ev.earned == "checked" and ev.capsule_tests is None
    # a v1 export has no commit: the record's own (none in this fixture) is named
    assert ev.earned_note == "as exported on NVIDIA H200 at an unknown commit; not " \
                             "recomputable here"


def test_index_shows_the_trust_exports_test_suite_and_guard_lines(out):
    html = (out / "index.html").read_text().replace('<span class="bad">', "[bad]")
    cpu = text_of(html.split('id="dir-cpu"')[1].split('id="dir-h200"')[0])
    assert "test suite: 489 passed, 0 failed, 183 skipped (reports/evidence/junit.xml)" in cpu
    assert "guards: passed (suite-guards.json: 4 of 4 bad inputs rejected)" in cpu
    h200 = text_of(html.split('id="dir-h200"')[1].split("</tbody>")[0])
    assert "test suite: 655 passed, 0 failed, 17 skipped" in h200
    assert "[bad]guards: failed (suite-guards.json: 3 of 5 bad inputs rejected (FAILED))" in h200
    assert "commit efa37c641809, checkout digest 3f9c2d7a18e0" in h200


def test_registry_build_fingerprints_match_conformance():
    from conformance.fingerprint import fingerprint
    from engine.registry import registry
    from engine.runtime.native import native_available
    build = RegistryBuild()
    cap, handler = registry().get("reference.add")
    value, _ = build.fingerprint("reference.add", {})
    assert value == fingerprint(cap, handler)["value"]
    assert build.fingerprint("plugin.nothing", {})[0] is None
    if not native_available():
        value, why = build.fingerprint("native_cuda.add", {"gpu": "NVIDIA H200"})
        assert value is None and "architecture" in why
    names_ = {c["name"] for c in build.registered()}
    assert "reference.add" in names_ and "cublas.matmul" in names_
    # conformance.trust.earned_for, as this checkout has it: the fixture record is stale here
    rec = json.loads((FIX / "cpu" / "reference.add.json").read_text())
    rec["fingerprint"]["value"] = "0" * 64
    label, why = build.earned(rec)
    assert label is None and why.startswith("stale")


# --- what the pages say ---------------------------------------------------------------------------

def test_failing_capsule_page_has_counterexample_and_replay(out):
    page = (out / "capsule-reference.exp.html").read_text()
    assert "0x64e2bc4b" in page and "vjp-nan-mismatch" in page
    assert ("torchlean-conformance replay reports/evidence/cpu/replays/reference.exp-wide-1.json"
            in text_of(page))
    for anchor in ("capsule-reference.exp", "record", "contracts", "policy", "evidence-cpu",
                   "evidence-cpu-cases", "evidence-cpu-errors", "evidence-cpu-observed",
                   "evidence-cpu-counterexamples", "evidence-cpu-environment"):
        assert f'id="{anchor}"' in page
    assert page.count("<svg") == 3     # two histograms and the distribution


def test_worst_ratio_includes_counterexamples():
    report = build_report([REPO / d for d in DIRS], fixed_build())
    ev = _cell(report, "native_cuda.scatter_add", 1)
    assert ev.stats_worst == pytest.approx(0.5426548906026969)
    assert ev.failure_worst == pytest.approx(1.346300722586536e-38 / 1.6049159092541687e-45)
    assert ev.worst_ratio == ev.failure_worst and ev.worst_is_lower_bound
    assert _cell(report, "reference.exp").worst_ratio == "nan"
    assert not _cell(report, "reference.add").worst_is_lower_bound


def test_forward_and_vjp_worst_apart_failures_included(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    exp = _cell(report, "reference.exp")            # schema_version 2: worst_ratio_failing
    sides = {d.direction: (d.within, d.failing, d.failing_from, d.worst)
             for d in exp.worst_by_direction}
    assert sides == {"forward": (0.0, None, None, 0.0),
                     "vjp": (pytest.approx(0.9758293077885016), "nan", "record", "nan")}
    assert not exp.worst_is_lower_bound             # the record states the failing worst
    scatter = _cell(report, "native_cuda.scatter_add", 1)     # schema_version 1
    fwd, vjp = scatter.worst_by_direction
    assert fwd.failing_from == "counterexamples" and fwd.lower_bound
    assert fwd.failing == pytest.approx(1.346300722586536e-38 / 1.6049159092541687e-45)
    assert (vjp.within, vjp.failing) == (0.0, None)
    row = (out / "index.html").read_text().split('id="capsule-reference.exp"')[1] \
        .split("</tr>")[0]
    # a NaN or inf mismatch by name and count: no ratio measures it
    assert text_of(row.split('class="num worst">')[1].split("</td>")[0]) == \
        "fwd 0vjp NaN mismatch × 1inf mismatch × 1"
    row = (out / "index.html").read_text().split('id="capsule-native_cuda.scatter_add"')[1] \
        .split("</tr>")[0]
    assert '<span class="side">fwd</span> ≥&#8239;8.39e+06</span>' in row
    page = (out / "capsule-reference.exp.html").read_text()
    assert "<th>worst within bound</th><th>worst failing</th>" in page
    vjp_row = page.split('id="evidence-cpu-errors"')[1].split("<tr><td>vjp</td>")[1] \
        .split("</tr>")[0]
    failing = vjp_row.split('<td class="num failing">')[1].split("</td>")[0]
    assert text_of(failing) == "NaN mismatch × 1inf mismatch × 1"
    assert vjp_row.endswith('<td class="num"><span class="tok">1</span></td>')    # worst ulps


def test_counterexamples_show_their_reasons(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    assert [ce.reasons for ce in _cell(report, "reference.exp").counterexamples] == \
        [["vjp-nan-mismatch"], ["vjp-inf-mismatch"]]
    # a version 1 counterexample's reasons are its failures'
    assert [ce.reasons for ce in _cell(report, "native_cuda.scatter_add", 1).counterexamples] \
        == [["exceeds-bound"]]
    page = (out / "capsule-reference.exp.html").read_text()
    assert re.findall(r'<p class="reasons">reasons?: (.*?)</p>', page) == \
        ["<code>vjp-nan-mismatch</code>", "<code>vjp-inf-mismatch</code>"]
    assert "reports/evidence/cpu/replays/reference.exp-near-overflow-0.json" in text_of(page)


def test_edges_first_with_its_label_and_case_sizes(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    add = _cell(report, "reference.add")
    assert [(k.name, k.fixed) for k in add.by_class][:2] == [("edges", True), ("normal", False)]
    assert add.sizes.buckets[:3] == [("0", 2), ("1", 14), ("2-31", 8)]
    assert (add.sizes.max_elements, add.sizes.max_terms, add.sizes.elements_total) == \
        (640, 1, 6842)
    page = (out / "capsule-reference.add.html").read_text()
    cases = page.split('id="evidence-cpu-cases"')[1].split("</table>")[0]
    first = re.findall(r"<tr class=\"\w*\"><td>(.*?)</td>", cases)[0]
    assert text_of(first) == "edges fixed edge set (same for every seed)"
    sizes = page.split('id="evidence-cpu-sizes"')[1].split("</p>")[0]
    assert re.findall(r'<td class="num">(\d+)</td>', sizes) == ["2", "14", "8", "6", "0", "0",
                                                                   "0"]
    assert "largest case: 640 input elements" in sizes
    # a version 1 record has neither: nothing is invented
    assert _cell(report, "native_cuda.scatter_add", 1).sizes is None
    assert 'id="evidence-h200-sizes"' not in (out / "capsule-native_cuda.scatter_add.html") \
        .read_text()


def test_interrupted_and_harness_error_have_styles_and_hints(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    sin, relu = _cell(report, "reference.sin"), _cell(report, "reference.relu")
    assert (sin.status, sin.status_hint) == ("interrupted", "rerun; resume re-runs it")
    assert relu.status_hint == ("a harness defect, not a kernel verdict: report it, the record "
                                "earns nothing")
    assert sin.earned is None and relu.earned is None and sin.vjp_status == "not run"
    html = (out / "index.html").read_text()
    row = html.split('id="capsule-reference.relu"')[1].split("</tr>")[0]
    assert '<td class="first" title="a harness defect, not a kernel verdict: report it, the ' \
           'record earns nothing"><span class="badge st-harness-error">harness-error</span>' in row
    assert '<span class="he">(1 harness error)</span>' in row
    css = (out / "style.css").read_text()
    assert ".st-interrupted {" in css and ".st-harness-error {" in css
    page = (out / "capsule-reference.sin.html").read_text()
    assert '<p class="notice hint st-interrupted-hint"><b>interrupted</b>: rerun; resume ' \
           're-runs it.</p>' in page
    page = (out / "capsule-reference.relu.html").read_text()
    errors = page.split('id="evidence-cpu-harness-errors"')[1].split("</table>")[0]
    assert '<td><span class="tok">wide[1]</span></td><td><code><span class="tok">vjp-reference' \
           '</span></code></td>' in errors
    assert "TypeError: unsupported operand type(s) for *: &#39;mpf&#39; and " \
           "&#39;NoneType&#39;" in text_of(errors)
    assert '<pre class="tb">Traceback (most recent call last):' in errors
    cases = page.split('id="evidence-cpu-cases"')[1].split("</table>")[0]
    assert "<th>harness errors</th>" in cases


def test_suite_pages(out):
    guards = (out / "suite-guards.html").read_text()
    h200 = guards.split('id="suite-guards-h200"')[1]
    results = re.findall(r'<td><span class="badge st-(\w+)">', h200)
    assert results == ["failed", "failed", "passed", "passed", "passed"]   # failures first
    assert "raised PlanningError, expected DeviceMismatchError" in h200
    alloc = (out / "suite-allocator-cap.html").read_text()
    assert "&#39;1MiB&#39;" in alloc and "(unset)" in alloc
    det = (out / "suite-determinism.html").read_text()
    assert 'href="capsule-reference.reduce_sum.html"' in det
    assert 'href="capsule-cublas.matmul.html"' in det


def test_hostile_text_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>\"'"
    d = copy_dir(FIX / "cpu", tmp_path / "ev<script>")
    rec = json.loads((d / "reference.exp.json").read_text())
    rec["capsule"]["notes"] = "<script>alert(\"notes\")</script> it's \"quoted\""
    rec["counterexamples"][0]["case"]["summary"] = "<b onmouseover=alert(2)>x</b>"
    rec["counterexamples"][0]["failures"][0]["reason"] = "<img src=x onerror=alert(3)>"
    rec["error_model"]["forward"]["transcendental"]["label"] = "\" onload=\"alert(4)"
    (d / "reference.exp.json").write_text(json.dumps(rec))
    # a record of a capsule so named cannot be <name>.json: refused, and named on the index
    rec["capsule"]["name"] = evil
    (d / "evil.json").write_text(json.dumps(rec))
    edit(d / "suite-guards.json",
         lambda g: g["outcomes"][0].update(message="<script>alert(5)</script>"))
    index = render_report([str(d)], str(tmp_path / "out"), build=FixedBuild([], {}))
    files = list(index.parent.glob("*.html"))
    assert re.fullmatch(r"capsule-[A-Za-z0-9._-]+\.html", names.capsule_page(evil))
    page = index.parent / names.capsule_page("reference.exp")
    assert page in files
    for f in files:
        text = f.read_text()
        assert "<script" not in text.lower(), f.name
        for tag, attrs in tags(text):
            assert tag not in ("img", "script"), (f.name, tag)
            assert not any(a.startswith("on") for a in attrs), (f.name, tag, attrs)
    html = index.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;" in html
    assert f'href="{page.name}"' in html
    text = text_of(page.read_text())
    assert "&lt;script&gt;alert(&#34;notes&#34;)&lt;/script&gt; it&#39;s &#34;quoted&#34;" in text
    assert "&lt;img src=x onerror=alert(3)&gt;" in text
    guards = text_of((index.parent / "suite-guards.html").read_text())
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in guards
