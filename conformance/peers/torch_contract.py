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
judge counts an element as a difference only where the kernel returned that value exactly. The
16-bit audit of PyTorch's kernels (conformance/peers/torch_lowp.py) uses the same contracts for
the ops of LOWP_OPS (conformance/lowp/conventions.py), the rule's value rounded to the format.
"""
from __future__ import annotations

import functools

from conformance.peers import rules as R
from conformance.peers.contract import Clause, Convention, PeerContract

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
                  Convention(NAN_GRADIENT, "grad", R.relu_grad_passes_nan)),
        _contract("abs", DOCS + "generated/torch.abs.html",
                  Convention(NAN_GRADIENT, "grad", R.abs_grad_sgn)),
        _contract("max", DOCS + "generated/torch.maximum.html",
                  Convention(TIE_OPERAND, "value", R.tie_second_operand),
                  Convention(TIE_SPLITS, "grad", R.minmax_grad(lt, R.a_tie)),
                  Convention(NAN_GRADIENT, "grad", R.minmax_grad(lt, R.a_nan))),
        _contract("min", DOCS + "generated/torch.minimum.html",
                  Convention(TIE_OPERAND, "value", R.tie_second_operand),
                  Convention(TIE_SPLITS, "grad", R.minmax_grad(gt, R.a_tie)),
                  Convention(NAN_GRADIENT, "grad", R.minmax_grad(gt, R.a_nan))),
        _contract("clamp", DOCS + "generated/torch.clamp.html",
                  Convention(TIE_OPERAND, "value", R.clamp_ties),
                  Convention(CLAMP_BOUNDS, "grad", R.clamp_grad_inclusive)),
        _contract("exp", DOCS + "generated/torch.exp.html",
                  Convention(FLOAT32_VJP, "grad", R.exp_grad_from_output)),
        _contract("inv", DOCS + "generated/torch.reciprocal.html",
                  Convention(FLOAT32_VJP, "grad", R.inv_grad_from_output)),
        _contract("mse_loss", DOCS + "generated/torch.nn.functional.mse_loss.html",
                  Convention(FLOAT32_VJP, "grad", R.mse_grad_float32)),
        _contract("reduce_mean", DOCS + "generated/torch.mean.html",
                  Convention(FLOAT32_VJP, "grad", R.mean_grad_reciprocal)),
    ]
    return {f"aten.{c.op}": c for c in table}


# The ops of PyTorch's 16-bit kernels (conformance/peers/torch_lowp.py) a clause above governs,
# each the 16-bit audit's op name -> the float32 contract's capsule: relu's and abs's VJPs at NaN
# (the unary sweep's VJP side) and max's and min's tie (the binary sweep's values; it sweeps no
# VJP, so their gradient clauses govern nothing there). Every rule of these reads each element
# alone, which conformance/lowp/conventions.py relies on. exp is left out: its float32-vjp-formula
# clause is g * result, and at the sweep's unit cotangent that is the forward's own output, which
# the forward's bound already judges; no other 16-bit op has a clause (nor do the accumulating
# ops: PyTorch documents no convention of sum, softmax, matmul, ... that TorchLean's differs from).
LOWP_OPS = {"abs": "aten.abs", "relu": "aten.relu", "max": "aten.max", "min": "aten.min"}


def lowp_contracts() -> dict[str, PeerContract]:
    """16-bit op -> PyTorch's contract, for the ops of LOWP_OPS."""
    table = contracts()
    return {op: table[capsule] for op, capsule in LOWP_OPS.items()}
