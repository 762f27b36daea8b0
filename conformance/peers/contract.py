"""Peer contracts: what an audited library promises about an op, as the judge applies it.

A peer (PyTorch's CUDA kernels, audited through `conformance.peers.torch_cuda`) keeps conventions
of its own where TorchLean's contract (docs/OPS.md) says something else: the subgradient of relu
at NaN, how max splits a tie's gradient, which zero a tie of signed zeros returns, a VJP evaluated
in float32 from the rounded forward output. Judged by TorchLean's contract alone, each is a
failure, and a reader of the page cannot tell it from a defect. A contract lists those
conventions, each as a clause (what the peer does, where it says so) and the peer's own value for
the elements the clause governs. The judge (conformance/peers/classify.py) counts a failing
element as a difference, not a failure, only where the kernel returned exactly the peer's value
there (NaN for NaN); every other failing element stays a failure, a defect against the peer's own
contract too. So a clause can only ever explain what the peer's rule produces, and a kernel cannot
hide a wrong value behind it.

Beside the conventions a contract states the op's documented accuracy; a failing element no
clause explains is then a defect or accuracy the peer does not document (accuracy.py's rules).

Some conventions are not a value rule but a numerical policy: CuPy compiles its kernels with
-ftz=true, so every subnormal operand is read as zero and every subnormal result flushed. Such a
convention is stated in the peer entries' numerical policy (the capsule says
subnormal=flush-to-zero), the error model of which then admits the flushed results for every
element (conformance/error_models.py), and in the contract as a PolicyConvention: listed with its
clause, and counted from the record's own observation (how many results were flushed, how many
inputs read as zero), never as a failure.

The judge chooses a contract by the plugin spec the user passed (conformance/peers/contracts.py),
never by what a kernel process says about itself: only our own peer module gets a peer's contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from conformance.peers.accuracy import UNDOCUMENTED_ACCURACY, DocumentedAccuracy, Upstream


@dataclass(frozen=True)
class Clause:
    """One convention of a peer: its name, what the peer does, where that is written (a doc URL
    or a source path of the peer's repository) and whether the peer documents it (False: only its
    source does: an undocumented behaviour, listed as such)."""
    name: str
    says: str
    source: str
    documented: bool

    def to_json(self) -> dict:
        return {"says": self.says, "source": self.source,
                "class": "convention" if self.documented else "undocumented"}


@dataclass(frozen=True)
class ConventionCase:
    """What a clause's rule reads: the case's inputs and params, the kernel's forward output, the
    cotangent (None for the forward), which gradient is judged (None for the forward), and
    whether the peer's policy reads subnormal operands as zero (DAZ: rules.read applies it)."""
    inputs: tuple
    params: dict
    out: np.ndarray
    g: np.ndarray | None
    grad: int | None
    daz: bool = False


@dataclass(frozen=True)
class Convention:
    """A clause and the peer's value under it: `rule(case) -> (governed, value)`, a boolean mask
    of the output elements the clause decides and the float32 value the peer returns there, or a
    tuple of such arrays where the clause admits each of them (CUDA's fmaxf leaves the sign of a
    zero tie unspecified: +0 and -0): an element holding any one of them is explained."""
    clause: Clause
    output: str                     # "value" or "grad"
    rule: Callable[[ConventionCase], tuple[np.ndarray, np.ndarray | tuple[np.ndarray, ...]]]


def admissible(value) -> tuple[np.ndarray, ...]:
    """A rule's value as the tuple of the arrays it admits (one array: a one-tuple)."""
    return tuple(value) if isinstance(value, tuple) else (value,)


@dataclass(frozen=True)
class PolicyConvention:
    """A convention the peer entries' numerical policy states (`field` = `value`, e.g.
    subnormals = flush-to-zero): its clause and the record's `observed` counters that count the
    elements the policy admitted (conformance/error_models.py: subnormals_flushed; conformance/
    campaign.py: inputs_flushed)."""
    clause: Clause
    field: str
    value: str
    observed: tuple[str, ...]

    def holds_in(self, record: dict) -> bool:
        """Whether the record's capsule was judged under this policy."""
        policy = ((record.get("capsule") or {}).get("numerical_policy") or {})
        return policy.get(self.field) == self.value

    def count(self, record: dict) -> int:
        """The elements the policy admitted in the record (0 where it was not judged so)."""
        if not self.holds_in(record):
            return 0
        observed = record.get("observed") or {}
        return sum(n for n in (observed.get(k) for k in self.observed)
                   if isinstance(n, int) and not isinstance(n, bool) and n > 0)


@dataclass(frozen=True)
class PeerContract:
    """A peer's contract of one op: where it documents the op, the conventions it keeps, what it
    documents of the forward's accuracy (conformance/peers/accuracy.py: an ulp bound with its
    source, or undocumented), the upstream reports of its findings that were verified, and the
    conventions its entries' numerical policy states (PolicyConvention)."""
    peer: str                       # e.g. "PyTorch"
    op: str                         # the op's label
    semantics: str                  # where the peer documents the op
    conventions: tuple[Convention, ...]
    accuracy: DocumentedAccuracy = UNDOCUMENTED_ACCURACY
    upstream: tuple[Upstream, ...] = ()
    policy: tuple[PolicyConvention, ...] = ()

    def for_output(self, output: str) -> tuple[Convention, ...]:
        return tuple(c for c in self.conventions if c.output == output)
