"""The `torchlean-conformance flags` command: the native kernels rebuilt under each NVRTC flag set
(engine/runtime/flag_sets.py), the campaign (and with --exhaustive the unary sweep) run under each
by the `run` and `exhaustive` subcommands in child processes, judged against the set's own policy
and against the default build's, then the matrix capsule x set printed and written as evidence
(conformance/flag_matrix.py says what each cell must show; docs/FLAGS.md).

Layout under the evidence directory (default reports/evidence/cuda-flags/):
  <set>/own/             records judged against the policy the set's flags declare;
  <set>/default-policy/  the same binaries judged against the default build's policy (sets other
                         than default, capsules whose declared facts differ);
  flag-matrix.json       the matrix, read by the report's "compile-flag matrix" page.
Exit codes as every subcommand: 0 every expectation met, 1 one not met, 2 a usage error (an
unknown set or capsule, no CUDA device, a busy directory), 3 a harness error, 130 interrupted.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import subprocess
import sys
import time
from pathlib import Path

from conformance import flag_matrix as fm
from conformance.evidence_dir import DEFAULT_EVIDENCE_ROOT, EvidenceLock

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_DIR = DEFAULT_EVIDENCE_ROOT / "cuda-flags"


class FlagsUsageError(Exception):
    """A user error of `flags`: an unknown or repeated set, a pattern that selects no native
    capsule (printed as one line, exit 2)."""


class NeedsCUDAError(FlagsUsageError):
    """`flags` on a machine without a native CUDA runtime: it compiles and runs the kernels."""


def configure(p: argparse.ArgumentParser, types: dict | None = None) -> None:
    """The arguments; `types` are `run`'s argparse checks of the options passed on to it (cases,
    seed, jobs, timeout), so a bad value is refused here, before any set is built."""
    from engine.runtime.flag_sets import FLAG_SETS
    t = types or {}
    p.add_argument("--capsule", action="extend", nargs="+", metavar="GLOB",
                   help="native-cuda capsules (names or globs; default: every native_cuda one)")
    p.add_argument("--sets", default=",".join(FLAG_SETS),
                   help=f"comma-separated flag sets (default: {','.join(FLAG_SETS)})")
    p.add_argument("--quick", action="store_true", help="the campaign's --quick (2 cases a class)")
    p.add_argument("--cases", type=t.get("cases", str), default=None,
                   help="the campaign's --cases")
    p.add_argument("--seed", type=t.get("seed", str), default=0,
                   help="the campaign's --seed (default: 0)")
    p.add_argument("--exhaustive", action="store_true",
                   help="also sweep the unary capsules under each set (see --stride)")
    p.add_argument("--stride", default="257",
                   help="with --exhaustive: every K-th float32 pattern (default: 257; 1 sweeps "
                        "all 2^32, minutes per capsule and set)")
    p.add_argument("--evidence-dir", help=f"where the sets' records and the matrix go (default: "
                                          f"{DEFAULT_DIR}/)")
    p.add_argument("--jobs", type=t.get("jobs", str), default=None,
                   help="the campaign's --jobs (worker processes per set)")
    p.add_argument("--timeout", type=t.get("timeout", str), default=None,
                   help="the campaign's --timeout per capsule")
    p.add_argument("--fresh", action="store_true", help="rerun capsules with a finished record")


def parse_sets(text: str) -> list[str]:
    """The named sets in command-line order, default first when present; unknown or repeated
    names are a FlagsUsageError naming the known ones."""
    from engine.runtime.flag_sets import FLAG_SETS
    names = [s.strip() for s in (text or "").split(",") if s.strip()]
    unknown = [s for s in names if s not in FLAG_SETS]
    if not names or unknown:
        what = f"unknown {', '.join(unknown)}" if unknown else "no set named"
        raise FlagsUsageError(f"--sets {text!r}: {what}; expected a comma-separated list of "
                              f"{', '.join(FLAG_SETS)}")
    if len(set(names)) != len(names):
        raise FlagsUsageError(f"--sets {text!r} names a set twice; name each once")
    return sorted(names, key=lambda s: s != "default")


def select(patterns: list[str] | None) -> list[str]:
    """The native-cuda capsules the patterns pick (all without patterns)."""
    every = fm.native_capsules()
    if not patterns:
        return every
    picked = [c for c in every if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    if not picked:
        raise FlagsUsageError(f"--capsule {' '.join(patterns)} matches no native-cuda capsule "
                              f"(NVRTC's flags reach only those); known: native_cuda.* such as "
                              f"{', '.join(every[:4])}")
    return picked


def require_cuda() -> None:
    from engine.runtime.native import RuntimeState, probe
    state, detail = probe()
    if state is not RuntimeState.native_available:
        raise NeedsCUDAError(f"`flags` compiles the native CUDA kernels under each flag set and "
                             f"runs them, so it needs a CUDA device; this machine has none "
                             f"usable ({state.value}: {detail}); run it on a machine with an "
                             "NVIDIA GPU and the CUDA build (`pip install -e .[cuda13]`)")


def unary(capsules: list[str]) -> list[str]:
    from conformance.exhaustive.refs import REFS
    from engine.providers.native_cuda.capsules import ALL_DECLARATIONS
    ops = {d.capsule_name: d.op.label for d in ALL_DECLARATIONS}
    return [c for c in capsules if ops[c] in REFS]


def child_env(flag_set: str, mode: str) -> dict:
    """The environment of a child run: the set compiled, and under default-policy the default
    build's declarations."""
    from engine.runtime import flag_sets
    env = dict(os.environ)
    env[flag_sets.FLAG_SET_ENV] = flag_set
    env.pop(flag_sets.DECLARED_FLAG_SET_ENV, None)
    if mode == fm.DEFAULT_POLICY:
        env[flag_sets.DECLARED_FLAG_SET_ENV] = "default"
    return env


