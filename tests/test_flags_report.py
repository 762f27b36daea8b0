"""The report's "compile-flag matrix" page, from fixtures/evidence/flags/flag-matrix.json (the
scenario of tests/flag_records.py): a gold page, the index's link and count, the expectation
marks, and a matrix that cannot be read counted as an unusable file (exit 1).

Regenerate the gold page after an intended change with
`TORCHLEAN_UPDATE_GOLDEN=1 pytest tests/test_flags_report.py -k gold` and review the diff."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from reports import render
from reports.current import FixedBuild
from reports.render import render_report

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
GOLD = REPO / "fixtures" / "golden-flags" / "flags.html"
GENERATED = re.compile(r'<p class="generated">[^<]*</p>')


def _render(tmp_path, monkeypatch, dirs=("fixtures/evidence/flags",)) -> Path:
    monkeypatch.chdir(REPO)     # directory paths appear on the page as given: keep them relative
    build = FixedBuild.from_file(FIX / "current_build.json")
    return render_report(list(dirs), str(tmp_path / "out"), build=build).parent


def test_gold_flags_page(tmp_path, monkeypatch):
    got = GENERATED.sub('<p class="generated">GENERATED</p>',
                        (_render(tmp_path, monkeypatch) / "flags.html").read_text())
    if os.environ.get("TORCHLEAN_UPDATE_GOLDEN"):
        GOLD.parent.mkdir(parents=True, exist_ok=True)
        GOLD.write_text(got)
    assert got == GOLD.read_text(), "flags.html differs from fixtures/golden-flags/flags.html"


def test_page_marks_expectations_and_the_index_links_it(tmp_path, monkeypatch):
    out = _render(tmp_path, monkeypatch)
    page = (out / "flags.html").read_text()
    assert page.count("not as expected: must fail") == 1        # add's fast-math cell
    assert page.count('<small class="muted">either</small>') == 3
    assert "20 cells (quick, seed 0): 16 as expected" in page
    assert "native_cuda.add under fast-math (default-policy): expected to fail" in page
    assert "<code>-std=c++17 --use_fast_math</code>" in page
    index = (out / "index.html").read_text()
    assert 'href="flags.html"' in index and "16 of 17 cells as expected (each native" in index


def test_unreadable_matrix_is_an_unusable_file(tmp_path, monkeypatch, capsys):
    ev = tmp_path / "ev"
    shutil.copytree(FIX / "flags", ev)
    doc = json.loads((ev / "flag-matrix.json").read_text())
    doc["schema_version"] = 99
    (ev / "flag-matrix.json").write_text(json.dumps(doc))
    code = render.main(["--evidence-dir", str(ev), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert "flag-matrix.json" in err and "version 99, expected " \
           "'torchlean-conformance-flag-matrix' version 1" in err
    assert not (tmp_path / "out" / "flags.html").exists()


def test_no_matrix_no_page(tmp_path, monkeypatch):
    out = _render(tmp_path, monkeypatch, dirs=("fixtures/evidence/cpu",))
    assert not (out / "flags.html").exists()
    assert 'href="flags.html"' not in (out / "index.html").read_text()
