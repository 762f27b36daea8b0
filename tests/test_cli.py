"""The `torchlean` command: the quickstart trains reproducibly, and every error path exits cleanly."""
import json
import signal
import subprocess
import sys

import pytest

from engine.cli import main


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_quickstart_trains_and_is_bitwise_reproducible(tmp_path, capsys):
    log1, log2 = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["quickstart_mlp", "--seed", "2026", "--log", str(log1)]) == 0
    assert main(["quickstart_mlp", "--seed", "2026", "--log", str(log2)]) == 0
    out = capsys.readouterr().out
    a, b = json.loads(log1.read_text()), json.loads(log2.read_text())
    assert a["losses"] == b["losses"] and a["final_loss"] == b["final_loss"]
    assert [s for s, _ in a["losses"]] == [0, 25, 50, 75, 100, 125, 150, 175, 199]
    first = a["losses"][0][1]
    assert a["final_loss"] < first / 20, (first, a["final_loss"])
    assert "prediction at (0, 0) = " in out and "prediction at (0.25, -0.75) = " in out
    # The target at the probes is 0.2 and 0.2; a trained model lands near both.
    for _, value in a["predictions"]:
        assert abs(value - 0.2) < 0.3
    assert main(["quickstart_mlp", "--seed", "7", "--steps", "3", "--log", str(log2)]) == 0
    assert json.loads(log2.read_text())["losses"] != a["losses"][:1]


def test_show_backend_prints_the_capsules_that_crossed(capsys):
    assert main(["quickstart_mlp", "--steps", "2", "--show-backend"]) == 0
    out = capsys.readouterr().out
    assert ("matmul: reference.matmul\n  provider=reference declared-trust=checked "
            "vjp=torchlean-tape\n"
            "  numeric=[round=nearest-even, subnormal=implementation-defined, "
            "contract=implementation-defined, reduce=implementation-defined]") in out
    for op in ("reshape", "broadcast", "add", "relu", "mse_loss"):
        assert f"{op}: reference.{op}\n" in out
    assert "permute" not in out   # transpose flags, not copies


