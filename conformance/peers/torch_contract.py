"""PyTorch's contract for the ops `conformance.peers.torch_cuda` audits: the conventions where
PyTorch (2.x) keeps its own rule instead of TorchLean's (docs/OPS.md), each with its source.

Documented (the autograd notes, "Gradients for non-differentiable functions",
https://pytorch.org/docs/stable/notes/autograd.html#gradients-for-non-differentiable-functions):
where a function is not defined (its input is NaN) the gradient is arbitrary; where it is not
differentiable but locally convex, PyTorch uses the subgradient of minimum norm (a tie of max
splits g in halves). Undocumented (only PyTorch's source says so): which of two equal operands a
max, min or clamp returns (so the sign of a zero), clamp's gradient at its bounds, and VJPs
evaluated in float32 from the rounded forward output (tools/autograd/derivatives.yaml), which
overflow where the exact product does not.

Each rule is PyTorch's formula in float32 NumPy, evaluated on the kernel's own forward output; the
judge counts an element as a difference only where the kernel returned that value exactly.
"""
from __future__ import annotations

import functools

import numpy as np

from conformance.peers.contract import Clause, Convention, ConventionCase, PeerContract

F32 = np.float32
AUTOGRAD_NOTE = ("https://pytorch.org/docs/stable/notes/autograd.html"
                 "#gradients-for-non-differentiable-functions")
DERIVATIVES = "pytorch/pytorch: tools/autograd/derivatives.yaml"

NAN_GRADIENT = Clause(
    "nan-input-gradient", "where the input is NaN the function is undefined and the gradient is "
    "arbitrary (relu passes g, abs gives 0 g, max/min give g to both operands)",
    AUTOGRAD_NOTE, documented=True)
TIE_SPLITS = Clause(
    "tie-gradient-split", "a tie of max or min is not differentiable and locally convex: the "
    "subgradient of minimum norm, g/2 to each operand", AUTOGRAD_NOTE, documented=True)
TIE_OPERAND = Clause(
    "tie-returns-second-operand", "max(a, b), min(a, b) and clamp's bounds return the second "
    "operand of a tie (so max(-0, +0) is +0), as the CUDA kernels' comparisons do",
    "pytorch/pytorch: aten/src/ATen/native/cuda/MaxMinElementwiseKernel.cu", documented=False)
CLAMP_BOUNDS = Clause(
    "clamp-gradient-at-bounds", "clamp passes g where lo <= x <= hi, bounds included "
    "(clamp_backward); the autograd note's minimum-norm rule would give 0 at lo",
    "pytorch/pytorch: torch/csrc/autograd/FunctionsManual.cpp clamp_backward", documented=False)
FLOAT32_VJP = Clause(
    "float32-vjp-formula", "the VJP is its derivatives.yaml formula in float32 on the rounded "
    "forward output (exp: g * result; reciprocal: -g * (result * result); mse_loss: "
    "(2/n) (x - y) g; mean: g * (1/n)), which can overflow, or be 0 * inf = NaN, where the exact "
    "gradient is finite", DERIVATIVES, documented=False)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=F32)


def _all(case: ConventionCase, value) -> tuple[np.ndarray, np.ndarray]:
    value = _f32(value)
    return np.ones(value.shape, dtype=bool), value


def _same_shape(case: ConventionCase) -> bool:
    a, b = case.inputs[0], case.inputs[1]
    return a.shape == b.shape == case.out.shape


def _relu_grad(case):
    # threshold_backward(grad, result, 0): result <= 0 ? 0 : g, and NaN <= 0 is false
    with np.errstate(invalid="ignore"):
        value = np.where(_f32(case.out) <= 0, F32(0), _f32(case.g))
    return np.isnan(_f32(case.inputs[0])), _f32(value)


def _abs_grad(case):
    x = _f32(case.inputs[0])
    sign = (x > 0).astype(F32) - (x < 0).astype(F32)    # g * sgn(x), and sgn(NaN) is 0
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isnan(x), _f32(_f32(case.g) * sign)


def _minmax_grad(lose_first, governs):
    """maximum's derivatives.yaml rule: where(a == b, g/2, g), 0 for the operand that loses
    (`lose_first(a, b)`: the first operand loses); `governs(a, b)` picks the clause's elements."""
    def rule(case):
        if not _same_shape(case):   # a broadcast operand's gradient is a sum: not this rule
            return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
        a, b, g = _f32(case.inputs[0]), _f32(case.inputs[1]), _f32(case.g)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            half = np.where(a == b, g / F32(2), g)
            loses = lose_first(a, b) if case.grad == 0 else lose_first(b, a)
            value = np.where(loses, F32(0), half)
            return governs(a, b), _f32(value)
    return rule


