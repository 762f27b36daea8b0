"""The report tells the truth at a glance (issue 38, the report's items): an edited plugin's
evidence never looks fresh, a NaN or inf mismatch is named in every summary figure, a cut input
list says how much of it is shown, CPU evidence names no GPU, a plugin run's headline and table
count what it audited, every suggested command runs as pasted (--plugin, --device), and
`--evidence-dir FILE` says it is a file. The browser half (nothing breaks mid-word, why a capsule
failed above the fold) is tests/test_report_browser.py.

fixtures/evidence/plugin/ is a real `run --plugin fixtures.plugins.numpy_kernels:ENTRIES --quick`
and its `export-trust` (fixtures/evidence/README.md)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from reports.builder import build_report
from reports.current import FixedBuild
from reports.render import main as report_main, render_report

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
PLUGIN = FIX / "plugin"
SPEC = "fixtures.plugins.numpy_kernels:ENTRIES"


def fixed_build(**changes) -> FixedBuild:
    doc = json.loads((FIX / "current_build.json").read_text())
    doc.update(changes)
    return FixedBuild(doc["registered"], doc["fingerprints"], doc.get("earned"))


def text_of(html: str) -> str:
    """What a reader sees: no tags (<wbr> joints and nowrap spans are markup)."""
    return re.sub(r"<[^>]+>", "", html)


def row_of(html: str, name: str) -> str:
    return html.split(f'id="capsule-{name}"')[1].split("</tr>")[0]


def evidence(report, name: str, i: int = 0):
    return next(r for r in report.rows if r.info.name == name).cells[i].evidence


def copy_plugin_dir(tmp_path: Path, name: str = "plugin") -> Path:
    return Path(shutil.copytree(PLUGIN, tmp_path / name))


def edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def trust_saw_this_checkout(monkeypatch) -> None:
    """As if this checkout were the one the fixture's export hashed (no edit since)."""
    exported = json.loads((PLUGIN / "trust.json").read_text())["checkout"]["digest"]
    monkeypatch.setattr("reports.plugin_sources._checkout_digest", lambda: exported)


# --- 1. an edited plugin's evidence is never `fresh` ----------------------------------------------

def test_plugin_evidence_is_not_fresh_on_an_export_that_never_saw_these_sources():
    """The export's fingerprint equals the record's, but the export hashed another checkout: the
    plugin may have been edited since, and the report runs no plugin code to tell."""
    report = build_report([PLUGIN], fixed_build())
    ev = evidence(report, "user.numpy_add")
    assert (ev.freshness.state, ev.freshness.recomputed) == ("unknown", False)
    assert ev.freshness.why == (
        "freshness unknown: this checkout's sources (the plugin's included) differ from those "
        "the export saw (checkout digest 13470f1b06af), and the report runs no plugin code to "
        "recompute its fingerprint; rerun `torchlean-conformance export-trust --device cpu "
        f"--plugin {SPEC} --evidence-dir {PLUGIN}` (or pass --plugin {SPEC} to the report to "
        "recompute it here)")
    assert ev.next_step == ("freshness unknown: the plugin may have changed since; rerun",
                            f"torchlean-conformance export-trust --device cpu --plugin {SPEC} "
                            f"--evidence-dir {PLUGIN}")
    assert (report.counts.stale, report.counts.unknown) == (0, 2)


def test_the_index_shows_no_green_fresh_for_unproven_plugin_evidence(tmp_path):
    index = render_report([str(PLUGIN)], str(tmp_path / "out"), build=fixed_build()).read_text()
    assert "fp-fresh" not in index
    assert re.findall(r'badge fp-(\w+)', index) == ["unknown", "unknown"]
    assert '<span class="sub">2 of unknown freshness</span>' in index


def test_an_export_of_this_very_checkout_proves_plugin_evidence_fresh(monkeypatch):
    trust_saw_this_checkout(monkeypatch)
    ev = evidence(build_report([PLUGIN], fixed_build()), "user.numpy_add")
    assert ev.freshness.state == "fresh" and ev.earned == "fuzzed"


