"""The report's pieces (names, charts, number formatting), the `report` command, and the page of
our kernels beside PyTorch's (reports/peers.py). Split from tests/test_reports.py, whose helpers
and fixtures it shares."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from reports import charts, names
from reports.builder import build_report, failure_ratio, worst
from reports.current import RegistryBuild
from reports.model import StatsView
from reports.render import main as report_main, render_report
from reports.writer import full, num
from test_reports import DIRS, FIX, REPO, copy_dir, fixed_build, text_of
from test_reports import out  # noqa: F401 (a fixture: the fixed build's pages in a tmp dir)


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
