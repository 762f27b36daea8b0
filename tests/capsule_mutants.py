"""A reference capsule with its forward or its VJP swapped for a wrong one, for the tests that show
the harness catches a wrong kernel (check_case must report a failure)."""
from __future__ import annotations

import dataclasses

from engine.ops import LOCAL_VJP
from engine.registry import registry
from engine.types import VJPMode


def mutant(name: str, forward=None, vjp=None):
    """(capsule, handler) of the registered capsule `name` with `forward` and/or `vjp` in place
    of its own; its VJP is declared a backend VJP, the tape's local rule where none is given."""
    cap, handler = registry().get(name)
    rule = LOCAL_VJP[cap.op]
    cap = dataclasses.replace(cap, vjp_mode=VJPMode.backend_vjp)
    return cap, dataclasses.replace(handler, forward=forward or handler.forward,
                                    vjp=vjp or (lambda i, o, g, **p: rule(i, o, g, **p)))
