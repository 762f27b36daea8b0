"""Every op's record (OpSpec), collected from the family modules of this package, one per
engine/ops/<family>.py and named as it, the way engine/ops/__init__.py collects the wrappers and
engine/providers/native_cuda/capsules.py the kernel declarations. A family module lists its records
in SPECS; everything the harness knows about an op (its layout, edges, value shaping, error model
facts, derived bounds, shrink focus, determinism case, guard cases) is in its record.

SPECS is the catalogue: every record in the order of their `catalogue` numbers (references.OPS
lists the same order). The other tables here are views of the records: OP_SPECS (op -> record)
and the derived-bound tables `rule_for` reads (error_models.py evaluates them; the exhaustive
sweep rebinds them to CuPy, conformance/exhaustive_judge.py).

A user's op (conformance.plugins.UserOp) gets its record from the user's contract module,
`--op-contracts module:attr` (load_contracts, register): after the built-in records, in every view
alike, so its plugin capsules meet the same campaign as a built-in op's."""
from __future__ import annotations

import os
import sys

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


# --- ops the engine does not have: a user's records ------------------------------------------------

# `--op-contracts module:attr[,module:attr...]`, as the CLI hands it to the judge's processes
CONTRACTS_ENV = "TORCHLEAN_OP_CONTRACTS"


class ContractError(Exception):
    """A user's op contract that cannot be loaded, or a record the catalogue cannot take."""


def register(spec: OpSpec) -> OpSpec:
    """Add the record of an op the engine does not have (a conformance.plugins.UserOp) to the
    catalogue and to every view of it: its capsules then meet the same audit as a built-in op's.
    The records of the engine's ops live in the family modules and are never registered here."""
    global SPECS
    from conformance.plugins import UserOp
    if not isinstance(spec, OpSpec):
        raise ContractError(f"a {type(spec).__name__} where an OpSpec was expected")
    if not isinstance(spec.op, UserOp):
        raise ContractError(f"the record of `{spec.op.label}` is the engine's own (conformance/"
                            "families/); a contract brings records of UserOps only")
    same = by_label(spec.op.label)
    if same is not None:
        if same is spec:
            return spec
        raise ContractError(f"op `{spec.op.label}` already has a record; give the new op "
                            "another name")
    reference = spec.reference
    if isinstance(reference, str) or not callable(getattr(reference, "forward", None)) or (
            spec.op.needs_vjp and not callable(getattr(reference, "vjp", None))):
        raise ContractError(f"the record of `{spec.op.label}` names no reference of its own: give "
                            "`reference=` an object (a module) with forward(inputs, **params)"
                            + (" and vjp(inputs, grad_out, **params)" if spec.op.needs_vjp
                               else ""))
    if spec.error_inputs or spec.determinism is not None:
        raise ContractError(f"the record of `{spec.op.label}` has guard cases or a determinism "
                            "case: those audit an engine wrapper and the session's capsule, which "
                            "a user's op has not")
    OP_SPECS[spec.op] = spec
    SPECS = SPECS + (spec,)
    if spec.forward_rule is not None:
        FORWARD_RULES[spec.op] = spec.forward_rule
    if spec.vjp_rule is not None:
        VJP_RULES[spec.op] = spec.vjp_rule
    for own in spec.capsule_rules:
        if own.forward is not None:
            CAPSULE_FORWARD_RULES[own.capsule] = own.forward
        if own.vjp is not None:
            CAPSULE_VJP_RULES[own.capsule] = own.vjp
    return spec


def by_label(label: str) -> OpSpec | None:
    """The record of the op named `label` (the engine's or a user's), or None."""
    return next((s for s in OP_SPECS.values() if s.op.label == label), None)


_CONTRACT_FILES: list = []      # the source files of the contract modules loaded


def contract_files() -> tuple:
    """The source files of the user's contract modules this process loaded (what the harness
    digest adds to conformance/'s own sources: they judge their ops)."""
    return tuple(_CONTRACT_FILES)


def load_contracts(specs: str | None = None) -> list[OpSpec]:
    """Import each `module:attr` of `specs` (comma-separated; default: the environment's
    CONTRACTS_ENV) and register its records: `attr` names an OpSpec, a list of them, or a
    function returning either. The modules are the user's contracts (records, references,
    bounds), imported in the judge's processes: never a kernel module."""
    import importlib
    specs = os.environ.get(CONTRACTS_ENV, "") if specs is None else specs
    loaded = []
    for item in (s.strip() for s in specs.split(",")):
        if not item:
            continue
        module_name, sep, attr = item.partition(":")
        if not sep or not module_name or not attr:
            raise ContractError(f"--op-contracts `{item}` is not of the form module:attr")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
            obj = getattr(module, attr)
        except Exception as exc:
            raise ContractError(f"--op-contracts `{item}`: {type(exc).__name__}: {exc}") from None
        source = getattr(module, "__file__", None)
        if source and source not in _CONTRACT_FILES:
            _CONTRACT_FILES.append(source)
        obj = obj() if callable(obj) and not isinstance(obj, OpSpec) else obj
        for spec in obj if isinstance(obj, (list, tuple)) else [obj]:
            loaded.append(register(spec))
    return loaded