@pytest.mark.parametrize("args, message", [
    (["quickstart_mlp", "--device", "metal"], "device `metal` has no maintained runtime profile"),
    (["quickstart_mlp", "--device", "rocm"], "device `rocm` has no maintained runtime profile"),
    (["quickstart_mlp", "--device", "tpu"], "device `tpu` has no maintained runtime profile"),
    (["quickstart_mlp", "--device", "trainium"], "device `trainium` has no maintained runtime"),
    (["quickstart_mlp", "--device", "vulkan"], "unknown device `vulkan`; known targets: cpu, "
                                               "cuda, rocm, metal, wasm, tpu, trainium, custom, "
                                               "external"),
    (["quickstart_mlp", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["quickstart_mlp", "--profile", "fastest"], "no profile named `fastest`; known profiles: "
                                                 "checked_cpu, checked_cuda, accurate_cuda, "
                                                 "graph_cuda, flash_cuda, libtorch_forward_cuda"),
    (["capsules", "--device", "gpu"], "unknown device `gpu`"),
    (["quickstart_mlp", "--log", "/nonexistent/dir/x.json"],
     "--log /nonexistent/dir/x.json: directory /nonexistent/dir does not exist"),
    (["quickstart_mlp", "--log", "/tmp"], "--log /tmp is a directory; pass a file path"),
])
def test_error_paths_exit_nonzero_without_traceback(args, message):
    code, out, err = run_cli(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_cuda_without_native_runtime_names_the_state():
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("a native CUDA runtime is present; the refusal path cannot be shown here")
    code, _, err = run_cli("quickstart_mlp", "--device", "cuda", "--steps", "1")
    assert code == 2 and "Traceback" not in err
    assert "CUDA requested" in err and ("CPU parity stub" in err or "no GPU is visible" in err)
    assert "--device cpu" in err


def test_capsules_listing(capsys):
    assert main(["capsules", "--device", "cpu", "--json"]) == 0
    caps = json.loads(capsys.readouterr().out)
    names = {c["name"] for c in caps}
    from engine.providers.reference import OPS
    assert names == {f"reference.{op.label}" for op in OPS}      # one capsule per reference op
    mm = next(c for c in caps if c["name"] == "reference.matmul")
    assert mm["declared_trust"] == "checked" and mm["vjp"] == "torchlean-tape"
    assert mm["contracts"]["shape"]["evidence"] == "runtime-guard"
    assert main(["capsules"]) == 0
    assert "reference.add" in capsys.readouterr().out


def test_a_bad_log_path_is_refused_before_training():
    code, out, err = run_cli("quickstart_mlp", "--log", "/nonexistent/dir/x.json")
    assert code == 2 and "step" not in out       # nothing trained, nothing printed


def test_output_into_a_closed_pipe_is_not_an_error():
    """`torchlean capsules --json | head -1`: the reader leaves early (the output is larger than
    a pipe's buffer, so the writer meets EPIPE); no BrokenPipeError traceback, exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "capsules", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()           # what head does after its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "BrokenPipeError" not in err, err


def test_export_trust_into_a_closed_pipe_is_not_an_error(tmp_path, monkeypatch):
    import engine.cli
    from conformance import cli

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass
    quieted = []
    monkeypatch.setattr(engine.cli, "quiet_broken_pipe", lambda: quieted.append(True))
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    (tmp_path / "ev").mkdir()
    assert cli.main(["export-trust", "--evidence-dir", str(tmp_path / "ev")]) == 0
    assert quieted == [True]


def test_an_interrupted_training_run_saves_nothing_and_exits_130(tmp_path):
    """^C during `torchlean gpt2 --save-params P`: one line on stderr, no traceback, exit 130
    (the shell's 128 + SIGINT), and no parameter file (it is written only after training, by
    rename)."""
    params = tmp_path / "p.safetensors"
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "gpt2", "--steps", "100000",
                             "--log-every", "100000", "--save-params", str(params)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # an xdist worker ignores SIGINT, and a child inherits that: give the
                            # child the default a terminal's ^C meets
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().startswith("gpt2: ")   # training has begun
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "torchlean: interrupted" and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_version_and_help_name_every_subcommand():
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("torchlean ")
    code, out, _ = run_cli("quickstart_mlp", "--help")
    for flag in ("--seed SEED", "(default: 2026)", "--steps STEPS", "(default: 200)",
                 "--show-backend", "--device DEVICE"):
        assert flag in out, flag
    conf = subprocess.run([sys.executable, "-m", "conformance.cli", "--help"],
                          capture_output=True, text=True, timeout=60).stdout
    for sub in ("run", "replay", "export-trust", "report", "trust-boundaries", "Exit codes"):
        assert sub in conf, sub


def test_quickstart_bound_answers_help_and_needs_cuda():
    from engine.runtime.native import native_available
    proc = subprocess.run([sys.executable, "-m", "conformance.quickstart_bound", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--steps" in proc.stdout
    if native_available():
        pytest.skip("a native CUDA runtime is here: the comparison runs")
    proc = subprocess.run([sys.executable, "-m", "conformance.quickstart_bound"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs a native CUDA runtime" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["-p", "no:xdist"], []])
def test_the_test_script_runs_with_and_without_xdist(args):
    """scripts/test.sh passes its arguments to pytest; `-p no:xdist` drops its own -n."""
    import os
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(["bash", "scripts/test.sh", *args, "-p", "no:cacheprovider",
                           "tests/test_types.py"], cwd=repo, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TORCHLEAN_USE_CURRENT_PYTHON": "1",
                                            "PYTHON": sys.executable,
                                            "TORCHLEAN_TEST_WORKERS": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout
