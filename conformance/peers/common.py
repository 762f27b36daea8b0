"""What the peer modules (torch_cuda.py, jax_xla.py, cupy_peer.py) share: a float parameter
rounded to float32, our default capsule of an op (the one whose policy and bound a peer entry
declares) and the reduction order a peer that documents none is held to.

A peer module runs in the kernel process (it is a `--plugin` module): this one imports only the
engine, never a judge module (conformance/isolation/kernel_host.py, JUDGE_MODULES)."""
from __future__ import annotations

import dataclasses

from engine.capsule import KernelCapsule
from engine.types import BackendOp, Device, NumericalPolicy, Provider, Reduction


def f32(x) -> float:
    """A float parameter rounded to float32 first (docs/OPS.md, calling convention)."""
    import numpy as np
    return float(np.float32(x))


def default_capsule(op: BackendOp, device: Device, providers: tuple[Provider, ...],
                    capsules: list[KernelCapsule]) -> KernelCapsule | None:
    """Our default capsule of `op` on `device` among `providers`: the first registered one that is
    not a variant (`*.accurate`, KernelCapsule.variant), else the first variant, else None."""
    ours = [c for c in capsules if c.op is op and c.device is device and c.provider in providers]
    plain = [c for c in ours if c.variant is None]
    return (plain or ours or [None])[0]


def any_order(policy: NumericalPolicy) -> NumericalPolicy:
    """`policy` with a fixed reduction order (fixed-left, fixed-tree) replaced by
    implementation-defined: a peer that documents no order is held to the bound every order meets,
    not to our order's bits."""
    if policy.reduction in (Reduction.fixed_left, Reduction.fixed_tree):
        return dataclasses.replace(policy, reduction=Reduction.implementation_defined)
    return policy
