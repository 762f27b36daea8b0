"""JAX's kernels of our ops (jax.numpy and jax.nn, compiled by XLA), audited beside ours:
`torchlean-conformance run --device cpu|cuda --plugin conformance.peers.jax_xla:ENTRIES`.

One entry `xla.<op>` per op of JAX_OPS that has a capsule of ours on the run's device (the
reference provider's on cpu; native_cuda's, cublas's or cufft's on cuda), declaring that capsule's
numerical policy and bound, so verdicts are on our scale. Each function is what a JAX user writes
for the op's contract (docs/OPS.md): `jax.nn.gelu(approximate=True)`, `jnp.clip` for clamp,
`jnp.log(jnp.maximum(a, eps))` for safe_log. The VJP is `jax.vjp` of the same function: XLA's
backward kernels are audited too. Each entry's policy is ours but where JAX's is its own
(jax_policy: subnormals flushed on the CPU, reductions in any order). On cpu JAX's CPU backend
runs them on copies of the harness's NumPy arrays, placed on JAX's CPU device (a CUDA build of
jaxlib would put them on its default device, the GPU); on cuda its GPU backend, through DLPack
(copying a view that is not 16-byte aligned, which XLA cannot take: XLA_ALIGNMENT).
float64 stays off (JAX's default); matmul asks for precision "highest" (on an Ampere or later GPU
JAX's default precision computes float32 products in TF32, as PyTorch's peer turns off too).
JAX's GPU client is told not to preallocate (XLA_PYTHON_CLIENT_PREALLOCATE=false, unless the user
set it): by default it takes 75% of the GPU's memory at its first use, leaving the harness's CuPy
allocations and the other kernel processes of a `--jobs` run the rest.
"""
from __future__ import annotations

import dataclasses
import os

from conformance.peers.common import any_order, default_capsule
from conformance.peers.expressions import JAX, functions
from conformance.plugins import PluginEntry, PluginError
from engine.capsule import KernelCapsule, standard_capsule
from engine.types import (BackendOp as Op, Device, NumericalPolicy, Provider, Subnormals,
                          TrustLevel, VJPMode)

SOURCE = "conformance/peers/jax_xla.py"
INSTALL = ("install JAX (pip install jax; on a GPU the CUDA build, pip install 'jax[cuda13]', and "
           "CuPy for --device cuda)")
JAX_OPS = (Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.scale, Op.abs, Op.sqrt, Op.relu, Op.clamp,
           Op.gelu, Op.sigmoid, Op.tanh, Op.softplus, Op.exp, Op.log, Op.sin, Op.cos, Op.inv,
           Op.safe_log, Op.softmax, Op.log_softmax, Op.reduce_sum, Op.reduce_mean, Op.mse_loss,
           Op.matmul)


OUR_PROVIDERS = (Provider.reference, Provider.native_cuda, Provider.cublas, Provider.cufft)
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


def require_jax():
    # read when JAX creates its GPU client (at first use): set before jax is imported, in the
    # process that runs the kernels (this plugin module runs in the kernel process)
    os.environ.setdefault(PREALLOCATE, "false")
    try:
        import jax
        import jax.numpy  # noqa: F401
    except ImportError as exc:
        raise PluginError(f"conformance.peers.jax_xla audits JAX's kernels, but jax is not "
                          f"importable ({exc}); {INSTALL}") from None
    return jax


def jax_functions(jax) -> dict:
    """Op -> JAX function of the op's inputs and parameters (docs/OPS.md), for every op of
    JAX_OPS: compiled from conformance/peers/expressions.py's JAX table, whose text the
    reproducers (reproducer.py) copy, so both call the same expression."""
    import numpy as np
    fns = functions(JAX, {"jax": jax, "np": np}, [op.label for op in JAX_OPS])
    return {op: fns[op.label] for op in JAX_OPS}


# XLA's GPU executables demand inputs at addresses that are multiples of 16 bytes (every buffer
# JAX allocates is). jax.dlpack.from_dlpack takes a CuPy view at any address without a word, and
# the computation then fails ("INTERNAL: Address of buffer 1 must be a multiple of 10" [hex]) or
# kills the process with SIGSEGV: JAX 0.11 on an H100, evidence/h100-runs/2026-12-07c. A JAX user
# never holds such an array, so the harness's misaligned views reach XLA as aligned copies, as
# jnp.array would give them: the misaligned class does not test JAX's kernels on the GPU.
XLA_ALIGNMENT = 16


