"""Every op's record (OpSpec), collected from the family modules of this package, one per
engine/ops/<family>.py and named as it, the way engine/ops/__init__.py collects the wrappers and
engine/providers/native_cuda/capsules.py the kernel declarations. A family module lists its records
in SPECS; everything the harness knows about an op (its layout, edges, value shaping, error model
facts, derived bounds, shrink focus, determinism case, guard cases) is in its record.

SPECS is the catalogue: every record in the order of their `catalogue` numbers (references.OPS
lists the same order). The other tables here are views of the records: OP_SPECS (op -> record)
and the derived-bound tables `rule_for` reads (error_models.py evaluates them; the exhaustive
sweep rebinds them to CuPy, conformance/exhaustive_judge.py)."""
from __future__ import annotations

from conformance.error_terms import DerivedRule
from conformance.families import (attention, attention_heads, conv, elementwise, fused, indexing,
                                  linalg, normalization, pooling, random, reduction, scan, shape,
                                  softmax, spectral)
from conformance.families.spec import OpSpec

# engine/ops/__init__.py's family order
FAMILIES = (elementwise, shape, reduction, indexing, linalg, softmax, normalization, attention,
            random, spectral, scan, pooling, conv, fused, attention_heads)


def _collect(families) -> tuple[OpSpec, ...]:
    """The records of every family, in catalogue order; an op declared twice, or two records at
    one place of the catalogue, is an error that names both."""
    seen: dict = {}
    places: dict = {}
    for family in families:
        for spec in family.SPECS:
            name = family.__name__.rsplit(".", 1)[-1]
            if spec.op in seen:
                raise ValueError(f"op `{spec.op.label}` has two records: in families/"
                                 f"{seen[spec.op]}.py and families/{name}.py")
            if spec.catalogue is not None and spec.catalogue in places:
                raise ValueError(f"ops `{places[spec.catalogue]}` and `{spec.op.label}` both "
                                 f"take catalogue place {spec.catalogue}; give the new one the "
                                 "next free number")
            seen[spec.op] = name
            places[spec.catalogue] = spec.op.label
    ordered = [s for f in families for s in f.SPECS]
    return tuple(sorted(ordered, key=lambda s: (s.catalogue is None, s.catalogue or 0)))


SPECS: tuple[OpSpec, ...] = _collect(FAMILIES)
OP_SPECS: dict = {s.op: s for s in SPECS}

# The derived bounds by op and by capsule: views of the records' forward_rule, vjp_rule and
# capsule_rules, plain dicts so that exhaustive_judge rebinds them with the function reading them.
FORWARD_RULES: dict = {s.op: s.forward_rule for s in SPECS if s.forward_rule is not None}
VJP_RULES: dict = {s.op: s.vjp_rule for s in SPECS if s.vjp_rule is not None}
CAPSULE_FORWARD_RULES: dict = {c.capsule: c.forward for s in SPECS for c in s.capsule_rules
                               if c.forward is not None}
CAPSULE_VJP_RULES: dict = {c.capsule: c.vjp for s in SPECS for c in s.capsule_rules
                           if c.vjp is not None}


def rule_for(op, capsule: str | None = None, vjp: bool = False) -> DerivedRule | None:
    """The derived rule of a capsule's value (vjp False) or gradient: its own, else its op's."""
    own = (CAPSULE_VJP_RULES if vjp else CAPSULE_FORWARD_RULES).get(capsule)
    return own if own is not None else (VJP_RULES if vjp else FORWARD_RULES).get(op)