@pytest.fixture
def own_plugin(tmp_path, monkeypatch):
    """A user's plugin module of their own (a copy of numpy_kernels) in the directory they run
    from, and a record of its user.numpy_add made for it as it is now."""
    from conformance.fingerprint import harness_digest
    from conformance.isolation.describe import describe_plugin
    monkeypatch.chdir(tmp_path)
    module = tmp_path / "h38b_own_kernels.py"
    module.write_text((REPO / "fixtures" / "plugins" / "numpy_kernels.py").read_text())
    spec = "h38b_own_kernels:ENTRIES"
    now = describe_plugin(spec, "cpu")["user.numpy_add"][1].fingerprint["value"]
    ev = tmp_path / "ev"
    ev.mkdir()
    shutil.copy(PLUGIN / "user.numpy_add.json", ev)

    def made_now(rec):
        rec["plugin"], rec["fingerprint"]["value"] = spec, now
        rec["settings"]["harness"] = harness_digest()       # judged by this harness
    edit(ev / "user.numpy_add.json", made_now)
    return module, spec, ev


def test_report_plugin_recomputes_freshness_and_an_edit_makes_it_stale(own_plugin):
    module, spec, ev = own_plugin
    report = build_report([ev], FixedBuild([], {}), [spec])
    fresh = evidence(report, "user.numpy_add")
    assert (fresh.freshness.state, fresh.freshness.recomputed) == ("fresh", True)
    assert fresh.freshness.source == f"plugin `{spec}` as described now (--plugin)"
    # it earned what it declares (fuzzed): no hint about test evidence it never claimed
    assert fresh.earned == "fuzzed" and fresh.next_step is None
    assert "no test-suite report" not in fresh.earned_why
    module.write_text(module.read_text() + "# edited after the run\n")
    stale = evidence(build_report([ev], FixedBuild([], {}), [spec]), "user.numpy_add")
    assert (stale.freshness.state, stale.earned) == ("stale", None)
    assert stale.next_step == ("made for another build, so it earns nothing; rerun:",
                               f"torchlean-conformance run --capsule user.numpy_add --device cpu "
                               f"--plugin {spec} --evidence-dir {ev}")
    # without --plugin the report runs no plugin code: unknown, never fresh
    unknown = evidence(build_report([ev], FixedBuild([], {})), "user.numpy_add")
    assert unknown.freshness.state == "unknown"
    assert unknown.freshness.why.startswith("freshness unknown: no trust export of this "
                                            "directory names this capsule; rerun")


def test_report_plugin_that_no_record_names_is_a_usage_error(tmp_path, capsys):
    args = ["--evidence-dir", str(PLUGIN), "--out", str(tmp_path / "out")]
    assert report_main(args + ["--plugin", "fixtures.plugins.misbehaving:ENTRIES"]) == 2
    assert capsys.readouterr().err == (
        "torchlean-conformance report: --plugin fixtures.plugins.misbehaving:ENTRIES: no record "
        f"in these evidence directories was made with it (they name {SPEC}); pass a plugin they "
        "name; or leave --plugin out (the report then runs no plugin code, and tells a plugin's "
        "freshness only where the trust export proves it)\n")
    assert not (tmp_path / "out").exists()


# --- 2. a NaN or inf mismatch is named wherever a worst error/bound is shown ----------------------

def _softmax_without_max_shift(rec: dict) -> None:
    """The issue's case: NaN mismatches forward (x8) and in the VJP (x6); the finite failing
    elements' worst is 10 forward, and the VJP has no finite failing element (0.333 within)."""
    rec["failure_reasons"] = {"nan-mismatch": 8, "vjp-nan-mismatch": 6}
    rec["stats"]["forward"]["worst_ratio_failing"] = 10.0
    rec["stats"]["vjp"].update(worst_ratio=0.333, worst_ratio_failing=None)


def test_nan_mismatch_is_named_in_every_summary_figure(tmp_path):
    d = copy_plugin_dir(tmp_path)
    edit(d / "user.naive_softplus.json", _softmax_without_max_shift)
    index = render_report([str(d)], str(tmp_path / "out"), build=fixed_build())
    worst = row_of(index.read_text(), "user.naive_softplus").split('class="num worst">')[1]
    assert text_of(worst.split("</td>")[0]) == "fwd NaN mismatch × 8vjp NaN mismatch × 6"
    page = (index.parent / "capsule-user.naive_softplus.html").read_text()
    summary = page.split('<table class="data summary">')[1].split("</table>")[0]
    assert "fwd NaN mismatch × 8vjp NaN mismatch × 6" in text_of(summary)
    assert "<td>failed</td>" in summary                  # the VJP failed, and says so
    kv = page.split("worst error / bound, failing elements</th><td>")[1].split("</td>")[0]
    assert text_of(kv) == "NaN mismatch × 8 (forward), NaN mismatch × 6 (vjp); finite: 10"
    errors = page.split('id="evidence-plugin-errors"')[1].split("</table>")[0]
    failing = [text_of(c) for c in re.findall(r'<td class="num failing">(.*?)</td>', errors)]
    assert failing == ["NaN mismatch × 8; finite: 10", "NaN mismatch × 6"]
    assert "worst NaN mismatch, off scale" in page       # the distribution chart's failures lane