def run_commands(args, flag_set: str, mode: str, capsules: list[str], out: Path) -> list[list]:
    """The `run` (and `exhaustive`) command lines of one set and mode."""
    base = [sys.executable, "-m", "conformance.cli"]
    run = [*base, "run", "--device", "cuda", "--suite", "campaign", "--no-progress",
           "--evidence-dir", str(out), "--seed", str(args.seed), "--capsule", *capsules]
    run += ["--quick"] if args.quick else []
    run += ["--fresh"] if args.fresh else []
    for flag, value in (("--cases", args.cases), ("--jobs", args.jobs),
                        ("--timeout", args.timeout)):
        if value is not None:
            run += [flag, str(value)]
    cmds = [run]
    sweep = unary(capsules) if args.exhaustive else []
    if sweep:
        cmds.append([*base, "exhaustive", "--device", "cuda", "--stride", str(args.stride),
                     "--evidence-dir", str(out), *[a for c in sweep for a in ("--capsule", c)]])
    return cmds


def _child(cmd: list, env: dict, label: str) -> int:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    print(f"flags: {label}: `{cmd[3]}` exit {proc.returncode} in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    if proc.returncode not in (EXIT_OK, EXIT_FAILED):
        print("\n".join(proc.stdout.strip().splitlines()[-20:]), file=sys.stderr)
    return proc.returncode


def main(args) -> int:
    from conformance.exhaustive.cli import ExhaustiveError, parse_stride
    try:
        sets = parse_sets(args.sets)
        capsules = select(args.capsule)
        if args.exhaustive:
            parse_stride(args.stride, "cuda")
        require_cuda()
    except (FlagsUsageError, ExhaustiveError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    root = Path(args.evidence_dir or DEFAULT_DIR)
    settings = {"quick": bool(args.quick), "cases": args.cases, "seed": str(args.seed),
                "exhaustive": bool(args.exhaustive),
                "stride": str(args.stride) if args.exhaustive else None}
    harness = []
    with EvidenceLock(root):
        for s in sets:
            for mode in ((fm.OWN,) if s == "default" else fm.MODES):
                picked = capsules if mode == fm.OWN else [
                    c for c in capsules if fm.facts_differ(c, s)]
                if not picked:
                    continue
                for cmd in run_commands(args, s, mode, picked, fm.set_dir(root, s, mode)):
                    code = _child(cmd, child_env(s, mode), f"{s} ({mode}, {len(picked)} "
                                                           "capsule(s))")
                    if code == EXIT_INTERRUPTED:
                        return EXIT_INTERRUPTED
                    if code == EXIT_USAGE:
                        return EXIT_USAGE
                    if code not in (EXIT_OK, EXIT_FAILED):
                        harness.append(code)
        matrix = fm.assemble(root, fm.Plan(sets, capsules, settings))
        path = fm.write(root, matrix)
    print(fm.table(matrix))
    print(f"wrote {path}")
    code = fm.exit_code(matrix)
    return code if code or not harness else EXIT_HARNESS
