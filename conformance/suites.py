"""The reliability suites as `torchlean-conformance run --suite NAME` handlers: each runs, writes
its evidence record as <evidence-dir>/suite-<name>.json (atomically), and prints its counts.

Under `run --cluster` each suite is one Dask task (conformance/cluster/suites.py), or one per
worker with --every-worker: each device's record lands under gpus/<device key>/ too, and the
directory's own record is the least claiming of them."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from conformance.evidence_dir import default_evidence_dir
from conformance.fingerprint import checkout_digest
from conformance.jsonfile import write_atomic


def _write(args, record: dict, out: Path | None = None) -> Path:
    """suite-<name>.json, stamped with the checkout it tested (trust reads the guard suite's)."""
    out = out or Path(args.evidence_dir or default_evidence_dir(args.device))
    path = out / f"suite-{record['suite']}.json"
    record = {**record, "checkout": checkout_digest()}
    write_atomic(path, json.dumps(record, indent=1, default=str))
    return path


def suite_report(name: str, device: str, quick: bool, patterns: list[str] | None = None,
                 on_done=None):
    """One suite's report object, run in this process (locally, or as a Dask task). `patterns`
    (run --capsule) narrow the guards and determinism suites to the capsules they select;
    `on_done(done, total, result)` hears of each capsule the determinism suite finishes."""
    if name == "guards":
        from conformance.guards import run_guards
        return run_guards(device, patterns)
    if name == "determinism":
        from conformance.determinism import run_determinism
        return run_determinism(device, runs=4 if quick else 8, patterns=patterns,
                               on_done=on_done)
    from conformance.allocator_cap import run_allocator_cap
    return run_allocator_cap(device)


def _record(name: str, report, device: str) -> dict:
    record = report.to_record()
    if name == "allocator-cap":
        record["device"] = device
    return record


def _reports(args, name: str) -> tuple[object, list[tuple]]:
    """(the report the directory's own record holds, [(report, path of its record, device key or
    None)]): the one local report, or on a cluster one per task, each written under
    gpus/<device key>/, the directory's own record being the least claiming of them."""
    patterns = getattr(args, "capsule", None) or None
    if not getattr(args, "cluster_client", None):
        report = suite_report(name, args.device, args.quick, patterns, _capsule_progress(args))
        return report, [(report, _write(args, _record(name, report, args.device)), None)]
    from conformance import cluster
    from conformance.cluster.suites import run_suite_on_cluster
    out = Path(args.evidence_dir or default_evidence_dir(args.device))
    ran = run_suite_on_cluster(args.cluster_client, functools.partial(suite_report,
                                                                      patterns=patterns),
                               name, args.device, args.quick, args.every_worker)
    done = [(report, _write(args, {**_record(name, report, args.device), "ran_on": ran_on},
                            cluster.device_dir(out, ran_on)), cluster.device_key(ran_on))
            for report, ran_on in ran]
    own, ran_on = next(((r, w) for r, w in ran if not r.passed), ran[0])
    path = _write(args, {**_record(name, own, args.device), "ran_on": ran_on}, out)
    print(f"{name}: {len(ran)} device(s); the least claiming record is {path}")
    return own, done


def _on(key: str | None) -> str:
    return "" if key is None else f" [{key}]"


def _capsule_progress(args):
    """on_done for a suite that audits capsule by capsule: a progress line (a bar on a
    terminal) per finished capsule, as the campaign's, unless --no-progress."""
    if getattr(args, "no_progress", False):
        return None
    from conformance.progress import Progress
    shown: list = []

    def on_done(done: int, total: int, result) -> None:
        if not shown:
            shown.append(Progress(total))
        shown[0].finished(done, total, {"capsule": {"name": f"determinism {result.capsule}"},
                                        "status": "passed" if result.passed else "failed"})
        if done == total:
            shown[0].close()
    return on_done


def guards_suite(args) -> int:
    own, reports = _reports(args, "guards")
    for report, path, key in reports:
        print(f"guards on {args.device}{_on(key)}: {report.rejected} of {report.tried} bad "
              f"inputs rejected with the named error, no kernel launched; known op afterwards: "
              f"{'right' if report.known_op_ok else 'WRONG'}; evidence {path}")
        if report.selection:
            print(f"  only the ops of the capsules --capsule {' '.join(report.selection)} "
                  "selects, and the checks about no single op")
        for o in report.outcomes:
            if not o.passed:
                print(f"  {o.name}: {o.problem}")
    return 0 if own.passed else 1


def determinism_suite(args) -> int:
    runs = 4 if args.quick else 8
    own, reports = _reports(args, "determinism")
    for report, path, key in reports:
        print(f"determinism on {args.device}{_on(key)} ({runs} runs per mode, each compared "
              f"with the first); evidence {path}")
        if report.selection and not report.results:
            print(f"  none of the capsules --capsule {' '.join(report.selection)} selects has "
                  "an unfixed reduction order: nothing to audit")
        elif report.selection:
            print(f"  only the capsules --capsule {' '.join(report.selection)} selects")
        for r in report.results:
            print(f"  {r.capsule:34s} default: {r.default.differ_text()} (spread "
                  f"{r.default.max_spread:.3g}); deterministic: "
                  f"{'bitwise identical' if r.deterministic.bitwise_identical else 'DIFFERS'}; "
                  f"worst error/bound {r.worst_ratio:.3g}" + (
                      "" if r.passed else f"  FAILED: {'; '.join(r.problems)}"))
    return 0 if own.passed else 1


def allocator_cap_suite(args) -> int:
    from conformance.allocator_cap import NOT_APPLICABLE
    if getattr(args, "capsule", None):   # the cap is the allocator's, no capsule's
        print("allocator cap: not per capsule, so --capsule does not narrow it: checked whole")
    own, reports = _reports(args, "allocator-cap")
    for report, path, key in reports:
        if report.applicable:
            print(f"allocator cap ({report.backend}){_on(key)}: {report.held} of "
                  f"{len(report.outcomes)} configurations held, each in a fresh process; "
                  f"evidence {path}")
        else:
            print(f"allocator cap{_on(key)}: {NOT_APPLICABLE}; {report.held} of "
                  f"{len(report.outcomes)} of those checks held; evidence {path}")
        for o in report.outcomes:
            if not o.passed:
                print(f"  {o.name} ({o.value!r}): {'; '.join(o.problems)}")
    return 0 if own.passed else 1


RELIABILITY_SUITES = {"guards": guards_suite, "determinism": determinism_suite,
                      "allocator-cap": allocator_cap_suite}
