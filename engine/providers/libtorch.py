"""libtorch.sdpa_forward: scaled_dot_product_attention's forward through PyTorch
(torch.nn.functional.scaled_dot_product_attention, torch's C++/CUDA kernels), with the VJP on our
tape (`_sdpa_vjp`, engine/ops/attention.py). Only the explicit libtorch_forward_cuda profile
selects it; `--device cuda` never does (engine/profile.py).

The CuPy arrays cross by DLPack (torch.from_dlpack / cupy.from_dlpack): no host copy. The mask
crosses as its bytes and becomes torch's boolean attn_mask (True = the key takes part, our
convention, never a finite sentinel). Torch returns NaN for a query row with no participant; those
rows are set to zero afterwards, as docs/OPS.md says. Torch returns zeros for a row whose
participating scores are all -inf, which docs/OPS.md makes NaN: where q or k holds inf or NaN,
those rows (and rows with a NaN or +inf participating score) are set to NaN afterwards. Torch picks its backend (math or
memory-efficient for float32) and its own order of operations: the capsule is trusted-external
with trusted-boundary value evidence. Within that boundary: a blocked key's inf or NaN in v can
reach the output through torch's 0 * v.

The capsule is always registered (it is a description); where `import torch` cannot work
(importlib.util.find_spec) its handler reports itself unavailable, so no plan selects it and the
plan says why. torch itself is imported by the first call, so the registry stays fast.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from engine.capsule import KernelHandler, standard_capsule
from engine.types import (BackendOp as Op, Contraction, Device, Evidence, NumericalPolicy,
                          Provider, Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

NAME = "libtorch.sdpa_forward"


def torch_present() -> bool:
    return importlib.util.find_spec("torch") is not None


def _forward(q, k, v, mask=None, scale=1.0):
    import torch
    from engine.providers.native_cuda import launch
    cp = launch.cupy()
    lk, dv = k.shape[-2], v.shape[-1]
    out_shape = q.shape[:-1] + (dv,)
    if lk == 0:
        return launch.zeros(out_shape)
    if q.shape[-2] * dv == 0 or (q.ndim == 3 and q.shape[0] == 0):
        return launch.empty(out_shape)
    tq, tk, tv = (torch.from_dlpack(launch.contiguous(x)) for x in (q, k, v))
    m = launch.mask_bytes(mask)
    tm = None if m is None else torch.from_dlpack(m).bool()
    if q.ndim == 2:
        tq, tk, tv = tq[None], tk[None], tv[None]
        tm = None if tm is None else tm[None]
    scale = float(np.float32(scale))   # docs/OPS.md: rounded to float32 before use
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tm, dropout_p=0.0, is_causal=False, scale=scale)
    out = cp.from_dlpack(out.reshape(out_shape).contiguous())
    if not bool(cp.isfinite(q).all()) or not bool(cp.isfinite(k).all()):
        # torch's softmax gives a row whose scores are all -inf zeros, the contract NaN
        rows = nan_rows(cp, q, k, None if m is None else m.view(bool), scale)
        out = cp.where(rows[..., None], cp.float32("nan"), out)
    if m is not None:   # torch gives NaN where no key participates; the contract says zeros
        blocked = ~cp.any(m.view(bool), axis=-1, keepdims=True)
        out = cp.where(blocked, cp.float32(0), out)
    return out


def nan_rows(xp, q, k, mask, scale: float):
    """bool [B?, Lq]: the query rows whose probabilities docs/OPS.md makes NaN, for NumPy or CuPy
    arrays q [B?, Lq, d], k [B?, Lk, d], mask bool [B?, Lq, Lk] or None: a NaN or +inf
    participating score, or participants whose scores are all -inf. Only inputs holding inf or
    NaN make such scores; they are evaluated by the IEEE formula in float64, as the reference
    evaluates such batches (every product of two float32 is exact there, and a sum holding an
    infinity or a NaN is the same in any order; -ftz touches float32 alone)."""
    with np.errstate(all="ignore"):   # inf - inf is the point (NumPy would warn; CuPy never)
        s = xp.matmul(q.astype(xp.float64), xp.swapaxes(k.astype(xp.float64), -1, -2)) * scale
    part = xp.ones(s.shape, dtype=bool) if mask is None else xp.broadcast_to(mask, s.shape)
    special = ((xp.isnan(s) | (s == xp.inf)) & part).any(axis=-1)
    only_neg_inf = ((s == -xp.inf) | ~part).all(axis=-1) & part.any(axis=-1)
    return special | only_neg_inf


NUMERICAL_POLICY = NumericalPolicy(Rounding.nearest_even, Subnormals.implementation_defined,
                         Contraction.implementation_defined, Reduction.implementation_defined)


def _unavailable() -> str | None:
    return None if torch_present() else ("PyTorch (LibTorch) is not installed; install torch to "
                                         "use the libtorch_forward_cuda profile")


def register_all(reg) -> None:
    cap = standard_capsule(
        Op.scaled_dot_product_attention, Provider.libtorch, Device.cuda,
        trust=TrustLevel.trusted_external, vjp_mode=VJPMode.torchlean_tape, policy=NUMERICAL_POLICY,
        source_file="engine/providers/libtorch.py",
        native_symbol="torch.nn.functional.scaled_dot_product_attention", name=NAME,
        value_summary="PyTorch SDPA forward (torch's choice of math or memory-efficient kernel, "
                      "boolean attn_mask with True = participates), fully blocked rows set to "
                      "zero and rows of only -inf (or a NaN or +inf) participating scores to "
                      "NaN afterwards; trusted at the PyTorch boundary",
        value_evidence=Evidence.trusted_boundary,
        notes="DLPack in and out, no host copies; VJP: our tape rule _sdpa_vjp, never torch "
              "autograd; selected only by the explicit libtorch_forward_cuda profile")
    reg.register(cap, KernelHandler(NAME, Op.scaled_dot_product_attention, Provider.libtorch,
                                    Device.cuda, _forward, unavailable=_unavailable))
