"""Peer contracts in the 16-bit judge: which failing results of a 16-bit kernel are its peer
keeping a convention of its own (conformance/peers/contract.py), not defects.

The contract is chosen by the plugin spec the user passed and the op the judge's reference is
chosen by (conformance/peers/contracts.lowp_contract_for): only our own peer module of PyTorch's
16-bit kernels gets PyTorch's, and a kernel audited through any other spec gets none. A result
that failed TorchLean's contract (docs/OPS.md) counts as a difference, not a failure, only where
a clause of the contract decides the element and the kernel returned exactly the peer's value
there: the same value and sign (so the same bits), or a NaN where the peer's is a NaN (the sweeps
compare no NaN payloads). Every other failing result stays a failure, a defect against the peer's
own contract too, so a wrong value where a clause governs still fails.

The peer's value: the clause's rule (conformance/peers/rules.py), PyTorch's formula in float32
on the 16-bit operands (every bfloat16 or float16 value is a float32), the cotangent and the
kernel's own forward output, then rounded once to the format: PyTorch's 16-bit kernels compute
in float32 and store the result in the tensor's 16-bit dtype. The rules of the 16-bit table read
each element alone (torch_contract.LOWP_OPS), so they are evaluated on the failing elements only:
a binary sweep's shard of 2^27 pairs judged on the GPU moves only its failures to the host.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.lowp.formats import Format
from conformance.peers.classify import differences_record
from conformance.peers.contract import ConventionCase, PeerContract, admissible

F32 = np.float32
OUTPUTS = {"forward": "value", "vjp": "grad"}    # the sweep's part -> the contract's output


def _peer_bits_equal(fmt: Format, got: np.ndarray, value) -> np.ndarray:
    """Where the kernel's values `got` (float64, of the format) are exactly the peer's float32
    `value` rounded to the format: equal with the same sign, or both NaN."""
    peer = fmt.round(np.asarray(value, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        same = (got == peer) & (np.signbit(got) == np.signbit(peer))
    return same | (np.isnan(got) & np.isnan(peer))


@dataclass
class Differences:
    """The elements a contract explained over one kernel's sweep: per clause, how many, on which
    part (forward, vjp), and the first one (its input, TorchLean's expected value, the
    kernel's)."""
    contract: PeerContract
    seen: dict[str, dict] = field(default_factory=dict)

    def explain(self, part: str, fmt: Format, inputs: list, got, failing, *, out=None,
                cotangent=None, shown=None, grad: int = 0) -> np.ndarray:
        """The failing elements (mask `failing` over `got`) that a clause of the contract for
        output OUTPUTS[part] explains, as a mask of got's shape. `inputs`: the operands' values
        (float64, got's shape), `out`: the kernel's forward output (the VJP's rules read it),
        `cotangent`: the VJP's, `grad`: which operand's gradient `got` is (a binary VJP's: 0 for
        a, 1 for b), `shown(i)`: flat element i in words (its input, TorchLean's expected value,
        the kernel's bits), the clause's example."""
        got = np.asarray(got, dtype=np.float64)
        explained = np.zeros(got.shape, dtype=bool)
        at = np.flatnonzero(np.asarray(failing, dtype=bool))
        conventions = self.contract.for_output(OUTPUTS[part])
        if at.size == 0 or not conventions:
            return explained

        def pick(a, dtype=F32):    # every value of the format is a float32 (NaN stays NaN)
            with np.errstate(invalid="ignore"):
                return np.asarray(a, dtype=np.float64).reshape(-1)[at].astype(dtype)
        kernel_values = pick(got, np.float64)
        case = ConventionCase(
            tuple(pick(x) for x in inputs), {}, pick(got if out is None else out),
            None if cotangent is None else pick(cotangent), grad if part == "vjp" else None)
        left = np.ones(at.size, dtype=bool)
        for convention in conventions:
            with np.errstate(all="ignore"):
                governed, value = convention.rule(case)
            governed = np.broadcast_to(np.asarray(governed, dtype=bool), at.shape)
            same = np.zeros(at.shape, dtype=bool)
            for v in admissible(value):    # the values the clause admits (most admit one)
                same |= _peer_bits_equal(fmt, kernel_values, np.broadcast_to(v, at.shape))
            hit = left & governed & same
            if hit.any():
                self._count(convention.clause.name, part, at[hit], shown)
                left &= ~hit
        explained.reshape(-1)[at[~left]] = True
        return explained

    def _count(self, name: str, part: str, where, shown) -> None:
        entry = self.seen.setdefault(name, {"elements": 0, "by_part": {}})
        entry["elements"] += int(where.size)
        entry["by_part"][part] = entry["by_part"].get(part, 0) + int(where.size)
        if "example" not in entry and shown is not None:
            entry["example"] = {"part": part, **shown(int(where[0]))}

    def record(self) -> dict:
        """The record's `differences` (conformance/peers/classify.differences_record): the
        contract judged against and, per clause that explained elements, its words, source,
        class (convention: documented; undocumented: only the peer's source says so) and
        counts."""
        return differences_record(self.contract, self.seen)


def merge_records(first: dict | None, second: dict | None) -> dict | None:
    """Two `differences` records of one kernel under one contract (its forward's and its binary
    VJP's sweep) as one: each clause's elements and per-part counts added, the first example
    kept."""
    if not first or not second:
        return first or second
    clauses = {name: dict(c) for name, c in first["clauses"].items()}
    for name, c in second["clauses"].items():
        if name not in clauses:
            clauses[name] = dict(c)
            continue
        mine = clauses[name]
        mine["elements"] = mine["elements"] + c["elements"]
        by_part = dict(mine.get("by_part") or {})
        for part, n in (c.get("by_part") or {}).items():
            by_part[part] = by_part.get(part, 0) + n
        mine["by_part"] = by_part
        mine.setdefault("example", c.get("example"))
    return {**first, "clauses": dict(sorted(clauses.items()))}
