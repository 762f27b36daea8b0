"""What the conformance command shows while and after it works: the tqdm display on a terminal
(running capsules by name), one logged line per capsule elsewhere, -q and -v; a kernel that returns
the wrong kind of value is a `wrong-type` failure, not a shape mismatch; replay commands are
shell-quoted; a plugin counterexample replayed where its module cannot be imported says how to fix
that."""
import io
import logging
import shlex
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance import progress
from conformance.cli import main
from conformance.generators import draw_case
from conformance.shrink import write_replay
from engine.types import BackendOp as Op

REPO = Path(__file__).resolve().parent.parent


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_names_the_running_capsules(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    p = progress.Progress(3)
    p.started("reference.add")
    p.started("reference.exp")
    shown = term.getvalue()
    assert "running reference.add, reference.exp" in shown and "0/3" in shown
    p.finished(1, 3, {"capsule": {"name": "reference.add"}, "status": "failed"})
    p.close()
    shown = term.getvalue()
    assert "1/3" in shown and "reference.add: failed" in shown       # failures are written out


@pytest.mark.parametrize("verbosity, lines", [
    (-1, []),
    (0, ["[1/2] reference.add: passed (resumed)"]),
    (1, ["[0/2] reference.add: started", "[1/2] reference.add: passed (resumed)"]),
])
def test_off_a_terminal_one_line_per_capsule_through_logging(verbosity, lines, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)      # not a terminal: no bar
    progress.configure_logging(verbosity)
    try:
        p = progress.Progress(2)
        p.started("reference.add")
        p.finished(1, 2, {"capsule": {"name": "reference.add"}, "status": "passed",
                          "resumed": True})
        p.close()
    finally:
        logging.getLogger("torchlean").handlers[:] = []
    assert stream.getvalue().splitlines() == lines


def _capsule(forward):
    sys.path.insert(0, str(REPO / "tests"))
    import test_mutations as T
    return T.capsule(Op.relu, "mutant.returns_something_else", forward, T.ANY_ORDER)


@pytest.mark.parametrize("returned, label", [
    (lambda a: np.maximum(a, 0).astype(np.float64), "float64"),
    (lambda a: None, "None"),
    (lambda a: [np.maximum(a, 0)], "list"),
])
def test_a_kernel_returning_the_wrong_kind_of_value_is_wrong_type(returned, label):
    sys.path.insert(0, str(REPO / "tests"))
    import test_mutations as T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = T.campaign(_capsule(returned), only=("normal",))
    assert set(result["failure_reasons"]) == {"wrong-type"}, result["failure_reasons"]
    got = result["counterexamples"][0]["failures"][0]["got"]
    assert label in got and "expected a float32 array of shape" in got


def test_replay_commands_are_shell_quoted(tmp_path):
    path = tmp_path / "my replays" / "reference.add; rm -rf x.json"
    path.parent.mkdir()
    command = write_replay(path, "reference.add", draw_case(Op.add, 0, "normal", 0), [], None,
                           "cpu")
    assert shlex.split(command) == ["torchlean-conformance", "replay", str(path)]


def test_a_plugin_replay_says_how_to_make_its_module_importable(tmp_path, capsys):
    path = tmp_path / "plugin-case.json"
    write_replay(path, "user.thing", draw_case(Op.add, 0, "normal", 0), [],
                 "module_nobody_has:ENTRIES", "cpu")
    assert main(["replay", "--plugin", "module_nobody_has:ENTRIES", str(path)]) == 2
    err = capsys.readouterr().err
    assert "recorded for plugin `module_nobody_has:ENTRIES`" in err
    assert "make `module_nobody_has` importable (PYTHONPATH=<dir holding it>)" in err
    assert "--plugin" not in err.split("recorded for")[0]      # no --plugin was given
