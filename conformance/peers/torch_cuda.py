"""PyTorch's CUDA kernels of our ops, audited beside ours:
`torchlean-conformance run --device cuda --plugin conformance.peers.torch_cuda:ENTRIES`.

One entry `aten.<op>` per op that has a native_cuda, cublas or cufft capsule in the registry and a
PyTorch counterpart (discovered at run time, so new capsules need no change here). The forward is
PyTorch's kernel on the harness's CuPy arrays through DLPack (no copies), written as a PyTorch user
would write the op's contract (docs/OPS.md); the VJP is torch.autograd over the same function, so
PyTorch's backward kernels are audited too. Each entry declares the numerical policy and declared
bound of our default capsule of the op: the verdicts are on our scale, and where PyTorch deviates
from the contract (NaN at gelu(-inf), a flushed subnormal), the evidence says so. TF32 is off.
"""
from __future__ import annotations

from typing import Callable

from conformance.peers.common import default_capsule
from conformance.peers.expressions import TORCH, functions, run_setup
from conformance.plugins import PluginEntry, PluginError
from engine.capsule import KernelCapsule, standard_capsule
from engine.types import BackendOp as Op, Device, Provider, TrustLevel, VJPMode

SOURCE = "conformance/peers/torch_cuda.py"
OUR_PROVIDERS = (Provider.native_cuda, Provider.cublas, Provider.cufft)
INSTALL = ("install a CUDA build of PyTorch (pip install torch; see https://pytorch.org for the "
           "wheel of your CUDA version) and CuPy (pip install cupy-cuda13x)")


def require_torch_cuda():
    """torch, with TF32 off, or PluginError naming what is missing and what to install."""
    try:
        import torch
    except ImportError as exc:
        raise PluginError(f"conformance.peers.torch_cuda audits PyTorch's CUDA kernels, but torch "
                          f"is not importable ({exc}); {INSTALL}") from None
    if not torch.cuda.is_available():
        raise PluginError("conformance.peers.torch_cuda audits PyTorch's CUDA kernels, but "
                          f"torch {torch.__version__} sees no CUDA device (a CPU-only build, or "
                          f"no GPU here); run on a CUDA machine and {INSTALL}")
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        raise PluginError(f"conformance.peers.torch_cuda hands PyTorch the harness's CuPy arrays, "
                          f"but cupy is not importable ({exc}); {INSTALL}") from None
    # TF32 off: float32 matmul in float32 (expressions.TORCH.setup, which scripts run too)
    run_setup(TORCH, {"torch": torch})
    return torch


# The ops peer_functions maps (known without torch, for the tests and the docs). Not mapped:
# rand_uniform and bernoulli_mask (another generator: nothing to compare), selective_scan and
# smooth_max_pool (no PyTorch kernel), conv, conv_transpose, the pools and the FFTs (not yet).
PEER_OPS = (Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.scale, Op.abs, Op.sqrt, Op.relu,
            Op.clamp, Op.gelu, Op.sigmoid, Op.tanh, Op.softplus, Op.exp, Op.log, Op.sin, Op.cos,
            Op.inv, Op.safe_log, Op.softmax, Op.log_softmax, Op.hard_masked_softmax,
            Op.reduce_sum, Op.reduce_mean, Op.mse_loss, Op.reshape, Op.permute, Op.broadcast,
            Op.concat, Op.slice, Op.gather, Op.scatter_add, Op.layer_norm, Op.batch_norm,
            Op.scaled_dot_product_attention, Op.matmul, Op.linear)


def peer_functions(torch) -> dict[Op, Callable]:
    """Op -> PyTorch function of the op's inputs (tensors) and parameters (docs/OPS.md), for
    every op of PEER_OPS: compiled from conformance/peers/expressions.py's TORCH table, whose
    text the reproducers (reproducer.py) copy, so both call the same expression."""
    import numpy as np
    fns = functions(TORCH, {"torch": torch, "np": np}, [op.label for op in PEER_OPS])
    return {op: fns[op.label] for op in PEER_OPS}


def our_capsule(op: Op, capsules: list[KernelCapsule]) -> KernelCapsule | None:
    """Our default CUDA capsule of `op`: the first registered native_cuda/cublas/cufft one that is
    not a variant (`*.accurate`, KernelCapsule.variant), else the first variant."""
    return default_capsule(op, Device.cuda, OUR_PROVIDERS, capsules)


def _fresh(torch, out, tensors):
    """PyTorch's output as a new contiguous buffer: a view of an input (reshape, a leading slice,
    a gradient that is g itself) is cloned, so what the harness gets back never aliases what it
    handed in."""
    out = out.contiguous()
    if out.numel() and any(x.numel() and x.untyped_storage().data_ptr()
                           == out.untyped_storage().data_ptr() for x in tensors):
        out = out.clone()
    return out


def forward_of(torch, fn):
    import cupy as cp

    def forward(*arrays, **params):
        ts = [torch.from_dlpack(a) for a in arrays]
        with torch.no_grad():
            out = fn(*ts, **params)
        return cp.from_dlpack(_fresh(torch, out, ts).detach())
    return forward


def vjp_of(torch, fn):
    import cupy as cp

    def vjp(inputs, output, g, **params):
        ts = [torch.from_dlpack(a).detach().requires_grad_(True) for a in inputs]
        tg = torch.from_dlpack(g)
        with torch.enable_grad():
            out = fn(*ts, **params)
            grads = torch.autograd.grad(out, ts, tg, allow_unused=True)
        # add's backward hands g itself back (twice): each gradient gets its own buffer
        return tuple(cp.zeros(a.shape, dtype=a.dtype) if d is None
                     else cp.from_dlpack(_fresh(torch, d, ts + [tg])) for a, d in zip(inputs, grads))
    return vjp


def peer_capsule(ours: KernelCapsule, torch) -> KernelCapsule:
    op = ours.op
    return standard_capsule(
        op, Provider.aten, Device.cuda, trust=TrustLevel.fuzzed, vjp_mode=VJPMode.backend_vjp,
        policy=ours.numerical_policy, source_file=SOURCE, name=f"aten.{op.label}",
        native_symbol=f"torch {torch.__version__}",
        declared_bound=ours.value_contract.declared_bound,
        value_summary=f"PyTorch {torch.__version__}'s CUDA kernel of {op.label}, audited under "
                      f"the policy and declared bound of our {ours.name} (compared on our scale)",
        notes=f"peer of {ours.name}; TF32 off; forward and torch.autograd VJP through DLPack")


def peers(capsules: list[KernelCapsule] | None = None) -> list[tuple[KernelCapsule, str, Callable]]:
    """(our capsule, peer name, PyTorch function) for every op with both; torch must import."""
    torch = require_torch_cuda()
    if capsules is None:
        from engine.registry import registry
        capsules = registry().capsules()
    fns = peer_functions(torch)
    out = []
    for op, fn in fns.items():
        ours = our_capsule(op, capsules)
        if ours is not None:
            out.append((ours, f"aten.{op.label}", fn))
    return out


def ENTRIES() -> list[PluginEntry]:  # noqa: N802 (the attribute name --plugin specs use)
    torch = require_torch_cuda()
    return [PluginEntry(peer_capsule(ours, torch), forward_of(torch, fn), vjp_of(torch, fn))
            for ours, _, fn in peers()]
