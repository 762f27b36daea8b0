"""TRUST_BOUNDARIES.md's capsule table: generation between the markers, and `--check`, which must
name each unresolved citation, missing or extra capsule, and an out-of-date table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports import names
from reports.current import FixedBuild
from reports.trust_boundaries import (BEGIN, END, MarkerError, capsule_table, check, generate,
                                      main, planned_pages)

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures" / "evidence"
DOC = f"# Trust\n\nSee [the add page](reports/out/{names.capsule_citation('reference.add')}).\n\n" \
      f"{BEGIN}\n{END}\n"


@pytest.fixture
def capsules() -> list[dict]:
    return json.loads((FIX / "current_build.json").read_text())["registered"]


def pages_for(capsules) -> dict[str, set[str]]:
    pages = {names.capsule_page(c["name"]): {names.capsule_anchor(c["name"]), "record"}
             for c in capsules}
    pages[names.INDEX_PAGE] = {"capsules"}
    return pages


def test_table_cites_every_capsule_page(capsules):
    table = capsule_table(capsules)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(capsules)
    for c in capsules:
        assert f"(reports/out/{names.capsule_citation(c['name'])})" in table
    first = next(r for r in rows if r.startswith("| `reference.add`"))
    assert "| add | reference | cpu | checked | torchlean-tape |" in first
    assert "runtime-guard / runtime-guard / test-suite / test-suite" in first


def test_generate_fills_the_markers_and_is_idempotent(capsules):
    text = generate(DOC, capsules)
    assert text.startswith(DOC.split(BEGIN)[0])
    assert capsule_table(capsules) in text and text.endswith(f"{END}\n")
    assert generate(text, capsules) == text
    assert check(text, capsules, pages_for(capsules)) == []


def test_missing_markers(capsules):
    with pytest.raises(MarkerError, match="markers"):
        generate("# no table here\n", capsules)
    assert "markers" in check(f"{END}\n{BEGIN}\n", capsules, pages_for(capsules))[0]


def test_unresolved_page_and_anchor(capsules):
    text = generate(DOC, capsules) + "\n[x](reports/out/capsule-nope.html#capsule-nope)\n" \
        "[y](reports/out/capsule-reference.add.html#no-such-anchor)\n[z](reports/out/index.html)\n"
    problems = check(text, capsules, pages_for(capsules))
    assert len(problems) == 2
    assert "citation reports/out/capsule-nope.html#capsule-nope names no page" in problems[0]
    assert "capsule-reference.add.html has no anchor #no-such-anchor" in problems[1]
    line = text.splitlines().index("[x](reports/out/capsule-nope.html#capsule-nope)") + 1
    assert problems[0].startswith(f"line {line}:")


def test_citation_outside_the_table_to_a_page_that_would_not_exist(capsules):
    pages = pages_for(capsules)
    del pages[names.capsule_page("reference.add")]
    problems = check(generate(DOC, capsules), capsules, pages)
    assert len(problems) == 2      # the prose link and the table row
    assert all("capsule-reference.add.html#capsule-reference.add names no page" in p
               for p in problems)


def test_missing_capsule(capsules):
    text = "\n".join(line for line in generate(DOC, capsules).splitlines()
                     if not line.startswith("| `cublas.matmul`")) + "\n"
    problems = check(text, capsules, pages_for(capsules))
    assert "registered capsule `cublas.matmul` is missing from the capsule table" in problems
    assert any("out of date" in p for p in problems)


def test_registered_capsule_added_later(capsules):
    text = generate(DOC, capsules[:-1])
    problems = check(text, capsules, pages_for(capsules))
    assert f"registered capsule `{capsules[-1]['name']}` is missing from the capsule table" \
        in problems


def test_unregistered_capsule_listed(capsules):
    text = generate(DOC, capsules)
    problems = check(text, capsules[1:], pages_for(capsules))
    assert f"the capsule table lists `{capsules[0]['name']}`, which is not registered" in problems


def test_out_of_date_table(capsules):
    text = generate(DOC, capsules).replace("| add | reference | cpu | checked |",
                                           "| add | reference | cpu | verified |")
    problems = check(text, capsules, pages_for(capsules))
    assert problems == ["the capsule table is out of date; run `torchlean-conformance "
                        "trust-boundaries` to regenerate it"]


def test_planned_pages_are_what_the_report_writes(capsules):
    build = FixedBuild(capsules, {})
    pages = planned_pages([FIX / "cpu", FIX / "h200"], build)
    assert names.capsule_anchor("reference.reduce_sum") in pages[
        names.capsule_page("reference.reduce_sum")]       # registered, no evidence: still a page
    assert "evidence-h200" in pages[names.capsule_page("cublas.matmul")]
    assert {"capsules", "op-matmul", "capsule-cublas.matmul"} <= pages[names.INDEX_PAGE]
    assert "suite-guards.html" in pages
    assert check(generate(DOC, capsules), capsules, pages) == []


def test_command_regenerates_then_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)             # no reports/evidence/ here: pages from the registry
    path = tmp_path / "TB.md"
    path.write_text(DOC)
    assert main(["--check", "--file", str(path)]) == 1
    err = capsys.readouterr().err
    assert "registered capsule `reference.add` is missing" in err and "out of date" in err
    assert main(["--file", str(path)]) == 0
    assert "capsule table regenerated" in capsys.readouterr().out
    assert main(["--check", "--file", str(path)]) == 0
    assert "citations resolve" in capsys.readouterr().out
    path.write_text("no markers\n")
    assert main(["--file", str(path)]) == 2


def test_repository_file_is_in_order(tmp_path, monkeypatch, capsys):
    """What CI runs: after adding or changing a capsule, run `torchlean-conformance
    trust-boundaries` and commit TRUST_BOUNDARIES.md."""
    monkeypatch.chdir(tmp_path)
    code = main(["--check", "--file", str(REPO / "TRUST_BOUNDARIES.md")])
    assert code == 0, capsys.readouterr().err


def test_cited_source_paths_must_exist_and_define_what_they_name(capsules, tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "buffer.py").write_text("def check_uint32():\n    pass\n")
    doc = ("`engine/buffer.py: check_uint32` `engine/buffer.py: no_such_name` "
           "`engine/providers/native_cuda.py` `tests/t.py::test_x`\n" + DOC)
    problems = check(generate(doc, capsules), capsules, pages_for(capsules), root=tmp_path)
    joined = "\n".join(problems)
    assert "cites `engine/providers/native_cuda.py`, which is not a file" in joined
    assert "cites `no_such_name` in engine/buffer.py" in joined
    assert "cites `tests/t.py`, which is not a file" in joined
    assert "check_uint32" not in joined
