"""`torchlean-conformance lowp --plugin MODULE:ATTR`: every 16-bit kernel the plugin declares (a
list of conformance/lowp/kernel.LowpKernel): a unary one swept over all 2^16 inputs of its
format, a binary one (add, sub, mul, max, min, or an op of the plugin's own whose contract
--op-contracts gives) over all 2^32 pairs (--device cuda judges them on the GPU) and its VJP where
it brings one, an accumulating one (sum, softmax, matmul, ...) audited on cases of a run seed, its
VJP too when it brings one; the
kernels in a kernel process, the references and verdicts here; one line per kernel, a record
<evidence-dir>/lowp-<kernel>.json each (docs/EXHAUSTIVE.md, "16-bit formats")."""
from __future__ import annotations

import argparse
import datetime as _dt
import secrets
import sys
from pathlib import Path

from conformance.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from conformance.fingerprint import harness_digest
from conformance.isolation.remote import KernelProcessError, PluginLoadError
from conformance.jsonfile import write_atomic
from conformance.peers.classify import in_words
from conformance.peers.contracts import lowp_contract_for
from conformance.lowp.audit import audit
from conformance.lowp.binary import ROWS, SweepRowsError, select_rows, sweep_pairs
from conformance.lowp.binary_vjp import sweep_vjp, with_vjp
from conformance.lowp.contracts import LowpContractError, ReferenceRefusedError, load_contracts
from conformance.lowp.kernel import ACCUMULATING, BINARY
from conformance.lowp.remote import open_kernels
from conformance.lowp.replay import make_replays
from conformance.lowp.trust import file_name, gpu_problem, machine_environment, source_digest
from conformance.formats import LOWP_FORMAT
from conformance.lowp.sweep import LowpKernelError, sweep

DEFAULT_DIR = Path("reports/evidence/lowp")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", metavar="MODULE:ATTR",
                   help="a list of LowpKernel, e.g. fixtures.plugins.low_precision:ALL")
    p.add_argument("--replay", metavar="FILE",
                   help="instead: call the kernel of a replay file (<evidence-dir>/replays/) "
                        "again on its inputs; exit 1 while it still fails, 0 once it does not")
    p.add_argument("--evidence-dir", default=str(DEFAULT_DIR),
                   help=f"where the records go (default {DEFAULT_DIR}/)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a kernel may take for one call (default 600)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where this process judges a binary kernel's 2^32 pairs (default cpu; "
                        "cuda: on CuPy, shards of 2^27 pairs); the kernels run where they run")
    p.add_argument("--pair-stride", type=int, default=1, metavar="K",
                   help="binary kernels: sweep every K-th pattern of the second operand and the "
                        "special ones against all of the first (default 1: all 2^32 pairs, "
                        "exhaustive; a larger K is a sample, recorded as one)")
    p.add_argument("--seed", type=int, default=None,
                   help="the run seed of the accumulating ops' cases, of the binary VJPs' drawn "
                        "inputs and of the contracts' certification pairs (default: drawn at "
                        "random and printed; the kernel process never sees it)")
    # dest apart from the float32 commands' --op-contracts (OpSpecs, which conformance/cli.py
    # loads for every command that has that attribute)
    p.add_argument("--op-contracts", action="append", metavar="MODULE:ATTR", default=[],
                   dest="lowp_contracts",
                   help="the contract of a binary op of the plugin's own (a "
                        "conformance.lowp.contracts.BinaryContract, or a list): imported here, "
                        "in the judge, never the kernels' module; repeatable")


