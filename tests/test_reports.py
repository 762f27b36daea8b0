"""The HTML report (reports/): gold pages from a fixed evidence set, escaping of hostile text,
counts, staleness, earned trust from trust exports, directory columns, suite pages, schema_version
1 and 2 records, every kind of corrupt evidence file (named, counted, exit 1), and the pieces
beneath (names, charts, formatting, the `report` command).

Gold pages live in fixtures/golden/, rendered from fixtures/evidence/{cpu,h200} with the build
described in fixtures/evidence/current_build.json; only the footer (time and versions) is
scrubbed. After an intended change to the pages, regenerate them with
`TORCHLEAN_UPDATE_GOLDEN=1 pytest tests/test_reports.py -k gold` and review the diff.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports import charts, names
from reports.builder import build_report, failure_ratio, worst
from reports.current import FixedBuild, RegistryBuild
from reports.model import StatsView
from reports.render import main as report_main, render_report
from reports.reader import DirectoryData
from reports.writer import full, num, write_report

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


# --- pieces ---------------------------------------------------------------------------------------

def test_slugs_are_stable_safe_and_distinct():
    assert names.slug("reference.add") == "reference.add"
    assert names.capsule_page("native_cuda.matmul") == "capsule-native_cuda.matmul.html"
    evil = names.slug("<script>")
    assert evil == names.slug("<script>") and re.fullmatch(r"[A-Za-z0-9._-]+", evil)
    assert names.slug("a/b") != names.slug("a_b") and names.slug("a b") != names.slug("a_b")
    assert not names.slug("..").startswith(".")
    assert names.capsule_citation("reference.add") == \
        "capsule-reference.add.html#capsule-reference.add"


def _stats(hist, worst_ratio=0.5, pct=(0.0, 0.2, 0.4)):
    return StatsView("forward", sum(c for _, c in hist), worst_ratio, 1.0,
                     list(zip(("p50", "p90", "p99"), pct)), hist)


def test_histogram_bars_follow_counts_on_a_log_scale():
    chart = charts.histogram(_stats([("0", 999), ("(0,0.5]", 0), ("(0.5,1]", 9)]))
    bars = [s for s in chart.shapes if s.kind == "rect"]
    assert [b.h for b in bars][1] == 0 and bars[0].h == 120
    assert bars[2].h == pytest.approx(120 * 1 / 3, abs=0.1)     # log10(10) / log10(1000)
    counts = [s.text for s in chart.shapes if s.cls == "count"]
    assert counts == ["999", "0", "9"]


def test_distribution_marks_the_bound_and_off_scale_failures():
    chart = charts.distribution([_stats([("0", 1)])], failure_worst=8.4e6)
    assert any(s.cls == "bound" for s in chart.shapes)
    off = [s.text for s in chart.shapes if s.cls == "offscale"]
    assert off == ["worst 8.4e+06, off scale"]
    lanes = [s.text for s in chart.shapes if s.cls == "lane"]
    assert lanes == ["forward", "failures"]
    worst_ok = [s for s in chart.shapes if s.cls == "worst-ok"]
    assert len(worst_ok) == 1


def test_number_formatting():
    assert num(0.22445201694096) == "0.224" and full(0.22445201694096) == "0.22445201694096"
    assert num(None) == "—" and num("nan") == "nan" and num(18) == "18" and num(True) == "yes"
    assert worst([0.5, "inf", 2.0]) == "inf" and worst([0.5, None, 2.0]) == 2.0
    assert worst(["inf", "nan"]) == "nan" and worst([]) is None
    assert failure_ratio("nan", 1e-45) == "nan" and failure_ratio(1.0, 0.0) == "inf"
    assert failure_ratio(2.0, 4.0) == 0.5 and failure_ratio(None, 1.0) is None


# --- the command ----------------------------------------------------------------------------------

def test_report_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert report_main([]) == 2
    assert "no evidence directory under reports/evidence/" in capsys.readouterr().err
    assert report_main(["--evidence-dir", "missing"]) == 2
    assert "evidence directory missing does not exist" in capsys.readouterr().err
    copy_dir(FIX / "cpu", tmp_path / "reports" / "evidence" / "cpu")
    stale_page = tmp_path / "reports" / "out" / "capsule-gone.html"
    stale_page.parent.mkdir(parents=True)
    stale_page.write_text("old")
    assert report_main([]) == 0
    index = Path(capsys.readouterr().out.strip())
    assert index == Path("reports/out/index.html") and index.exists()
    assert (tmp_path / "reports/out/capsule-reference.exp.html").exists()
    assert not stale_page.exists()
    # this checkout's registry as the build, one unusable record: named, exit 1
    (tmp_path / "reports/evidence/cpu/reference.exp.json").write_text("[]")
    assert report_main(["--evidence-dir", "reports/evidence/cpu", "reports/evidence/cpu"]) == 2
    capsys.readouterr()
    assert report_main([]) == 1
    assert capsys.readouterr().err == (
        "torchlean-conformance report: warning: reports/evidence/cpu/reference.exp.json: is an "
        "array, expected a JSON object; rerun `torchlean-conformance run --capsule reference.exp "
        "--fresh --device cpu`\n")


# --- ours and PyTorch's (reports/peers.py) --------------------------------------------------------

PEERS = FIX / "peers"   # fixtures/plugins/numpy_peers.py's campaign with a bench-kernels.json


def test_peers_page_only_with_aten_records(out):
    assert not (out / names.PEERS_PAGE).exists()
    assert names.PEERS_PAGE not in (out / "index.html").read_text()


def test_peers_page_model_from_the_fake_peer_campaign():
    report = build_report([PEERS], RegistryBuild())
    assert report.directories[0].unusable == []          # bench-kernels.json is not evidence
    (sec,) = report.peers.sections
    assert sec.ceiling_gbs == 4012.5 and sec.bench_note.startswith("throughput from")
    by_op = {o.op: o for o in sec.ops}
    assert sorted(by_op) == ["add", "gelu"]
    gelu = by_op["gelu"]
    (ours,), (peer,) = gelu.ours, gelu.peers
    assert (ours.name, ours.status, peer.name, peer.status) == (
        "reference.gelu", "passed", "aten.gelu", "failed")
    assert peer.forward_ulps == "nan"                     # NaN at -inf: a NaN mismatch
    assert peer.forward_ratio == "NaN mismatch"          # by name: no ratio measures it
    assert dict(peer.reasons).keys() == {"nan-mismatch", "exceeds-bound"}
    assert ours.throughput == [("2^26", "1286 GB/s", "1200 GB/s")]     # large cases only
    assert peer.throughput == [("2^26", "4044 GB/s", "3900 GB/s")]     # PyTorch's, same rows
    assert by_op["add"].peers[0].forward_ulps == 0.0


def test_peers_page_says_when_the_benchmark_is_absent(tmp_path):
    d = copy_dir(PEERS, tmp_path / "peers")
    (d / "bench-kernels.json").unlink()
    index = render_report([str(d)], str(tmp_path / "out"))
    page = (index.parent / names.PEERS_PAGE).read_text()
    assert "no bench-kernels.json in this directory: throughput not measured" in page
    report = build_report([d], RegistryBuild())
    assert all(s.throughput == [] for o in report.peers.sections[0].ops for s in o.ours + o.peers)


def test_peers_page_rendered_linked_and_removed_when_gone(tmp_path):
    out_dir = tmp_path / "out"
    index = render_report([str(PEERS)], str(out_dir))
    page = (out_dir / names.PEERS_PAGE).read_text()
    assert 'href="peers.html"' in index.read_text()
    assert 'id="peers-peers-gelu"' in page
    assert "nan-mismatch (4), exceeds-bound (25)" in text_of(page)
    assert '<td class="num ratio bad">' in page            # the failing peer's error / bound
    render_report([str(REPO / d) for d in DIRS], str(out_dir), build=fixed_build())
    assert not (out_dir / names.PEERS_PAGE).exists()


def test_peers_throughput_without_our_record(tmp_path):
    d = copy_dir(PEERS, tmp_path / "peers")
    (d / "reference.gelu.json").unlink()
    gelu = {o.op: o for o in build_report([d], RegistryBuild()).peers.sections[0].ops}["gelu"]
    assert gelu.ours == []
    assert gelu.peers[0].throughput == [("2^26", "4044 GB/s", "3900 GB/s")]
