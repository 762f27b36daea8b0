"""A peer's documented accuracy, and the class of every failing element a convention does not
explain: a defect against the peer's own contract, or accuracy the peer does not document.

A peer contract (conformance/peers/contract.py) holds, beside its conventions, the op's
documented accuracy: an ulp bound where the peer's documentation, or the function its source
shows the kernel calling, states one (PyTorch's CUDA `torch.exp` calls `expf`, for which the CUDA
C++ Programming Guide, "Mathematical Functions", lists 2 ulp), else "undocumented" (PyTorch gives
formulas, never an accuracy, for sigmoid, softmax, layer_norm, gelu, mse_loss, ...; JAX documents
none; CuPy none of its own, its ufuncs calling the same CUDA functions as PyTorch's kernels). The
bound covers the forward value only: no peer documents the accuracy of a gradient.

The rule, per element that failed TorchLean's contract and that no clause explained (classify.py
runs first), from the judge's own comparison (its reason, the kernel's value, the exact value and
the distance in ulps of the correctly rounded value), never from anything the kernel process says:

1. Defect, semantics: a NaN or an infinity where the exact value is a number, or the reverse
   (nan-mismatch, inf-mismatch); an element never written (poison-in-output); a value other
   than the exact one where TorchLean's model is bitwise (not-bitwise: relu, abs, max, min, clamp,
   the shape and indexing ops select or copy a value, and their documentation says which).
2. Defect, no correct digit: |got - exact| >= |exact| (relative error 1 or more). This covers a
   wrong sign, a zero where the exact value is a normal number, a nonzero where it is zero, a
   value off by its own magnitude (the tanh-GELU forward near x = -2.2 that the issue cites) and
   a subnormal result flushed to zero: its relative error is exactly 1. PyTorch documents no flush
   on CUDA (nvcc's default is -ftz=false, and torch.set_flush_denormal is CPU only), so a flushed
   sigmoid(-100) is not a policy the peer states; it is a result with no digit of the value, and
   a defect, as the issue's author holds. A signed-zero mismatch (a zero where the exact value is
   zero) has no error: rule 3. A peer whose kernels do flush by their own rule declares it in its
   entries' numerical policy (CuPy's -ftz=true: subnormal=flush-to-zero, a contract.
   PolicyConvention); the error model then admits its flushed results, and results computed
   from subnormal operands read as zero, before any element reaches these rules.
   For an element that is a difference of far larger terms (layer_norm's and batch_norm's
   normalized values, log_softmax's log-probabilities), the error is measured against those
   terms' scale instead (|got - exact| >= max(|exact|, scale)): a float32 evaluation of the
   documented formula rounds the terms before they cancel, so a tiny exact value can keep no
   digit without any defect (conformance/peers/operand_scale.py says why and which ops).
3. Defect, documented bound: the op's documented bound b (value output only) and the distance
   from the correctly rounded value over b + 1 ulps. The bound is measured from the exact value;
   the rounded reference is within half an ulp of it, and the other half covers the ulp unit
   halving below a power of two: the margin only makes the rule slower to call a defect. A 0-ulp
   bound (IEEE add, mul, division, sqrt: correctly rounded) has no margin: its one admissible
   value is the correctly rounded one, so any other is a violation.
4. Otherwise undocumented accuracy: exceeds TorchLean's bound (exceeds-bound,
   not-correctly-rounded, signed-zero) where the peer states nothing and the result keeps a
   correct digit. Listed with its measured figure (elements, worst ulps, worst error / TorchLean's
   bound), not a failure, not a defect; the element is marked passed as a convention is.

A record whose failing elements were all conventions or undocumented accuracy passes, with both
listed in its `differences`, and earns no trust in TorchLean's terms (conformance/trust.py); any
defect, and every whole-case failure (raised, shape, mutated input, VJP identity, repeatability),
keeps it `failed`. The contract, and so the bound, is chosen by the plugin spec the user gave
(contracts.py), as conventions are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance import error_models as E

DEFECT, CONVENTION, UNDOCUMENTED = "defect", "convention", "undocumented"
BOUND_MARGIN_ULPS = 1.0        # rule 3's margin (module docstring)
CUDA_GUIDE = ("https://docs.nvidia.com/cuda/cuda-c-programming-guide/"
              "#single-precision-floating-point-functions")

_CODE = {r: i for i, r in enumerate(E.REASONS)}
# rule 1 by reason alone
SEMANTIC_REASONS = (E.NAN_MISMATCH, E.INF_MISMATCH, E.POISON_IN_OUTPUT, E.NOT_BITWISE)
# rules 2-4 decide these by the measured error
ACCURACY_REASONS = (E.EXCEEDS_BOUND, E.NOT_CORRECTLY_ROUNDED, E.SIGNED_ZERO, E.FLUSHED_SUBNORMAL)


@dataclass(frozen=True)
class DocumentedAccuracy:
    """What a peer documents about an op's forward accuracy: `ulps` (None: undocumented), the
    function that bound is stated for, where it is stated, and where the peer's source shows its
    kernel calling that function ('' where the peer's own page states it)."""
    ulps: float | None = None
    function: str = ""
    source: str = ""
    calls: str = ""

    @property
    def documented(self) -> bool:
        return self.ulps is not None

    def in_words(self) -> str:
        if not self.documented:
            return "undocumented"
        what = f"{self.function}: " if self.function else ""
        return f"{what}{self.ulps:g} ulp"

    def to_json(self) -> dict:
        return {"ulps": self.ulps, "function": self.function, "source": self.source,
                "calls": self.calls, "class": "documented" if self.documented else UNDOCUMENTED}


UNDOCUMENTED_ACCURACY = DocumentedAccuracy()


def cuda_function(name: str, ulps: float, calls: str) -> DocumentedAccuracy:
    """The bound the CUDA C++ Programming Guide lists for float32 function `name`, for an op whose
    kernel calls it (`calls`: the peer's source that shows so)."""
    return DocumentedAccuracy(ulps, name, CUDA_GUIDE, calls)


@dataclass(frozen=True)
class Upstream:
    """A report of a finding upstream: which output ("value" or "grad") and reason (without the
    `vjp-` prefix) it covers, where the inputs are non-finite only or anywhere ("infinite",
    "any"), the reference (owner/repo#n) and what it reports. Only reports read and verified are
    listed (torch_contract.py, UPSTREAM)."""
    output: str
    reason: str
    inputs: str
    reference: str
    says: str

    def covers(self, output: str, reason: str, inputs: list[float]) -> bool:
        if (output == "value") != (self.output == "value") or reason != self.reason:
            return False
        return self.inputs == "any" or any(np.isinf(x) for x in inputs)

    def to_json(self) -> dict:
        return {"reference": self.reference, "url": self.url, "says": self.says}

    @property
    def url(self) -> str:
        repo, _, n = self.reference.partition("#")
        return f"https://github.com/{repo}/issues/{n}"


def relative_error(got, exact) -> np.ndarray:
    """|got - exact| / |exact| in float64: 0 where both are zero (a zero's sign carries no error),
    inf where only the exact value is zero; an infinite got is infinitely far."""
    got = np.asarray(got, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rel = np.abs(got - exact) / np.abs(exact)
    rel = np.where((got == 0) & (exact == 0), 0.0, rel)
    return np.where(np.isnan(rel), np.inf, rel)


def classes(reasons, got, exact, ulps, bound_ulps: float | None,
            scale=None) -> tuple[np.ndarray, np.ndarray]:
    """(defect, undocumented) masks for failing elements with base reason names `reasons` (an
    array of str), the kernel's values, the exact values and the ulps from the rounded reference;
    `bound_ulps` the documented bound of this output (None: undocumented); `scale` the terms'
    scale of each element where it is a difference of larger terms (operand_scale.py; None: the
    result's own). The module docstring's rules 1-4; every element is in exactly one of the
    two."""
    reasons = np.asarray(reasons, dtype=object)
    accuracy = np.isin(reasons, ACCURACY_REASONS)
    no_digit = relative_error(got, exact) >= 1.0
    if scale is not None:     # rule 2 at the terms' scale: an error below it keeps their digits
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(np.asarray(got, np.float64) - np.asarray(exact, np.float64))
            no_digit &= ~(err < np.asarray(scale, dtype=np.float64))
    ulps = np.asarray(ulps, dtype=np.float64)
    over = np.zeros(reasons.shape, dtype=bool) if bound_ulps is None else \
        ~(np.nan_to_num(ulps, nan=np.inf) <= bound_ulps + margin(bound_ulps))
    undocumented = accuracy & ~no_digit & ~over
    return ~undocumented, undocumented


def margin(bound_ulps: float) -> float:
    """Rule 3's margin: none for a 0-ulp (correctly rounded) bound, whose one admissible value is
    the rounded reference itself; else BOUND_MARGIN_ULPS."""
    return 0.0 if bound_ulps == 0 else BOUND_MARGIN_ULPS


def bound_for(contract, output: str) -> float | None:
    """The documented bound that judges `output` ("value" or "grad"): only the forward's."""
    accuracy = getattr(contract, "accuracy", UNDOCUMENTED_ACCURACY)
    return accuracy.ulps if output == "value" else None


def settle(contract, output: str, verdict: E.Verdict, got, exact, scale=None) -> dict | None:
    """Mark passed the failing elements of `verdict` that are undocumented accuracy (module
    docstring), after classify.explain took the conventions (`scale`: the forward's terms' scale,
    operand_scale.py, or None); returns their measured figure
    ({"elements", "worst_ulps", "worst_ratio", "reasons"}) or None where there were none. The
    defects stay failing."""
    failing = ~verdict.ok
    if not failing.any():
        return None
    got = np.broadcast_to(np.asarray(got, dtype=np.float32), verdict.ok.shape)
    exact = np.broadcast_to(np.asarray(exact, dtype=np.float64), verdict.ok.shape)
    names = np.array(E.REASONS, dtype=object)[verdict.reason[failing].astype(int)]
    terms = None if scale is None else np.broadcast_to(scale, verdict.ok.shape)[failing]
    _, undocumented = classes(names, got[failing], exact[failing], verdict.ulps[failing],
                              bound_for(contract, output), terms)
    if not undocumented.any():
        return None
    where = np.zeros(verdict.ok.shape, dtype=bool)
    where[failing] = undocumented
    figure = {"elements": int(np.count_nonzero(where)),
              "worst_ulps": _worst(verdict.ulps[where]),
              "worst_ratio": _worst(verdict.ratio[where]),
              "reasons": {str(r): int(n) for r, n in zip(*np.unique(
                  names[undocumented].astype(str), return_counts=True))}}
    verdict.ok[where] = True
    verdict.reason[where] = _CODE[E.OK]
    for a in (verdict.err, verdict.ratio, verdict.ulps):
        a[where] = 0.0
    return figure


def _worst(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.max()) if v.size else 0.0


def merge(total: dict, figure: dict) -> None:
    """Fold one output's figure (settle's) into the record's running account."""
    total["elements"] = total.get("elements", 0) + figure["elements"]
    total["worst_ulps"] = max(total.get("worst_ulps", 0.0), figure["worst_ulps"])
    total["worst_ratio"] = max(total.get("worst_ratio", 0.0), figure["worst_ratio"])
    reasons = total.setdefault("reasons", {})
    for r, n in figure["reasons"].items():
        reasons[r] = reasons.get(r, 0) + n