def _a_nan(a, b):
    return np.isnan(a) | np.isnan(b)


def _a_tie(a, b):
    return a == b


def _tie_value(case):
    if not _same_shape(case):
        return np.zeros(case.out.shape, dtype=bool), _f32(case.out)
    a, b = _f32(case.inputs[0]), _f32(case.inputs[1])
    return a == b, b


def _pt_max(a, b):
    with np.errstate(invalid="ignore"):
        return _f32(np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(a > b, a, b)))


def _pt_min(a, b):
    with np.errstate(invalid="ignore"):
        return _f32(np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(a < b, a, b)))


def _bounds(case):
    return F32(case.params["lo"]), F32(case.params["hi"])


def _clamp_value(case):
    x = _f32(case.inputs[0])
    lo, hi = _bounds(case)
    return (x == lo) | (x == hi), _pt_min(_pt_max(x, lo), hi)


def _clamp_grad(case):
    x = _f32(case.inputs[0])
    lo, hi = _bounds(case)
    with np.errstate(invalid="ignore"):
        return _all(case, np.where((x >= lo) & (x <= hi), _f32(case.g), F32(0)))


def _exp_grad(case):
    with np.errstate(invalid="ignore", over="ignore"):
        return _all(case, _f32(case.g) * _f32(case.out))


def _inv_grad(case):
    out = _f32(case.out)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        return _all(case, -_f32(case.g) * (out * out))


def _mse_grad(case):
    a, b = _f32(case.inputs[0]), _f32(case.inputs[1])
    if a.shape != b.shape or a.size == 0:
        return np.zeros(a.shape, dtype=bool), a
    alpha = F32(2.0 / a.size)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        d = (alpha * (a - b)) * _f32(case.g)
    return _all(case, d if case.grad == 0 else -d)


def _mean_grad(case):
    x = _f32(case.inputs[0])
    axes = case.params.get("axes")
    axes = tuple(range(x.ndim)) if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if not axes or n == 0:
        return np.zeros(x.shape, dtype=bool), x
    g = _f32(case.g)
    if not case.params.get("keepdims", False):
        g = np.expand_dims(g, tuple(sorted(axes)))
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        value = np.broadcast_to(g, x.shape) * F32(1.0 / F32(n))
    return _all(case, value)


def _contract(op: str, doc: str, *conventions: Convention) -> PeerContract:
    return PeerContract("PyTorch", op, doc, conventions)


DOCS = "https://pytorch.org/docs/stable/"


@functools.lru_cache(maxsize=1)
def contracts() -> dict[str, PeerContract]:
    """aten.<op> -> PyTorch's contract, for the ops with a convention of their own."""
    lt = lambda a, b: a < b   # noqa: E731  (max's first operand loses where it is the smaller)
    gt = lambda a, b: a > b   # noqa: E731
    table = [
        _contract("relu", DOCS + "generated/torch.nn.functional.relu.html",
                  Convention(NAN_GRADIENT, "grad", _relu_grad)),
        _contract("abs", DOCS + "generated/torch.abs.html",
                  Convention(NAN_GRADIENT, "grad", _abs_grad)),
        _contract("max", DOCS + "generated/torch.maximum.html",
                  Convention(TIE_OPERAND, "value", _tie_value),
                  Convention(TIE_SPLITS, "grad", _minmax_grad(lt, _a_tie)),
                  Convention(NAN_GRADIENT, "grad", _minmax_grad(lt, _a_nan))),
        _contract("min", DOCS + "generated/torch.minimum.html",
                  Convention(TIE_OPERAND, "value", _tie_value),
                  Convention(TIE_SPLITS, "grad", _minmax_grad(gt, _a_tie)),
                  Convention(NAN_GRADIENT, "grad", _minmax_grad(gt, _a_nan))),
        _contract("clamp", DOCS + "generated/torch.clamp.html",
                  Convention(TIE_OPERAND, "value", _clamp_value),
                  Convention(CLAMP_BOUNDS, "grad", _clamp_grad)),
        _contract("exp", DOCS + "generated/torch.exp.html",
                  Convention(FLOAT32_VJP, "grad", _exp_grad)),
        _contract("inv", DOCS + "generated/torch.reciprocal.html",
                  Convention(FLOAT32_VJP, "grad", _inv_grad)),
        _contract("mse_loss", DOCS + "generated/torch.nn.functional.mse_loss.html",
                  Convention(FLOAT32_VJP, "grad", _mse_grad)),
        _contract("reduce_mean", DOCS + "generated/torch.mean.html",
                  Convention(FLOAT32_VJP, "grad", _mean_grad)),
    ]
    return {f"aten.{c.op}": c for c in table}
