"""`torchlean-conformance lowp --plugin MODULE:ATTR`: every 16-bit unary kernel the plugin
declares (a list of conformance/lowp/kernel.LowpKernel) swept over all 2^16 inputs of its format,
the kernels in a kernel process, the references and verdicts here; one line per kernel, a record
<evidence-dir>/lowp-<kernel>.json each (docs/EXHAUSTIVE.md, "16-bit formats")."""
from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
from pathlib import Path

from conformance.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from conformance.fingerprint import harness_digest
from conformance.isolation.remote import KernelProcessError, PluginLoadError
from conformance.jsonfile import write_atomic
from conformance.lowp.remote import open_kernels
from conformance.lowp.sweep import LOWP_FORMAT, LowpKernelError, sweep

DEFAULT_DIR = Path("reports/evidence/lowp")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", required=True, metavar="MODULE:ATTR",
                   help="a list of LowpKernel, e.g. fixtures.plugins.low_precision:ALL")
    p.add_argument("--evidence-dir", default=str(DEFAULT_DIR),
                   help=f"where the records go (default {DEFAULT_DIR}/)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a kernel may take for its 2^16 inputs (default 600)")


def _line(rec: dict) -> str:
    reasons = ", ".join(f"{k} x{v}" for k, v in rec["failure_reasons"].items())
    return (f"{rec['kernel']:<28} {rec['storage']:<9} {rec['op']:<9} "
            f"bound {rec['bound_ulps']:g} ulp  worst passing {rec['max_ulps_passing']:.3g} ulp  "
            f"{rec['status']}" + (f": {reasons}" if reasons else ""))


def main(args) -> int:
    out_dir = Path(args.evidence_dir)
    try:
        kp, kernels = open_kernels(args.plugin, timeout=args.timeout)
    except (PluginLoadError, KernelProcessError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    worst, ended = EXIT_OK, None
    try:
        for k in kernels:
            base = {"format": LOWP_FORMAT, "kernel": k.name, "op": k.op, "storage": k.fmt.name,
                    "bound_ulps": k.bound_ulps}
            try:
                if ended is not None:    # one process holds them all: the rest are not swept
                    raise KernelProcessError(f"not swept: the kernel process ended during "
                                             f"{ended}'s sweep")
                rec = sweep(k)
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
                    print(f"  e.g. input {c['input']} ({c['input_value']:.6g}): expected "
                          f"{c['expected']}, got {c['got']} ({c['got_value']:.6g}): {c['reason']}")
    finally:
        kp.close()
    print(f"{sum(1 for _ in kernels)} 16-bit kernel(s) swept over all 2^16 inputs; records in "
          f"{out_dir}/")
    return worst
