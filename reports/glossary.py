"""One line per numerical-policy value: what it lets a result do (TRUST_BOUNDARIES.md, "Floating
point", says it at length; conformance/error_models.py turns it into bounds); and what to do about a
record status that is no kernel verdict."""
from __future__ import annotations

NUMERICAL_POLICY = {
    "rounding": {
        "nearest-even": "correctly rounded ops must equal the correctly rounded reference",
        "scalar-context": "the scalar context's default, nearest-even: judged the same way",
        "directed": "faithful (within 1 ulp); unit roundoff doubled in sum bounds",
        "implementation-defined": "within 2 ulp (CUDA's approximate division); unit roundoff "
                                  "doubled in sum bounds",
        "unspecified": "within 2 ulp (CUDA's approximate division); unit roundoff doubled in "
                       "sum bounds",
    },
    "subnormals": {
        "gradual-underflow": "subnormal results must be kept; flushing one fails",
        "flush-to-zero": "a subnormal may become a same-signed zero; bounds add 2n·2^-126",
        "implementation-defined": "a subnormal may become a same-signed zero; bounds add 2n·2^-126",
        "unspecified": "a subnormal may become a same-signed zero; bounds add 2n·2^-126",
    },
    "contraction": {
        "separate": "each product rounds before it is added",
        "fused": "product and add round once (FMA)",
        "implementation-defined": "fused or separate, element by element",
        "unspecified": "fused or separate, element by element",
        "n/a": "the op has no multiply-add",
    },
    "reduction": {
        "fixed-left": "a left fold: gamma_(n-1) bound, and the fold's exact bits, every run",
        "fixed-tree": "a fixed tree: gamma_(ceil log2 n) bound, the same bits every run",
        "implementation-defined": "any order, FMA included: gamma_n bound; bits may vary by run",
        "unspecified": "any order, FMA included: gamma_n bound; bits may vary by run",
        "n/a": "the op does not reduce",
    },
}


def numerical_policy_meaning(field: str, value: str) -> str:
    return NUMERICAL_POLICY.get(field, {}).get(value, "not a known value of this field")


# Shown beside the status on the index (on hover) and on the capsule page.
STATUS_HINTS = {
    "interrupted": "rerun; resume re-runs it",
    "harness-error": "a harness defect, not a kernel verdict: report it, the record earns nothing",
}
# The generator class whose cases are one fixed set (the edge set an op's record builds, edges.py).
FIXED_CLASS = "edges"
FIXED_CLASS_LABEL = "fixed edge set (same for every seed)"
