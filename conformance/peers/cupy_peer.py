"""CuPy's kernels of our ops (its ufuncs, reductions, cupyx.scipy.special and cuBLAS through
cupy.matmul), audited beside ours:
`torchlean-conformance run --device cuda --plugin conformance.peers.cupy_peer:ENTRIES`.

One entry `cupy_peer.<op>` per op of CUPY_OPS that has a CUDA capsule of ours (native_cuda, cublas
or cufft, discovered in the registry at run time), declaring that capsule's bound and its policy
but where CuPy's is its own (cupy_policy): CuPy compiles its kernels with NVRTC and appends
-ftz=true to every option list (cupy/cuda/compiler.py), so the ops its own kernels compute read
subnormal operands as zero and flush subnormal results; it documents no reduction order (CUB or
its own block reduction), so any order. Each function is what a CuPy (or NumPy) user writes for
the op's contract (docs/OPS.md), compiled from conformance/peers/expressions.py's CUPY table,
whose text `torchlean-conformance reproduce` copies into a finding's script. CuPy has no
autodiff, so no VJP is claimed (vjp_mode none) and only forwards are audited. CuPy's own
contract, its conventions and what it documents of its accuracy, is
conformance/peers/cupy_contract.py.

The prefix `cupy_peer.` keeps these capsules apart from fixtures/plugins/cupy_ufuncs.py's
`cupy.<op>` (the exhaustive audit of six of CuPy's ufuncs against NVIDIA's table): a run with both
plugins would refuse the second name, and one evidence directory would hold one `cupy.exp.json`
for two different audits.

The module imports without CuPy (the tables are plain data; tests build the entries through
`entries_for` with NumPy and SciPy bound to the names the same compiled text calls); ENTRIES
needs CuPy and a GPU, and says so with a PluginError naming what to install.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

from conformance.peers.common import any_order, default_capsule
from conformance.peers.expressions import CUPY, functions
from conformance.plugins import PluginEntry, PluginError
from engine.capsule import KernelCapsule, standard_capsule
from engine.types import (BackendOp as Op, Device, NumericalPolicy, Provider, Subnormals,
                          TrustLevel, VJPMode)

SOURCE = "conformance/peers/cupy_peer.py"
PREFIX = "cupy_peer"
OUR_PROVIDERS = (Provider.reference, Provider.native_cuda, Provider.cublas, Provider.cufft)
INSTALL = "install CuPy for your CUDA version (pip install cupy-cuda13x) on a machine with a GPU"
TF32 = "CUPY_TF32"

# The ops mapped (known without CuPy, for the contract and the tests). Not mapped: rand_uniform
# and bernoulli_mask (another generator), gelu (CuPy has no function of it: a formula written
# here would audit our transcription, not CuPy), hard_masked_softmax, the norms, attention,
# convolution, pooling, selective_scan and the FFTs (no CuPy function of the op's contract).
CUPY_OPS = (Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.scale, Op.abs, Op.sqrt, Op.relu, Op.clamp,
            Op.sigmoid, Op.tanh, Op.softplus, Op.exp, Op.log, Op.sin, Op.cos, Op.inv,
            Op.safe_log, Op.softmax, Op.log_softmax, Op.reduce_sum, Op.reduce_mean, Op.mse_loss,
            Op.matmul, Op.reshape, Op.permute, Op.broadcast, Op.concat, Op.slice, Op.gather,
            Op.scatter_add)
# The ops whose arithmetic is CuPy's own NVRTC-compiled kernels (elementwise and reduction
# kernels, -ftz=true): their subnormals are flushed. The shape and indexing ops only move bits,
# scatter_add adds with atomics (cupyx.scatter_add) and matmul is cuBLAS's: those keep our
# capsule's subnormal policy (a copy flushes nothing; ours already admits the others' flushes).
NVRTC_OPS = frozenset((Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.scale, Op.abs, Op.sqrt,
                       Op.relu, Op.clamp, Op.sigmoid, Op.tanh, Op.softplus, Op.exp, Op.log,
                       Op.sin, Op.cos, Op.inv, Op.safe_log, Op.softmax, Op.log_softmax,
                       Op.reduce_sum, Op.reduce_mean, Op.mse_loss))
FTZ_SOURCE = "cupy/cupy: cupy/cuda/compiler.py (options += ('-ftz=true',) before every compile)"


def require_cupy():
    """(cupy, cupyx.scipy.special, cupyx.scatter_add) on a visible GPU with TF32 off, or a
    PluginError naming what is missing."""
    try:
        import cupy
        import cupyx
        import cupyx.scipy.special as special
    except ImportError as exc:
        raise PluginError(f"conformance.peers.cupy_peer audits CuPy's kernels, but cupy is not "
                          f"importable ({exc}); {INSTALL}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:   # noqa: BLE001 - CuPy's CUDARuntimeError, or no driver at all
        raise PluginError(f"conformance.peers.cupy_peer audits CuPy's kernels, but CuPy "
                          f"{cupy.__version__} sees no CUDA device ({exc}); {INSTALL}") from None
    if not count:
        raise PluginError(f"conformance.peers.cupy_peer audits CuPy's kernels, but CuPy "
                          f"{cupy.__version__} sees no CUDA device; {INSTALL}")
    check_tf32(os.environ.get(TF32))
    return cupy, special, cupyx.scatter_add


def check_tf32(value: str | None) -> None:
    """CuPy reads CUPY_TF32 once, as int(os.getenv('CUPY_TF32', '0')), at its first float32
    matmul (cupy/_core/_routines_linalg.pyx, get_compute_type): a positive integer lets cuBLAS
    compute float32 products in TF32, which is not the float32 matmul the contract states, and
    a value that is no integer makes that matmul raise. Both refused rather than overridden: the
    variable is the user's, and CuPy may have read it already."""
    if value is None:
        return
    try:
        tf32 = int(value) > 0
    except ValueError:
        raise PluginError(f"conformance.peers.cupy_peer audits CuPy's float32 matmul, but "
                          f"{TF32}={value!r} is not an integer, and CuPy's matmul raises reading "
                          f"it; unset {TF32} (or set it to 0) and run again") from None
    if tf32:
        raise PluginError(f"conformance.peers.cupy_peer audits CuPy's float32 matmul, but "
                          f"{TF32}={value} lets cuBLAS compute it in TF32; unset {TF32} (or "
                          f"set it to 0) and run again")