def _line(rec: dict) -> str:
    reasons = ", ".join(f"{k} x{v}" for k, v in rec["failure_reasons"].items())
    cases = rec.get("cases")
    what = (f"{cases['total']} cases, {rec['elements']} elements" if isinstance(cases, dict)
            else f"worst passing {rec.get('max_ulps_passing') or 0:.3g} ulp")
    vjp = rec.get("vjp")
    if isinstance(cases, dict) and isinstance(vjp, dict):
        what += f"; VJP {vjp['cases']['total']} cases, {vjp['elements']} elements"
    if isinstance(rec.get("pairs"), int):
        what = (f"{'all ' if rec.get('exhaustive') else ''}{rec['pairs']} pairs in "
                f"{rec['seconds']:.1f} s, {what}")
    differs = in_words(rec.get("differences"))
    return (f"{rec['kernel']:<28} {rec['storage']:<9} {rec['op']:<9} "
            f"bound {rec['bound_ulps']:g} ulp  {what}  {rec['status']}" +
            (f": {reasons}" if reasons else "") +
            (f"; {rec['differences']['peer']}'s conventions, not failures: {differs}"
             if differs else ""))


class NoGPUError(RuntimeError):
    """--device cuda where CuPy has no GPU to judge on."""


def _check_gpu() -> None:
    problem = gpu_problem()
    if problem:
        raise NoGPUError(f"--device cuda: no usable GPU ({problem}); run on a machine with an "
                         "NVIDIA GPU and CuPy, or judge on the CPU with --device cpu "
                         "(--pair-stride K for a sample of the 2^32 pairs)")


def _values(v) -> str:
    return ", ".join(f"{x:.6g}" for x in v) if isinstance(v, list) else f"{v:.6g}"


