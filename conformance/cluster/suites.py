"""The reliability suites (guards, determinism, allocator-cap) as Dask tasks under
`torchlean-conformance run --cluster SPEC`: each suite one task on any worker, or with
--every-worker one task pinned to each worker (each GPU under local-cuda). A task runs the suite
exactly as the local command does (conformance/suites.py's suite_report) and returns its report
and where it ran; conformance/suites.py writes and prints them.

A suite whose worker dies, or whose task raises, is the named SuiteTaskError: the suite is not
run, which `run` reports as that suite's crash (a harness error) while the other suites go on."""
from __future__ import annotations

import os
import time

from conformance import cluster


class SuiteTaskError(RuntimeError):
    """A suite's Dask task did not return (its worker died, or the suite raised there)."""


def suite_task(run, name: str, device: str, quick: bool) -> tuple:
    """On a Dask worker: (run(name, device, quick), where it ran); `run` is suites.suite_report,
    handed in (this module stays below conformance/suites.py in the import graph)."""
    return run(name, device, quick), cluster.where(device)


def run_suite_on_cluster(client, run, name: str, device: str, quick: bool,
                         every_worker: bool) -> list[tuple]:
    """[(report, ran_on)] of one suite, `run(name, device, quick)` its report: one task, or one
    per worker (in worker order)."""
    workers = sorted(client.scheduler_info()["workers"]) if every_worker else [None]
    futures = []
    for w, worker in enumerate(workers):
        placement = {} if worker is None else {"workers": [worker], "allow_other_workers": False}
        futures.append(client.submit(suite_task, run, name, device, quick, pure=False,
                                     key=f"suite-{name}-{os.getpid()}-{w}-{time.time_ns()}",
                                     **placement))
    out = []
    for worker, res in zip(workers, cluster.gather_pinned(client, futures, workers)):
        if isinstance(res, BaseException):   # KilledWorker, WorkerGoneError, or it raised
            raise SuiteTaskError(
                f"suite `{name}` did not complete on {worker or 'its Dask worker'}: "
                f"{type(res).__name__}: {str(res).split('. ')[0]}; its record is not written "
                "(rerun the suite; without --cluster it runs in this process)") from res
        out.append(res)
    return out