def cupy_functions(cp, special, scatter_add) -> dict[Op, Callable]:
    """Op -> function of the op's inputs and parameters (docs/OPS.md), for every op of CUPY_OPS:
    compiled from conformance/peers/expressions.py's CUPY table, whose text the reproducers
    (reproducer.py) copy, so both call the same expression. `cp` is bound as the bodies' `cupy`
    (cupy, or numpy as its stand-in); `special` (cupyx.scipy.special, or scipy.special) and
    `scatter_add` (cupyx.scatter_add, or numpy.add.at) as the bodies' `cupyx.scipy.special` and
    `cupyx.scatter_add`: a namespace of just those two, so a stand-in needs no `cupyx` module and
    a body naming anything else of cupyx fails here, in the tests, not on the GPU."""
    import types

    import numpy as np
    cupyx = types.SimpleNamespace(scipy=types.SimpleNamespace(special=special),
                                  scatter_add=scatter_add)
    fns = functions(CUPY, {"cupy": cp, "cupyx": cupyx, "np": np},
                    [op.label for op in CUPY_OPS])
    return {op: fns[op.label] for op in CUPY_OPS}


def _empty_axis(inputs: tuple, params: dict) -> str | None:
    """softmax / log_softmax along a zero-length axis: cupyx.scipy.special's softmax and
    log_softmax start with cupy.amax over the axis, which raises ValueError there (a reduction with
    no identity over an empty slice, NumPy's documented rule) where docs/OPS.md gives an empty
    result. CuPy's semantics refuse the case: the entry declines it (the record lists it as
    skipped, with this reason) rather than counting CuPy's documented refusal as a failure."""
    shape = getattr(inputs[0], "shape", ()) if inputs else ()
    if not shape:
        return None
    axis = int(params.get("axis", -1))
    if -len(shape) <= axis < len(shape) and shape[axis] == 0:
        return (f"a zero-length axis ({axis} of shape {list(shape)}): CuPy's softmax family takes "
                "cupy.amax over it, which raises ValueError on an empty slice (NumPy's rule for a "
                "reduction with no identity)")
    return None