def _replay(args) -> int:
    from conformance.jsonfile import UnusableFileError
    from conformance.lowp.replay import ReplayFileError, main_replay
    try:
        status, line = main_replay(args.replay, args.timeout, args.lowp_contracts)
    except (UnusableFileError, ReplayFileError, PluginLoadError, LowpContractError,
            ReferenceRefusedError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LowpKernelError as exc:
        status, line = EXIT_FAILED, f"still fails: {exc}"
    print(line)
    return EXIT_FAILED if status else EXIT_OK


def _drop_private(rec: dict) -> None:
    """Remove the audit's cases (`_inputs`, arrays for the shrinker) from every counterexample,
    the VJP's too: make_replays takes them as it goes, but a kernel that raised or a process
    that ended while shrinking leaves the rest (a record holds no arrays)."""
    vjp = rec.get("vjp") if isinstance(rec.get("vjp"), dict) else {}
    for ex in (rec.get("counterexamples") or []) + (vjp.get("counterexamples") or []):
        if isinstance(ex, dict):
            ex.pop("_inputs", None)


def main(args) -> int:
    if args.replay:
        return _replay(args)
    if not args.plugin:
        print("torchlean-conformance: lowp needs --plugin MODULE:ATTR (a list of LowpKernel) or "
              "--replay FILE", file=sys.stderr)
        return EXIT_USAGE
    out_dir = Path(args.evidence_dir)
    try:
        rows = select_rows(args.pair_stride)
        if args.device == "cuda":
            _check_gpu()
    except (SweepRowsError, NoGPUError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        contracts = load_contracts(args.lowp_contracts, args.plugin)
        kp, kernels = open_kernels(args.plugin, timeout=args.timeout, own_ops=set(contracts))
    except (LowpContractError, PluginLoadError, KernelProcessError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    worst, ended = EXIT_OK, None
    plugin_source, env = source_digest(args.plugin), machine_environment()
    seed, source = (args.seed, "given") if args.seed is not None else \
        (secrets.randbits(62), "random")
    try:
        for k in kernels:
            base = {"format": LOWP_FORMAT, "kernel": k.name, "op": k.op, "storage": k.fmt.name,
                    "bound_ulps": k.bound_ulps}
            op_contract = contracts.get(k.op)    # an op of the plugin's own: its reference
            try:
                if ended is not None:    # one process holds them all: the rest are not swept
                    raise KernelProcessError(f"not audited: the kernel process ended during "
                                             f"{ended}'s audit")
                # a peer's contract is ours, chosen by the plugin spec the user gave and the op
                # the reference is chosen by (no clause governs an accumulating op)
                peer_contract = lowp_contract_for(args.plugin, k.op)
                rec = (audit(k, seed, source) if k.op in ACCUMULATING else
                       sweep_pairs(k, args.device, rows, contract=peer_contract,
                                   op_contract=op_contract, seed=seed)
                       if k.op in BINARY or op_contract else sweep(k, peer_contract))
                if k.op in BINARY and k.vjp is not None:
                    rec = with_vjp(rec, sweep_vjp(k, args.device, rows, seed, peer_contract))
            except ReferenceRefusedError as exc:    # the contract's fault, not the kernel's
                rec = {**base, "status": "refused", "failure_reasons": {"reference-refused": 1},
                       "message": str(exc)[:2000], "max_ulps_passing": 0.0,
                       "reference": op_contract.summary(), "run": {"seed": seed,
                                                                   "seed_source": source}}
            except LowpKernelError as exc:    # the kernel's verdict: it raised, returned junk
                rec = {**base, "status": "failed", "failure_reasons": {exc.reason: 1},
                       "message": str(exc)[:2000], "max_ulps_passing": 0.0}
            except KernelProcessError as exc:   # it exited or hung: this run's verdict too
                rec = {**base, "status": exc.status, "failure_reasons": {exc.status: 1},
                       "message": str(exc)[:2000], "max_ulps_passing": 0.0}
                ended = ended or k.name
            rec.update(plugin=args.plugin, harness=harness_digest(), plugin_source=plugin_source,
                       environment=env,
                       created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
            out_dir.mkdir(parents=True, exist_ok=True)
            if rec.get("counterexamples") and ended is None:
                try:
                    rec["replays"] = make_replays(rec, k, out_dir, op_contract)
                except (LowpKernelError, KernelProcessError) as exc:   # while shrinking
                    rec["replays"], rec["shrink_error"] = [], str(exc)[:500]
                    ended = ended or (k.name if isinstance(exc, KernelProcessError) else None)
            _drop_private(rec)
            write_atomic(out_dir / file_name(k.name), rec)
            print(_line(rec), flush=True)
            if rec["status"] != "passed":
                worst = EXIT_USAGE if rec["status"] == "refused" and worst != EXIT_FAILED \
                    else EXIT_FAILED
                if isinstance(rec.get("message"), str):
                    print(f"  {rec['message'][:300]}")
                for c in rec.get("counterexamples", [])[:1]:
                    where = (f"input {c['input']} ({_values(c['input_value'])})"
                             + (f", {c['output']}" if "output" in c else "")
                             if "input" in c else
                             f"{c['class']}[{c['index']}] (shapes {c['shapes']}) " +
                             (f"gradient {c['gradient']} " if "gradient" in c else "") +
                             f"element {c['element']}")
                    print(f"  e.g. {where}: expected {c['expected']}, got {c['got']} "
                          f"({c['got_value']:.6g}): {c['reason']}")
                    if c.get("replay"):
                        print(f"  replay: torchlean-conformance lowp --replay "
                              f"{out_dir / c['replay']}")
    finally:
        kp.close()
    pairwise = BINARY + tuple(contracts)
    unary = sum(1 for k in kernels if k.op not in ACCUMULATING + pairwise)
    binary = sum(1 for k in kernels if k.op in pairwise)
    accumulating = len(kernels) - unary - binary
    seeded = sum(1 for k in kernels if k.op in contracts or (k.op in BINARY and k.vjp))
    pairs = "all 2^32 pairs" if rows.size == ROWS else f"{rows.size << 16} pairs (a sample)"
    parts = ([f"{unary} swept over all 2^16 inputs"] if unary else []) + \
        ([f"{binary} over {pairs}, judged on {args.device}"] if binary else []) + \
        ([f"{seeded} with VJP inputs or contract certification drawn from run seed {seed} "
          f"({source})"] if seeded and not accumulating else []) + \
        ([f"{accumulating} audited on cases of run seed {seed} ({source}; --seed {seed} draws "
          f"them again)"] if accumulating else [])
    print(f"{len(kernels)} 16-bit kernel(s): {', '.join(parts)}; records in {out_dir}/ "
          f"(their earned trust: torchlean-conformance export-trust --lowp {out_dir})")
    return worst
