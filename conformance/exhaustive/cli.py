"""The `torchlean-conformance exhaustive` command: which capsules (unary ones of the device, or a
plugin's), its user errors, the sweep of each (conformance/exhaustive/__init__.py) written to
<evidence-dir>/exhaustive-<capsule>.json, and one line per capsule (docs/EXHAUSTIVE.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance import exhaustive
from conformance.exhaustive.plan import record_file
from conformance.exhaustive.refs import FUNCTIONS, REFS, SKIPPED, formulas
from conformance.selection import NoCapsuleMatchError, select_targets

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3
DEFAULT_CPU_STRIDE = 65537


class ExhaustiveError(Exception):
    """A user error of `exhaustive` (printed as one line, exit 2)."""


class NotUnaryError(ExhaustiveError):
    """A capsule named on the command line is not a unary elementwise one."""


class NoGPUError(ExhaustiveError):
    """--device cuda without a usable GPU."""


class BadStrideError(ExhaustiveError):
    """--stride that is not a positive integer below 2^32."""


def select(device: str, patterns: list[str] | None, plugins: list[str]) -> list[tuple]:
    """(capsule, handler, plugin or None) of every unary capsule of the device the patterns pick
    (all unary registry capsules without patterns; only the plugins' when --plugin is given
    alone)."""
    from conformance.isolation.describe import in_process
    found = [(cap, handler, target.plugin) for target, cap, handler in
             select_targets(device, patterns, plugins, plugins_only=bool(plugins) and not patterns,
                            say_skipped=False)]
    # The sweep hands the kernel all 2^32 inputs in this process: a plugin's is imported here
    # (only once selection, through its kernel process, has found it is a unary capsule).
    found = [in_process(cap.name, plugin, handler) + (plugin,) if plugin else (cap, handler, None)
             for cap, handler, plugin in found]
    if patterns:
        named = [c.name for c, _, _ in found if formulas(c.op.label) is None and
                 c.op.label not in SKIPPED and c.name in patterns]
        if named:
            raise NotUnaryError(
                f"--capsule {', '.join(named)}: not a unary elementwise capsule (the sweep takes "
                f"one float32 input: {_unary_names()}); name a unary capsule, or use "
                "`torchlean-conformance run` for the others")
    for cap, _, _ in found:
        if cap.op.label in SKIPPED:
            print(f"skipping {cap.name}: {SKIPPED[cap.op.label]}", file=sys.stderr)
    unary = [t for t in found if formulas(t[0].op.label) is not None]
    if not unary:
        raise NotUnaryError(
            f"no unary elementwise capsule among the {len(found)} selected on `{device}` (the "
            f"sweep takes {_unary_names()}); pick one with --capsule")
    return unary


def _unary_names() -> str:
    return (f"{', '.join(sorted(REFS))}; and, as a plugin's UserOp, "
            f"{', '.join(sorted(FUNCTIONS))}")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--capsule", action="append", metavar="GLOB",
                   help="unary capsules to sweep (default: every unary capsule of the device)")
    p.add_argument("--device", default="cpu",
                   help="cpu (a sampled sweep with NumPy: every K-th input) or cuda (every "
                        "float32 input, what earns `verified`) (default: cpu, as run's)")
    p.add_argument("--stride", type=str, default=None,
                   help=f"sweep every K-th bit pattern (default 1 on cuda, "
                        f"{DEFAULT_CPU_STRIDE} on cpu); K > 1 is a sampled sweep")
    p.add_argument("--evidence-dir", help="default reports/evidence/<device>/")
    p.add_argument("--plugin", action="append", metavar="MODULE:ATTR",
                   help="audit a plugin's unary capsules (docs/EXHAUSTIVE.md)")
    p.add_argument("--cluster", default=None, metavar="SPEC",
                   help="shard each capsule's sweep over the workers of a Dask cluster, one "
                        "shard per worker: local (--jobs worker processes here), local-cuda "
                        "(one worker per visible GPU) or a scheduler address tcp://host:port; "
                        "needs pip install '.[cluster]' (default: this process, one shard per "
                        "visible GPU)")
    p.add_argument("--jobs", type=int, default=None,
                   help="with --cluster local: worker processes (default: up to 4, at most one "
                        "per CPU core)")


def parse_stride(text: str | None, device: str) -> int:
    if text is None:
        return 1 if device == "cuda" else DEFAULT_CPU_STRIDE
    try:
        k = int(text, 0)
    except ValueError:
        k = 0
    if not 1 <= k < 2 ** 32:
        raise BadStrideError(f"--stride {text}: expected a whole number from 1 to 2^32 - 1 "
                             "(1 sweeps every pattern); pass e.g. --stride 65537")
    return k


def check_device(device: str) -> None:
    if device not in ("cuda", "cpu"):
        raise ExhaustiveError(f"--device {device}: expected cuda or cpu")
    if device == "cuda":
        try:
            from engine.runtime.native import require_native_runtime
            require_native_runtime()
        except Exception as exc:
            raise NoGPUError(f"--device cuda: no usable GPU ({exc}); run on a machine with an "
                             "NVIDIA GPU, or use --device cpu --stride K for a sampled "
                             "sweep") from None


def summary_line(rec: dict) -> str:
    f, v = rec["forward"], rec.get("vjp")
    to_mp = rec["reference"]["forward"]["to_mpmath"] + (
        rec["reference"]["vjp"]["to_mpmath"] if rec["reference"].get("vjp") else 0)
    vjp_ulps = "-" if v is None else f"{v['max_ulps']:.3g}"
    ncr = f["not_correctly_rounded"] + (v["not_correctly_rounded"] if v else 0)
    return (f"{rec['capsule']['name']:<28} {rec['seconds']:7.2f}s  max ulp fwd "
            f"{f['max_ulps']:.3g} / vjp {vjp_ulps}  to mpmath {to_mp}  not correctly rounded "
            f"{ncr}  {rec['mode']} {rec['status']}")


# Error models measured in ulps of the correctly rounded result: for these, a sweep's max ulp
# figure is the model's own measure; for the others (gamma, derived bounds) it is not.
ULP_MODELS = ("bitwise", "correctly-rounded", "ulps", "faithful")


def meaning_line(rec: dict) -> str | None:
    """The second line of a record whose summary line needs it: what a sampled sweep covered,
    and what the VJP's max ulp figure means when the VJP is judged by a bound not stated in
    ulps (a gradient near zero may sit many ulps from the correctly rounded one within it)."""
    said = []
    if rec.get("mode") == "sampled":
        said.append(f"sampled: every K-th bit pattern (K = {rec.get('stride')}), "
                    f"{(rec.get('patterns') or {}).get('checked')} of 2^32 checked (a sampled "
                    "sweep never earns `verified`)")
    model = ((rec.get("reference") or {}).get("vjp") or {}).get("model") or {}
    if (rec.get("vjp") or {}).get("max_ulps", 0) > 1 and \
            model.get("kind") not in ULP_MODELS + (None,):
        said.append(f"vjp max ulp is the distance from the correctly rounded gradient, not "
                    f"what judges it: its bound is {model.get('label') or model.get('kind')}, "
                    "absolute, so near a zero gradient many ulps can pass")
    return "  " + "; ".join(said) if said else None


def cluster_line(rec: dict) -> str:
    """The second line of a `--cluster` sweep: workers, shard and wall times, speed-ups."""
    c = rec["cluster"]
    times = ", ".join(f"{s['seconds']:.3f}" for s in c["shards"]) or "-"
    line = (f"  {len(c['workers'])} worker(s), shard seconds {times}, wall "
            f"{c['wall_seconds']:.3f}s, speed-up {c['speedup']}")
    if c.get("speedup_vs_single_worker") is not None:
        line += (f" ({c['speedup_vs_single_worker']} against one worker's "
                 f"{c['single_worker_seconds']:.3f}s)")
    return line + (f"; LOST: {rec['message']}" if c["lost"] else "")


def cluster_jobs(args) -> int:
    """--jobs for `--cluster local`: checked here, capped at the CPU cores there are."""
    import os
    if args.jobs is None:
        return min(4, os.cpu_count() or 1)
    if not args.cluster or args.jobs < 1:
        raise ExhaustiveError(f"--jobs {args.jobs}: expected a whole number of at least 1, "
                              "together with --cluster local (without --cluster the sweep takes "
                              "one shard per visible GPU in this process)")
    return min(args.jobs, os.cpu_count() or 1)


def main_exhaustive(args) -> int:
    try:
        check_device(args.device)
        stride = parse_stride(args.stride, args.device)
        jobs = cluster_jobs(args)
        targets = select(args.device, args.capsule, args.plugin or [])
    except (ExhaustiveError, NoCapsuleMatchError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from conformance.evidence_dir import EvidenceLock, default_evidence_dir
    out_dir = Path(args.evidence_dir or default_evidence_dir(args.device))
    out_dir.mkdir(parents=True, exist_ok=True)
    client = None
    if args.cluster:
        from conformance import cluster
        try:
            client = cluster.connect(args.cluster, jobs)
        except cluster.ClusterUnavailableError as exc:
            print(f"torchlean-conformance: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        with EvidenceLock(out_dir):
            codes = [sweep_one(cap, handler, plugin, args.device, stride, out_dir, client)
                     for cap, handler, plugin in targets]
    finally:
        if client is not None:
            cluster.close(client)
    print(f"wrote {len(targets)} record(s) under {out_dir}")
    return EXIT_FAILED if EXIT_FAILED in codes else max(codes, default=EXIT_OK)


def sweep_one(cap, handler, plugin, device, stride, out_dir, client=None) -> int:
    """Sweep one capsule here (one shard per visible GPU) or on the cluster; write its record,
    print its line; its exit code."""
    from conformance import evidence
    path = record_file(out_dir, cap.name)
    try:
        if client is not None:
            from conformance.cluster.exhaustive import sweep_on_cluster
            rec = sweep_on_cluster(client, cap, handler, plugin, device, stride, path)
        else:
            from conformance.exhaustive.plan import gpu_count
            devices = gpu_count() if device == "cuda" else 1
            rec = exhaustive.sweep_capsule(cap, handler, device, stride, devices)
    except Exception as exc:   # the harness's own defect: kept, never a verdict
        rec = exhaustive.harness_error_record(cap, handler, device, stride, exc)
    evidence.write_atomic(path, rec)
    print(summary_line(rec), flush=True)
    meaning = meaning_line(rec)
    if meaning:
        print(meaning, flush=True)
    if rec.get("cluster"):
        print(cluster_line(rec), flush=True)
    if rec.get("traceback"):
        print(rec["traceback"], file=sys.stderr)
    return {"passed": EXIT_OK, "failed": EXIT_FAILED, "incomplete": EXIT_HARNESS,
            "harness-error": EXIT_HARNESS}[rec["status"]]
