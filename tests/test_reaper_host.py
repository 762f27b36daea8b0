"""The reaper (conformance/isolation/reaper.py) kills what kernels leave behind and nothing of the
host's: the harness runs inside processes with children of their own (a Dask LocalCluster's client
owns its workers' processes and multiprocessing's resource tracker), and closing a kernel process
there once killed them all, a worker's restart with them. Each case runs in a fresh interpreter,
so that this process's children and subreaper flag stay out of it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="prctl and /proc are Linux's")

PRELUDE = """
import json, os, subprocess, sys, time
from conformance.isolation import reaper

def alive(pid):
    # a killed child is reaped by the reaper; a live one is not a zombie
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def sleeper(**kw):
    # no descriptor of this script's output: the test reads it to its end
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)

def orphan_of_a_kernel():
    # a kernel process stand-in (a session of its own, as kernel processes have) that forks an
    # escapee into yet another session and ends: the escapee is adopted by this subreaper
    kernel = subprocess.Popen([sys.executable, "-c", "import os, time\\n"
                               "if os.fork() == 0:\\n"
                               "    os.setsid(); print(os.getpid(), flush=True)\\n"
                               "    time.sleep(60); os._exit(0)\\n"],
                              start_new_session=True, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    pid = int(kernel.stdout.readline())
    kernel.wait()
    return pid
"""


def _run(body: str) -> dict:
    script = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_closing_a_kernel_process_spares_the_hosts_children_and_kills_its_orphans():
    """The client of a Dask LocalCluster describing a plugin (KernelProcess.close): the resource
    tracker and a worker-like child live on, unreaped; the kernel's escapee does not."""
    out = _run("""
        from multiprocessing import resource_tracker
        from conformance.isolation.describe import describe_plugin
        from conformance.runner import reap_orphans
        reaper.become_subreaper()                      # as a local run makes its process
        resource_tracker.ensure_running()              # the helper every Dask nanny relies on
        tracker = resource_tracker._resource_tracker._pid
        worker = sleeper()                             # a nanny's worker process, say
        escapee = orphan_of_a_kernel()
        assert alive(escapee)
        table = describe_plugin("fixtures.plugins.worker_killer:ENTRIES", "cpu")
        reap_orphans()
        reaper.kill_children()
        print(json.dumps({"described": sorted(table), "escapee": alive(escapee),
                          "tracker": alive(tracker), "worker": worker.poll(),
                          "tracker_answers": resource_tracker._resource_tracker._check_alive()}))
        worker.kill()
    """)
    assert out == {"described": ["user.killing_abs"], "escapee": False, "tracker": True,
                   "worker": None, "tracker_answers": True}


def test_a_host_that_adopts_nothing_keeps_its_new_session_children_and_ends_its_forked_kernel():
    """Not a subreaper (a Dask worker, a cluster's client): no child in another session can be a
    kernel's orphan, so none is killed; a kernel process it forked itself (prefork marks it)
    is killed even before it leaves this session."""
    out = _run("""
        own = sleeper(start_new_session=True)          # the host's, in a session of its own
        forked = sleeper()                             # stands for a fork not yet setsid
        reaper.started_kernel(forked.pid)
        killed = reaper.kill_children()
        print(json.dumps({"subreaper": reaper.is_subreaper(), "killed": killed,
                          "own": own.poll(), "forked": alive(forked.pid)}))
        own.kill()
    """)
    assert out == {"subreaper": False, "killed": 1, "own": None, "forked": False}
