"""The `torchlean-conformance` command: `run`, `replay`, `export-trust`.

Others extend it without editing this file's logic: add a subcommand to SUBCOMMANDS (name ->
(configure(parser), handler(args) -> exit code)), or a suite to SUITES (name -> handler(args) ->
exit code), which `run --suite NAME` dispatches to; the default suite is the fuzz campaign.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from pathlib import Path
from typing import Callable

from conformance.plugins import PluginError
from conformance.shrink import ReplayError
from conformance.trust import TrustFileError
from engine.errors import TorchLeanError

FAILING = ("failed", "crashed", "timed-out", "error")


class NoCapsuleMatchError(Exception):
    """`--capsule` patterns that select no capsule for the device."""


USER_ERRORS = (NoCapsuleMatchError, PluginError, ReplayError, TrustFileError, TorchLeanError)


def default_evidence_dir(device: str) -> Path:
    return Path("reports") / "evidence" / device


def _require_device(device: str) -> None:
    from engine.types import Device
    Device.parse(device)
    if device == "cuda":
        from engine.runtime.native import require_native_runtime
        require_native_runtime()


def select_targets(device: str, patterns: list[str] | None, plugins: list[str]) -> list:
    """(Target, capsule, handler) for every registry capsule of the device and every plugin
    entry, filtered by the glob patterns."""
    from conformance.plugins import plugin_handlers
    from conformance.runner import Target
    from engine.registry import registry
    found = []
    reg = registry()
    for cap in reg.capsules():
        handler = reg.handler(cap.name)
        missing = handler.unavailable() if handler.unavailable is not None else None
        if cap.device.label == device and missing is None:
            found.append((Target(cap.name), cap, handler))
        elif cap.device.label == device:
            print(f"skipping {cap.name}: {missing}", file=sys.stderr)
    for spec in plugins:
        for name, (cap, handler) in plugin_handlers(spec).items():
            if cap.device.label == device:
                found.append((Target(name, spec), cap, handler))
    if patterns:
        found = [t for t in found if any(fnmatch.fnmatchcase(t[1].name, p) for p in patterns)]
        if not found:
            raise NoCapsuleMatchError(
                f"--capsule {' '.join(patterns)} matches no capsule on device `{device}`; "
                "`torchlean capsules` lists the names (globs like 'reference.*' work)")
    return found


# --- run ------------------------------------------------------------------------------------------

def _bar(done: int, total: int, rec: dict, width: int = 30) -> None:
    """A text progress bar on stderr; one line per capsule when stderr is not a terminal."""
    filled = int(width * done / max(total, 1))
    name = rec.get("capsule", {}).get("name", "?")
    status = rec.get("status", "?") + (" (resumed)" if rec.get("resumed") else "")
    if not sys.stderr.isatty():
        sys.stderr.write(f"[{done}/{total}] {name}: {status}\n")
        return
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                     f"{name}: {status}".ljust(100))
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def worst_ratio(rec: dict) -> float | None:
    stats = rec.get("stats") or {}
    vals = [stats.get(k, {}).get("worst_ratio") for k in ("forward", "vjp")]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return max(vals) if vals else None


def summary_table(records: list[dict]) -> str:
    rows = [("capsule", "cases", "worst err/bound", "status")]
    for r in records:
        w = worst_ratio(r)
        rows.append((r.get("capsule", {}).get("name", "?"),
                     str((r.get("cases") or {}).get("total", 0)),
                     "-" if w is None else f"{w:.3g}", r.get("status", "?")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def campaign_suite(args) -> int:
    """The default suite: fuzz every selected capsule, write evidence, print the summary."""
    from conformance.campaign import Settings
    from conformance.runner import run_targets
    _require_device(args.device)
    targets = select_targets(args.device, args.capsule, args.plugin or [])
    settings = Settings.for_run(args.cases, args.seed, args.quick).to_json()
    out = Path(args.evidence_dir or default_evidence_dir(args.device))
    jobs = args.jobs or (0 if args.device == "cuda" else min(4, os.cpu_count() or 1))
    timeout = args.timeout or (300.0 if args.quick else 1800.0)
    records = run_targets([t[0] for t in targets], settings, out, args.device, jobs, timeout,
                          fresh=args.fresh, on_done=None if args.no_progress else _bar)
    print(summary_table(records))
    bad = [r for r in records if r.get("status") in FAILING]
    print(f"\n{len(records) - len(bad)} of {len(records)} capsules without failures; evidence "
          f"in {out}/")
    for r in bad:
        msg = r.get("message") or ", ".join(f"{k} x{v}" for k, v in
                                            (r.get("failure_reasons") or {}).items())
        print(f"  {r.get('capsule', {}).get('name')}: {r.get('status')}: {msg}")
        for ce in (r.get("counterexamples") or [])[:1]:
            if ce.get("replay_command"):
                print(f"    replay: {ce['replay_command']}")
    return 1 if bad else 0


def _reliability_suites() -> dict[str, Callable]:
    from conformance.suites import RELIABILITY_SUITES
    return RELIABILITY_SUITES


SUITES: dict[str, Callable] = {"campaign": campaign_suite, **_reliability_suites()}


def configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--capsule", action="append", metavar="GLOB",
                   help="capsule names or globs (repeatable); default: every capsule")
    p.add_argument("--cases", type=int, help="cases per generator class (default 8, quick 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="few cases per class (CI)")
    p.add_argument("--jobs", type=int, default=0,
                   help="worker processes (default: up to 4 on cpu, one per GPU on cuda)")
    p.add_argument("--plugin", action="append", metavar="MODULE:ATTR",
                   help="audit capsules from a user's module (docs/PLUGINS.md)")
    p.add_argument("--evidence-dir", help="default reports/evidence/<device>/")
    p.add_argument("--timeout", type=float, help="seconds per capsule (default 1800, quick 300)")
    p.add_argument("--fresh", action="store_true",
                   help="rerun capsules that already have a finished record for this build")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--suite", default=None,
                   help=f"one suite to run (default: every suite); known: {', '.join(SUITES)}")


def cmd_run(args) -> int:
    if args.suite is None:
        # Every suite that applies to the device; the exit code is the worst of them. A suite
        # that crashes is reported and the others still run.
        _require_device(args.device)
        worst = 0
        for name, suite in SUITES.items():
            try:
                worst = max(worst, suite(args))
            except USER_ERRORS:
                raise
            except Exception:   # noqa: BLE001 - a harness bug must not hide the other suites
                import traceback
                print(f"suite `{name}` crashed:\n{traceback.format_exc()}", file=sys.stderr)
                worst = max(worst, 1)
        return worst
    suite = SUITES.get(args.suite)
    if suite is None:
        raise NoCapsuleMatchError(f"--suite `{args.suite}` is unknown; known suites: "
                                  f"{', '.join(SUITES)}")
    return suite(args)


# --- replay ---------------------------------------------------------------------------------------

def configure_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a replay file written under <evidence-dir>/replays/")


def cmd_replay(args) -> int:
    from conformance.campaign import check_case
    from conformance.shrink import decode_case, read_replay
    from conformance.worker import resolve
    data = read_replay(Path(args.file))
    _require_device(data.get("device", "cpu"))
    try:
        capsule, handler = resolve(data["capsule"], data.get("plugin"))
    except KeyError as exc:
        raise ReplayError(f"replay file {args.file}: {exc.args[0]}") from None
    case = decode_case(data["case"])
    print(f"replaying {capsule.name} on {case.summary()} (recorded: "
          f"{', '.join(data.get('reasons', [])) or 'no reasons'})")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = check_case(capsule, handler, case, {})
    if res.skipped:
        print(f"not judged: {res.skipped}")
        return 2
    for f in res.failures:
        print("  " + f.line())
    print("still failing" if res.failed else "passes now")
    return 1 if res.failed else 0


# --- export-trust -----------------------------------------------------------------------------

def configure_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu")
    p.add_argument("--evidence-dir", help="default reports/evidence/<device>/")
    p.add_argument("--out", help="default <evidence-dir>/trust.json")
    p.add_argument("--plugin", action="append", metavar="MODULE:ATTR")
    p.add_argument("--tests", metavar="JUNIT_XML",
                   help="a pytest --junitxml report; a passing suite lets runtime-guarded "
                        "capsules earn `checked`")


def cmd_export(args) -> int:
    from conformance.trust import export_trust
    evidence_dir = Path(args.evidence_dir or default_evidence_dir(args.device))
    out = Path(args.out) if args.out else evidence_dir / "trust.json"
    targets = [(cap, h) for _, cap, h in select_targets(args.device, None, args.plugin or [])]
    doc = export_trust(evidence_dir, out, targets, args.device,
                       Path(args.tests) if args.tests else None)
    for name, e in doc["capsules"].items():
        print(f"{name}: declared {e['declared']}, earned {e['earned'] or 'nothing'} "
              f"({e['reason']})")
    print(f"wrote {out}")
    return 0


# Subcommands implemented by another package's `main(argv)`; `main` hands them their arguments
# untouched (argparse's REMAINDER drops leading options in subparsers).
FORWARDED = {"report": "reports.render", "trust-boundaries": "reports.trust_boundaries"}


def _forward(module: str):
    def configure(p: argparse.ArgumentParser) -> None:
        p.description = f"see `torchlean-conformance {module} --help`"

    def handler(args) -> int:   # reached only through main's forwarding
        import importlib
        return importlib.import_module(module).main([])
    return configure, handler


SUBCOMMANDS: dict[str, tuple[Callable, Callable, str]] = {
    "run": (configure_run, cmd_run, "fuzz capsules against the mpmath references, then the "
                                    "guard, determinism and allocator-cap suites"),
    "replay": (configure_replay, cmd_replay, "rerun one shrunk counterexample"),
    "export-trust": (configure_export, cmd_export, "write the trust each capsule earned"),
    "report": (*_forward("reports.render"), "render the static HTML evidence report"),
    "trust-boundaries": (*_forward("reports.trust_boundaries"),
                         "regenerate (or --check) the capsule table of TRUST_BOUNDARIES.md"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchlean-conformance", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, handler, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        configure(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in FORWARDED:
        import importlib
        return importlib.import_module(FORWARDED[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
