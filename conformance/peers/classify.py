"""The judge's side of a peer contract (conformance/peers/contract.py): which failing elements of
one output are the peer keeping its own convention, and the campaign's account of them.

An element counts as a difference only where it failed TorchLean's contract, was not left holding
the allocator's poison, lies where a clause of the contract decides the value, and holds exactly
the value that clause's rule gives (NaN for NaN). It is then marked passed in the verdict (error,
ratio and ulps 0: a convention is not an error of the peer's), and its clause is counted. Every
other failing element is left to conformance/peers/accuracy.py: accuracy the peer does not
document (passed, listed with its figure) or a defect against the peer's own contract (a failure).
"""
from __future__ import annotations

import numpy as np

from conformance import error_models
from conformance.peers.contract import ConventionCase, PeerContract, admissible

_OK = error_models.REASONS.index(error_models.OK)
_POISON = error_models.REASONS.index(error_models.POISON_IN_OUTPUT)


def _same(value: np.ndarray, got: np.ndarray) -> np.ndarray:
    value = np.array(value, dtype=np.float32)   # a contiguous copy; ascontiguousarray makes 0-d 1-d
    got = np.array(got, dtype=np.float32)
    return (value.view(np.uint32) == got.view(np.uint32)) | (np.isnan(value) & np.isnan(got))


def explain(contract: PeerContract, output: str, case: ConventionCase, got,
            verdict: error_models.Verdict) -> dict[str, int]:
    """Mark passed the failing elements of `verdict` (output "value" or "grad") that a clause
    explains; returns clause name -> elements explained."""
    got = np.asarray(got, dtype=np.float32)
    failing = ~verdict.ok & (verdict.reason != _POISON)
    counts: dict[str, int] = {}
    for convention in contract.for_output(output):
        if not failing.any():
            break
        governed, value = convention.rule(case)
        governed = np.broadcast_to(np.asarray(governed, dtype=bool), got.shape)
        same = np.zeros(got.shape, dtype=bool)
        for v in admissible(value):     # the values the clause admits (most admit one)
            same |= _same(np.broadcast_to(np.asarray(v, dtype=np.float32), got.shape), got)
        explained = failing & governed & same
        n = int(np.count_nonzero(explained))
        if n:
            name = convention.clause.name
            counts[name] = counts.get(name, 0) + n
            failing &= ~explained
            verdict.ok[explained] = True
            verdict.reason[explained] = _OK
            for a in (verdict.err, verdict.ratio, verdict.ulps):
                a[explained] = 0.0
    return counts


def differences_record(contract: PeerContract, seen: dict[str, dict],
                       undocumented: dict[str, dict] | None = None) -> dict:
    """The record's `differences`: the contract judged against, and per clause seen, what it says,
    where, its class (convention: documented; undocumented: only the peer's source says so) and
    how many cases and elements it explained; the op's documented accuracy, and per output
    ("value", "grad") the failing elements that were accuracy the peer does not document, with
    the measured figure (conformance/peers/accuracy.py)."""
    clauses = {c.clause.name: c.clause for c in contract.conventions}
    return {"peer": contract.peer, "semantics": contract.semantics,
            "clauses": {name: {**clauses[name].to_json(), **counts}
                        for name, counts in sorted(seen.items())},
            "accuracy": contract.accuracy.to_json(),
            "undocumented_accuracy": {k: v for k, v in sorted((undocumented or {}).items())}}


def _count(x) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0


def in_words(differences) -> str:
    """A record's `differences` (differences_record's) in words, '' for none: the clauses that
    explained elements, `tie-gradient-split x12 elements`, and the accuracy the peer does not
    document, `undocumented accuracy (grad) x3 elements, worst 12 ulps`."""
    if not isinstance(differences, dict):
        return ""
    clauses = differences.get("clauses")
    words = [f"{name} x{c['elements']} elements" for name, c in sorted(clauses.items())
             if isinstance(c, dict) and _count(c.get("elements"))] \
        if isinstance(clauses, dict) else []
    loose = differences.get("undocumented_accuracy")
    if isinstance(loose, dict):
        words += [f"undocumented accuracy ({output}) x{f['elements']} elements, worst "
                  f"{f.get('worst_ulps', '?'):g} ulps" if isinstance(f.get("worst_ulps"), float)
                  else f"undocumented accuracy ({output}) x{f['elements']} elements"
                  for output, f in sorted(loose.items())
                  if isinstance(f, dict) and _count(f.get("elements"))]
    return ", ".join(words)
