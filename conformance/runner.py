"""Capsules spread over worker processes, with per-capsule isolation, time limits and resume.

Why not pytest-xdist here: the CLI is not a test session; xdist would drag pytest's collection and
reporting into every run and still needs a plugin (pytest-timeout) for per-item limits. Why not
ProcessPoolExecutor: one crashing worker breaks the whole pool (BrokenProcessPool fails every
pending future) and a hung task cannot be killed on its own. A ThreadPoolExecutor whose threads each
run `subprocess.run(..., timeout=...)` is standard library all the way, kills exactly the hung
capsule, records a crash as that capsule's `crashed`, and sets CUDA_VISIBLE_DEVICES per worker so
each GPU gets one worker. The tests themselves use pytest-xdist (`-n 2`) as usual.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from conformance import evidence

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    capsule: str
    plugin: str | None = None


def gpu_slots(device: str, jobs: int) -> list[str | None]:
    """One slot per worker; on CUDA each slot names the GPU its worker sees, round robin over the
    visible GPUs (several workers may share one GPU: the oracle's CPU work is the bottleneck)."""
    n = max(jobs, 1)
    if device != "cuda":
        return [None] * n
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        try:
            from cupy.cuda import runtime
            ids = [str(i) for i in range(runtime.getDeviceCount())]
        except Exception:
            ids = ["0"]
    ids = ids or ["0"]
    return [ids[i % len(ids)] for i in range(n)]


def _stub(capsule, handler, status: str, message: str, settings: dict, device: str, plugin):
    campaign = {"status": status, "message": message, "settings": settings}
    return evidence.make_record(capsule, campaign, evidence.build_fingerprint(capsule, handler),
                                device, plugin)


class RunInterrupted(Exception):
    """SIGINT stopped a run: `records` holds what finished (or was interrupted), in target order,
    None for targets that never started."""

    def __init__(self, records: list) -> None:
        super().__init__("interrupted")
        self.records = records


def _end(proc: subprocess.Popen) -> None:
    """Terminate a worker, and kill it if it has not gone within a second."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def campaign_process(t: Target, capsule, handler, settings: dict, evidence_dir: Path,
                     device: str, timeout_s: float, env: dict, started=lambda proc: True,
                     ended=lambda: None, stopped=lambda: False) -> dict | None:
    """One capsule's campaign in a `conformance.worker` process with a time limit: its record
    (read back), or the stub that says it timed out, crashed or was interrupted (written where
    the record would be). `started(proc)` may refuse the process (a stop came first: None is
    returned), `ended()` follows it, `stopped()` says whether a stop was asked."""
    path = evidence.record_path(evidence_dir, capsule.name)
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.getcwd(),
                                                      env.get("PYTHONPATH")]))
    spec = {"capsule": t.capsule, "plugin": t.plugin, "settings": settings,
            "evidence_dir": str(evidence_dir), "device": device}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "conformance.worker", json.dumps(spec)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not started(proc):
        _end(proc)
        proc.communicate()
        return None
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        _end(proc)
        out, err = proc.communicate()
        timed_out = True
    finally:
        ended()
    if stopped() and (timed_out or proc.returncode != 0 or not path.exists()):
        rec = _stub(capsule, handler, "interrupted", f"stopped by SIGINT after "
                    f"{time.monotonic() - t0:.1f} s; rerun: resume runs it again",
                    settings, device, t.plugin)
    elif timed_out:
        rec = _stub(capsule, handler, "timed-out", f"no result within {timeout_s:g} s "
                    "(--timeout); the worker was killed", settings, device, t.plugin)
    elif proc.returncode != 0 or not path.exists():
        tail = (err or out or "").strip().splitlines()[-12:]
        rec = _stub(capsule, handler, "crashed", f"worker exited with status "
                    f"{proc.returncode}: " + "\n".join(tail), settings, device, t.plugin)
    else:
        return evidence.load_record(path)
    evidence.write_atomic(path, rec)
    return rec


def run_targets(targets: list[Target], settings: dict, evidence_dir: Path, device: str,
                jobs: int, timeout_s: float, fresh: bool = False, on_done=None,
                on_start=None) -> list[dict]:
    """Run each target's campaign in its own process; returns the records, in target order.
    A finished record for the same fingerprint and settings is reused unless `fresh`.
    `on_start(target)` and `on_done(done, total, record)` report progress. On SIGINT every worker
    is stopped, running capsules are recorded as `interrupted`, and RunInterrupted is raised."""
    from conformance.worker import resolve
    evidence_dir = Path(evidence_dir)
    slots: queue.Queue = queue.Queue()
    for s in gpu_slots(device, jobs):
        slots.put(s)
    records: dict[int, dict] = {}
    running: dict[int, subprocess.Popen] = {}
    guard = threading.Lock()
    stop = threading.Event()

    def one(i: int, t: Target) -> dict | None:
        capsule, handler = resolve(t.capsule, t.plugin)
        path = evidence.record_path(evidence_dir, capsule.name)
        if not fresh:
            done = evidence.resumable(path, evidence.build_fingerprint(capsule, handler),
                                      settings, t.plugin)
            if done is not None:
                done["resumed"] = True
                return done
        slot = slots.get()
        try:
            if stop.is_set():
                return None
            env = dict(os.environ)
            if slot is not None:
                env["CUDA_VISIBLE_DEVICES"] = slot
            if on_start is not None:
                on_start(t)

            def started(proc) -> bool:
                with guard:
                    if stop.is_set():
                        return False
                    running[i] = proc
                    return True

            def ended() -> None:
                with guard:
                    running.pop(i, None)
            return campaign_process(t, capsule, handler, settings, evidence_dir, device,
                                    timeout_s, env, started, ended, stop.is_set)
        finally:
            slots.put(slot)

    def collect(fut, i: int) -> None:
        try:
            rec = fut.result()
        except Exception as exc:   # resolving the capsule failed: a user error, reported
            rec = {"capsule": {"name": targets[i].capsule}, "status": "error",
                   "message": f"{type(exc).__name__}: {exc}"}
        if rec is None:
            return
        records[i] = rec
        if on_done is not None:
            on_done(len(records), len(targets), rec)

    workers = max(jobs, 1)
    pool = ThreadPoolExecutor(max_workers=workers)
    futures = {pool.submit(one, i, t): i for i, t in enumerate(targets)}
    try:
        for fut in as_completed(futures):
            collect(fut, futures[fut])
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C waits too
        try:
            stop.set()
            with guard:
                procs = list(running.values())
            for proc in procs:
                _end(proc)
            pool.shutdown(wait=True, cancel_futures=True)
            for fut, i in futures.items():
                if i not in records and fut.done() and not fut.cancelled():
                    collect(fut, i)
        finally:
            signal.signal(signal.SIGINT, previous)
        raise RunInterrupted([records.get(i) for i in range(len(targets))]) from None
    pool.shutdown(wait=True)
    return [records[i] for i in range(len(targets))]
