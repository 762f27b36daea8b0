"""Run as a script by tests/test_mpmath_backends.py, once per mpmath backend (MPMATH_NOGMPY=1 forces
the pure-Python one): every op's reference, forward and VJP, on the first case of each generator
class at seed 0, fast paths on (as the campaign runs them: what they leave takes the mpmath path);
the softmax family's (whose row fast paths build raw mpf values of their own) at seeds 1-5 too;
and every op's seed-0 cases again with the fast paths off. Prints one JSON object: the backend
and, per op and pass, a SHA-256 of every value's and exact array's bits (or of the refusal's
message)."""
from __future__ import annotations

import hashlib
import json
import warnings

import mpmath.libmp
import numpy as np

from conformance import generators
from conformance.references import OPS, get
from conformance.references._common import ReferenceInputError
from conformance.references.fast import exact_only
from engine.types import BackendOp, RuntimeEntry

_OPS = {op.label: op for op in (*BackendOp, *RuntimeEntry)}
# conformance/references/fast/rows.py's Ziv fallbacks build raw mpf values: seed 0's first cases
# do not reach the one that failed under gmpy2 (log_softmax's "wide" class does at seeds 3 and 4)
ROW_OPS = ("softmax", "log_softmax", "hard_masked_softmax", "cross_entropy")


def _feed(h, ref) -> None:
    for arr in (ref.value, ref.exact):
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())


def digest(label: str, seeds=(0,)) -> str:
    op, module = _OPS[label], get(label)
    h = hashlib.sha256()
    for seed, cls in ((s, c) for s in seeds for c in generators.classes_for(op)):
        case = generators.draw_case(op, seed, cls, 0)
        try:
            ref = module.forward(case.inputs, **case.params)
        except ReferenceInputError as exc:
            h.update(f"refused {exc}".encode())
            continue
        _feed(h, ref)
        if getattr(module, "vjp", None) is None:
            continue
        g = generators.cotangent_for(op, seed, cls, 0, ref.value.shape)
        for grad in module.vjp(case.inputs, g, **case.params):
            if grad is not None:
                _feed(h, grad)
    return h.hexdigest()


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)
    labels = [label for label in OPS if label in _OPS]
    out = {"backend": mpmath.libmp.BACKEND, "ops": {}, "exact_only": {}}
    for label in labels:
        out["ops"][label] = digest(label, range(6) if label in ROW_OPS else (0,))
    with exact_only():
        for label in labels:
            out["exact_only"][label] = digest(label)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
