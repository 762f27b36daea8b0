"""JAX's contract for the ops `conformance.peers.jax_xla` audits: the conventions where JAX (0.10,
XLA) keeps its own rule instead of TorchLean's (docs/OPS.md), each with its source. JAX documents
none of them (its gradient conventions live in its JVP rules, jax/_src/lax/lax.py), so each is
listed as undocumented; what JAX's maintainers state is policy, not a value rule, and sits in the
entries' numerical policy (conformance/peers/jax_xla.py: jax_policy). JAX documents no accuracy of
any op (XLA's CPU and GPU backends use their own approximations), so every contract's accuracy is
undocumented (conformance/peers/accuracy.py).

Each rule is JAX's JVP rule in float32 NumPy on the kernel's own forward output; the judge counts
an element as a difference only where the kernel returned that value exactly
(conformance/peers/classify.py)."""
from __future__ import annotations

import functools

from conformance.peers import rules as R
from conformance.peers.contract import Clause, Convention, PeerContract

LAX = "jax-ml/jax: jax/_src/lax/lax.py"
DOCS = "https://docs.jax.dev/en/latest/_autosummary/"

TIE_OPERAND = Clause(
    "tie-returns-second-operand", "max(a, b), min(a, b) and clip's bounds return the second "
    "operand of a tie (so maximum(-0, +0) is +0)", LAX + " (max_p, min_p lowering)",
    documented=False)
NAN_TO_NEITHER = Clause(
    "nan-gradient-to-neither", "max/min's JVP selects by comparison: where an operand is NaN "
    "neither gets the gradient (both 0; TorchLean gives g to the NaN)", LAX + " (_balanced_eq)",
    documented=False)
ABS_SELECT = Clause(
    "abs-gradient-select", "abs's JVP is select(x >= 0, g, -g): g at 0 and -g (as 0 - g) at NaN "
    "(TorchLean: 0 and NaN)", LAX + " (abs_p's JVP)", documented=False)
CLAMP_BOUNDS = Clause(
    "clamp-gradient-at-bounds", "clip is min(max(x, lo), hi) and each tie halves g: g/2 at a "
    "bound, g/4 where lo = hi = x (TorchLean: 0 at the bounds)",
    "jax-ml/jax: jax/_src/numpy/ufuncs.py clip", documented=False)
DAZ_PARAMETER = Clause(
    "subnormal-parameter-read-as-zero", "on the CPU a subnormal scalar (scale's alpha) is read as "
    "zero too, as every subnormal operand is there (FTZ and DAZ, as intended)",
    "jax-ml/jax#16200", documented=False)
NAN_THROUGH = Clause(
    "nan-input-nan-gradient", "the chain rule through a NaN input gives NaN (TorchLean's safe_log "
    "gives 0 where the input is not above eps)", LAX + " (log_p, max_p JVPs)", documented=False)
FLOAT32_VJP = Clause(
    "float32-vjp-formula", "the VJP is its JVP rule in float32 on the rounded forward output "
    "(exp: g * ans; reciprocal: g * -(1 / (x x)); sqrt: g * (0.5 / ans); mean: g * (1/n)), which can "
    "round twice, overflow or give 0 * inf = NaN where the exact gradient is finite",
    LAX, documented=False)


def _contract(op: str, doc: str, *conventions: Convention) -> PeerContract:
    return PeerContract("JAX", op, doc, conventions)


@functools.lru_cache(maxsize=1)
def contracts() -> dict[str, PeerContract]:
    """xla.<op> -> JAX's contract, for every op conformance/peers/jax_xla.py audits (JAX_OPS):
    its page and conventions; its accuracy is undocumented throughout (JAX states none)."""
    lt = lambda a, b: a < b   # noqa: E731
    gt = lambda a, b: a > b   # noqa: E731
    table = [
        _contract("max", DOCS + "jax.numpy.maximum.html",
                  Convention(TIE_OPERAND, "value", R.tie_second_operand),
                  Convention(NAN_TO_NEITHER, "grad", R.minmax_grad_nan_to_neither),
                  Convention(TIE_OPERAND, "grad", R.minmax_grad(lt, R.a_tie))),
        _contract("min", DOCS + "jax.numpy.minimum.html",
                  Convention(TIE_OPERAND, "value", R.tie_second_operand),
                  Convention(NAN_TO_NEITHER, "grad", R.minmax_grad_nan_to_neither),
                  Convention(TIE_OPERAND, "grad", R.minmax_grad(gt, R.a_tie))),
        _contract("clamp", DOCS + "jax.numpy.clip.html",
                  Convention(TIE_OPERAND, "value", R.clamp_ties),
                  Convention(CLAMP_BOUNDS, "grad", R.clamp_grad_halved_ties)),
        _contract("abs", DOCS + "jax.numpy.abs.html",
                  Convention(ABS_SELECT, "grad", R.abs_grad_select)),
        _contract("safe_log", DOCS + "jax.numpy.log.html",
                  Convention(NAN_THROUGH, "grad", R.nan_input_nan_grad)),
        _contract("exp", DOCS + "jax.numpy.exp.html",
                  Convention(FLOAT32_VJP, "grad", R.exp_grad_from_output)),
        _contract("inv", DOCS + "jax.numpy.reciprocal.html",
                  Convention(FLOAT32_VJP, "grad", R.inv_grad_integer_pow)),
        _contract("scale", DOCS + "jax.numpy.multiply.html",
                  Convention(DAZ_PARAMETER, "value", R.scale_daz_alpha)),
        _contract("sqrt", DOCS + "jax.numpy.sqrt.html",
                  Convention(FLOAT32_VJP, "grad", R.sqrt_grad_half_over_output)),
        _contract("reduce_mean", DOCS + "jax.numpy.mean.html",
                  Convention(FLOAT32_VJP, "grad", R.mean_grad_reciprocal)),
        _contract("mse_loss", DOCS + "jax.numpy.mean.html",
                  Convention(FLOAT32_VJP, "grad", R.mse_grad_float32)),
    ]
    from conformance.peers.jax_xla import JAX_OPS     # imports without jax
    named = {c.op for c in table}
    table += [_contract(op.label, DOCS + PAGES.get(op.label, "jax.numpy.html"))
              for op in JAX_OPS if op.label not in named]
    return {f"xla.{c.op}": c for c in table}


def with_conventions() -> dict[str, PeerContract]:
    """The contracts that state a convention of their own."""
    return {name: c for name, c in contracts().items() if c.conventions}


# op -> the page that documents it, for the ops without a convention
PAGES = {"add": "jax.numpy.add.html", "sub": "jax.numpy.subtract.html",
         "mul": "jax.numpy.multiply.html", "relu": "jax.nn.relu.html",
         "gelu": "jax.nn.gelu.html", "sigmoid": "jax.nn.sigmoid.html",
         "tanh": "jax.numpy.tanh.html", "softplus": "jax.nn.softplus.html",
         "log": "jax.numpy.log.html", "sin": "jax.numpy.sin.html", "cos": "jax.numpy.cos.html",
         "softmax": "jax.nn.softmax.html", "log_softmax": "jax.nn.log_softmax.html",
         "reduce_sum": "jax.numpy.sum.html", "matmul": "jax.numpy.matmul.html"}
