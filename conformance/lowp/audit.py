"""The audit of an accumulating 16-bit kernel (sum, softmax, matmul, linear, log_softmax,
layer_norm, attention: accumulate.py): cases drawn from a run seed the kernel process never sees,
in classes that reach what such kernels get wrong (long rows, where a 16-bit accumulator loses the
sum; values past exp's range without the max shift; cancellation, of a sum, of a bias, of a
variance around a large mean; a variance below layer_norm's eps; special values; an empty row),
each judged element by element and called twice: bits that differ on the same inputs are
`not-repeatable`. A kernel's VJP, when it brings one, is audited after the forward
(audit_vjp.py) and recorded in the same record."""
from __future__ import annotations

import time

import numpy as np

from conformance.formats import LOWP_FORMAT
from conformance.lowp import accumulate
from conformance.lowp.audit_vjp import audit_vjp, merge
from conformance.lowp.cases import CASES_PER_CLASS, COUNTEREXAMPLES, classes, draw
from conformance.lowp.shrink import output_shape
from conformance.lowp.sweep import call_twice, mark_unrepeatable


def audit(kernel, seed: int, seed_source: str = "given") -> dict:
    """The audit's record. `kernel` has name, op, fmt, bound_ulps and call_bits(*bits)."""
    fmt = kernel.fmt
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    by_class, reasons, examples, elements = {}, {}, [], 0
    for cls in classes(kernel.op):
        run = failed = 0
        for i in range(CASES_PER_CLASS):
            xs = draw(kernel.op, fmt, cls, rng)
            bits = [fmt.encode(x) for x in xs]
            got_bits, again = call_twice(kernel, bits, output_shape(kernel.op, xs), f"{cls}[{i}]")
            got = fmt.decode(got_bits)
            reason, ref, _ = accumulate.judge(kernel.op, fmt, xs, got, kernel.accumulation)
            mark_unrepeatable(reason, got_bits, again)
            run += 1
            elements += got.size
            bad = reason != ""
            if bad.any():
                failed += 1
                for r, n in zip(*np.unique(reason[bad].astype(str), return_counts=True)):
                    r = str(r)
                    reasons[r] = reasons.get(r, 0) + int(n)
                    if len(examples) < COUNTEREXAMPLES and all(e["reason"] != r for e in examples):
                        at = tuple(int(j) for j in np.argwhere(reason == r)[0])
                        examples.append({"class": cls, "index": i, "element": list(at),
                                         "shapes": [list(x.shape) for x in xs], "reason": r,
                                         "expected": fmt.hex(ref[at]),
                                         "got": f"0x{int(got_bits[at]):04x}",
                                         "got_value": float(got[at]),
                                         "expected_value": float(ref[at]),
                                         "_inputs": xs})   # for the shrinker (replay.py)
        by_class[cls] = {"run": run, "failed": failed}
    failed_cases = sum(c["failed"] for c in by_class.values())
    rec = {"format": LOWP_FORMAT, "kernel": kernel.name, "op": kernel.op, "storage": fmt.name,
           "accumulation": kernel.accumulation, "bound_ulps": kernel.bound_ulps,
           "status": "failed" if failed_cases else "passed",
           "cases": {"total": sum(c["run"] for c in by_class.values()), "failed": failed_cases,
                     "by_class": by_class}, "elements": elements,
           "failure_reasons": reasons, "max_ulps_passing": None, "counterexamples": examples,
           "run": {"seed": seed, "seed_source": seed_source}}
    if getattr(kernel, "vjp", None) is not None:      # its VJP's part (audit_vjp.py)
        merge(rec, audit_vjp(kernel, seed))
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
