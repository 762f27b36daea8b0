"""The `torchlean-conformance` command: run, replay, export-trust, user errors, extension hooks."""
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli

PLUGIN = "fixtures.plugins.numpy_kernels:ENTRIES"


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_run_prints_progress_and_a_summary_and_exits_0(tmp_path):
    # the campaign alone: the suites (which audit every capsule) have tests of their own
    out = run_cli("run", "--quick", "--suite", "campaign", "--capsule", "reference.add",
                  "--capsule", "reference.rel*", "--capsule", "reference.resh*",
                  "--evidence-dir", str(tmp_path), "--jobs", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reference.relu: passed" in out.stderr and "[3/3]" in out.stderr
    header, rule, *rows = out.stdout.splitlines()[:5]
    assert header.split() == ["capsule", "cases", "fwd", "err/bound", "vjp", "err/bound", "status"]
    assert {r.split()[0] for r in rows} == {"reference.add", "reference.relu", "reference.reshape"}
    assert all(r.split()[-1] == "passed" for r in rows)
    assert (tmp_path / "reference.add.json").exists()


def test_a_failing_plugin_capsule_exits_1_with_a_replay_command(tmp_path):
    out = run_cli("run", "--quick", "--plugin", PLUGIN, "--capsule", "user.*",
                  "--evidence-dir", str(tmp_path))
    assert out.returncode == 1
    assert "user.naive_softplus: failed" in out.stdout
    replay = next(line.split("replay: ")[1] for line in out.stdout.splitlines()
                  if "replay: " in line)
    # a plugin's counterexample replays with the plugin named again (a file's plugin is never
    # imported on the file's word alone: tests/test_replay_safety.py)
    assert replay.startswith(f"torchlean-conformance replay --plugin {PLUGIN} ")
    again = run_cli(*shlex.split(replay)[1:])
    assert again.returncode == 1 and "still failing" in again.stdout
    assert "expected 0x" in again.stdout and "inputs in0=[0x" in again.stdout


def test_replay_of_a_fixed_kernel_passes(tmp_path):
    from conformance.generators import Case
    from conformance.shrink import write_replay
    from engine.types import BackendOp as Op
    import numpy as np
    case = Case(Op.add, "normal", (np.ones(3, np.float32), np.ones(3, np.float32)), {})
    path = tmp_path / "r.json"
    write_replay(path, "reference.add", case, [], None, "cpu")
    out = run_cli("replay", str(path))
    assert out.returncode == 0 and "passes now" in out.stdout


def test_export_trust_writes_the_default_file(tmp_path):
    # the campaign's record is what trust needs here (the suites' records: tests/test_trust*.py)
    assert run_cli("run", "--quick", "--capsule", "reference.abs", "--suite", "campaign",
                   "--evidence-dir", str(tmp_path)).returncode == 0
    out = run_cli("export-trust", "--evidence-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "trust.json").read_text())
    assert doc["capsules"]["reference.abs"]["earned"] == "fuzzed"
    assert doc["capsules"]["reference.add"]["earned"] is None
    assert "reference.abs: declared checked, earned fuzzed" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["run", "--capsule", "nothing.*"], "--capsule nothing.* matches no capsule on device `cpu`"),
    (["run", "--plugin", "no_colon"], "is not of the form module:attr"),
    (["run", "--plugin", "no_such_module_xyz:E"], "cannot import module `no_such_module_xyz`"),
    (["run", "--plugin", "fixtures.plugins.numpy_kernels:NOPE"], "has no attribute `NOPE`"),
    (["run", "--device", "gpu0"], "unknown device `gpu0`"),
    (["run", "--suite", "nope"], "--suite `nope` is unknown; known suites: campaign"),
    (["replay", "/nonexistent/replay.json"], "cannot read replay file"),
    (["run", "--cases", "0"], "--cases must be a whole number from 1 to 100000, got '0'"),
    (["run", "--cases", "-1"], "--cases must be a whole number from 1 to 100000, got '-1'"),
    (["run", "--timeout", "0"], "--timeout must be a number of seconds above 0"),
    (["run", "--timeout", "-1"], "--timeout must be a number of seconds above 0"),
    (["run", "--jobs", "0"], "--jobs must be a whole number from 1 to 4096, got '0'"),
    (["run", "--jobs", "-2"], "--jobs must be a whole number from 1 to 4096, got '-2'"),
    (["run", "--seed", "-1"], "--seed must be a whole number from 0 to 18446744073709551615"),
    (["run", "--device", "metal"], "device `metal` has no maintained runtime profile"),
    (["export-trust", "--device", "bogus"], "unknown device `bogus`"),
])
def test_user_errors_are_one_line_messages_without_traceback(args, message, tmp_path):
    # the usage error comes before the evidence directory is created or locked
    out = run_cli(*args, *(["--evidence-dir", str(tmp_path / "ev")] if args[0] != "replay"
                           else []))
    assert not (tmp_path / "ev").exists(), "a refused command created its evidence directory"
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_refused_devices_create_nothing_on_disk(tmp_path):
    for args in (["run", "--device", "metal"], ["export-trust", "--device", "bogus"]):
        out = run_cli(*args, "--evidence-dir", str(tmp_path / "ev"))
        assert out.returncode == 2 and not (tmp_path / "ev").exists(), out.stderr
        assert out.stdout == ""      # no empty table before the error


