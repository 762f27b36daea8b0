"""`torchlean-conformance reproduce`: a peer's recorded failure as a script that needs only the
peer and NumPy, exits 1 while the failure stands and 0 once fixed. Checked on the replays of JAX's
CPU audit (run where jax is installed) and of PyTorch's on the H100 (compiled here; their run
needs the GPU)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.peers.reproducer import EXPRESSIONS, ReproducerError, reproducer

REPO = Path(__file__).resolve().parent.parent
JAX_REPLAYS = sorted((REPO / "evidence/jax-cpu/with-contract/replays").glob("xla.*.json"))
TORCH_REPLAYS = [p for p in sorted((REPO / "evidence/h100/replays").glob("aten.*.json"))
                 if json.loads(p.read_text())["case"]["op"] in EXPRESSIONS]


def _imports(script: str) -> set[str]:
    tree = ast.parse(script)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", JAX_REPLAYS + TORCH_REPLAYS, ids=lambda p: p.name)
def test_a_reproducer_needs_only_the_peer_and_numpy(path):
    script = reproducer(path)
    peer = "jax" if path.name.startswith("xla.") else "torch"
    assert _imports(script) == {"sys", "numpy", peer}
    compile(script, path.name, "exec")


# the JAX whose CPU kernels made the replays (evidence/jax-cpu/README.md); another version may
# have fixed a finding (JAX 0.11.2's CPU exp on the GPU machine returns the correctly rounded
# value where 0.10.2 was 4 ulp off), so that a failure still stands is asserted for this one only
JAX_RECORDED = "0.10.2"


def _run_reproducer(tmp_path, path) -> subprocess.CompletedProcess:
    (tmp_path / "r.py").write_text(reproducer(path))
    return subprocess.run([sys.executable, str(tmp_path / "r.py")], capture_output=True,
                          text=True, timeout=120)


def test_every_jax_reproducer_gives_a_verdict_under_the_installed_jax(tmp_path):
    jax = pytest.importorskip("jax")
    assert len(JAX_REPLAYS) >= 10
    for path in JAX_REPLAYS:
        proc = _run_reproducer(tmp_path, path)
        reason = json.loads(path.read_text())["failures"][0]["reason"]
        line = proc.stdout.rstrip()
        assert line.startswith(f"JAX {jax.__version__}: "), (path.name, proc.stdout, proc.stderr)
        assert (proc.returncode, line.endswith(": fixed")) in ((0, True), (1, False)) and \
            (proc.returncode == 0 or line.endswith(f"still fails ({reason})")), \
            (path.name, proc.stdout, proc.stderr)


def test_every_recorded_jax_failure_reproduces_under_the_jax_that_made_it(tmp_path):
    jax = pytest.importorskip("jax")
    if jax.__version__ != JAX_RECORDED:
        pytest.skip(f"the replays are JAX {JAX_RECORDED}'s; this is JAX {jax.__version__} (the "
                    "test above checks that each reproducer still gives a verdict)")
    for path in JAX_REPLAYS:
        proc = _run_reproducer(tmp_path, path)
        reason = json.loads(path.read_text())["failures"][0]["reason"]
        assert proc.returncode == 1 and f"still fails ({reason})" in proc.stdout, \
            (path.name, proc.stdout, proc.stderr)


def test_a_fixed_value_exits_0(tmp_path):
    """The same script expecting the bits the installed JAX returns: as if they were right."""
    pytest.importorskip("jax")
    path = next(p for p in JAX_REPLAYS if p.name.startswith("xla.exp-"))
    first = _run_reproducer(tmp_path, path)
    got = first.stdout.split("(0x", 1)[1][:8]        # the first bits printed are JAX's
    data = json.loads(path.read_text())
    data["failures"][0]["expected"] = f"0x{got}"
    data["failures"][0]["bound"] = None        # bitwise: JAX's own bits
    (tmp_path / "fixed.json").write_text(json.dumps(data))
    proc = _run_reproducer(tmp_path, tmp_path / "fixed.json")
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(": fixed"), proc.stdout


def test_what_it_cannot_write_is_a_usage_error(tmp_path):
    ours = json.loads(JAX_REPLAYS[0].read_text())
    ours["capsule"] = "reference.exp"
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    with pytest.raises(ReproducerError, match="a reproducer is written for a peer's"):
        reproducer(tmp_path / "ours.json")
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "reproduce",
                           str(tmp_path / "ours.json")], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and "reference.exp" in proc.stderr


def test_the_capsule_page_gives_a_peers_failure_its_reproduce_command():
    from reports.builder import build_report
    from reports.current import RegistryBuild
    report = build_report([REPO / "evidence/jax-cpu/with-contract"], RegistryBuild())
    row = next(r for r in report.rows if r.info.name == "xla.exp")
    ce = row.cells[0].evidence.counterexamples[0]
    assert ce.reproduce_command == f"torchlean-conformance reproduce {ce.replay_file}"
    ours = build_report([REPO / "fixtures/evidence/cpu"], RegistryBuild())
    assert all(c.reproduce_command is None for r in ours.rows for cell in r.cells
               if cell.evidence for c in cell.evidence.counterexamples)
