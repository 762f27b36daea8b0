"""mpmath references, one module per op named like the op; get(op) returns the module (forward, vjp)."""

import importlib
from types import ModuleType

OPS = (
    "add", "sub", "mul", "max", "min", "scale", "abs", "sqrt", "clamp", "relu", "gelu", "sigmoid", "tanh",
    "softplus", "exp", "log", "sin", "cos", "inv", "safe_log", "rand_uniform", "bernoulli_mask",
    "reduce_sum", "reduce_mean", "softmax", "log_softmax", "hard_masked_softmax", "mse_loss", "reshape",
    "permute", "broadcast", "concat", "slice", "gather", "scatter_add", "matmul", "linear",
    "layer_norm", "batch_norm", "scaled_dot_product_attention",
)


class UnknownReferenceError(KeyError):
    """No reference module exists for the requested op."""


def get(op_name: str) -> ModuleType:
    """The reference module for op_name (with forward, and vjp unless the op is random)."""
    if op_name not in OPS:
        raise UnknownReferenceError(
            f"no reference for op {op_name!r}; known ops: {', '.join(OPS)}"
        )
    return importlib.import_module(f"{__name__}.{op_name}")
