"""The HTML report (reports/): gold pages from a fixed evidence set, escaping of hostile text,
counts, staleness, directory columns, suite pages, and the pieces beneath (names, charts,
formatting, the `report` command).

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
from reports.model import Stats
from reports.render import main as report_main, render_report
from reports.writer import full, num

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
GOLDEN = REPO / "fixtures" / "golden"
DIRS = ["fixtures/evidence/cpu", "fixtures/evidence/h200"]
GENERATED = re.compile(r'<p class="generated">[^<]*</p>')


def fixed_build(**changes) -> FixedBuild:
    doc = json.loads((FIX / "current_build.json").read_text())
    doc.update(changes)
    return FixedBuild(doc["registered"], doc["fingerprints"], doc.get("earned"))


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
    from conformance.evidence import validate
    records = [p for d in DIRS for p in (REPO / d).glob("*.json")
               if not p.name.startswith("suite-") and p.name != "trust.json"]
    assert len(records) == 7
    for p in records:
        validate(json.loads(p.read_text()))


# --- counts, grouping, columns --------------------------------------------------------------------

def test_counts_partition_the_capsules(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    c = report.counts
    assert (c.capsules, c.passing, c.failing, c.stale, c.unaudited) == (8, 4, 2, 1, 2)
    assert c.passing + c.failing + c.unaudited == c.capsules
    outcome = {r.info.name: r.outcome for r in report.rows}
    assert outcome == {"reference.add": "passing", "reference.matmul": "passing",
                       "native_cuda.add": "passing", "cublas.matmul": "passing",
                       "reference.exp": "failing", "native_cuda.scatter_add": "failing",
                       "reference.layer_norm": "unaudited", "reference.reduce_sum": "unaudited"}
    html = (out / "index.html").read_text()
    shown = re.findall(r'<span class="n">(\d+)</span><span class="what">(\w+)</span>', html)
    assert shown == [("8", "capsules"), ("4", "passing"), ("2", "failing"), ("1", "stale"),
                     ("2", "unaudited")]


def test_rows_grouped_by_op_with_reference_first():
    report = build_report([REPO / d for d in DIRS], fixed_build())
    groups = {g.op: [r.info.name for r in g.rows] for g in report.groups}
    assert groups["matmul"] == ["reference.matmul", "cublas.matmul"]
    assert groups["add"] == ["reference.add", "native_cuda.add"]
    assert [g.op for g in report.groups] == sorted(groups)


def test_directories_are_columns(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    assert [d.label for d in report.directories] == ["cpu", "h200"]
    assert report.directories[1].gpu == "NVIDIA H200"
    rows = {r.info.name: r for r in report.rows}
    ref, cuda = rows["reference.add"].cells, rows["native_cuda.add"].cells
    assert ref[0].evidence is not None and not ref[1].applicable
    assert cuda[1].evidence is not None and not cuda[0].applicable
    assert rows["reference.reduce_sum"].cells[0].absent == "no evidence"
    html = (out / "index.html").read_text()
    heads = re.findall(r'<th colspan="7" class="grp dir">([^<]*)', html)
    assert [h.strip() for h in heads] == ["cpu", "h200"]
    row = html.split('id="capsule-reference.add"')[1].split("</tr>")[0]
    assert row.count('class="first"') == 1 and 'class="first na"' in row


def test_one_capsule_in_two_directories(tmp_path):
    a = copy_dir(FIX / "cpu", tmp_path / "a")
    b = copy_dir(FIX / "cpu", tmp_path / "b")
    edit(b / "reference.add.json", lambda d: d.update(status="failed"))
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


def test_unreadable_files_are_listed_not_fatal(tmp_path):
    d = copy_dir(FIX / "cpu", tmp_path / "cpu")
    (d / "broken.json").write_text("{not json")
    (d / "other.json").write_text('{"hello": 1}')
    edit(d / "reference.layer_norm.json", lambda r: r.update(cases="eighteen"))
    report = build_report([d], fixed_build())
    assert any(u.startswith("the record of `reference.layer_norm` does not follow")
               for u in report.directories[0].unreadable)
    assert any(u.startswith("broken.json:") for u in report.directories[0].unreadable)
    assert any(u.startswith("other.json: neither") for u in report.directories[0].unreadable)
    assert sum(bool(r.evidence) for r in report.rows) == 3     # the good records still count


# --- staleness and earned trust -------------------------------------------------------------------

def _cell(report, name, i=0):
    return next(r for r in report.rows if r.info.name == name).cells[i].evidence


def test_stale_when_the_build_fingerprint_moved(out):
    report = build_report([REPO / d for d in DIRS], fixed_build())
    stale = _cell(report, "reference.matmul")
    assert stale.freshness.state == "stale" and stale.earned is None
    assert stale.earned_why == "stale evidence earns nothing"
    fresh = _cell(report, "reference.add")
    assert fresh.freshness.state == "fresh" and fresh.earned == "fuzzed"
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


def test_trust_export_decides_where_no_fingerprint_can_be_computed(tmp_path):
    report = build_report([FIX / "h200"], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "fresh" and "trust.json" in ev.freshness.source
    assert ev.earned == "checked"
    h = copy_dir(FIX / "h200", tmp_path / "h200")
    edit(h / "trust.json", lambda d: d["capsules"]["cublas.matmul"].update(fingerprint="f" * 64))
    report = build_report([h], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "stale" and ev.earned is None
    (h / "trust.json").unlink()
    report = build_report([h], fixed_build())
    ev = _cell(report, "cublas.matmul")
    assert ev.freshness.state == "unknown" and ev.earned is None
    assert report.counts.stale == 0


def test_registry_build_fingerprints_match_conformance():
    from conformance.evidence import build_fingerprint
    from engine.registry import registry
    from engine.runtime.native import native_available
    build = RegistryBuild()
    cap, handler = registry().get("reference.add")
    value, _ = build.fingerprint("reference.add", {})
    assert value == build_fingerprint(cap, handler)["value"]
    assert build.fingerprint("plugin.nothing", {})[0] is None
    if not native_available():
        value, why = build.fingerprint("native_cuda.add", {"gpu": "NVIDIA H200"})
        assert value is None and "architecture" in why
    names_ = {c["name"] for c in build.registered()}
    assert "reference.add" in names_ and "cublas.matmul" in names_


# --- what the pages say ---------------------------------------------------------------------------

def test_failing_capsule_page_has_counterexample_and_replay(out):
    page = (out / "capsule-reference.exp.html").read_text()
    assert "0x64e2bc4b" in page and "vjp-nan-mismatch" in page
    assert ("torchlean-conformance replay reports/evidence/cpu/replays/reference.exp-wide-1.json"
            in page)
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
    rec["capsule"]["name"] = evil
    rec["capsule"]["notes"] = "<script>alert(\"notes\")</script> it's \"quoted\""
    rec["counterexamples"][0]["case"]["summary"] = "<b onmouseover=alert(2)>x</b>"
    rec["counterexamples"][0]["failures"][0]["reason"] = "<img src=x onerror=alert(3)>"
    rec["error_model"]["forward"]["transcendental"]["label"] = "\" onload=\"alert(4)"
    (d / "evil.json").write_text(json.dumps(rec))
    edit(d / "suite-guards.json",
         lambda g: g["outcomes"][0].update(message="<script>alert(5)</script>"))
    index = render_report([str(d)], str(tmp_path / "out"), build=FixedBuild([], {}))
    files = list(index.parent.glob("*.html"))
    page = index.parent / names.capsule_page(evil)
    assert page in files and re.fullmatch(r"capsule-[A-Za-z0-9._-]+\.html", page.name)
    for f in files:
        text = f.read_text()
        assert "<script" not in text.lower(), f.name
        for tag, attrs in tags(text):
            assert tag not in ("img", "script"), (f.name, tag)
            assert not any(a.startswith("on") for a in attrs), (f.name, tag, attrs)
    html = index.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;" in html
    assert f'href="{page.name}"' in html
    text = page.read_text()
    assert "&lt;script&gt;alert(&#34;notes&#34;)&lt;/script&gt; it&#39;s &#34;quoted&#34;" in text
    assert "&lt;img src=x onerror=alert(3)&gt;" in text
    guards = (index.parent / "suite-guards.html").read_text()
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in guards


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
    return Stats("forward", sum(c for _, c in hist), worst_ratio, 1.0,
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
