"""The `torchlean-conformance` command: `run`, `replay`, `export-trust`, `report`,
`trust-boundaries`, `exhaustive`, `ulp-table`, `lowp`, `flags`, `reproduce`, `classify-peers`.

Its exit codes are conformance/exit_codes.py's (`--help` and README.md list them from there); the
worst applies when several do.

Others extend it without editing this file's logic: add a subcommand to SUBCOMMANDS (name ->
(configure(parser), handler(args) -> exit code)), or a suite to SUITES (name -> handler(args) ->
exit code), which `run --suite NAME` dispatches to; the default suite is the fuzz campaign.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable

from conformance import flags_cli as _flags
from conformance.cluster.suites import SuiteTaskError
# What the campaign prints once it ends (the table and its legend, one line per failure reason) is
# console.py's; its names stay importable from here.
from conformance.console import (FAILING, print_summary, summary_table,  # noqa: F401
                                 throughput_lines, worst_ratio)
from conformance.exhaustive import cli as _exhaustive
from conformance.lowp import cli as _lowp
from conformance.ulp_table import cli as _ulp_table
from conformance.peers import rejudge as _rejudge
from conformance.peers import reproducer as _reproducer
from conformance.flag_matrix import FlagMatrixError
from conformance.evidence_dir import EvidenceDirError, EvidenceLock, default_evidence_dir
from conformance.junit_evidence import TestEvidenceError
from conformance.plugins import PluginError
from conformance.runner import RunInterrupted
from conformance import replay_cli as _replay
from conformance.replay import ReplayError
from conformance.selection import NoCapsuleMatchError, select_targets
from conformance.trust import TrustFileError
from engine.errors import TorchLeanError

from conformance import exit_codes
from conformance.exit_codes import (EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_HARNESS,
                                    EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE,
                                    SEVERITY, EnvironmentFailure)


USER_ERRORS = (NoCapsuleMatchError, PluginError, ReplayError, TrustFileError, TorchLeanError,
               EvidenceDirError, TestEvidenceError, FlagMatrixError)


def exit_code(records: list[dict]) -> int:
    """The command's exit code for a set of records (module docstring)."""
    statuses = {r.get("status") for r in records if r}
    if "interrupted" in statuses:
        return EXIT_INTERRUPTED
    if statuses & exit_codes.KERNEL_FAILED:
        return EXIT_FAILED
    if "error" in statuses:
        return EXIT_USAGE
    if "harness-error" in statuses:
        return EXIT_HARNESS
    return EXIT_OK


def worst(codes) -> int:
    """The worst of several exit codes, by exit_codes.SEVERITY."""
    return max(codes, key=SEVERITY.index, default=EXIT_OK)


def _require_device(device: str) -> None:
    """The device parses, has a maintained profile, and (cuda) a native runtime: checked before
    anything is printed or created on disk."""
    from engine.profile import maintained_for_device
    maintained_for_device(device)
    if device == "cuda":
        from engine.runtime.native import require_native_runtime
        require_native_runtime()


# --- run ------------------------------------------------------------------------------------------

