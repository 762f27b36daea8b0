"""The exit codes of `torchlean-conformance` (conformance/exit_codes.py): documented in `--help`
and README.md from that one module; a closed stdout pipe never changes the verdict's code and is
never a harness error; a selection that selects nothing is a usage error, not a pass."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance import cli, exit_codes
from conformance.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from conformance.generators import Case
from conformance.progress import ReaderMayLeaveStream
from conformance.replay import write_replay
from engine.types import BackendOp as Op

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "fixtures.plugins.numpy_kernels:ENTRIES"


def _codes() -> dict[str, int]:
    return {name: value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")}


# --- documentation --------------------------------------------------------------------------------

def test_the_docstring_lists_every_constant_once():
    listed = [int(m) for m in re.findall(r"^ {4}(\d+) ", exit_codes.__doc__, re.M)]
    assert sorted(listed) == sorted(_codes().values()) == sorted(exit_codes.SEVERITY)


def test_help_lists_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    epilog = text[text.index("Exit codes (conformance/exit_codes.py):"):]
    for value in _codes().values():
        assert re.search(rf"^  {value} +\S", epilog, re.M), (value, epilog)
    assert "never changes the code" in epilog


def test_readme_quotes_the_exit_codes_as_generated():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### Exit codes"):]
    start = section.index("```text\n") + len("```text\n")
    block = section[start:section.index("\n```", start)]
    assert block == cli.exit_codes_text(), (
        "README.md's exit-code block differs from conformance/exit_codes.py: paste "
        "`python -c 'from conformance.cli import exit_codes_text; print(exit_codes_text())'`")


def test_the_cli_docstring_points_to_exit_codes_instead_of_repeating_them():
    assert "conformance/exit_codes.py" in cli.__doc__
    assert "130" not in cli.__doc__ and "harness error" not in cli.__doc__


def test_the_worst_code_follows_the_severity_order():
    assert cli.worst([EXIT_OK, exit_codes.EXIT_ENVIRONMENT, exit_codes.EXIT_HARNESS]) == \
        exit_codes.EXIT_ENVIRONMENT
    assert cli.worst([EXIT_USAGE, EXIT_FAILED, exit_codes.EXIT_HARNESS]) == EXIT_FAILED


# --- a reader that leaves -------------------------------------------------------------------------

class ClosedPipe:
    """stdout of `... | head` once head has gone: every write fails."""

    def __init__(self) -> None:
        self.tries = 0

    def write(self, text):
        self.tries += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


def test_a_closed_stream_stops_printing_and_raises_nothing():
    silenced = []
    pipe = ClosedPipe()
    stream = ReaderMayLeaveStream(pipe, lambda: silenced.append(True))
    assert stream.write("line one\n") == len("line one\n")
    stream.write("line two\n")
    stream.flush()
    assert stream.reader_left and silenced == [True] and pipe.tries == 1


def test_suites_printing_into_a_closed_pipe_keep_their_verdicts(tmp_path, monkeypatch):
    """`run | head` over every suite: a suite's prints meeting the closed pipe used to be that
    suite's crash (exit 3, a traceback each); now the suites finish and the worst verdict stands."""
    finished = []

    def suite(code):
        def run(args):
            print("a line the reader never reads")
            finished.append(code)
            return code
        return run
    monkeypatch.setattr(cli, "SUITES", {"passing": suite(EXIT_OK), "failing": suite(EXIT_FAILED),
                                        "after": suite(EXIT_OK)})
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["run", "--evidence-dir", str(tmp_path)]) == EXIT_FAILED
    assert finished == [EXIT_OK, EXIT_FAILED, EXIT_OK]


def test_a_real_suite_into_a_closed_pipe_writes_its_record(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["run", "--suite", "guards", "--evidence-dir", str(tmp_path)]) == EXIT_OK
    assert json.loads((tmp_path / "suite-guards.json").read_text())["suite"] == "guards"


def _closed_stdout_run(*args, cwd=None) -> subprocess.CompletedProcess:
    """The command with its stdout a pipe whose reader has already left (deterministic: the read
    end is closed before the command starts, so its first write meets EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "conformance.cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300, cwd=cwd)
    finally:
        os.close(write_end)


def test_a_failing_replay_into_a_closed_pipe_still_exits_1(tmp_path):
    """`replay <failing> | head -1` used to exit 0 (or 120, from the interpreter's last flush)."""
    x = np.array([120.0], np.float32)   # exp(120) overflows float32: the naive softplus is inf
    path = tmp_path / "softplus.json"
    write_replay(path, "user.naive_softplus", Case(Op.softplus, "normal", (x,), {}), [], PLUGIN,
                 "cpu")
    out = _closed_stdout_run("replay", "--plugin", PLUGIN, str(path), cwd=REPO)
    assert out.returncode == EXIT_FAILED, out.stderr
    assert "BrokenPipeError" not in out.stderr and "Traceback" not in out.stderr


def test_a_failing_campaign_into_a_closed_pipe_still_exits_1_and_records(tmp_path):
    """`run --plugin P --quick | head -2` with a failing capsule used to exit 0."""
    out = _closed_stdout_run("run", "--quick", "--no-progress", "--plugin", PLUGIN, "--capsule",
                             "user.naive_softplus", "--evidence-dir", str(tmp_path), cwd=REPO)
    assert out.returncode == EXIT_FAILED, out.stderr
    assert "BrokenPipeError" not in out.stderr and "Traceback" not in out.stderr
    record = json.loads((tmp_path / "user.naive_softplus.json").read_text())
    assert record["status"] == "failed"


# --- a selection of nothing -----------------------------------------------------------------------

def test_a_plugin_whose_capsules_are_all_for_another_device_is_a_usage_error(tmp_path, capsys):
    """It used to audit nothing and pass: `0 of 0 capsules without failures`, exit 0."""
    code = cli.main(["run", "--quick", "--plugin", "fixtures.plugins.cupy_ufuncs:ENTRIES",
                     "--evidence-dir", str(tmp_path / "ev")])
    out = capsys.readouterr()
    assert code == EXIT_USAGE and "0 of 0" not in out.out
    assert ("plugin fixtures.plugins.cupy_ufuncs:ENTRIES defines 6 capsules, all for device "
            "cuda; this run is --device cpu") in out.err
    assert not (tmp_path / "ev").exists()


def test_a_plugin_adding_nothing_beside_others_is_named(tmp_path, capsys):
    from conformance.selection import select_targets
    found = select_targets("cpu", None, ["fixtures.plugins.cupy_ufuncs:ENTRIES",
                                         "fixtures.plugins.numpy_kernels:GOOD"], plugins_only=True)
    assert [t[1].name for t in found] == ["user.numpy_add"]
    assert "skipping plugin fixtures.plugins.cupy_ufuncs:ENTRIES defines 6 capsules" in \
        capsys.readouterr().err