# op -> the cases CuPy's documented semantics refuse (PluginEntry.declines)
DECLINES = {Op.softmax: _empty_axis, Op.log_softmax: _empty_axis}


def forward_of(cp, fn) -> Callable:
    """The entry's forward: CuPy's function, its result a fresh contiguous array (a view of an
    input, as reshape, transpose, broadcast_to or a slice return, is copied, so what the harness
    gets back never aliases what it handed in)."""
    def forward(*arrays, **params):
        out = fn(*arrays, **params)
        # copy(), not ascontiguousarray: that makes a 0-d result (a full reduction) 1-d
        if not out.flags.c_contiguous or any(cp.may_share_memory(out, a) for a in arrays):
            out = out.copy()
        return out
    return forward


def cupy_policy(ours: NumericalPolicy, op: Op) -> NumericalPolicy:
    """Our capsule's policy, but CuPy's own where CuPy's is its own: its NVRTC kernels flush
    subnormals (FTZ_SOURCE; ours already admits a flush where it is implementation-defined or
    unspecified), and no reduction order is documented, so any order."""
    policy = any_order(ours)
    if op in NVRTC_OPS and policy.subnormals is Subnormals.gradual_underflow:
        policy = dataclasses.replace(policy, subnormals=Subnormals.flush_to_zero)
    return policy


def our_capsule(op: Op, device: Device, capsules: list[KernelCapsule]) -> KernelCapsule | None:
    """Our default capsule of `op` on `device` (common.default_capsule)."""
    return default_capsule(op, device, OUR_PROVIDERS, capsules)


def peer_capsule(ours: KernelCapsule, version: str) -> KernelCapsule:
    op = ours.op
    ftz = "-ftz=true, " if op in NVRTC_OPS else ""
    kernel = "cuBLAS" if op is Op.matmul else "its own kernel"
    return standard_capsule(
        op, Provider.external, ours.device, trust=TrustLevel.fuzzed, vjp_mode=VJPMode.none,
        policy=cupy_policy(ours.numerical_policy, op), source_file=SOURCE,
        name=f"{PREFIX}.{op.label}", native_symbol=f"cupy {version}",
        declared_bound=ours.value_contract.declared_bound,
        value_summary=f"CuPy {version}'s kernel of {op.label} ({kernel}), audited under the "
                      f"declared bound of our {ours.name} and its policy, save CuPy's own "
                      "subnormal mode and reduction order",
        notes=f"peer of {ours.name}; forward only (CuPy has no autodiff); {ftz}any reduction "
              f"order; subnormals: {FTZ_SOURCE}")


def entries_for(device: Device, cp, special, scatter_add, version: str,
                capsules: list[KernelCapsule] | None = None) -> list[PluginEntry]:
    """One entry per op of CUPY_OPS with our capsule on `device`, running the functions of
    cupy_functions(cp, special, scatter_add)."""
    if capsules is None:
        from engine.registry import registry
        capsules = registry().capsules()
    fns = cupy_functions(cp, special, scatter_add)
    out = []
    for op in CUPY_OPS:
        ours = our_capsule(op, device, capsules)
        if ours is not None:
            out.append(PluginEntry(peer_capsule(ours, version), forward_of(cp, fns[op]),
                                   declines=DECLINES.get(op)))
    return out


def ENTRIES() -> list[PluginEntry]:  # noqa: N802 (the attribute --plugin specs use)
    cp, special, scatter_add = require_cupy()
    return entries_for(Device.cuda, cp, special, scatter_add, cp.__version__)
