"""The reliability suites as `torchlean-conformance run --suite NAME` handlers: each runs, writes
its evidence record as <evidence-dir>/suite-<name>.json (atomically), and prints its counts."""
from __future__ import annotations

import json
from pathlib import Path

from conformance.evidence_dir import default_evidence_dir
from conformance.fingerprint import checkout_digest
from conformance.jsonfile import write_atomic


def _write(args, record: dict) -> Path:
    """suite-<name>.json, stamped with the checkout it tested (trust reads the guard suite's)."""
    out = Path(args.evidence_dir or default_evidence_dir(args.device))
    path = out / f"suite-{record['suite']}.json"
    record = {**record, "checkout": checkout_digest()}
    write_atomic(path, json.dumps(record, indent=1, default=str))
    return path


def guards_suite(args) -> int:
    from conformance.guards import run_guards
    report = run_guards(args.device)
    path = _write(args, report.to_record())
    print(f"guards on {args.device}: {report.rejected} of {report.tried} bad inputs rejected "
          f"with the named error, no kernel launched; known op afterwards: "
          f"{'right' if report.known_op_ok else 'WRONG'}; evidence {path}")
    for o in report.outcomes:
        if not o.passed:
            print(f"  {o.name}: {o.problem}")
    return 0 if report.passed else 1


def determinism_suite(args) -> int:
    from conformance.determinism import run_determinism
    runs = 4 if args.quick else 8
    report = run_determinism(args.device, runs=runs)
    path = _write(args, report.to_record())
    print(f"determinism on {args.device} ({runs} runs per mode); evidence {path}")
    for r in report.results:
        print(f"  {r.capsule:34s} default: {r.default.differing_runs}/{r.default.runs - 1} runs "
              f"differ (spread {r.default.max_spread:.3g}); deterministic: "
              f"{'bitwise identical' if r.deterministic.bitwise_identical else 'DIFFERS'}; "
              f"worst error/bound {r.worst_ratio:.3g}" + ("" if r.passed else
                                                           f"  FAILED: {'; '.join(r.problems)}"))
    return 0 if report.passed else 1


def allocator_cap_suite(args) -> int:
    from conformance.allocator_cap import NOT_APPLICABLE, run_allocator_cap
    report = run_allocator_cap()
    record = report.to_record()
    record["device"] = args.device
    path = _write(args, record)
    if report.applicable:
        print(f"allocator cap ({report.backend}): {report.held} of {len(report.outcomes)} "
              f"configurations held, each in a fresh process; evidence {path}")
    else:
        print(f"allocator cap: {NOT_APPLICABLE}; {report.held} of {len(report.outcomes)} of "
              f"those checks held; evidence {path}")
    for o in report.outcomes:
        if not o.passed:
            print(f"  {o.name} ({o.value!r}): {'; '.join(o.problems)}")
    return 0 if report.passed else 1


RELIABILITY_SUITES = {"guards": guards_suite, "determinism": determinism_suite,
                      "allocator-cap": allocator_cap_suite}