def campaign_suite(args) -> int:
    """The default suite: fuzz every selected capsule, write evidence, print the summary."""
    from conformance.campaign import Settings
    from conformance.runner import run_targets
    _require_device(args.device)
    targets = select_targets(args.device, args.capsule, args.plugin or [],
                             plugins_only=bool(args.plugin) and not args.capsule)
    settings = Settings.for_run(args.cases, 0 if args.seed is None else args.seed,
                                args.quick).to_json()
    # A plugin's cases come from a seed its kernel cannot know: drawn here unless --seed is given
    # (the records keep it, so `--seed S` and replay reproduce the run).
    plugin_seed = secrets.randbits(63) if args.seed is None else None
    out = Path(args.evidence_dir or default_evidence_dir(args.device))
    timeout = args.timeout or (300.0 if args.quick else 1800.0)
    from conformance.progress import Progress
    progress = Progress(len(targets), enabled=not args.no_progress)
    try:
        if args.cluster:
            records = _run_on_cluster(args, [t[0] for t in targets], settings, out, timeout,
                                      progress)
        else:
            records = run_targets([t[0] for t in targets], settings, out, args.device,
                                  job_count(args), timeout, fresh=args.fresh,
                                  on_done=progress.finished,
                                  on_start=lambda t: progress.started(t.capsule),
                                  plugin_seed=plugin_seed,
                                  seed_source="default" if args.seed is None else "given")
    except RunInterrupted as stop:
        progress.close()
        done = [r for r in stop.records if r is not None]
        print(f"interrupted: {sum(r.get('status') == 'interrupted' for r in done)} running "
              f"capsule(s) recorded as interrupted, {len(stop.records) - len(done)} not started; "
              "run again to resume", file=sys.stderr)
        print_summary(done, out)
        return EXIT_TERMINATED if stop.terminated else EXIT_INTERRUPTED
    progress.close()
    print_summary(records, out)
    return exit_code(records)


def _reliability_suites() -> dict[str, Callable]:
    from conformance.suites import RELIABILITY_SUITES
    return RELIABILITY_SUITES


SUITES: dict[str, Callable] = {"campaign": campaign_suite, **_reliability_suites()}


