"""Campaigns on Dask distributed (`torchlean-conformance run --cluster SPEC`): the optional extra
`pip install .[cluster]`; without `--cluster` the local runner (conformance/runner.py) stays.

SPEC is `local` (a LocalCluster of --jobs single-threaded worker processes on this machine),
`local-cuda` (one worker per visible GPU, each with CUDA_VISIBLE_DEVICES naming its own: the
layout dask-cuda's LocalCUDACluster gives, built from distributed's SpecCluster and Nanny) or a
scheduler's address (`tcp://host:8786`: a cluster of hosts that each have this project installed).

Each task is one capsule's campaign, run exactly as the local runner runs it: a
`conformance.worker` process with the time limit, on the Dask worker's machine, into a scratch
directory. The task returns the record, its replay files and where it ran (host, Dask worker,
GPU model, UUID, driver, CUDA runtime); the client writes each record atomically into the one
evidence directory, so records from every worker land side by side. A campaign that crashes or
hangs is recorded as such by the task, as locally; a Dask worker that dies under a task (the
scheduler gives up on it: KilledWorker) is recorded as `crashed` by the client, and the other
tasks go on.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

from conformance import evidence
from conformance.fingerprint import fingerprint
from engine.errors import TorchLeanError
from conformance.runner import Target, _stub, campaign_process


class ClusterUnavailableError(TorchLeanError):
    """--cluster was asked for but Dask distributed is not importable, or no scheduler answers."""


def _distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ClusterUnavailableError(
            f"--cluster needs Dask distributed, which is not importable ({exc}); install the "
            "extra: pip install '.[cluster]', or run without --cluster (the local runner)") from None
    return distributed


def _gpu_ids() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [v.strip() for v in visible.split(",") if v.strip()]
    from cupy.cuda import runtime
    return [str(i) for i in range(runtime.getDeviceCount())]


def connect(spec: str, jobs: int, timeout: str = "20s"):
    """A distributed.Client for SPEC; the caller closes it (and its cluster) with close()."""
    distributed = _distributed()
    import dask
    # A worker lost under a campaign is that campaign's crash, not a reason to rerun it
    # elsewhere (a kernel that kills its process would take the next worker down too).
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    if spec == "local":
        cluster = distributed.LocalCluster(n_workers=max(jobs, 1), threads_per_worker=1,
                                           processes=True, dashboard_address=None)
        return distributed.Client(cluster)
    if spec == "local-cuda":
        ids = _gpu_ids()
        if not ids:
            raise ClusterUnavailableError("--cluster local-cuda: no GPU is visible here; use "
                                          "--cluster local on the CPU")
        # No host-memory limit: Dask's default share (host memory x 1 thread / cores) would
        # have the nanny kill a GPU sweep's worker for its host buffers, a lost shard or a
        # `crashed` capsule that no kernel caused.
        workers = {f"gpu-{g}": {"cls": distributed.Nanny,
                                "options": {"nthreads": 1, "memory_limit": 0,
                                            "env": {"CUDA_VISIBLE_DEVICES": g}}}
                   for g in ids}
        scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
        cluster = distributed.SpecCluster(workers=workers, scheduler=scheduler)
        return distributed.Client(cluster)
    try:
        return distributed.Client(spec, timeout=timeout)
    except OSError as exc:
        raise ClusterUnavailableError(f"--cluster {spec}: no Dask scheduler answered ({exc}); "
                                      "pass local, local-cuda or a running scheduler's "
                                      "address (tcp://host:8786)") from None


def close(client) -> None:
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


class WorkerGoneError(RuntimeError):
    """A task pinned to a worker that left the cluster before running it."""


def gather_pinned(client, futures: list, workers: list, poll_s: float = 2.0) -> list:
    """Each future's result, or the exception it ended with (KilledWorker when its worker died
    under it). A future pinned (allow_other_workers=False) to a worker that has left the cluster
    would wait for that worker forever: when its worker is missing from two polls running and
    it has not ended, it is cancelled and ends with WorkerGoneError. `workers[i]` is the worker
    futures[i] is pinned to (None: not pinned)."""
    from distributed import wait
    pending, missing, gone = set(range(len(futures))), set(), set()
    while pending:
        try:
            wait([futures[i] for i in pending], timeout=poll_s, return_when="FIRST_COMPLETED")
        except TimeoutError:   # none ended within the poll: look at the workers
            pass
        pending = {i for i in pending if not futures[i].done()}
        alive = set(client.scheduler_info()["workers"])
        lost = {i for i in pending if workers[i] is not None and workers[i] not in alive}
        for i in lost & missing:
            futures[i].cancel()
            gone.add(i)
        pending -= gone
        missing = lost
    out = []
    for i, fut in enumerate(futures):
        if i in gone:
            out.append(WorkerGoneError(f"worker {workers[i]} left the cluster before running "
                                       "its task"))
            continue
        try:
            out.append(fut.result())
        except Exception as exc:   # KilledWorker, or the task's own exception
            out.append(exc)
    return out


def where(device: str) -> dict:
    """The machine and GPU a task ran on (the record's `ran_on`)."""
    out = {"host": socket.gethostname()}
    try:
        from distributed import get_worker
        worker = get_worker()
        out["worker"], out["worker_name"] = worker.address, str(worker.name)
    except (ImportError, ValueError):
        out["worker"] = None
    if device == "cuda":
        env = evidence.environment(device)
        out.update({k: env.get(k) for k in ("gpu", "driver", "cuda_runtime")})
        try:
            from cupy.cuda import runtime
            out["gpu_uuid"] = runtime.getDeviceProperties(0)["uuid"].hex()
        except Exception:   # an older CuPy without the field: the model still says which kind
            out["gpu_uuid"] = None
    return out


def device_key(ran_on: dict) -> str:
    """The evidence key of the device a task ran on: `gpus/<key>/` holds its records. A GPU is
    named by model and UUID (driver and CUDA runtime are in each record); a CPU worker by host
    and Dask worker name, so two CPU workers' records stay apart too. The name, not the address:
    a LocalCluster's workers get new ports every run but keep their names (0, 1, ...), so a rerun
    adds no device columns (records without a name fall back to the address)."""
    import re
    if ran_on.get("gpu"):
        model = re.sub(r"[^A-Za-z0-9]+", "-", str(ran_on["gpu"])).strip("-").lower()
        return f"{model}-{(ran_on.get('gpu_uuid') or 'unknown')[:8]}-{ran_on.get('host')}"
    name = ran_on.get("worker_name") or ran_on.get("worker") or "local"
    worker = re.sub(r"[^A-Za-z0-9]+", "-", str(name)).strip("-")
    return f"cpu-{ran_on.get('host')}-{worker}"


def device_dir(evidence_dir: Path, ran_on: dict) -> Path:
    return Path(evidence_dir) / "gpus" / device_key(ran_on)


def campaign_task(capsule: str, plugin: str | None, settings: dict, device: str,
                  timeout_s: float) -> dict:
    """One capsule's campaign on a Dask worker: {record, replays (name -> text), ran_on}."""
    from conformance.runner import resolve_targets
    cap, handler = resolve_targets([Target(capsule, plugin)], device)[0]   # plugins not imported here
    if isinstance(cap, Exception):
        raise cap
    with tempfile.TemporaryDirectory(prefix="torchlean-campaign-") as tmp:
        rec = campaign_process(Target(capsule, plugin), cap, handler, settings, Path(tmp), device,
                               timeout_s, dict(os.environ))
        replays = {p.name: json.loads(p.read_text().replace(tmp + os.sep, ""))
                   for p in (Path(tmp) / "replays").glob("*.json")}
        for ce in rec.get("counterexamples") or []:   # paths relative to the evidence dir
            for key in ("replay_file", "replay_command"):
                if isinstance(ce.get(key), str):
                    ce[key] = ce[key].replace(tmp + os.sep, "")
    return {"record": rec, "replays": replays, "ran_on": where(device)}


def _relocate(text: str, replays_dir: Path) -> str:
    """A replay path or command from a task's scratch directory, under `replays_dir`."""
    return text.replace("replays" + os.sep, str(replays_dir) + os.sep, 1)


def _worse(a: dict | None, b: dict) -> dict:
    """Of two workers' records of one capsule, the one that claims less (any verdict but
    `passed` beats `passed`): the evidence directory's own record never over-states a GPU."""
    if a is None:
        return b
    return b if a.get("status") == "passed" and b.get("status") != "passed" else a


def run_targets_on_cluster(client, targets: list[Target], settings: dict, evidence_dir: Path,
                           device: str, timeout_s: float, fresh: bool = False,
                           on_done=None, every_worker: bool = False) -> list[dict]:
    """conformance.runner.run_targets on a Dask cluster: the same records, in target order.
    Each record also lands under gpus/<device key>/ (device_key). `every_worker`: each capsule
    runs on every worker (one GPU each under local-cuda), and the directory's own record is the
    least claiming of them."""
    from distributed import as_completed
    from conformance.runner import resolve_targets
    evidence_dir = Path(evidence_dir)
    resolved = resolve_targets(targets, device)
    records: dict[int, dict] = {}
    futures = {}
    workers = sorted(client.scheduler_info()["workers"]) if every_worker else [None]
    for i, t in enumerate(targets):
        capsule, handler = resolved[i]
        if isinstance(capsule, Exception):
            raise capsule
        path = evidence.record_path(evidence_dir, capsule.name)
        done = None if fresh or every_worker else evidence.resumable(
            path, fingerprint(capsule, handler), settings, t.plugin)
        if done is not None:
            done["resumed"] = True
            records[i] = done
            if on_done is not None:
                on_done(len(records), len(targets), done)
            continue
        for w, worker in enumerate(workers):
            placement = {} if worker is None else {"workers": [worker],
                                                   "allow_other_workers": False}
            fut = client.submit(campaign_task, t.capsule, t.plugin, settings, device, timeout_s,
                                pure=False, key=f"campaign-{capsule.name}-{os.getpid()}-{i}-{w}",
                                **placement)
            futures[fut] = (i, t, capsule, handler, path)
    pending = {i: len(workers) for i in {v[0] for v in futures.values()}}
    merged: dict[int, dict | None] = {}
    for fut in as_completed(list(futures)):
        i, t, capsule, handler, path = futures[fut]
        try:
            out = fut.result()
            rec = out["record"]
            rec["ran_on"] = out["ran_on"]
            replays_dir = evidence_dir / "replays"
            for name, replay in out["replays"].items():
                replays_dir.mkdir(parents=True, exist_ok=True)
                if isinstance(replay.get("command"), str):
                    replay["command"] = _relocate(replay["command"], replays_dir)
                evidence.write_atomic(replays_dir / name, replay)
            for ce in rec.get("counterexamples") or []:
                for key in ("replay_file", "replay_command"):
                    if isinstance(ce.get(key), str):
                        ce[key] = _relocate(ce[key], replays_dir)
            evidence.write_atomic(evidence.record_path(device_dir(evidence_dir, rec["ran_on"]),
                                                       capsule.name), rec)
        except Exception as exc:   # the Dask worker died under it (KilledWorker) or the task failed
            rec = _stub(capsule, handler, "crashed", f"the Dask task ended with "
                        f"{type(exc).__name__}: {exc}", settings, device, t.plugin)
        merged[i] = _worse(merged.get(i), rec)
        pending[i] -= 1
        if pending[i]:
            continue
        evidence.write_atomic(path, merged[i])
        records[i] = merged[i]
        if on_done is not None:
            on_done(len(records), len(targets), merged[i])
    return [records[i] for i in range(len(targets))]


def device_records(evidence_dir: Path) -> dict[str, list[dict]]:
    """Device key -> its records, from gpus/*/ of an evidence directory (keys sorted; devices
    without a usable record left out). The command's table and the report's page read this."""
    out = {}
    for d in sorted((Path(evidence_dir) / "gpus").glob("*")):
        recs = evidence.load_records(d) if d.is_dir() else []
        if recs:
            out[d.name] = recs
    return out


def device_matrix(evidence_dir: Path, by_device: dict[str, list[dict]] | None = None
                  ) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(device keys, capsule -> key -> status) from gpus/*/ of an evidence directory (or from
    its device_records, when the caller has read them already)."""
    if by_device is None:
        by_device = device_records(evidence_dir)
    rows: dict[str, dict[str, str]] = {}
    for key, recs in by_device.items():
        for rec in recs:
            rows.setdefault(rec["capsule"]["name"], {})[key] = rec.get("status")
    return list(by_device), rows


def format_matrix(evidence_dir: Path) -> str:
    """The capsules x devices table the command prints after a cluster run."""
    keys, rows = device_matrix(evidence_dir)
    if not keys:
        return ""
    width = max([len(n) for n in rows] + [7])
    lines = ["devices: " + "; ".join(f"[{j}] {k}" for j, k in enumerate(keys)),
             f"{'capsule':{width}s}  " + "  ".join(f"[{j}]".ljust(9) for j in range(len(keys)))]
    for name in sorted(rows):
        lines.append(f"{name:{width}s}  " + "  ".join(
            str(rows[name].get(k, "-")).ljust(9) for k in keys))
    return "\n".join(lines)