def test_jobs_beyond_the_cores_are_capped_with_a_note(tmp_path):
    import os
    out = run_cli("run", "--suite", "campaign", "--quick", "--capsule", "reference.abs",
                  "--jobs", "1000", "--evidence-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert f"--jobs 1000 is more than the {os.cpu_count()} CPU cores here" in out.stderr


def test_a_plugin_alone_audits_only_its_capsules_and_only_the_campaign(tmp_path):
    out = run_cli("run", "--quick", "--plugin", "fixtures.plugins.numpy_kernels:GOOD",
                  "--evidence-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert {p.name for p in tmp_path.glob("*.json")} == {"user.numpy_add.json"}
    assert "cases/s" in out.stdout and "elements/s" in out.stdout


def test_cuda_without_a_native_runtime_exits_with_the_runtime_message():
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("a native CUDA runtime is present here")
    out = run_cli("run", "--device", "cuda", "--quick")
    assert out.returncode == 2
    assert "CUDA requested" in out.stderr and "Traceback" not in out.stderr


def test_extension_hooks_for_other_subcommands_and_suites():
    assert {"run", "replay", "export-trust"} <= set(cli.SUBCOMMANDS)
    assert "campaign" in cli.SUITES
    calls = []
    cli.SUITES["demo"] = lambda args: calls.append(args.device) or 0
    cli.SUBCOMMANDS["hello"] = (lambda p: p.add_argument("--who", default="x"),
                                lambda args: 7, "say hello")
    try:
        assert cli.main(["run", "--suite", "demo"]) == 0 and calls == ["cpu"]
        assert cli.main(["hello"]) == 7
    finally:
        del cli.SUITES["demo"], cli.SUBCOMMANDS["hello"]


def test_the_complete_plugin_of_plugins_md_runs_as_written(tmp_path):
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "PLUGINS.md").read_text()
    code = re.search(r"## A complete plugin.*?```python\n(.*?)```", doc, re.S).group(1)
    (tmp_path / "my_kernels.py").write_text(code)
    repo = Path(__file__).resolve().parent.parent
    import os
    out = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--quick", "--plugin",
                          "my_kernels:ENTRIES", "--evidence-dir", str(tmp_path / "ev")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 of 2 capsules without failures" in out.stdout
    assert {p.name for p in (tmp_path / "ev").glob("user.*.json")} == {"user.my_add.json",
                                                                       "user.my_exp.json"}


UNWRITABLE = "/proc/torchlean-no-such-dir"     # procfs refuses mkdir, even for root


@pytest.mark.parametrize("args, message", [
    (["run", "--capsule", "reference.abs", "--quick", "--evidence-dir", UNWRITABLE],
     f"evidence directory {UNWRITABLE} cannot be written (No such file or directory)"),
    (["run", "--suite", "guards", "--evidence-dir", UNWRITABLE],
     f"evidence directory {UNWRITABLE} cannot be written (No such file or directory)"),
    (["export-trust", "--evidence-dir", UNWRITABLE], f"evidence directory {UNWRITABLE} does not "
                                                     "exist"),
    (["report", "--evidence-dir", str(Path(__file__).resolve().parent.parent / "evidence" / "h200"),
      "--out", UNWRITABLE],
     f"--out {UNWRITABLE}: cannot be written"),
])
def test_an_unwritable_directory_is_refused_before_any_work(args, message):
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
