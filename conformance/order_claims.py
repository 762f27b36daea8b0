"""A capsule's fixed-order claim held against its op's record: the program of the declared order
(OpSpec.fixed_order, conformance/orders.py) replays it bit for bit, the record says why it can only
be held to bitwise repeatability (OpSpec.order_repeat_only), or the claim is unchecked and the
campaign fails it as `unchecked-order-claim`."""
from __future__ import annotations

import numpy as np

from conformance.families import OP_SPECS
from conformance.orders import LEFT, TREE, fused_options


def ordered_results(op, policy, inputs, params) -> list[np.ndarray] | None:
    """The float32 results the declared fixed order allows (one per admissible contraction), or
    None when the policy fixes no order or this op has no order program."""
    if _undefined(op, policy) is not None:
        return None
    return OP_SPECS[op].fixed_order.run(inputs, params, policy.reduction, fused_options(policy))


def _undefined(op, policy) -> str | None:
    """Why no program replays the policy's order for `op` ("" when the policy fixes no order),
    or None when one does."""
    order = policy.reduction
    if order not in (LEFT, TREE):
        return ""
    spec = OP_SPECS.get(op)
    if spec is None or spec.fixed_order is None:
        return f"op `{op.label}` has no order program"
    defines = spec.fixed_order.defines
    if order not in defines:
        return f"the program of `{op.label}` replays {', '.join(o.label for o in defines)} only"
    if True in fused_options(policy) and not defines[order]:
        return (f"the {order.label} program of `{op.label}` rounds every product: no fused "
                f"{order.label} order is defined")
    return None


def unchecked_claim(op, policy) -> str | None:
    """Why a capsule's declared fixed order would pass unchecked (the campaign fails it as
    `unchecked-order-claim`), or None: no fixed order, a program replays it, or the op's record
    holds such an order to bitwise repeatability alone (OpSpec.order_repeat_only)."""
    why = _undefined(op, policy)
    spec = OP_SPECS.get(op)
    if not why or (spec is not None and spec.order_repeat_only):
        return None
    return (f"the capsule declares reduce={policy.reduction.label}, "
            f"contract={policy.contraction.label} for `{op.label}`, but {why}: the claim would "
            "pass unchecked. Declare reduce=implementation-defined (the value is still judged "
            "against the any-order bound), or a contraction the program replays, or add the "
            "order's program to conformance/orders.py and the op's record")


def repeat_only_reason(op, policy) -> str | None:
    """The op record's reason when the declared fixed order is held to repeatability alone."""
    spec = OP_SPECS.get(op)
    if _undefined(op, policy) and spec is not None and spec.order_repeat_only:
        return spec.order_repeat_only
    return None


def claim_check(op, policy) -> str:
    """How the campaign holds the capsule's order claim, for the evidence record: "no fixed
    order", "program" (bit for bit against the order's program), "repeatability only: <why>", or
    "unchecked" (failed as unchecked-order-claim)."""
    why = _undefined(op, policy)
    if why is None:
        return "program"
    if why == "":
        return "no fixed order"
    reason = repeat_only_reason(op, policy)
    return f"repeatability only: {reason}" if reason else "unchecked"
