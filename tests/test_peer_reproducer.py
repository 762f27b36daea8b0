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


def test_every_recorded_jax_failure_reproduces(tmp_path):
    pytest.importorskip("jax")
    assert len(JAX_REPLAYS) >= 10
    for path in JAX_REPLAYS:
        (tmp_path / "r.py").write_text(reproducer(path))
        proc = subprocess.run([sys.executable, str(tmp_path / "r.py")], capture_output=True,
                              text=True, timeout=120)
        reason = json.loads(path.read_text())["failures"][0]["reason"]
        assert proc.returncode == 1 and f"still fails ({reason})" in proc.stdout, \
            (path.name, proc.stdout, proc.stderr)


def test_a_fixed_value_exits_0(tmp_path):
    """The same script against the value JAX returns: as if JAX's exp were fixed."""
    pytest.importorskip("jax")
    data = json.loads(next(p for p in JAX_REPLAYS if p.name.startswith("xla.exp-")).read_text())
    data["failures"][0]["expected"] = data["failures"][0]["got"]
    data["failures"][0]["bound"] = None        # bitwise: JAX's own bits
    (tmp_path / "fixed.json").write_text(json.dumps(data))
    (tmp_path / "r.py").write_text(reproducer(tmp_path / "fixed.json"))
    proc = subprocess.run([sys.executable, str(tmp_path / "r.py")], capture_output=True,
                          text=True, timeout=120)
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
