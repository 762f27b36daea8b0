"""The `torchlean` command: the quickstart trains reproducibly, and every error path exits cleanly."""
import json
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
    assert ("matmul: reference.matmul\n  provider=reference trust=checked vjp=torchlean-tape\n"
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
                                                 "checked_cpu, checked_cuda, libtorch_forward_cuda"),
    (["capsules", "--device", "gpu"], "unknown device `gpu`"),
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
    assert "reference.matmul" in names and len(caps) == 40
    mm = next(c for c in caps if c["name"] == "reference.matmul")
    assert mm["trust"] == "checked" and mm["vjp"] == "torchlean-tape"
    assert mm["contracts"]["shape"]["evidence"] == "runtime-guard"
    assert main(["capsules"]) == 0
    assert "reference.add" in capsys.readouterr().out
