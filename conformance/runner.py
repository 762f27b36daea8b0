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
import secrets
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from conformance import evidence
from conformance.exit_codes import EnvironmentFailure
from conformance.fingerprint import fingerprint

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
    return evidence.make_record(capsule, campaign, fingerprint(capsule, handler),
                                device, plugin)


class RunInterrupted(Exception):
    """SIGINT or SIGTERM stopped a run: `records` holds what finished (or was interrupted), in
    target order, None for targets that never started; `terminated` is True for SIGTERM."""

    def __init__(self, records: list, terminated: bool = False) -> None:
        super().__init__("interrupted")
        self.records = records
        self.terminated = terminated


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
                     ended=lambda: None, stopped=lambda: False, seed_source: str = "given"
                     ) -> dict | None:
    """One capsule's campaign in a `conformance.worker` process (the judge) with a time limit:
    its record (read back, and counted only when it carries this call's nonce), or the stub that
    says it timed out, crashed or was interrupted (written where the record would be).
    `started(proc)` may refuse the process (a stop came first: None is returned), `ended()`
    follows it, `stopped()` says whether a stop was asked."""
    path = evidence.record_path(evidence_dir, capsule.name)
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.getcwd(),
                                                      env.get("PYTHONPATH")]))
    nonce = secrets.token_hex(16)
    spec = {"capsule": t.capsule, "plugin": t.plugin, "settings": settings,
            "evidence_dir": str(evidence_dir), "device": device, "nonce": nonce,
            "seed_source": seed_source}
    t0 = time.monotonic()
    with _SPAWN:   # the spec goes through stdin: arguments and environment are readable by others
        proc = subprocess.Popen([sys.executable, "-m", "conformance.worker"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _OURS.add(proc.pid)
    if not started(proc):
        _end(proc)
        proc.communicate()
        return None
    try:
        out, err = proc.communicate(json.dumps(spec), timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        _end(proc)
        out, err = proc.communicate()
        timed_out = True
    finally:
        ended()
        _OURS.discard(proc.pid)
    reap_orphans()   # whatever the judge's kernel left behind, before any record is read
    rec = _own_record(path, nonce) if not timed_out and proc.returncode == 0 else None
    if rec is not None:
        return rec
    if stopped() or (proc.returncode in _STOPPED_CODES and not timed_out):
        rec = _stub(capsule, handler, "interrupted", f"stopped by a signal after "
                    f"{time.monotonic() - t0:.1f} s; rerun: resume runs it again",
                    settings, device, t.plugin)
    elif timed_out:
        rec = _stub(capsule, handler, "timed-out", f"no result within {timeout_s:g} s "
                    "(--timeout); the worker was killed", settings, device, t.plugin)
    else:
        tail = (err or out or "").strip().splitlines()[-12:]
        why = (f"worker exited with status {proc.returncode}" if proc.returncode else
               "worker exited with status 0 but wrote no record of this run (a record "
               "without this run's nonce is never its verdict)")
        rec = _stub(capsule, handler, "crashed", why + (": " + "\n".join(tail) if tail else ""),
                    settings, device, t.plugin)
    rec["run"] = {"nonce": nonce, "seed": settings.get("seed"), "seed_source": seed_source}
    evidence.write_atomic(path, rec)
    return rec


# A judge's exit by SIGINT or SIGTERM (its handler's code, or the signal itself): interrupted,
# never crashed, whatever reached it first.
_STOPPED_CODES = (130, 143, -signal.SIGINT, -signal.SIGTERM)
_SPAWN = threading.Lock()
_OURS: set[int] = set()


def _own_record(path: Path, nonce: str) -> dict | None:
    """The record at `path` when this run's judge wrote it (its nonce), else None."""
    try:
        rec = evidence.load_record(path)
    except (evidence.EvidenceError, OSError):
        return None
    run = rec.get("run")
    return rec if isinstance(run, dict) and run.get("nonce") == nonce else None


def reap_orphans() -> int:
    """Kill the processes this runner adopted (it is a subreaper): descendants of a judge that
    died, such as a kernel's forks. Only children in another session than this one's and not
    started here: kernel processes start their own session, so this process's other children
    (a Dask cluster's workers, say) are never touched."""
    from conformance.isolation.reaper import kill_children
    own_sid = os.getsid(0)
    with _SPAWN:
        return kill_children(lambda pid, sid: pid not in _OURS and sid != own_sid, limit_s=2.0)


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the runner: handled as SIGINT is (workers stopped, `interrupted` records),
    and the command exits 143."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def run_targets(targets: list[Target], settings: dict, evidence_dir: Path, device: str,
                jobs: int, timeout_s: float, fresh: bool = False, on_done=None,
                on_start=None, plugin_seed: int | None = None,
                seed_source: str = "given") -> list[dict]:
    """Run each target's campaign in its own process; returns the records, in target order.
    A finished record for the same fingerprint and settings is reused unless `fresh`.
    `on_start(target)` and `on_done(done, total, record)` report progress. On SIGINT or SIGTERM
    every worker is stopped (and whatever its kernel started), running capsules are recorded as
    `interrupted`, and RunInterrupted is raised (its `terminated` says which signal).
    `plugin_seed`: the seed of plugin targets when the user gave none, drawn at random by the
    caller and handed only to judges (recorded as seed_source "random"); `seed_source` says
    where the others' seed came from ("given" by the user, or the "default")."""
    from conformance.isolation.reaper import become_subreaper
    become_subreaper()
    resolved = resolve_targets(targets, device)
    evidence_dir = Path(evidence_dir)
    slots: queue.Queue = queue.Queue()
    for s in gpu_slots(device, jobs):
        slots.put(s)
    records: dict[int, dict] = {}
    running: dict[int, subprocess.Popen] = {}
    guard = threading.Lock()
    stop = threading.Event()

    def one(i: int, t: Target) -> dict | None:
        capsule, handler = resolved[i]
        if isinstance(capsule, Exception):
            raise capsule
        path = evidence.record_path(evidence_dir, capsule.name)
        own = settings if t.plugin is None or plugin_seed is None else \
            {**settings, "seed": plugin_seed}
        source = "random" if own is not settings else seed_source
        if not fresh:
            done = evidence.resumable(path, fingerprint(capsule, handler),
                                      own, t.plugin)
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
            return campaign_process(t, capsule, handler, own, evidence_dir, device,
                                    timeout_s, env, started, ended, stop.is_set, source)
        finally:
            slots.put(slot)

    environment: list = []

    def collect(fut, i: int) -> None:
        try:
            rec = fut.result()
        except EnvironmentFailure as exc:   # the disk, not the capsule: stop and say so
            environment.append(exc)
            stop.set()
            return
        except Exception as exc:   # resolving the capsule failed: a user error, reported
            rec = {"capsule": {"name": targets[i].capsule}, "status": "error",
                   "message": f"{type(exc).__name__}: {exc}"}
        if rec is None:
            return
        records[i] = rec
        if on_done is not None:
            on_done(len(records), len(targets), rec)

    workers = max(jobs, 1)
    in_main = threading.current_thread() is threading.main_thread()
    before_term = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    pool = ThreadPoolExecutor(max_workers=workers)
    futures = {pool.submit(one, i, t): i for i, t in enumerate(targets)}
    try:
        for fut in as_completed(futures):
            collect(fut, futures[fut])
    except KeyboardInterrupt as stop_signal:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C waits too
        if in_main:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
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
            reap_orphans()
        finally:
            signal.signal(signal.SIGINT, previous)
            if in_main:
                signal.signal(signal.SIGTERM, before_term)
        err = RunInterrupted([records.get(i) for i in range(len(targets))])
        err.terminated = isinstance(stop_signal, Terminated)
        raise err from None
    pool.shutdown(wait=True)
    if in_main:
        signal.signal(signal.SIGTERM, before_term)
    reap_orphans()
    if environment:
        raise environment[0]
    return [records[i] for i in range(len(targets))]


def resolve_targets(targets: list[Target], device: str) -> list[tuple]:
    """(capsule, handler) per target: a built-in from the registry here (the engine's code), a
    plugin entry as its kernel process describes it (the plugin is never imported here; one
    kernel process per plugin). A target that cannot be resolved holds its exception, raised
    when its turn comes (a user error, recorded as `error`)."""
    from conformance.isolation.describe import describe_plugin
    from conformance.worker import resolve
    described: dict[str, dict] = {}
    out = []
    for t in targets:
        try:
            if t.plugin is None:
                out.append(resolve(t.capsule, None))
                continue
            if t.plugin not in described:
                described[t.plugin] = describe_plugin(t.plugin, device)
            table = described[t.plugin]
            if t.capsule not in table:
                raise KeyError(f"plugin `{t.plugin}` defines no capsule `{t.capsule}`; it "
                               f"defines: {', '.join(table) or 'none'}")
            out.append(table[t.capsule])
        except Exception as exc:
            out.append((exc, None))
    return out