def test_inf_mismatch_of_the_real_plugin_run_is_named_not_a_ratio(tmp_path):
    report = build_report([PLUGIN], fixed_build())
    fwd, vjp = evidence(report, "user.naive_softplus").worst_by_direction
    assert (fwd.worst, fwd.mismatches, fwd.failing) == ("inf", [("inf mismatch", 35)],
                                                        4.460149039706125e+43)
    assert (vjp.worst, vjp.mismatches) == (0.0, [])
    index = render_report([str(PLUGIN)], str(tmp_path / "out"), build=fixed_build()).read_text()
    worst = row_of(index, "user.naive_softplus").split('class="num worst">')[1].split("</td>")[0]
    assert text_of(worst) == "fwd inf mismatch × 35vjp 0"


# --- 7. a cut input list says how much of it is shown ---------------------------------------------

def test_input_label_says_how_many_of_how_many_are_shown(tmp_path):
    d = copy_plugin_dir(tmp_path)

    def long_inputs(rec):        # the shrunk case's failure: the first the page shows
        failure = rec["counterexamples"][0]["shrunk_failures"][0]
        failure["inputs"] = {"in0": ["0x3f800000"] * 16 + ["... 239 more"],
                             "in1": ["0x40000000"] * 7, "mask": ["T", "F", "T"]}
    edit(d / "user.naive_softplus.json", long_inputs)
    index = render_report([str(d)], str(tmp_path / "out"), build=fixed_build())
    page = (index.parent / "capsule-user.naive_softplus.html").read_text()
    labels = re.findall(r'<span class="inname">(\w+)</span> <span class="muted">\((.*?)\)</span>',
                        page)
    assert labels[:3] == [("in0", "16 of 255 float32 shown, hex bits"),
                          ("in1", "7 float32, hex bits"), ("mask", "3 mask elements, T/F")]


# --- 8. CPU evidence names no GPU -----------------------------------------------------------------

def test_cpu_evidence_as_exported_says_cpu(monkeypatch):
    # reference.add's fingerprint withheld: the CPU directory's trust export decides
    fps = json.loads((FIX / "current_build.json").read_text())["fingerprints"]
    del fps["reference.add"]
    ev = evidence(build_report([FIX / "cpu"], fixed_build(fingerprints=fps)), "reference.add")
    assert ev.earned_note == "as exported on the CPU at commit efa37c6; not recomputable here"
    trust_saw_this_checkout(monkeypatch)
    plugin = evidence(build_report([PLUGIN], fixed_build()), "user.numpy_add")
    assert plugin.earned_note == "as exported on the CPU at commit cf523a8; not recomputable here"
    assert "GPU" not in plugin.earned_why


# --- 12. a plugin run's headline and table: what the directory audited ----------------------------

def test_plugin_run_counts_and_tabulates_only_what_it_audited(tmp_path, monkeypatch):
    report = build_report([PLUGIN], fixed_build())
    c = report.counts
    assert (c.capsules, c.passing, c.failing, c.stale, c.unaudited) == (2, 1, 1, 0, 0)
    assert (c.without_evidence, c.other_devices) == (7, 3)
    index = render_report([str(PLUGIN)], str(tmp_path / "out"), build=fixed_build()).read_text()
    assert re.findall(r'<tr id="(capsule-[\w.]+)"', index) == ["capsule-user.numpy_add",
                                                                "capsule-user.naive_softplus"]
    assert re.findall(r'<span class="n">(\d+)</span><span class="what">([\w ]+)</span>',
                      index) == [("2", "capsules audited"), ("1", "passing"), ("1", "failing"),
                                 ("0", "stale"), ("0", "no verdict")]
    folded = index.split('<details id="no-evidence-here" class="folded">')[1]
    assert "7 registered capsules without a record in these directories (cpu: 7)" in \
        " ".join(text_of(folded.split("</summary>")[0]).split())
    # a plugin capsule that declared `fuzzed` and earned it: no hint about a test-suite report
    trust_saw_this_checkout(monkeypatch)
    ev = evidence(build_report([PLUGIN], fixed_build()), "user.numpy_add")
    assert ev.earned == "fuzzed" and ev.next_step is None
    assert ev.earned_why == ("fuzz campaign passed (trust.json exported 2026-12-06T07:25:38+00:00)"
                             "; as exported on the CPU at commit cf523a8; not recomputable here")