def _to_jax(jax, a, device: Device):
    if device is Device.cuda:
        if a.data.ptr % XLA_ALIGNMENT:
            a = a.copy()          # a fresh CuPy allocation: aligned
        return jax.dlpack.from_dlpack(a)
    # committed to the CPU device, so the computation runs there whatever JAX's default device
    return jax.device_put(a, jax.devices("cpu")[0])


def _from_jax(out, device: Device):
    import numpy as np
    if device is Device.cuda:
        import cupy as cp
        return cp.from_dlpack(out).copy()
    return np.array(out, dtype=np.float32)      # a writable copy the harness owns


def forward_of(jax, fn, device: Device):
    def forward(*arrays, **params):
        return _from_jax(fn(*(_to_jax(jax, a, device) for a in arrays), **params), device)
    return forward


def vjp_of(jax, fn, device: Device):
    def vjp(inputs, output, g, **params):
        xs = [_to_jax(jax, a, device) for a in inputs]
        _, pullback = jax.vjp(lambda *ys: fn(*ys, **params), *xs)
        grads = pullback(_to_jax(jax, g, device))
        return tuple(_from_jax(d, device) for d in grads)
    return vjp


def our_capsule(op: Op, device: Device, capsules: list[KernelCapsule]) -> KernelCapsule | None:
    """Our default capsule of `op` on `device`: the first that is not an `.accurate` variant."""
    return default_capsule(op, device, OUR_PROVIDERS, capsules)


# Where JAX's numerical policy is its own, with its source. Subnormals on the CPU: XLA's CPU
# runtime executes with flush-to-zero and denormals-are-zero set, on purpose ("working as
# intended", jax-ml/jax#16200; the flag that keeps it, xla_cpu_ftz, openxla/xla#35740). The order
# of a reduction: XLA documents none (its reductions may reassociate), so any order, with the
# bound any order meets.
FLUSH_SOURCE = "jax-ml/jax#16200 (CPU: FTZ and DAZ set by XLA's runtime, as intended)"


def jax_policy(ours: NumericalPolicy, device: Device) -> NumericalPolicy:
    subnormals = Subnormals.flush_to_zero if device is Device.cpu else ours.subnormals
    return dataclasses.replace(any_order(ours), subnormals=subnormals)


def peer_capsule(ours: KernelCapsule, jax) -> KernelCapsule:
    op = ours.op
    return standard_capsule(
        op, Provider.xla, ours.device, trust=TrustLevel.fuzzed, vjp_mode=VJPMode.backend_vjp,
        policy=jax_policy(ours.numerical_policy, ours.device), source_file=SOURCE,
        name=f"xla.{op.label}",
        native_symbol=f"jax {jax.__version__}", declared_bound=ours.value_contract.declared_bound,
        value_summary=f"JAX {jax.__version__}'s XLA kernel of {op.label}, audited under the "
                      f"declared bound of our {ours.name} and its policy, save JAX's own "
                      "subnormal mode and reduction order",
        notes=f"peer of {ours.name}; forward and jax.vjp; subnormals: {FLUSH_SOURCE} on cpu")


def entries_for(device: Device) -> list[PluginEntry]:
    jax = require_jax()
    from engine.registry import registry
    capsules = registry().capsules()
    fns = jax_functions(jax)
    out = []
    for op in JAX_OPS:
        ours = our_capsule(op, device, capsules)
        if ours is not None:
            out.append(PluginEntry(peer_capsule(ours, jax), forward_of(jax, fns[op], device),
                                   vjp_of(jax, fns[op], device)))
    return out


def ENTRIES() -> list[PluginEntry]:  # noqa: N802 (the attribute --plugin specs use)
    """JAX's kernels on both devices: the run keeps those of its --device."""
    out = entries_for(Device.cpu)
    try:
        import cupy  # noqa: F401  (a CUDA run needs it: probe)
        out += entries_for(Device.cuda)
    except ImportError:
        pass
    return out


