"""`torchlean-conformance run --suite ...` writes each reliability suite's record; `report` and
`trust-boundaries` are reached through the same command."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main


def test_guards_suite_writes_its_record(tmp_path, capsys):
    assert main(["run", "--suite", "guards", "--evidence-dir", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "suite-guards.json").read_text())
    assert rec["suite"] == "guards" and rec["tried"] == rec["rejected"] >= 100
    assert "bad inputs rejected" in capsys.readouterr().out


def test_determinism_suite_writes_its_record(tmp_path, capsys):
    """The CPU determinism audit through the command, judged on its record: every reference
    capsule it audits repeats bit for bit in both modes and stays within its bound. (This was
    also tests/test_determinism.py's own audit of run_determinism("cpu", runs=3): the same checks,
    here on 4 runs per mode, so the audit runs once in the suite.)"""
    assert main(["run", "--suite", "determinism", "--quick", "--evidence-dir",
                 str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "suite-determinism.json").read_text())
    assert rec["passed"] and rec["selection"] is None
    names = {c["capsule"] for c in rec["capsules"]}
    assert {"reference.matmul", "reference.linear", "reference.reduce_sum",
            "reference.scatter_add", "reference.gather"} <= names
    for c in rec["capsules"]:
        assert c["passed"], (c["capsule"], c["problems"])
        assert c["deterministic"]["bitwise_identical"] and c["default"]["bitwise_identical"]
        assert c["deterministic"]["runs"] == c["default"]["runs"] == 4
        assert 0 <= c["worst_ratio"] <= 1


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


REPO = Path(__file__).resolve().parent.parent


def _command(*args, cwd=None):
    """`python -m ARGS` from `cwd`, finding this checkout's packages by PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def test_the_reports_command_and_the_forwarded_one_agree(tmp_path):
    """`python -m reports` (torchlean-report) is the reports package's own command;
    `torchlean-conformance report|trust-boundaries` runs it in a child process (conformance
    never imports reports): the same exit code and message for each case."""
    help_text = _command("reports", "--help").stdout
    assert "report" in help_text and "trust-boundaries" in help_text
    missing = str(tmp_path / "nowhere")
    for cmd in (("reports",), ("conformance.cli",)):
        gone = _command(*cmd, "report", "--evidence-dir", missing, "--out",
                        str(tmp_path / "out"), cwd=tmp_path)
        assert gone.returncode == 2, gone.stderr
        assert f"torchlean-conformance report: evidence directory {missing} does not exist" \
            in gone.stderr and "Traceback" not in gone.stderr
        bad = _command(*cmd, "trust-boundaries", "--no-such-flag")
        assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr
    assert _command("reports", "nothing").returncode == 2


def test_the_child_finds_the_reports_beside_this_conformance(tmp_path):
    """From a directory where neither package is importable by default, and without PYTHONPATH,
    the forwarded child still finds the reports package beside conformance."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from conformance.cli import main; "
            f"sys.exit(main(['trust-boundaries', '--file', 'absent.md']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 2 and "absent.md: " in out.stderr, out.stderr
    assert "cannot read absent.md" in out.stderr and "No module named" not in out.stderr


def test_the_forwarded_command_relays_output_and_exit_code(tmp_path, capsys):
    unreadable = tmp_path / "absent.md"
    assert main(["trust-boundaries", "--file", str(unreadable)]) == 2
    assert f"cannot read {unreadable}" in capsys.readouterr().err
