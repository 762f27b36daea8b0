"""CuPy's kernels of our ops (its ufuncs, reductions, cupyx.scipy.special and cuBLAS through
cupy.matmul), audited beside ours:
`torchlean-conformance run --device cuda --plugin conformance.peers.cupy_peer:ENTRIES`.

One entry `cupy_peer.<op>` per op of CUPY_OPS that has a CUDA capsule of ours (native_cuda, cublas
or cufft, discovered in the registry at run time), declaring that capsule's bound and its policy
but where CuPy's is its own (cupy_policy): CuPy compiles its kernels with NVRTC and appends
-ftz=true to every option list (cupy/cuda/compiler.py), so the ops its own kernels compute read
subnormal operands as zero and flush subnormal results; it documents no reduction order (CUB or
its own block reduction), so any order. Each function is what a CuPy (or NumPy) user writes for
the op's contract (docs/OPS.md); CuPy has no autodiff, so no VJP is claimed (vjp_mode none) and
only forwards are audited. CuPy's own contract, its conventions and what it documents of its
accuracy, is conformance/peers/cupy_contract.py.

The prefix `cupy_peer.` keeps these capsules apart from fixtures/plugins/cupy_ufuncs.py's
`cupy.<op>` (the exhaustive audit of six of CuPy's ufuncs against NVIDIA's table): a run with both
plugins would refuse the second name, and one evidence directory would hold one `cupy.exp.json`
for two different audits.

The module imports without CuPy (the tables are plain data; tests build the entries on NumPy and
SciPy stand-ins of the same functions through `entries_for`); ENTRIES needs CuPy and a GPU, and
says so with a PluginError naming what to install.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

from conformance.peers.common import any_order, default_capsule, f32
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
    """Op -> function of the op's inputs and parameters (docs/OPS.md), written with `cp` (cupy,
    or numpy as its stand-in), `special` (cupyx.scipy.special, or scipy.special) and
    `scatter_add` (cupyx.scatter_add, or numpy.add.at), for every op of CUPY_OPS. Float
    parameters are float32 scalars (NumPy's: rounded first, and a float32 kernel)."""
    import numpy as np

    def s32(x):
        return np.float32(f32(x))

    def axis_index(a, axis, index):
        return (slice(None),) * (int(axis) % a.ndim) + (index,)

    def reduce(fn):
        def run(a, axes=None, keepdims=False):
            axis = None if axes is None else tuple(int(i) for i in axes)
            return fn(a, axis=axis, keepdims=bool(keepdims))
        return run

    def scatter(base, src, axis, indices):
        out = base.copy()
        scatter_add(out, axis_index(base, axis, cp.asarray(indices, dtype=np.int64)), src)
        return out

    def mt(a, flag):
        return cp.swapaxes(a, -1, -2) if flag else a
    return {
        Op.add: cp.add, Op.sub: cp.subtract, Op.mul: cp.multiply,
        # NumPy's maximum / minimum: NaN propagates (CuPy's docstring: "If NaN appears, it
        # returns the NaN")
        Op.max: cp.maximum, Op.min: cp.minimum,
        Op.scale: lambda a, alpha: cp.multiply(a, s32(alpha)),
        Op.abs: cp.abs, Op.sqrt: cp.sqrt,
        # NumPy and CuPy have no relu; maximum(a, 0) is what their users write and the form whose
        # documented semantics are relu's contract: NaN propagates, 0 for a < 0 (a * (a > 0)
        # gives NaN at -inf and -0 for negatives; where(a > 0, a, 0) drops NaN)
        Op.relu: lambda a: cp.maximum(a, s32(0)),
        Op.clamp: lambda a, lo, hi: cp.clip(a, s32(lo), s32(hi)),
        Op.sigmoid: special.expit, Op.tanh: cp.tanh,
        # softplus as NumPy's documented logaddexp(a, 0) = log(exp(a) + exp(0))
        Op.softplus: lambda a: cp.logaddexp(a, s32(0)),
        Op.exp: cp.exp, Op.log: cp.log, Op.sin: cp.sin, Op.cos: cp.cos,
        Op.inv: cp.reciprocal,
        Op.safe_log: lambda a, eps=1e-12: cp.log(cp.maximum(a, s32(eps))),
        Op.softmax: lambda a, axis=-1: special.softmax(a, axis=int(axis)),
        Op.log_softmax: lambda a, axis=-1: special.log_softmax(a, axis=int(axis)),
        Op.reduce_sum: reduce(cp.sum), Op.reduce_mean: reduce(cp.mean),
        # square, not ** 2: CuPy's power is powf(x, 2.0f), a library call of its own
        Op.mse_loss: lambda p, q: cp.mean(cp.square(cp.subtract(p, q))),
        Op.matmul: lambda a, b, trans_a=False, trans_b=False: cp.matmul(mt(a, trans_a),
                                                                       mt(b, trans_b)),
        Op.reshape: lambda a, shape: cp.reshape(a, tuple(int(n) for n in shape)),
        Op.permute: lambda a, perm: cp.transpose(a, tuple(int(i) for i in perm)),
        Op.broadcast: lambda a, shape: cp.broadcast_to(a, tuple(int(n) for n in shape)),
        Op.concat: lambda *arrays, axis: cp.concatenate(arrays, axis=int(axis)),
        Op.slice: lambda a, axis, start, stop: a[axis_index(a, axis, slice(int(start),
                                                                            int(stop)))],
        Op.gather: lambda a, axis, indices: cp.take(a, cp.asarray(indices, dtype=np.int64),
                                                    axis=int(axis)),
        Op.scatter_add: scatter,
    }


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
