"""mpmath references, one module per op named like the op; get(op) returns the module (forward, vjp)."""

import importlib
from types import ModuleType

from conformance.families import SPECS

# op name -> its module here, from every op record (conformance/families/), in catalogue order
_MODULES = {spec.op.label: spec.reference for spec in SPECS}
OPS = tuple(_MODULES)


class UnknownReferenceError(KeyError):
    """No reference module exists for the requested op."""


def get(op_name: str) -> ModuleType:
    """The reference module for op_name (with forward, and vjp unless the op is random)."""
    if op_name not in OPS:
        raise UnknownReferenceError(
            f"no reference for op {op_name!r}; known ops: {', '.join(OPS)}"
        )
    return importlib.import_module(f"{__name__}.{_MODULES[op_name]}")
