"""mpmath references, one module per op named like the op; get(op) returns the module (forward, vjp).
A user's op (conformance.plugins.UserOp) brings its reference in its record (`OpSpec.reference`, an
object with forward and vjp, from the user's contract module)."""

import importlib
from types import ModuleType

from conformance import families
from conformance.families import SPECS

# op name -> its module here, from every op record (conformance/families/), in catalogue order
_MODULES = {spec.op.label: spec.reference for spec in SPECS}
OPS = tuple(_MODULES)


class UnknownReferenceError(KeyError):
    """No reference module exists for the requested op."""


def known(op_name: str) -> bool:
    """Whether `op_name` has a reference: one of ours, or a registered user record's."""
    return op_name in OPS or families.by_label(op_name) is not None


def get(op_name: str) -> ModuleType:
    """The reference module for op_name (with forward, and vjp unless the op is random)."""
    if op_name not in OPS:
        spec = families.by_label(op_name)
        if spec is not None and not isinstance(spec.reference, str):
            return spec.reference
        raise UnknownReferenceError(
            f"no reference for op {op_name!r}; known ops: {', '.join(OPS)}"
        )
    return importlib.import_module(f"{__name__}.{_MODULES[op_name]}")
