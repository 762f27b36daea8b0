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

Every op the plugin audits has a contract, most with no convention: each states the op's page and
what PyTorch documents of its forward's accuracy (ACCURACY: the CUDA C++ Programming Guide's
bound of the math function the kernel calls, 0 ulp for IEEE arithmetic and for selections, else
undocumented) and the verified upstream reports of its findings (UPSTREAM), which
conformance/peers/accuracy.py's classification and the per-peer page read.

Each rule is PyTorch's formula in float32 NumPy, evaluated on the kernel's own forward output; the
judge counts an element as a difference only where the kernel returned that value exactly. The
16-bit audit of PyTorch's kernels (conformance/peers/torch_lowp.py) uses the same contracts for
the ops of LOWP_OPS (conformance/lowp/conventions.py), the rule's value rounded to the format.
"""
from __future__ import annotations

import functools

from conformance.peers import rules as R
from conformance.peers import torch_rows
from conformance.peers.accuracy import UNDOCUMENTED_ACCURACY, DocumentedAccuracy, Upstream, \
    cuda_function
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
MASKED_NAN_ROW = Clause(
    "masked-softmax-nan-row", "softmax(a.masked_fill(~mask, -inf)): a row whose participants "
    "hold a NaN or a +inf, or only -inf, has a NaN max or sum, so its masked entries are NaN too "
    "(exp(-inf - max) / sum, as softmax's formula is documented), where TorchLean's masked "
    "entries are exactly 0",
    "https://pytorch.org/docs/stable/generated/torch.nn.functional.softmax.html", documented=True)
NEG_INF_ROW = Clause(
    "attention-neg-inf-row-zero", "a query row whose scores (after the mask) are all -inf gets "
    "zero output and zero dq, where the softmax of only -inf scores is NaN",
    "pytorch/pytorch: aten/src/ATen/native/transformers/attention.cpp (_safe_softmax; "
    "pytorch/pytorch#133882 calls it from SDPA, #103749 the report)", documented=False)
BLOCKED_KEY_NAN = Clause(
    "attention-blocked-key-nan", "the documented formula (attn_weight @ value after an additive "
    "-inf mask bias) multiplies a blocked key's value row by its probability 0 and adds the bias "
    "to its score: an infinite or NaN value there makes the output NaN (0 * inf), a NaN or +inf "
    "score the whole row; the VJP is that formula's autograd, where TorchLean never reads a "
    "blocked key's data",
    "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention"
    ".html (its reference implementation)", documented=True)
FLOAT32_VJP = Clause(
    "float32-vjp-formula", "the VJP is its derivatives.yaml formula in float32 on the rounded "
    "forward output (exp: g * result; reciprocal: -g * (result * result); mse_loss: "
    "(2/n) (x - y) g; mean: g * (1/n)), which can overflow, or be 0 * inf = NaN, where the exact "
    "gradient is finite", DERIVATIVES, documented=False)


DOCS = "https://pytorch.org/docs/stable/"
KERNELS = "pytorch/pytorch: aten/src/ATen/native/cuda/"


def _exact(doc: str) -> DocumentedAccuracy:
    """An op whose page defines its result as a selection or copy of input values (abs, relu,
    max, min, clamp, the shape and indexing ops): the value itself, 0 ulp."""
    return DocumentedAccuracy(0.0, "exact", DOCS + doc)


def _ieee(function: str, calls: str) -> DocumentedAccuracy:
    """IEEE round-to-nearest arithmetic (x+y, x*y; x/y and sqrtf under nvcc's defaults
    -prec-div=true, -prec-sqrt=true: PyTorch builds without --use_fast_math): 0 ulp."""
    return cuda_function(function, 0.0, KERNELS + calls)


# op -> what PyTorch documents of its CUDA forward's accuracy (accuracy.py). Its pages give no
# accuracy; where its source shows the kernel calling a CUDA math function for float32, the CUDA
# C++ Programming Guide's bound for that function is the documented one. Every op not here
# (sigmoid, softplus, gelu, the softmax family, the reductions, mse_loss, the norms, attention,
# matmul, linear, scatter_add's sums) is a formula without a stated accuracy: undocumented.
ACCURACY = {
    "exp": cuda_function("expf", 2.0, KERNELS + "UnaryOpsKernel.cu (exp_kernel_cuda: std::exp)"),
    "log": cuda_function("logf", 1.0, KERNELS + "UnaryLogKernels.cu"),
    "safe_log": cuda_function("logf", 1.0, KERNELS + "UnaryLogKernels.cu, after an exact "
                                                     "clamp_min"),
    "sin": cuda_function("sinf", 2.0, KERNELS + "UnaryGeometricSinKernel.cu"),
    "cos": cuda_function("cosf", 2.0, KERNELS + "UnaryGeometricCosKernel.cu"),
    "tanh": cuda_function("tanhf", 2.0, KERNELS + "UnaryGeometricTanhKernel.cu"),
    "sqrt": _ieee("sqrtf", "UnaryOpsKernel.cu (sqrt_kernel_cuda: ::sqrt)"),
    "inv": _ieee("1/x (x/y)", "UnaryFractionKernels.cu (reciprocal)"),
    "add": _ieee("x+y", "BinaryAddSubKernel.cu"),
    "sub": _ieee("x-y", "BinaryAddSubKernel.cu"),
    "mul": _ieee("x*y", "BinaryMulKernel.cu"),
    "scale": _ieee("x*y", "BinaryMulKernel.cu"),
    "abs": _exact("generated/torch.abs.html"),
    "relu": _exact("generated/torch.nn.functional.relu.html"),
    "max": _exact("generated/torch.maximum.html"),
    "min": _exact("generated/torch.minimum.html"),
    "clamp": _exact("generated/torch.clamp.html"),
    "reshape": _exact("generated/torch.reshape.html"),
    "permute": _exact("generated/torch.permute.html"),
    "broadcast": _exact("generated/torch.Tensor.expand.html"),
    "concat": _exact("generated/torch.cat.html"),
    "slice": _exact("generated/torch.narrow.html"),
    "gather": _exact("generated/torch.index_select.html"),
}

# op -> the upstream reports of its findings, read and verified (search of the issue trackers):
# none is listed that was not read.
UPSTREAM = {
    "gelu": (
        Upstream("value", "nan-mismatch", "infinite", "pytorch/pytorch#194278",
                 "Fix gelu returning NaN for infinite inputs on CUDA: F.gelu(-inf) is NaN, as "
                 "-inf * 0; the tanh approximation has the same shape (the CUDA half of #185770)"),
        Upstream("value", "nan-mismatch", "infinite", "pytorch/pytorch#185770",
                 "torch.nn.functional.gelu returns NaN for infinite inputs"),
    ),
}

# op -> the page that documents it (its semantics), for the ops without a convention
PAGES = {
    "add": "generated/torch.add.html", "sub": "generated/torch.sub.html",
    "mul": "generated/torch.mul.html", "scale": "generated/torch.mul.html",
    "sqrt": "generated/torch.sqrt.html", "gelu": "generated/torch.nn.functional.gelu.html",
    "sigmoid": "generated/torch.sigmoid.html", "tanh": "generated/torch.tanh.html",
    "softplus": "generated/torch.nn.functional.softplus.html",
    "log": "generated/torch.log.html", "sin": "generated/torch.sin.html",
    "cos": "generated/torch.cos.html", "safe_log": "generated/torch.clamp_min.html",
    "softmax": "generated/torch.softmax.html", "log_softmax": "generated/torch.log_softmax.html",
    "hard_masked_softmax": "generated/torch.Tensor.masked_fill.html",
    "reduce_sum": "generated/torch.sum.html", "reshape": "generated/torch.reshape.html",
    "permute": "generated/torch.permute.html", "broadcast": "generated/torch.Tensor.expand.html",
    "concat": "generated/torch.cat.html", "slice": "generated/torch.narrow.html",
    "gather": "generated/torch.index_select.html",
    "scatter_add": "generated/torch.Tensor.index_add.html",
    "layer_norm": "generated/torch.nn.functional.layer_norm.html",
    "batch_norm": "generated/torch.nn.functional.batch_norm.html",
    "scaled_dot_product_attention":
        "generated/torch.nn.functional.scaled_dot_product_attention.html",
    "matmul": "generated/torch.matmul.html", "linear": "generated/torch.nn.functional.linear.html",
}


def _contract(op: str, doc: str, *conventions: Convention) -> PeerContract:
    return PeerContract("PyTorch", op, doc, conventions, ACCURACY.get(op, UNDOCUMENTED_ACCURACY),
                        UPSTREAM.get(op, ()))


@functools.lru_cache(maxsize=1)
def contracts() -> dict[str, PeerContract]:
    """aten.<op> -> PyTorch's contract, for every op conformance/peers/torch_cuda.py audits
    (PEER_OPS): its page, its conventions (none for most), its documented accuracy."""
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
        _contract("hard_masked_softmax", DOCS + PAGES["hard_masked_softmax"],
                  Convention(MASKED_NAN_ROW, "value", torch_rows.masked_softmax_nan_row)),
        _contract("scaled_dot_product_attention", DOCS + PAGES["scaled_dot_product_attention"],
                  Convention(NEG_INF_ROW, "value", torch_rows.attention_neg_inf_row_zero),
                  Convention(NEG_INF_ROW, "grad", torch_rows.attention_neg_inf_row_zero),
                  Convention(BLOCKED_KEY_NAN, "value", torch_rows.attention_blocked_key_nan),
                  Convention(BLOCKED_KEY_NAN, "grad", torch_rows.attention_blocked_key_nan)),
    ]
    from conformance.peers.torch_cuda import PEER_OPS    # imports without torch
    named = {c.op for c in table}
    table += [_contract(op.label, DOCS + PAGES[op.label]) for op in PEER_OPS
              if op.label not in named]
    return {f"aten.{c.op}": c for c in table}


def with_conventions() -> dict[str, PeerContract]:
    """The contracts that state a convention of their own (the others state only semantics and
    accuracy)."""
    return {name: c for name, c in contracts().items() if c.conventions}


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
