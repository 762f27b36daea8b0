"""Re-judging a recorded peer record (`aten.*`, `xla.*`, `cupy_peer.*`) under its peer's contract,
as far as the record allows: `torchlean-conformance classify-peers DIR...` or
`rejudge(record, directory)`.

A record keeps per-reason case counts, per-direction worst figures and its counterexamples (each
failing element with its inputs, the kernel's value, the exact value and its ulps, and a replay
file with the whole case), not every element. So each failure reason is classified on what is
there (conformance/peers/accuracy.py's rules), and says on what basis:

- `reason`: decided for every element by the reason alone. A NaN or infinity mismatch, an
  unwritten element or a wrong selection of an output the contract has no convention for is a
  defect wherever it occurs; a whole-case failure (raised, shape, mutated input, VJP identity,
  repeatability) is not an element the rules classify and stays a failure (a defect).
- `recorded`: decided on the recorded elements only, the unrecorded ones of the same reason
  unseen: a convention clause that explains every recorded element (checked against the clause's
  rule on the replay file's case; the rules that read the forward output are given the correctly
  rounded forward, the kernel's own not being recorded: exact for the selections, and the same
  infinity where exp or the reciprocal overflow), or accuracy the peer does not document where
  every recorded element keeps a correct digit and meets any documented bound.
- A reason with a recorded defect is a defect (one is certain); one whose recorded elements are
  of several non-defect classes, or that has none recorded, is `undecided`.

The record's status: its own where the campaign judged nothing (crashed, timed-out, harness-error,
interrupted, unsupported: no reason to classify, so never `passed`); else `failed` where any reason
is a defect, `passed` where every reason is a convention or undocumented accuracy on the basis of
the reason alone, else `undecided` (no defect recorded, but the unrecorded elements could hold one:
rerun the campaign, whose judge applies the contract to every element). A record judged under a
contract already (its `differences` present) may have been judged under an older one, so its
remaining failures are classified the same way; the conventions and undocumented accuracy it lists
are reported as they stand. The contract's policy conventions (CuPy's -ftz=true:
contract.PolicyConvention) are reported with the elements the record observed them admit, where the
record's capsule was judged under that policy; they are never failures.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from conformance import error_models as E
from conformance.exit_codes import KERNEL_FAILED
from conformance.peers import accuracy as A, operand_scale

UNDECIDED = "undecided"
UNCHECKED = "unchecked"    # an element a convention could govern, its case not recorded
ELEMENT_REASONS = set(E.REASONS) - {E.OK}
JUDGED = ("passed", "failed")    # the statuses of a campaign that judged its cases
F32 = np.float32


@dataclass
class ReasonClass:
    """One failure reason of a record: its class, the basis, why, its case count, its recorded
    elements by class, and the measured figure over them (worst ulps from the correctly rounded
    value, worst error / TorchLean's bound)."""
    reason: str
    cls: str
    basis: str
    why: str
    cases: int
    recorded: dict[str, int] = field(default_factory=dict)
    worst_ulps: float | None = None
    worst_ratio: float | None = None
    upstream: list[str] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"class": self.cls, "basis": self.basis, "why": self.why, "cases": self.cases,
                "recorded": self.recorded, "worst_ulps": self.worst_ulps,
                "worst_ratio": self.worst_ratio, "upstream": self.upstream,
                "replays": self.replays}


@dataclass
class Rejudged:
    capsule: str
    peer: str
    recorded_status: str
    status: str
    reasons: list[ReasonClass]
    conventions: dict[str, int]         # clause -> elements, from a record judged live
    undocumented: dict[str, dict]       # output -> figure, from a record judged live
    policy: dict[str, int] = field(default_factory=dict)   # policy clause -> elements observed

    def to_json(self) -> dict:
        return {"capsule": self.capsule, "peer": self.peer, "recorded_status":
                self.recorded_status, "status": self.status,
                "reasons": {r.reason: r.to_json() for r in self.reasons},
                "conventions": self.conventions, "undocumented_accuracy": self.undocumented,
                "policy": self.policy}


