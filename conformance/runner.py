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
import subprocess
import sys
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
    """One slot per worker; on CUDA, one visible GPU per slot."""
    if device != "cuda":
        return [None] * max(jobs, 1)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v for v in visible.split(",") if v.strip()]
    else:
        try:
            from cupy.cuda import runtime
            ids = [str(i) for i in range(runtime.getDeviceCount())]
        except Exception:
            ids = ["0"]
    return ids[: max(jobs, 1)] if jobs else ids


def _stub(capsule, handler, status: str, message: str, settings: dict, device: str, plugin):
    campaign = {"status": status, "message": message, "settings": settings}
    return evidence.make_record(capsule, campaign, evidence.build_fingerprint(capsule, handler),
                                device, plugin)


def run_targets(targets: list[Target], settings: dict, evidence_dir: Path, device: str,
                jobs: int, timeout_s: float, fresh: bool = False, on_done=None) -> list[dict]:
    """Run each target's campaign in its own process; returns the records, in target order.
    A finished record for the same fingerprint and settings is reused unless `fresh`."""
    from conformance.worker import resolve
    evidence_dir = Path(evidence_dir)
    slots: queue.Queue = queue.Queue()
    for s in gpu_slots(device, jobs):
        slots.put(s)
    records: dict[int, dict] = {}

    def one(i: int, t: Target) -> dict:
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
            env = dict(os.environ)
            if slot is not None:
                env["CUDA_VISIBLE_DEVICES"] = slot
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.getcwd(),
                                                              env.get("PYTHONPATH")]))
            spec = {"capsule": t.capsule, "plugin": t.plugin, "settings": settings,
                    "evidence_dir": str(evidence_dir), "device": device}
            try:
                proc = subprocess.run([sys.executable, "-m", "conformance.worker",
                                       json.dumps(spec)], env=env, capture_output=True,
                                      text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                rec = _stub(capsule, handler, "timed-out", f"no result within {timeout_s:g} s "
                            "(--timeout); the worker was killed", settings, device, t.plugin)
                evidence.write_atomic(path, rec)
                return rec
            if proc.returncode != 0 or not path.exists():
                tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-12:]
                rec = _stub(capsule, handler, "crashed", f"worker exited with status "
                            f"{proc.returncode}: " + "\n".join(tail), settings, device, t.plugin)
                evidence.write_atomic(path, rec)
                return rec
            return evidence.load_record(path)
        finally:
            slots.put(slot)

    workers = max(1, len(gpu_slots(device, jobs)) if device == "cuda" else max(jobs, 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(one, i, t): i for i, t in enumerate(targets)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                rec = fut.result()
            except Exception as exc:   # resolving the capsule failed: a user error, reported
                rec = {"capsule": {"name": targets[i].capsule}, "status": "error",
                       "message": f"{type(exc).__name__}: {exc}"}
            records[i] = rec
            if on_done is not None:
                on_done(len(records), len(targets), rec)
    return [records[i] for i in range(len(targets))]
