"""Stopping a run with a signal, as a user's terminal, a job scheduler or a `kill` does: SIGTERM
to the parent alone or to its whole group is handled as Ctrl-C (running capsules recorded as
`interrupted`, exit 143, a message), SIGINT reaching the judges before the parent never records
`crashed`, and no judge or kernel process outlives the command."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "fixtures.plugins.slow_kernels:ENTRIES"


def _start(tmp_path):
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO), "TL_SIGNAL_TEST": mark}
    proc = subprocess.Popen([sys.executable, "-m", "conformance.cli", "run", "--device", "cpu",
                             "--quick", "--no-progress", "--jobs", "2", "--evidence-dir",
                             str(tmp_path), "--plugin", PLUGIN], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, mark


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries the run's mark (the command and everything it
    started: judges inherit it, kernel processes from their judge)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if f"TL_SIGNAL_TEST={mark}".encode() in p.joinpath("environ").read_bytes():
                state = p.joinpath("stat").read_text().split(")")[-1].split()[0]
                if state != "Z":
                    out.append(int(p.name))
        except OSError:
            pass
    return out


def _children(pid: int, needle: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int(p.joinpath("stat").read_text().split(")")[-1].split()[1])
                cmd = p.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid and needle in cmd:
                out.append(int(p.name))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait_for_judges(proc, n=2, limit=60.0) -> list[int]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        judges = [j for j in _children(proc.pid, "conformance.worker") if _comm(j) != "tl-kernel"]
        kernels = [k for j in judges for k in _children(j, "") if _comm(k) == "tl-kernel"]
        if len(judges) >= n and len(kernels) >= n:
            time.sleep(1.0)   # both inside their campaigns
            return judges
        time.sleep(0.1)
    pytest.fail("the judges never started")


def _statuses(tmp_path) -> dict:
    return {p.stem: json.loads(p.read_text())["status"] for p in tmp_path.glob("user.*.json")}


@pytest.mark.parametrize("whom", ["parent", "group"])
def test_sigterm_records_interrupted_and_leaves_nothing_behind(tmp_path, whom):
    proc, mark = _start(tmp_path)
    _wait_for_judges(proc)
    if whom == "parent":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted:" in err and "Traceback" not in err, err[-2000:]
    assert set(_statuses(tmp_path).values()) == {"interrupted"}
    assert _marked(mark) == []          # no judge, kernel or fork outlives the command


def test_sigint_to_the_judges_first_is_interrupted_never_crashed(tmp_path):
    proc, mark = _start(tmp_path)
    for judge in _wait_for_judges(proc):
        os.kill(judge, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    statuses = _statuses(tmp_path)
    assert set(statuses.values()) == {"interrupted"}, (statuses, err[-2000:])
    assert proc.returncode == 130
    assert _marked(mark) == []