def _split(reason: str) -> tuple[str, str]:
    return ("grad", reason[4:]) if reason.startswith("vjp-") else ("value", reason)


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _got(failure: dict) -> float:
    try:
        return float(np.array([int(failure["got"], 16)], np.uint32).view(F32)[0])
    except (TypeError, ValueError, KeyError):
        return _float(failure.get("got_value"))


def _inputs(failure: dict) -> list[float]:
    out = []
    for values in (failure.get("inputs") or {}).values():
        for h in values if isinstance(values, list) else [values]:
            try:
                out.append(float(np.array([int(h, 16)], np.uint32).view(F32)[0]))
            except (TypeError, ValueError):
                pass
    return out


def _convention(contract, output: str, failure: dict, replay: dict | None,
                daz: bool = False) -> str | None:
    """The clause whose rule gives exactly the recorded value at the recorded element, or None
    (no replay to read the case from, or no clause's value)."""
    if replay is None or not contract.for_output(output):
        return None
    from conformance.peers.contract import ConventionCase, admissible
    from conformance.references import get as get_reference
    from conformance.replay import decode_case
    try:
        case = decode_case(replay["case"])
        with np.errstate(all="ignore"):
            out = get_reference(case.op.label).forward(case.inputs, **case.params).value
        grad = None if output == "value" else int(failure["output"][len("grad["):-1])
        cc = ConventionCase(tuple(case.inputs), case.params, np.asarray(out, F32),
                            None if grad is None else case.cotangent, grad, daz)
        at = tuple(failure["element"])
        got = np.array([int(failure["got"], 16)], np.uint32).view(F32)[0]
        for convention in contract.for_output(output):
            with np.errstate(all="ignore"):
                governed, value = convention.rule(cc)
            for v in admissible(value):
                v = np.asarray(v, F32)
                if bool(np.broadcast_to(governed, v.shape)[at]):
                    v = v[at]
                    if v.view(np.uint32) == got.view(np.uint32) or \
                            (np.isnan(v) and np.isnan(got)):
                        return convention.clause.name
    except Exception:   # noqa: BLE001 - an unreadable case decides nothing: the element stays
        return None
    return None


def _element_class(contract, output, base, failure, replay, daz: bool) -> str:
    """The element's class; UNCHECKED where a convention could govern it, or its op's terms'
    scale (operand_scale.py) decides rule 2, but its case is not recorded (an unshrunk
    counterexample: the replay file holds the shrunk case only). Checked
    whether or not the record was judged under a contract: it may have been an older one."""
    if contract.for_output(output) and replay is None:
        return UNCHECKED
    cls = replay_class(contract, failure, replay, daz)[0]
    if replay is None and cls == A.DEFECT and output == "value" and \
            contract.op in operand_scale.SCALES and base in A.ACCURACY_REASONS:
        return UNCHECKED     # no digit of the result: only the terms' scale decides (rule 2)
    return cls


def replay_class(contract, failure: dict, replay: dict | None,
                 daz: bool = False) -> tuple[str, str | None]:
    """(class, clause) of one failing element of a replay file's shrunk case (`failure` one of
    its `failures`): a convention and the clause whose rule gives exactly the recorded value, or
    a defect or undocumented accuracy (accuracy.py's rules) and None. reproducer.py asks this."""
    output, base = _split(str(failure.get("reason", "")))
    clause = _convention(contract, output, failure, replay, daz)
    if clause is not None:
        return A.CONVENTION, clause
    defect, _ = A.classes(np.array([base], dtype=object), np.array([_got(failure)]),
                          np.array([_float(failure.get("exact"))]),
                          np.array([_float(failure.get("ulps"))]), A.bound_for(contract, output),
                          _terms_scale(output, failure, replay))
    return (A.DEFECT if bool(defect[0]) else A.UNDOCUMENTED), None


