"""A KernelCapsule as plain data and back, so a capsule a plugin defines reaches the judge without
the judge importing the plugin or unpickling anything. Only the engine's own record types and a
plugin's UserOp (a label) are rebuilt (ALLOWED); a value of any other type, an unknown enum member or a bad name is refused
with CapsuleDataError. The rebuilt capsule validates itself as any capsule does (its name)."""
from __future__ import annotations

import dataclasses
import enum

from conformance.plugins import UserOp
from engine import types as T
from engine.capsule import KernelCapsule

# the engine's record types, and a user's op (its label: the judge finds its contract by it)
ALLOWED = {c.__name__: c for c in (
    KernelCapsule, T.BackendOp, T.RuntimeEntry, T.Provider, T.Device, T.TrustLevel, T.VJPMode,
    T.Rounding, T.Subnormals, T.Contraction, T.Reduction, T.NumericalPolicy, T.ClaimKind,
    T.Claim, T.Evidence, T.Provenance, T.DeclaredBound, T.ContractDescriptor, UserOp)}


class CapsuleDataError(Exception):
    """A capsule description that does not rebuild into a KernelCapsule of the engine's types."""


def to_data(x):
    if isinstance(x, enum.Enum):
        return {"enum": type(x).__name__, "value": x.value}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"record": type(x).__name__,
                "fields": {f.name: to_data(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise CapsuleDataError(f"a capsule field of type {type(x).__name__} cannot be described")


def from_data(x, depth: int = 0):
    if depth > 16:
        raise CapsuleDataError("a capsule description nested too deeply")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if not isinstance(x, dict):
        raise CapsuleDataError(f"a {type(x).__name__} where a capsule field was expected")
    name = x.get("enum", x.get("record"))
    cls = ALLOWED.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CapsuleDataError(f"type {name!r} is not one of the engine's capsule types")
    if "enum" in x:
        if not issubclass(cls, enum.Enum):
            raise CapsuleDataError(f"{name} is not an enum")
        try:
            return cls(x.get("value"))
        except ValueError:
            raise CapsuleDataError(f"{x.get('value')!r} is not a {name}") from None
    if not dataclasses.is_dataclass(cls) or not isinstance(x.get("fields"), dict):
        raise CapsuleDataError(f"{name} is not a record or has no fields")
    known = {f.name for f in dataclasses.fields(cls)}
    fields = x["fields"]
    if not set(fields) <= known:
        raise CapsuleDataError(f"{name} has no field(s) {sorted(set(fields) - known)}")
    try:
        return cls(**{k: from_data(v, depth + 1) for k, v in fields.items()})
    except CapsuleDataError:
        raise
    except Exception as exc:   # the record's own validation (e.g. a capsule name)
        raise CapsuleDataError(f"{name}: {type(exc).__name__}: {exc}") from None


def capsule_from_data(data) -> KernelCapsule:
    cap = from_data(data)
    if not isinstance(cap, KernelCapsule):
        raise CapsuleDataError(f"a {type(cap).__name__} where a KernelCapsule was expected")
    return cap