def whole_number(lo: int, hi: int, what: str):
    """An argparse type: a whole number in [lo, hi], else a message naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number from {lo} to {hi}, "
                                             f"got {text!r}")
        return value
    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"--timeout must be a number of seconds above 0 and at "
                                         f"most 604800 (a week), got {text!r}")
    return value


SEED = whole_number(0, 2 ** 64 - 1, "--seed")   # the rule engine.ops.rand_uniform applies too


def _run_on_cluster(args, targets, settings, out, timeout, progress) -> list[dict]:
    """The campaign's capsules as Dask tasks (conformance/cluster/), on the command's client."""
    from conformance import cluster
    records = cluster.run_targets_on_cluster(args.cluster_client, targets, settings, out,
                                             args.device, timeout, fresh=args.fresh,
                                             on_done=progress.finished,
                                             every_worker=args.every_worker)
    progress.close()
    print(cluster.format_matrix(out))
    return records


def configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--capsule", action="extend", nargs="+", metavar="GLOB",
                   help="capsule names or globs, several after one flag or the flag repeated "
                        "(default: every capsule of the device; with --plugin, the plugin's); "
                        "the guard and determinism suites audit the same capsules, and a run of "
                        "every suite leaves out allocator-cap, which checks no capsule")
    p.add_argument("--cases", type=whole_number(1, 100_000, "--cases"),
                   help="seeded cases per generator class, besides the fixed edge set "
                        "(default: 8; 2 with --quick)")
    p.add_argument("--seed", type=SEED, default=None,
                   help="campaign seed, 0 to 2^64-1 (default: 0 for the registry's capsules; a "
                        "random seed, recorded in the evidence, for --plugin capsules)")
    p.add_argument("--quick", action="store_true", help="2 cases per class and a short shrink "
                                                        "(what CI and check.sh run)")
    p.add_argument("--jobs", type=whole_number(1, 4096, "--jobs"), default=None,
                   help="worker processes, at most one per CPU core (default: up to 4; on cuda "
                        "they share the visible GPUs round robin)")
    p.add_argument("--plugin", action="append", metavar="MODULE:ATTR",
                   help="audit capsules from a user's module (docs/PLUGINS.md); repeatable")
    p.add_argument("--op-contracts", action="append", metavar="MODULE:ATTR",
                   help="the records (OpSpecs) of ops the engine does not have that --plugin "
                        "capsules declare, from the user's contract module (never the kernel "
                        "module: the judge imports this one); repeatable")
    p.add_argument("--evidence-dir", help="where records go (default: reports/evidence/<device>/)")
    p.add_argument("--timeout", type=seconds,
                   help="seconds per capsule before its worker is killed (default: 1800; 300 "
                        "with --quick)")
    p.add_argument("--cluster", default=None, metavar="SPEC",
                   help="run the campaign's capsules and each suite as Dask tasks: local "
                        "(--jobs worker processes here), local-cuda (one worker per visible "
                        "GPU) or a scheduler address tcp://host:port; needs pip install "
                        "'.[cluster]' (default: the local runner)")
    p.add_argument("--every-worker", action="store_true",
                   help="with --cluster: run each capsule and suite on every worker (every GPU "
                        "under local-cuda), each device's records under "
                        "<evidence-dir>/gpus/<device>/")
    p.add_argument("--fresh", action="store_true",
                   help="rerun capsules that already have a finished record for this build")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (a bar on a terminal; elsewhere a line per "
                        "finished capsule and suite)")
    p.add_argument("--suite", default=None, metavar="SUITE",
                   help=f"one suite to run (default: every suite; with --plugin, the campaign "
                        f"only); known: {', '.join(SUITES)}")


def job_count(args) -> int:
    """--jobs, capped at the cores there are (more workers than cores only contend)."""
    cores = os.cpu_count() or 1
    if args.jobs is None:
        return min(4, cores)
    if args.jobs > cores:
        print(f"torchlean-conformance: --jobs {args.jobs} is more than the {cores} CPU cores "
              f"here; using {cores}", file=sys.stderr)
    return min(args.jobs, cores)


def _run_suites(args) -> int:
    if args.suite is None and args.plugin:
        return campaign_suite(args)   # a plugin's kernels have no guard or determinism suite
    if args.suite is None:
        # Every suite that applies to the device; the exit code is the worst of them. A suite
        # that crashes is reported (a harness error) and the others still run.
        _require_device(args.device)
        codes = []
        # each suite's wall time, printed last: check.sh's "conformance suites" stage is their sum
        seconds: dict[str, float] = {}
        for number, (name, suite) in enumerate(SUITES.items(), start=1):
            if name in NOT_PER_CAPSULE and args.capsule:
                print(f"{name}: skipped: it checks no capsule, so a --capsule run leaves it out "
                      f"(run it alone with --suite {name})")
                continue
            started = time.monotonic()
            try:
                codes.append(suite(args))
            except USER_ERRORS:
                raise
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED
            except BrokenPipeError:   # never a harness error: main says what closed (stdout's
                raise                 # reader leaving never raises: progress.reader_may_leave)
            except SuiteTaskError as exc:   # its Dask worker died: the others still run
                print(f"torchlean-conformance: {exc}", file=sys.stderr)
                codes.append(EXIT_HARNESS)
            except Exception:   # noqa: BLE001 - a harness bug must not hide the other suites
                import traceback
                print(f"suite `{name}` crashed (a harness error):\n{traceback.format_exc()}",
                      file=sys.stderr)
                codes.append(EXIT_HARNESS)
            seconds[name] = time.monotonic() - started
            _suite_done(args, f"[suite {number}/{len(SUITES)}] {name}", codes[-1])
            if codes[-1] == EXIT_INTERRUPTED:
                break
        print("suites' wall time: " + ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items()))
        return worst(codes)
    suite = SUITES.get(args.suite)
    if suite is None:
        raise NoCapsuleMatchError(f"--suite `{args.suite}` is unknown; known suites: "
                                  f"{', '.join(SUITES)}")
    try:
        code = suite(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except SuiteTaskError as exc:   # its Dask worker died: not run, a harness-visible failure
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_HARNESS
    _suite_done(args, f"[suite] {args.suite}", code)
    return code


# Suites that check no capsule (the allocator's cap): a --capsule run of every suite skips them.
NOT_PER_CAPSULE = ("allocator-cap",)


def _suite_done(args, label: str, code: int) -> None:
    """One progress line on stderr as a suite ends (through logging: -q silences it, and it is
    flushed as written, terminal or not), unless --no-progress."""
    if not args.no_progress:
        from conformance.progress import log
        log.info("%s: %s", label, {EXIT_OK: "passed", EXIT_FAILED: "failed"}.get(
            code, f"exit {code}"))


def cmd_run(args) -> int:
    # Usage errors first, before anything is created on disk or the directory is locked (a
    # mistyped --capsule must not wait for, or block, another run into the same directory).
    _require_device(args.device)
    if args.every_worker and not args.cluster:
        raise TorchLeanError("--every-worker runs each capsule and suite on every worker of a "
                             "Dask cluster and needs --cluster (local, local-cuda or an "
                             "address)")
    if args.suite is not None and args.suite not in SUITES:
        raise NoCapsuleMatchError(f"--suite `{args.suite}` is unknown; known suites: "
                                  f"{', '.join(SUITES)}")
    if args.suite in (None, "campaign"):
        select_targets(args.device, args.capsule, args.plugin or [],   # the suite says skips
                       plugins_only=bool(args.plugin) and not args.capsule, say_skipped=False)
    out = Path(args.evidence_dir or default_evidence_dir(args.device))
    args.cluster_client = None
    with EvidenceLock(out):   # one writer per evidence directory, for the whole command
        if args.cluster:   # one Dask client for every suite's tasks
            from conformance import cluster
            args.cluster_client = cluster.connect(args.cluster, job_count(args))
        try:
            return _run_suites(args)
        finally:
            if args.cluster_client is not None:
                cluster.close(args.cluster_client)


# --- export-trust -----------------------------------------------------------------------------

def _export_lowp(directory: Path, out) -> int:
    from conformance.lowp.trust import OWN, export_lowp_trust, machine_environment
    if not directory.is_dir():
        raise EvidenceDirError(f"--lowp {directory}: no such directory; run `torchlean-conformance "
                               "lowp --plugin MODULE:ATTR --evidence-dir DIR` first")
    doc = export_lowp_trust(directory, machine_environment(), Path(out) if out else None)
    for name, k in sorted(doc["kernels"].items()):
        print(f"{name:<32} {k['earned'] or 'nothing':<9} {k['reason']}")
    for line in doc["unusable"]:
        print(f"unusable: {line}")
    earned = [k["earned"] for k in doc["kernels"].values()]
    own = [level for level in OWN.values() if level in earned]   # contracts' ops, when any
    print(f"{len(earned)} 16-bit kernel(s): " + ", ".join(
        f"{earned.count(level)} {level or 'nothing'}"
        for level in ("verified", "fuzzed", *own, None)) +
        f"; written to {out or directory / 'trust-lowp.json'}")
    return EXIT_OK


def configure_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu",
                   help="the device whose capsules and evidence to export: cpu or cuda "
                        "(default: cpu)")
    p.add_argument("--evidence-dir", help="default reports/evidence/<device>/")
    p.add_argument("--out", help="default <evidence-dir>/trust.json")
    p.add_argument("--plugin", action="append", metavar="MODULE:ATTR",
                   help="also export the capsules of a user's module, as `run --plugin` audited "
                        "them (docs/PLUGINS.md); they are listed first and alone, the "
                        "registry's in one line; repeatable")
    p.add_argument("--op-contracts", action="append", metavar="MODULE:ATTR",
                   help="the contracts of the plugin's ops the engine does not have (as run's)")
    p.add_argument("--tests", metavar="JUNIT_XML",
                   help="a pytest --junitxml report; a passing suite lets runtime-guarded "
                        "capsules earn `checked`")
    p.add_argument("--lowp", metavar="DIR",
                   help="instead: the trust of the 16-bit kernels whose `lowp` records DIR "
                        "holds (DIR/trust-lowp.json; conformance/lowp/trust.py)")


def cmd_export(args) -> int:
    from conformance.junit_evidence import load_test_evidence
    from conformance.trust import export_trust
    if args.lowp:
        return _export_lowp(Path(args.lowp), args.out)
    _require_device(args.device)
    evidence_dir = Path(args.evidence_dir or default_evidence_dir(args.device))
    if not evidence_dir.is_dir():
        raise EvidenceDirError(f"evidence directory {evidence_dir} does not exist; run "
                               f"`torchlean-conformance run --device {args.device}` first")
    out = Path(args.out) if args.out else evidence_dir / "trust.json"
    tests = load_test_evidence(args.tests) if args.tests else None
    selected = select_targets(args.device, None, args.plugin or [])
    targets = [(cap, h) for _, cap, h in selected]
    with EvidenceLock(evidence_dir):
        doc = export_trust(evidence_dir, out, targets, args.device, tests)
    # With --plugin the user asked about their own capsules: those are listed, alone; the
    # registry's (exported too) are one line.
    theirs = {t.capsule for t, _, _ in selected if t.plugin} if args.plugin else None
    for name, e in doc["capsules"].items():
        if theirs is None or name in theirs:
            print(f"{name}: declared {e['declared']}, earned {e['earned'] or 'nothing'} "
                  f"({e['reason']})")
    if theirs is not None:
        rest = [e for name, e in doc["capsules"].items() if name not in theirs]
        earned = sum(e["earned"] is not None for e in rest)
        print(f"{len(rest)} registry capsules of {args.device} not listed ({earned} of them "
              f"earned something); rerun without --plugin to see them")
    print(f"wrote {out}")
    for problem in doc["unusable"]:
        print(f"torchlean-conformance: warning: {problem}", file=sys.stderr)
    return EXIT_FAILED if doc["unusable"] else EXIT_OK


# Subcommands of the reports package's own command (reports/cli.py, `python -m reports`).
# reports imports conformance, so conformance never imports reports (tests/test_import_graph.py):
# `main` runs that command in a child process with the arguments untouched (argparse's REMAINDER
# drops leading options in subparsers) and returns its exit code.

def forward_to_reports(name: str, argv: list[str]) -> int:
    """`python -m reports NAME ARGV...` in a child process: its exit code. The child imports the
    reports package beside this conformance package (PYTHONPATH leads with their common parent,
    so a source checkout and an installed wheel each run their own). Its output is relayed
    through sys.stdout and sys.stderr, so a caller that replaced them (a notebook, pytest's
    capture) sees it: stderr first, which keeps `report`'s warnings before its index line."""
    import subprocess
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        child = subprocess.run([sys.executable, "-m", "reports", name, *argv], env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               errors="replace")
    except KeyboardInterrupt:   # subprocess.run has killed the child
        print(f"torchlean-conformance: {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    sys.stderr.write(child.stderr)
    sys.stdout.write(child.stdout)
    return child.returncode


FORWARDED = ("report", "trust-boundaries")


def _forward(name: str):
    def configure(p: argparse.ArgumentParser) -> None:
        p.description = f"see `torchlean-conformance {name} --help`"

    def handler(args) -> int:   # reached after global options (`-v report`): no arguments left
        return forward_to_reports(name, [])
    return configure, handler


SUBCOMMANDS: dict[str, tuple[Callable, Callable, str]] = {
    "run": (configure_run, cmd_run, "fuzz capsules against the mpmath references, then the "
                                    "guard, determinism and allocator-cap suites"),
    "replay": (lambda p: _replay.configure(p, whole_number(1, 2 ** 62, "--max-elements")),
               lambda args: _replay.main(args, _require_device),
               "rerun one shrunk counterexample (a file's plugin loads only with the same "
               "--plugin)"),
    "export-trust": (configure_export, cmd_export, "write the trust each capsule earned"),
    "report": (*_forward("report"), "render the static HTML evidence report"),
    "trust-boundaries": (*_forward("trust-boundaries"),
                         "regenerate (or --check) the capsule table of TRUST_BOUNDARIES.md"),
    "exhaustive": (_exhaustive.configure, _exhaustive.main_exhaustive,
                   "sweep the float32 inputs of unary capsules: every K-th on cpu (the "
                   "default), every one with --device cuda"),
    "ulp-table": (_ulp_table.configure, _ulp_table.main,
                  "sweep twelve unary functions of ours, PyTorch, CuPy and JAX over every "
                  "float32 input and print their ulp table beside NVIDIA's documented figures"),
    "reproduce": (_reproducer.configure, _reproducer.main,
                  "write a standalone script (the peer and NumPy only) that reproduces a peer's "
                  "recorded failure from its replay file"),
    "classify-peers": (_rejudge.configure, _rejudge.main,
                       "classify a peer's recorded failures against its own contract: defect, "
                       "convention, undocumented accuracy, or undecided on the recorded data"),
    "lowp": (_lowp.configure, _lowp.main,
             "audit a plugin's bfloat16/float16 kernels: unary ones over all 2^16 inputs, "
             "sum, softmax and matmul on cases of a run seed, against correctly rounded "
             "references"),
    "flags": (lambda p: _flags.configure(p, {"cases": whole_number(1, 100_000, "--cases"),
                                             "seed": SEED, "timeout": seconds,
                                             "jobs": whole_number(1, 4096, "--jobs")}),
              _flags.main,
              "the compile-flag matrix: each capsule under each NVRTC flag set, judged against "
              "its own and the default build's policy"),
}


def exit_codes_text() -> str:
    """The exit codes as conformance/exit_codes.py's docstring lists them (its table, dedented,
    and the notes after it): what `--help` prints and README.md quotes, so neither can drift."""
    body = exit_codes.__doc__.split("\n\n", 1)[1]
    table, _, notes = body.partition("\n\n")
    return textwrap.dedent(table) + "\n\n" + notes.strip()


def build_parser() -> argparse.ArgumentParser:
    from engine.cli import version
    parser = argparse.ArgumentParser(prog="torchlean-conformance",
                                     description=__doc__.split("\n\nOthers extend")[0],
                                     epilog="Exit codes (conformance/exit_codes.py):\n" +
                                     textwrap.indent(exit_codes_text(), "  "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="say more on stderr (each capsule as it starts)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="say less on stderr: warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, handler, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        configure(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; whatever it prints may meet a reader that left (`| head`): the printing
    stops, the verdict's exit code stands (progress.reader_may_leave)."""
    from conformance.progress import reader_may_leave
    with reader_may_leave():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in FORWARDED:
        return forward_to_reports(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    contracts = getattr(args, "op_contracts", None)
    if contracts:
        if getattr(args, "cluster", None):
            print("torchlean-conformance: --op-contracts with --cluster: a cluster's workers do "
                  "not load the contracts; run the plugin's campaign without --cluster",
                  file=sys.stderr)
            return EXIT_USAGE
        from conformance.families import CONTRACTS_ENV, ContractError, load_contracts
        os.environ[CONTRACTS_ENV] = ",".join(contracts)    # for the workers this run starts
        try:
            load_contracts()
        except ContractError as exc:
            print(f"torchlean-conformance: {exc}", file=sys.stderr)
            return EXIT_USAGE
    from engine import cli_warnings
    cli_warnings.install("torchlean-conformance")
    from conformance.progress import configure_logging
    configure_logging(-1 if args.quiet else min(args.verbose, 1))
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EnvironmentFailure as exc:   # a full disk, an unwritable path: not a verdict
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        print("torchlean-conformance: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:   # not stdout's or stderr's reader (their guards drop that)
        print(f"torchlean-conformance: a pipe the command wrote to closed under it ({exc}); "
              "its verdict is unknown: run it again", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except Exception:   # noqa: BLE001 - the harness's own bug: exit 3, never a kernel's 1
        import traceback
        traceback.print_exc()
        print("torchlean-conformance: the harness itself raised (above): a defect of this tool, "
              "not a verdict; please report it", file=sys.stderr)
        return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