def _terms_scale(output: str, failure: dict, replay: dict | None):
    """The recorded element's terms' scale (operand_scale.py) from its replay's case, or None
    (a gradient, no replay, an op without one, an unreadable case)."""
    if output != "value" or replay is None:
        return None
    from conformance.replay import decode_case
    try:
        case = decode_case(replay["case"])
        s = operand_scale.scale(case.op.label, case)
        return None if s is None else np.array([s[tuple(failure["element"])]])
    except Exception:   # noqa: BLE001 - an unreadable case: the result's own scale
        return None


def _replay(directory: Path | None, ce: dict) -> dict | None:
    name = Path(str(ce.get("replay_file") or "")).name
    if directory is None or not name:
        return None
    path = Path(directory) / "replays" / name
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def rejudge(record: dict, directory: Path | None = None, contract=None) -> Rejudged | None:
    """The record's failures classified under its peer's contract (chosen by the plugin spec the
    record names, as the live judge does), or None for a record that is no peer's. `directory`
    holds its replays/ (for the convention check of recorded elements)."""
    from conformance.peers.contracts import contract_for
    name = (record.get("capsule") or {}).get("name", "")
    contract = contract or contract_for(record.get("plugin"), name)
    if contract is None:
        return None
    live = isinstance(record.get("differences"), dict)
    policy = ((record.get("capsule") or {}).get("numerical_policy") or {})
    daz = policy.get("subnormals") == "flush-to-zero"
    elements: dict[str, list[tuple[str, dict, str]]] = {}   # reason -> (class, failure, replay)
    for ce in record.get("counterexamples") or []:
        replay = _replay(directory, ce)
        # the replay file holds the shrunk case: only its failures' elements index into it
        for shrunk, failures in ((False, ce.get("failures")), (True, ce.get("shrunk_failures"))):
            for failure in failures or []:
                reason = str(failure.get("reason", ""))
                output, base = _split(reason)
                if base not in ELEMENT_REASONS or \
                        not str(failure.get("got", "")).startswith("0x"):
                    continue    # a whole-case failure: no element
                cls = _element_class(contract, output, base, failure,
                                     replay if shrunk else None, daz)
                elements.setdefault(reason, []).append((cls, failure,
                                                        ce.get("replay_command", "")))
    reasons = [_reason(contract, record, reason, int(n), elements.get(reason, []), live)
               for reason, n in sorted((record.get("failure_reasons") or {}).items())]
    recorded = str(record.get("status"))
    if recorded not in JUDGED or not reasons:
        # a crash, a hang, a harness error, an interrupted or unsupported run judged nothing
        # (no failure reason to classify): it keeps its status, as does a failure whose record
        # names no reason; an empty list of reasons is not a pass
        status = recorded
    elif any(r.cls == A.DEFECT for r in reasons):
        status = "failed"
    elif all(r.basis == "reason" for r in reasons):
        status = "passed"
    else:
        status = UNDECIDED
    diff = record.get("differences") if live else {}
    policy = {pc.clause.name: pc.count(record) for pc in getattr(contract, "policy", ())}
    return Rejudged(name, contract.peer, str(record.get("status")), status, reasons,
                    {k: v.get("elements", 0) for k, v in (diff.get("clauses") or {}).items()},
                    dict(diff.get("undocumented_accuracy") or {}),
                    {k: n for k, n in policy.items() if n})


