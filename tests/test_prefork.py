"""The kernel process a judge forks before reading its run (conformance/isolation/prefork.py)
holds what a freshly started one would, seen from inside by a probing kernel
(fixtures/plugins/process_probe.py) in a real run: no descriptor of the judge's but its own
standard streams and two pipes, standard input empty (the judge's carries the seed and nonce),
none of the judge's modules loaded or importable, a session of its own, the name `tl-kernel`;
and a kernel's sys.exit(3) exits 3 without running the kernel's atexit hooks (TRUST_BOUNDARIES.md:
no atexit hook of a kernel runs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "fixtures.plugins.process_probe:ENTRIES"


def _run(tmp_path, capsule):
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--device", "cpu",
                           "--quick", "--no-progress", "--suite", "campaign", "--seed", "1",
                           "--plugin", PLUGIN, "--capsule", capsule, "--evidence-dir",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    record = json.loads((tmp_path / f"{capsule}.json").read_text())
    return proc, record


def test_the_forked_kernel_process_holds_nothing_of_its_judge(tmp_path):
    proc, record = _run(tmp_path, "user.probe")
    assert proc.returncode == 0 and record["status"] == "passed", proc.stdout + proc.stderr
    kept = record["run"]["kernel_output"]["kept"]
    report = json.loads(next(line for line in kept.splitlines()
                             if line.startswith("PROBE "))[len("PROBE "):])
    # 0, 1, 2, the two pipes of the wire, and the directory listing /proc/self/fd itself
    assert report["fds"][:3] == [0, 1, 2] and len(report["fds"]) == 6, \
        json.dumps(report["targets"])   # a string: pytest shortens an object, not a message
    assert report["stdin"] == ""
    assert report["loaded"] == [] and report["attributes"] == []
    assert report["references_importable"] is False
    assert report["sid_is_pid"] is True and report["comm"] == "tl-kernel"


def test_a_kernels_exit_keeps_its_status_and_runs_no_atexit_hook(tmp_path):
    proc, record = _run(tmp_path, "user.probe_exit_3")
    assert proc.returncode == 1 and record["status"] == "crashed", proc.stdout + proc.stderr
    assert "the kernel process exited with status 3" in record["message"]
    assert "KERNEL-ATEXIT" not in record["run"]["kernel_output"]["kept"]


def _kernel_process(way: str):
    from conformance.isolation.prefork import fork_kernel_host
    from conformance.isolation.remote import KernelProcess
    forked = fork_kernel_host() if way == "forked" else None
    kp = KernelProcess("cpu", PLUGIN, forked=forked)
    kp.load()
    return kp


def _call(kp, name):
    import numpy as np
    return kp.request({"op": "forward", "name": name, "inputs": [np.ones(3, np.float32)],
                       "params": {}, "poison": False, "offsets": None}, budget=1 << 20)


@pytest.mark.parametrize("way", ["fresh", "forked"])
def test_both_ways_give_the_same_process(way):
    # forked from this test process, which has the judge's modules loaded: the fork forgets them
    import conformance.references  # noqa: F401
    kp = _kernel_process(way)
    try:
        reply = _call(kp, "user.probe")
        assert reply["out"].tolist() == [1.0, 1.0, 1.0]
    finally:
        kept = kp.close()["kept"]
    report = json.loads(next(line for line in kept.splitlines()
                             if line.startswith("PROBE "))[len("PROBE "):])
    assert len(report["fds"]) == 6 and report["stdin"] == "", report
    assert report["loaded"] == [] and report["attributes"] == [], report
    assert report["references_importable"] is False and report["comm"] == "tl-kernel"
    assert report["sid_is_pid"] is True


@pytest.mark.parametrize("way", ["fresh", "forked"])
def test_both_ways_exit_with_the_kernels_status_and_no_atexit_hook(way):
    from conformance.isolation.remote import KernelProcessError
    kp = _kernel_process(way)
    try:
        with pytest.raises(KernelProcessError, match="exited with status 3"):
            _call(kp, "user.probe_exit_3")
    finally:
        kept = kp.close()["kept"]
    assert "KERNEL-ATEXIT" not in kept
