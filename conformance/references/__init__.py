"""mpmath references, one module per op named like the op; get(op) returns the module (forward,
vjp); the unary functions of FUNCTIONS (no op of the engine's) have one too, forward only.
A user's op (conformance.plugins.UserOp) brings its reference in its record (`OpSpec.reference`, an
object with forward and vjp, from the user's contract module)."""

import importlib
from types import ModuleType

from conformance import families
from conformance.families import SPECS

# op name -> its module here, from every op record (conformance/families/), in catalogue order
_MODULES = {spec.op.label: spec.reference for spec in SPECS}
OPS = tuple(_MODULES)
# Unary functions the engine has no op for, with a reference here all the same: the exhaustive
# sweep's ulp table judges other libraries' rsqrt, erf and exact GELU (docs/EXHAUSTIVE.md). A
# plugin's capsule names one as conformance.plugins.UserOp(label, needs_vjp=False). Forward only.
FUNCTIONS = ("rsqrt", "erf", "gelu_erf")


class UnknownReferenceError(KeyError):
    """No reference module exists for the requested op."""


def known(op_name: str) -> bool:
    """Whether `op_name` has a reference: one of ours, a registered user record's, or one of
    FUNCTIONS."""
    return op_name in OPS or families.by_label(op_name) is not None or op_name in FUNCTIONS


def get(op_name: str) -> ModuleType:
    """The reference module for op_name (with forward, and vjp unless the op is random)."""
    if op_name not in OPS:
        spec = families.by_label(op_name)
        if spec is not None and not isinstance(spec.reference, str):
            return spec.reference
        if op_name in FUNCTIONS:    # after a user's record: a contract of the user's judges it
            return importlib.import_module(f"{__name__}.{op_name}")
        raise UnknownReferenceError(
            f"no reference for op {op_name!r}; known ops: {', '.join(OPS)}; functions without "
            f"an op: {', '.join(FUNCTIONS)}"
        )
    return importlib.import_module(f"{__name__}.{_MODULES[op_name]}")