def _reason(contract, record, reason, cases, seen, live) -> ReasonClass:
    output, base = _split(reason)
    rc = ReasonClass(reason, UNDECIDED, "recorded", "", cases)
    ulps, ratios = [], []
    for cls, failure, command in seen:
        rc.recorded[cls] = rc.recorded.get(cls, 0) + 1
        ulps.append(_float(failure.get("ulps")))
        ratios.append(_float(failure.get("error")) / _float(failure.get("bound")))
        if command and command not in rc.replays:
            rc.replays.append(command)
        rc.upstream += [u.reference for u in contract.upstream
                        if u.covers(output, base, _inputs(failure)) and u.reference not in rc.upstream]
    finite = [u for u in ulps if np.isfinite(u)]
    rc.worst_ulps = max(finite) if finite else None
    finite = [r for r in ratios if np.isfinite(r)]
    rc.worst_ratio = max(finite) if finite else None
    if base not in ELEMENT_REASONS:
        rc.cls, rc.basis = A.DEFECT, "reason"
        rc.why = "a whole-case failure: no element to classify; it stays a failure"
    elif base in A.SEMANTIC_REASONS and not contract.for_output(output):
        rc.cls, rc.basis = A.DEFECT, "reason"
        rc.why = (f"{base}: a special value, an unwritten element or a wrong selection, and no "
                  f"convention of {contract.peer}'s governs this output")
    elif rc.recorded.get(A.DEFECT):
        rc.cls = A.DEFECT
        rc.why = f"{rc.recorded[A.DEFECT]} recorded element(s) break {contract.peer}'s contract"
    elif len(set(rc.recorded) - {UNCHECKED}) == 1:
        (rc.cls,) = set(rc.recorded) - {UNCHECKED}
        rc.why = (f"every recorded element that could be checked is {rc.cls}; the elements of "
                  "the other cases were not recorded")
    else:
        rc.why = ("no element that could be checked was recorded" if not
                  set(rc.recorded) - {UNCHECKED} else
                  "the recorded elements are of several classes") + \
            "; rerun the campaign under the contract to decide"
    return rc


def rejudge_directory(directory: Path) -> list[Rejudged]:
    """Every peer record (aten.*.json, xla.*.json, cupy_peer.*.json) of `directory`, rejudged."""
    from conformance.peers.contracts import PEER_PREFIXES
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        if not path.name.startswith(PEER_PREFIXES):
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        judged = rejudge(record, Path(directory)) if isinstance(record, dict) else None
        if judged is not None:
            out.append(judged)
    return out


class RejudgeError(Exception):
    """A path given to classify-peers is not an evidence directory (a usage error)."""


def configure(p) -> None:
    p.add_argument("dirs", nargs="+", help="evidence directories holding aten.*/xla.*/"
                                           "cupy_peer.* records (and their replays/)")
    p.add_argument("--json", action="store_true", help="print the classification as JSON")


def main(args) -> int:
    """Print each peer record's failures by class; exit 1 where a defect is certain or a
    peer's kernel crashed or timed out (as `run` exits), 0 else."""
    import sys
    out, failed = {}, False
    for d in args.dirs:
        if not Path(d).is_dir():
            print(f"torchlean-conformance: classify-peers: {d} is not a directory; give the "
                  "evidence directories that hold the peers' aten.*/xla.*/cupy_peer.* records",
                  file=sys.stderr)
            return 2
        judged = rejudge_directory(Path(d))
        if not judged:
            print(f"torchlean-conformance: classify-peers: {d} holds no record of a peer "
                  "module's capsule (aten.*.json, xla.*.json, cupy_peer.*.json made with "
                  "--plugin conformance.peers.torch_cuda:ENTRIES, jax_xla:ENTRIES or "
                  "cupy_peer:ENTRIES)", file=sys.stderr)
            return 2
        out[d] = [j.to_json() for j in judged]
        failed |= any(j.status in KERNEL_FAILED for j in judged)   # as `run` exits
    if args.json:
        print(json.dumps(out, indent=1, sort_keys=True))
        return 1 if failed else 0
    for d, judged in out.items():
        print(f"{d}:")
        for j in judged:
            print(f"  {j['capsule']}: {j['recorded_status']} -> {j['status']}")
            for reason, r in j["reasons"].items():
                figure = "" if r["worst_ulps"] is None else \
                    f", worst {r['worst_ulps']:g} ulp, {r['worst_ratio'] or 0:.3g}x our bound"
                ups = "".join(f", upstream {u}" for u in r["upstream"])
                print(f"    {reason} ({r['cases']} cases): {r['class']} [{r['basis']}]"
                      f"{figure}{ups}: {r['why']}")
            for clause, n in sorted(j["policy"].items()):
                print(f"    {clause}: {n} element(s) admitted by {j['peer']}'s policy "
                      "(observed), a convention, not failures")
    return 1 if failed else 0