# --- 13. every suggested command runs as pasted ---------------------------------------------------

def test_a_stale_plugin_records_rerun_names_its_plugin_and_device(tmp_path):
    build = fixed_build(fingerprints={"user.numpy_add": "0" * 64})
    index = render_report([str(PLUGIN)], str(tmp_path / "out"), build=build).read_text()
    step = row_of(index, "user.numpy_add").split('<span class="next">')[1].split("</td>")[0]
    assert text_of(step) == ("made for another build, so it earns nothing; rerun: "
                             "torchlean-conformance run --capsule user.numpy_add --device cpu "
                             f"--plugin {SPEC} --evidence-dir {PLUGIN}")


def test_an_unusable_plugin_records_rerun_names_its_plugin(tmp_path, capsys):
    d = copy_plugin_dir(tmp_path)
    edit(d / "user.numpy_add.json", lambda rec: rec.update(status="exploded"))
    assert report_main(["--evidence-dir", str(d), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.endswith(
        f"; rerun `torchlean-conformance run --capsule user.numpy_add --fresh --device cpu "
        f"--plugin {SPEC} --evidence-dir {d}`\n")
    # a record too damaged to name its plugin: the command says a plugin is needed
    (d / "user.numpy_add.json").write_text("[]")
    assert report_main(["--evidence-dir", str(d), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.endswith(
        "rerun `torchlean-conformance run --capsule user.numpy_add --fresh --device cpu "
        f"--plugin MODULE:ATTR --evidence-dir {d}` with the plugin that defines it\n")


def test_a_plugin_capsule_missing_from_a_second_directory_is_run_with_its_plugin(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(PLUGIN / "user.naive_softplus.json", other)    # the directory audits cpu
    index = render_report([str(PLUGIN), str(other)], str(tmp_path / "out"),
                          build=fixed_build()).read_text()
    absent = index.split('id="capsule-user.numpy_add-other"')[1].split("</tr>")[0]
    assert text_of(absent.split('class="first absent">')[1]).strip() == (
        "no evidence in this directory: torchlean-conformance run --capsule user.numpy_add "
        f"--device cpu --plugin {SPEC} --evidence-dir {other}")


def test_the_rerun_of_a_user_op_names_its_op_contracts():
    from reports import commands
    rec = json.loads((PLUGIN / "user.naive_softplus.json").read_text())
    for ce in rec["counterexamples"]:
        ce["replay_command"] = ce["replay_command"].replace(
            "replay --plugin", "replay --op-contracts fixtures.plugins.user_ops_contract:"
                               "CONTRACTS --plugin")
    assert commands.rerun(rec, "ev") == (
        f"torchlean-conformance run --capsule user.naive_softplus --device cpu --plugin {SPEC} "
        "--op-contracts fixtures.plugins.user_ops_contract:CONTRACTS --evidence-dir ev")


# --- 14. --evidence-dir FILE ----------------------------------------------------------------------

def test_an_evidence_dir_that_is_a_file_is_named_as_one(tmp_path, capsys):
    given = PLUGIN / "trust.json"
    assert report_main(["--evidence-dir", str(given), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"torchlean-conformance report: --evidence-dir {given} is a file, not a directory; pass "
        f"the directory that holds the evidence records, e.g. the one this file is in: "
        f"--evidence-dir {PLUGIN}\n")
    assert not (tmp_path / "out").exists()


def test_a_page_and_the_console_order_reasons_alike():
    """One order of failure reasons (conformance/console.py's REASON_ORDER) on the console and on
    a page, and every reason the console orders has a meaning on the page."""
    from conformance.console import BOUND_EXCESSES, REASON_ORDER, ordered_reasons
    from reports.verdicts import MEANINGS, explained
    named = REASON_ORDER + BOUND_EXCESSES
    assert set(named) <= set(MEANINGS), set(named) - set(MEANINGS)
    reasons = [("exceeds-bound", 9), ("vjp-nan-mismatch", 1), ("raised", 1), ("signed-zero", 4),
               ("nan-mismatch", 2), ("not-bitwise", 3), ("input-mutated", 1)]
    page = [r for r, _, _ in explained(reasons)]
    console = [r for r, _ in ordered_reasons(reasons)]
    assert page == console == ["raised", "nan-mismatch", "vjp-nan-mismatch", "input-mutated",
                               "signed-zero", "not-bitwise", "exceeds-bound"]
