"""`torchlean-conformance run --suite ...` writes each reliability suite's record; `report` and
`trust-boundaries` are reached through the same command."""
import json

import pytest

from conformance.cli import main


def test_guards_suite_writes_its_record(tmp_path, capsys):
    assert main(["run", "--suite", "guards", "--evidence-dir", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "suite-guards.json").read_text())
    assert rec["suite"] == "guards" and rec["tried"] == rec["rejected"] >= 100
    assert "bad inputs rejected" in capsys.readouterr().out


def test_determinism_suite_writes_its_record(tmp_path, capsys):
    assert main(["run", "--suite", "determinism", "--quick", "--evidence-dir",
                 str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "suite-determinism.json").read_text())
    assert rec["passed"] and {c["capsule"] for c in rec["capsules"]} >= {"reference.matmul"}


def test_unknown_suite_is_named(capsys):
    assert main(["run", "--suite", "speed"]) != 0
    err = capsys.readouterr().err
    assert "--suite `speed` is unknown; known suites: campaign, guards, determinism, " \
           "allocator-cap" in err


def test_report_and_trust_boundaries_are_forwarded(tmp_path, capsys):
    assert main(["run", "--suite", "guards", "--evidence-dir", str(tmp_path / "ev")]) == 0
    assert main(["report", "--evidence-dir", str(tmp_path / "ev"), "--out",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "index.html").exists()
    assert main(["trust-boundaries", "--check"]) == 0
    assert "citations resolve" in capsys.readouterr().out
