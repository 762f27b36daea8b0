"""`torchlean-conformance lowp --plugin MODULE:ATTR`: every 16-bit kernel the plugin declares (a
list of conformance/lowp/kernel.LowpKernel): a unary one swept over all 2^16 inputs of its
format, an accumulating one (sum, softmax, matmul) audited on cases of a run seed; the kernels in
a kernel process, the references and verdicts here; one line per kernel, a record
<evidence-dir>/lowp-<kernel>.json each (docs/EXHAUSTIVE.md, "16-bit formats")."""
from __future__ import annotations

import argparse
import datetime as _dt
import re
import secrets
import sys
from pathlib import Path

from conformance.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from conformance.fingerprint import harness_digest
from conformance.isolation.remote import KernelProcessError, PluginLoadError
from conformance.jsonfile import write_atomic
from conformance.lowp.audit import audit
from conformance.lowp.kernel import ACCUMULATING
from conformance.lowp.remote import open_kernels
from conformance.formats import LOWP_FORMAT
from conformance.lowp.sweep import LowpKernelError, sweep

DEFAULT_DIR = Path("reports/evidence/lowp")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", required=True, metavar="MODULE:ATTR",
                   help="a list of LowpKernel, e.g. fixtures.plugins.low_precision:ALL")
    p.add_argument("--evidence-dir", default=str(DEFAULT_DIR),
                   help=f"where the records go (default {DEFAULT_DIR}/)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a kernel may take for one call (default 600)")
    p.add_argument("--seed", type=int, default=None,
                   help="the run seed of the accumulating ops' cases (default: drawn at random "
                        "and printed; the kernel process never sees it)")


def _line(rec: dict) -> str:
    reasons = ", ".join(f"{k} x{v}" for k, v in rec["failure_reasons"].items())
    cases = rec.get("cases")
    what = (f"{cases['total']} cases, {rec['elements']} elements" if isinstance(cases, dict)
            else f"worst passing {rec.get('max_ulps_passing') or 0:.3g} ulp")
    return (f"{rec['kernel']:<28} {rec['storage']:<9} {rec['op']:<9} "
            f"bound {rec['bound_ulps']:g} ulp  {what}  {rec['status']}" +
            (f": {reasons}" if reasons else ""))


def main(args) -> int:
    out_dir = Path(args.evidence_dir)
    try:
        kp, kernels = open_kernels(args.plugin, timeout=args.timeout)
    except (PluginLoadError, KernelProcessError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    worst, ended = EXIT_OK, None
    seed, source = (args.seed, "given") if args.seed is not None else \
        (secrets.randbits(62), "random")
    try:
        for k in kernels:
            base = {"format": LOWP_FORMAT, "kernel": k.name, "op": k.op, "storage": k.fmt.name,
                    "bound_ulps": k.bound_ulps}
            try:
                if ended is not None:    # one process holds them all: the rest are not swept
                    raise KernelProcessError(f"not audited: the kernel process ended during "
                                             f"{ended}'s audit")
                rec = sweep(k) if k.op not in ACCUMULATING else audit(k, seed, source)
            except LowpKernelError as exc:    # the kernel's verdict: it raised or returned junk
                rec = {**base, "status": "failed", "failure_reasons": {"raised": 1},
                       "message": str(exc)[:2000], "max_ulps_passing": 0.0}
            except KernelProcessError as exc:   # it exited or hung: this run's verdict too
                rec = {**base, "status": exc.status, "failure_reasons": {exc.status: 1},
                       "message": str(exc)[:2000], "max_ulps_passing": 0.0}
                ended = ended or k.name
            rec.update(plugin=args.plugin, harness=harness_digest(),
                       created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
            out_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(out_dir / f"lowp-{_SAFE.sub('_', k.name)}.json", rec)
            print(_line(rec), flush=True)
            if rec["status"] != "passed":
                worst = EXIT_FAILED
                if isinstance(rec.get("message"), str):
                    print(f"  {rec['message'][:300]}")
                for c in rec.get("counterexamples", [])[:1]:
                    where = (f"input {c['input']} ({c['input_value']:.6g})" if "input" in c else
                             f"{c['class']}[{c['index']}] (shapes {c['shapes']}) element "
                             f"{c['element']}")
                    print(f"  e.g. {where}: expected {c['expected']}, got {c['got']} "
                          f"({c['got_value']:.6g}): {c['reason']}")
    finally:
        kp.close()
    unary = sum(1 for k in kernels if k.op not in ACCUMULATING)
    print(f"{len(kernels)} 16-bit kernel(s): {unary} swept over all 2^16 inputs, "
          f"{len(kernels) - unary} audited on cases of run seed {seed} ({source}; --seed "
          f"{seed} draws them again); records in {out_dir}/")
    return worst
