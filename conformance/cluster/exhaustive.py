"""`torchlean-conformance exhaustive --cluster SPEC`: a capsule's sweep sharded over the workers of
a Dask cluster (conformance/cluster/__init__.py's `connect`: local, local-cuda with one GPU per
worker, or a scheduler's address), one shard per worker.

Each shard is a task pinned to its own worker: exhaustive.sweep_shard, the chunks
conformance.exhaustive.plan.shards gives it, judged there (on that worker's one GPU under
local-cuda). The client merges the shards' results with exhaustive.merge_shards, the local sweep's
own merge, and writes the one record, with `cluster`: the workers, where each shard ran and its
seconds, the wall time, the speed-up (sum of shard seconds / wall) and, when an earlier
single-worker record of the same sweep is known, the speed-up against it (docs/EXHAUSTIVE.md).

An exhaustive verdict needs every pattern: a shard whose worker dies (KilledWorker) or whose task
raises leaves the record `incomplete`, the lost shard named in `message` and `cluster.lost`;
never a verdict over the other shards alone. Shards that ran on GPUs of different models,
drivers or CUDA runtimes leave it `incomplete` too: a verified record binds one GPU environment.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conformance import cluster, evidence, exhaustive
from conformance.exhaustive.plan import patterns_checked, shards

GPU_KEYS = ("gpu", "driver", "cuda_runtime")


def shard_task(capsule: str, plugin: str | None, device: str, stride: int, index: int,
               count: int, chunk: int | None) -> dict:
    """One shard on a Dask worker: sweep_shard's result, the worker's environment and where."""
    from conformance.worker import resolve
    cap, handler = resolve(capsule, plugin, device)
    out = exhaustive.sweep_shard(cap, handler, device, stride, index, count, chunk)
    out["environment"] = evidence.environment(device)
    out["ran_on"] = cluster.where(device)
    return out


def single_worker_seconds(previous: dict | None, rec: dict) -> float | None:
    """The single-worker time of this sweep, when an earlier record of the same sweep (capsule
    build, stride, device, GPU model) had one: a one-shard run's own seconds, or what an earlier
    cluster record carried forward."""
    gpu = lambda r: (r.get("environment") or {}).get("gpu")  # noqa: E731
    if not previous or previous.get("status") != "passed" or gpu(previous) != gpu(rec) or any(
            previous.get(k) != rec.get(k) for k in ("fingerprint", "stride", "device", "mode")):
        return None
    if previous.get("shards") == 1:
        return previous.get("seconds")
    return (previous.get("cluster") or {}).get("single_worker_seconds")


def incomplete_reason(count: int, lost: list[dict], envs: list[dict]) -> str | None:
    """Why a cluster sweep's record is no verdict: a lost shard (its patterns never judged), or
    shards judged on different GPU environments; None when neither."""
    if lost:
        first = lost[0]
        return (f"shard {first['shard']} of {count} lost on worker {first['worker']} "
                f"({first['error'].split('. ')[0]}): its {first['patterns']} patterns were never "
                f"judged; an exhaustive verdict needs every pattern (lost shards: "
                f"{', '.join(str(x['shard']) for x in lost)})")[:1000]
    kinds = sorted({tuple(str(e.get(k)) for k in GPU_KEYS) for e in envs})
    if len(kinds) > 1:
        return (f"the shards ran on {len(kinds)} different GPU environments (model, driver, "
                f"CUDA runtime: {'; '.join(', '.join(k) for k in kinds)}); a verified record "
                "binds one: run on workers with identical GPUs")
    return None


def _ratio(a: float, b: float) -> float | None:
    """a / b to four significant digits (times are kept to the microsecond)."""
    return float(f"{a / b:.4g}") if b > 0 else None


def _read(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def sweep_on_cluster(client, cap, handler, plugin: str | None, device: str, stride: int,
                     previous_path: Path | None = None, chunk: int | None = None) -> dict:
    """Sweep one capsule with one shard per worker of `client`; returns its record."""
    workers = sorted(client.scheduler_info()["workers"])
    count = len(workers)
    t0 = time.perf_counter()
    futures = [client.submit(shard_task, cap.name, plugin, device, stride, i, count, chunk,
                             key=f"exhaustive-{cap.name}-{os.getpid()}-{i}-{time.time_ns()}",
                             workers=[w], allow_other_workers=False, pure=False)
               for i, w in enumerate(workers)]
    results = cluster.gather_pinned(client, futures, workers)
    wall = time.perf_counter() - t0
    outs, lost = [], []
    parts = shards(exhaustive.chunk_plan(device, stride, chunk), count)
    for i, res in enumerate(results):
        if isinstance(res, BaseException):   # KilledWorker, WorkerGoneError, or it raised
            lost.append({"shard": i, "worker": workers[i], "patterns": patterns_checked(parts[i]),
                         "error": f"{type(res).__name__}: {res}"[:500]})
        else:
            outs.append(res)
    rec = exhaustive.merge_shards(cap, handler, device, stride, outs, wall, chunk) if outs else \
        exhaustive.harness_error_record(cap, handler, device, stride,
                                        RuntimeError("every shard was lost"))
    if outs:
        rec["environment"] = outs[0]["environment"]
    rec["shards"] = count
    info = {"workers": workers, "shards": [
        {"shard": o["index"], "worker": o["ran_on"].get("worker"), "ran_on": o["ran_on"],
         "patterns": o["patterns"], "seconds": round(o["seconds"], 6)} for o in outs],
        "lost": lost, "wall_seconds": round(wall, 6)}
    busy = sum(o["seconds"] for o in outs)
    info["speedup"] = _ratio(busy, wall)
    single = single_worker_seconds(_read(previous_path) if previous_path else None, rec)
    info["single_worker_seconds"] = single
    info["speedup_vs_single_worker"] = _ratio(single, wall) if single else None
    rec["cluster"] = info
    reason = incomplete_reason(count, lost, [o["environment"] for o in outs])
    if reason:
        rec["status"], rec["message"] = "incomplete", reason
    if lost:
        rec["patterns"]["unjudged"] = sum(x["patterns"] for x in lost)
    return rec
