"""Digests of every case the harness draws, per op: the campaign's cases (inputs, params, input
offsets, cotangent, identity stream) per seed, with each case's sibling (its values and cotangent
stream) on seed 0, the determinism audit's case, and the guard suite's error inputs (plus one
digest for the guard cases about no single op). Keyed by op, so a new op adds keys and changes
none.
A refactor of the harness must leave them byte for byte the same:

    python scripts/case_digest.py > before.json   # on the old tree
    python scripts/case_digest.py > after.json    # on the new tree
    cmp before.json after.json

tests/test_case_stream_digest.py checks the committed fixtures/case_digests.json the same way.
`--seeds N` (default 3) and `--cases K` (cases per seeded class, default 2, the campaign's) pick
the span; the fixed edge set is always whole."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _feed(h, value) -> None:
    """Every byte and every type that decides a case: arrays by dtype, shape and bytes; params by
    key order and repr."""
    if isinstance(value, np.ndarray):
        h.update(f"nd{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value):
            h.update(repr(k).encode())
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, (tuple, list)):
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        for v in value:
            _feed(h, v)
        h.update(b")")
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())


def campaign_digests(seeds: int, cases: int) -> dict:
    from conformance import generators as G
    return {op.label: op_digests(op, seeds, cases)
            for op in sorted(G.OP_SPECS, key=lambda o: o.label)}


def op_digests(op, seeds: int, cases: int) -> dict:
    """seed -> the digest of every case of `op` on that seed (campaign_digests' entry of one op)."""
    from conformance import generators as G
    per_seed = {}
    for seed in range(seeds):
        h = hashlib.sha256()
        for cls in G.classes_for(op):
            for i in range(G.class_size(op, cls, cases)):
                case = G.draw_case(op, seed, cls, i)
                # the cotangent's shape is the op's output shape; its stream is checked on
                # a fixed probe shape (the output shape follows the op, not the harness)
                _feed(h, (cls, i, case.inputs, case.params, case.terms, case.elements,
                          G.identity_rng(op, seed, cls, i).random(4),
                          G.cotangent_for(op, seed, cls, i, (7,)), case.offsets))
                if seed == 0:   # the siblings' streams, on one seed (they cost a draw each)
                    sibling = G.draw_sibling(op, seed, cls, i)
                    _feed(h, (sibling.inputs, sibling.params, sibling.offsets,
                              G.sibling_cotangent(op, seed, cls, i, (7,))))
        per_seed[str(seed)] = h.hexdigest()
    return per_seed


def determinism_digests() -> dict:
    """op -> digest of its determinism-audit case (the cases share one random stream, drawn in
    their records' turn order: a new op's case comes last and leaves the others alone)."""
    from conformance import determinism
    cases = determinism.audit_cases(np.random.default_rng(determinism._RNG_SEED))
    out = {}
    for op, case in cases.items():
        h = hashlib.sha256()
        _feed(h, (op.label, case))
        out[op.label] = h.hexdigest()
    return out


def guard_digests() -> dict:
    """The guard suite's cases: op -> digest of that op's error inputs (rank, name, check, error
    class, message regex), and "cross-cutting" for the cases about no single op."""
    from conformance import guards
    from conformance.families import SPECS
    out = {}
    for spec in SPECS:
        if spec.error_inputs:
            h = hashlib.sha256()
            for e in spec.error_inputs:
                _feed(h, (e.rank, e.name, e.check, e.error.__name__, e.message))
            out[spec.op.label] = h.hexdigest()
    h = hashlib.sha256()
    for c in guards._cross_cutting_cases():
        _feed(h, (c.name, c.check, c.error.__name__, c.message, c.launches_allowed))
    out["cross-cutting"] = h.hexdigest()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--cases", type=int, default=2)
    a = p.parse_args(argv)
    doc = {"seeds": a.seeds, "cases": a.cases, "numpy": np.__version__,
           "campaign": campaign_digests(a.seeds, a.cases),
           "determinism": determinism_digests(), "guards": guard_digests()}
    print(json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
