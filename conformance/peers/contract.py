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
    of the output elements the clause decides and the float32 value the peer returns there."""
    clause: Clause
    output: str                     # "value" or "grad"
    rule: Callable[[ConventionCase], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PeerContract:
    """A peer's contract of one op: where it documents the op, the conventions it keeps, what it
    documents of the forward's accuracy (conformance/peers/accuracy.py: an ulp bound with its
    source, or undocumented) and the upstream reports of its findings that were verified."""
    peer: str                       # e.g. "PyTorch"
    op: str                         # the op's label
    semantics: str                  # where the peer documents the op
    conventions: tuple[Convention, ...]
    accuracy: DocumentedAccuracy = UNDOCUMENTED_ACCURACY
    upstream: tuple[Upstream, ...] = ()

    def for_output(self, output: str) -> tuple[Convention, ...]:
        return tuple(c for c in self.conventions if c.output == output)
