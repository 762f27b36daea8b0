"""What a user of each peer writes for each of our ops, as source text: the one source both the
peer plugins (conformance/peers/torch_cuda.py, jax_xla.py, cupy_peer.py) and the standalone
reproducers (reproducer.py) are made from. A plugin compiles the text into the functions it audits
(`functions`); a reproducer copies the same text into its script (`source`). So what a script
calls is, character for character, what the audit called, and a change to one is a change to both.

A table per peer, keyed by the capsule prefix its plugin names its entries with (`aten` PyTorch,
`xla` JAX, `cupy_peer` CuPy). Each entry is the op's label -> its signature (the op's inputs
positionally, then its parameters by the names docs/OPS.md gives them) and its body, an expression
that may call the peer's helpers (small functions, also text, such as `f32`: a float parameter
rounded to float32 first, the calling convention). The names a body may use are the peer's
module, `np`, the helpers and what the table's prelude or imports bind (F and DEVICE for
PyTorch, jnp for JAX, cupyx for CuPy: its extension package, shipped in CuPy's own wheel); a
script binds the same names at its top, importing nothing but the peer and NumPy.

CuPy's table holds every op cupy_peer.py audits (its CUPY_OPS): the plugin compiles it with
`cupy`/`cupyx` bound to CuPy, and its tests with NumPy/SciPy stand-ins bound to the same names
(CuPy's API is theirs), so what tests/test_peer_cupy.py runs on the CPU is this text too. CuPy has
no autodiff: no VJP expression, and reproducer.py writes forwards only for it.
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Expression:
    """`def peer(<signature>): return <body>`; `helpers` names the helper functions the body
    calls, directly or through another helper (written before it, in the table's order)."""
    signature: str
    body: str
    helpers: tuple[str, ...] = ()


@dataclass(frozen=True)
class PeerTable:
    """One peer's expressions and what its scripts need around them."""
    peer: str                       # the peer's name in words: "PyTorch"
    module: str                     # the peer's top-level module: "torch"
    plugin: str                     # the plugin module whose entries these are
    imports: str                    # a script's import lines of the peer
    prelude: str                    # names the bodies use, bound from the peer's module and np
    setup: str                      # statements the plugin and a script run before any op
    helpers: dict[str, str]         # helper name -> its source (a def), in dependency order
    ops: dict[str, Expression]
    autodiff: str | None            # "torch", "jax", or None: no VJP expression
    install: str = ""


# --- PyTorch (conformance/peers/torch_cuda.py) ---------------------------------------------------

_TORCH_HELPERS = {
    "f32": '''def f32(x):
    """A float parameter rounded to float32 first (docs/OPS.md, calling convention)."""
    return float(np.float32(x))
''',
    "device_param": '''def device_param(x, dtype):
    """A mask or index parameter (NumPy, CuPy or a sequence) as a tensor on DEVICE."""
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):   # a CuPy array
        return torch.from_dlpack(x.view("uint8") if x.dtype == bool else x).to(dtype)
    return torch.as_tensor(np.asarray(x), device=DEVICE).to(dtype)
''',
    "reduce": '''def reduce(fn, a, axes, keepdims):
    """fn over `axes` (all of them for None); no axis to reduce (or a 0-d input): the identity,
    -0 kept."""
    dims = tuple(range(a.dim())) if axes is None else tuple(int(x) for x in axes)
    if not dims:
        return a.clone()
    return fn(a, dim=dims, keepdim=bool(keepdims))
''',
    "masked_softmax": '''def masked_softmax(a, mask, axis):
    """softmax over the unmasked entries of each row; a row with none is zeros (docs/OPS.md)."""
    m = device_param(mask, torch.bool)
    live = m.any(dim=axis, keepdim=True)
    x = torch.where(live, a.masked_fill(~m, float("-inf")), torch.zeros_like(a))
    return torch.where(live, torch.softmax(x, dim=axis), torch.zeros_like(a))
''',
}

_E = Expression
TORCH = PeerTable(
    peer="PyTorch", module="torch", plugin="conformance.peers.torch_cuda",
    imports="import torch\n", prelude='F = torch.nn.functional\nDEVICE = "cuda"\n',
    # float32 matmul in float32: the contract, and what the cuBLAS capsules do
    setup=("torch.backends.cuda.matmul.allow_tf32 = False\n"
           "torch.backends.cudnn.allow_tf32 = False\n"
           'torch.set_float32_matmul_precision("highest")\n'),
    helpers=_TORCH_HELPERS, autodiff="torch",
    install="a CUDA build of PyTorch (https://pytorch.org)",
    ops={
        "add": _E("a, b", "torch.add(a, b)"),
        "sub": _E("a, b", "torch.sub(a, b)"),
        "mul": _E("a, b", "torch.mul(a, b)"),
        "max": _E("a, b", "torch.maximum(a, b)"),
        "min": _E("a, b", "torch.minimum(a, b)"),
        "scale": _E("a, alpha", "torch.mul(a, f32(alpha))", ("f32",)),
        "abs": _E("a", "torch.abs(a)"),
        "sqrt": _E("a", "torch.sqrt(a)"),
        "relu": _E("a", "torch.relu(a)"),
        "clamp": _E("a, lo, hi", "torch.clamp(a, f32(lo), f32(hi))", ("f32",)),
        "gelu": _E("a", 'F.gelu(a, approximate="tanh")'),
        "sigmoid": _E("a", "torch.sigmoid(a)"),
        "tanh": _E("a", "torch.tanh(a)"),
        "softplus": _E("a", "F.softplus(a)"),
        "exp": _E("a", "torch.exp(a)"),
        "log": _E("a", "torch.log(a)"),
        "sin": _E("a", "torch.sin(a)"),
        "cos": _E("a", "torch.cos(a)"),
        "inv": _E("a", "torch.reciprocal(a)"),
        # clamp_min keeps NaN, as log(max(a, eps)) must
        "safe_log": _E("a, eps=1e-12", "torch.log(torch.clamp_min(a, f32(eps)))", ("f32",)),
        "softmax": _E("a, axis=-1", "torch.softmax(a, dim=axis)"),
        "log_softmax": _E("a, axis=-1", "torch.log_softmax(a, dim=axis)"),
        "hard_masked_softmax": _E("a, mask, axis=-1", "masked_softmax(a, mask, axis)",
                                  ("device_param", "masked_softmax")),
        "reduce_sum": _E("a, axes=None, keepdims=False", "reduce(torch.sum, a, axes, keepdims)",
                         ("reduce",)),
        "reduce_mean": _E("a, axes=None, keepdims=False",
                          "reduce(torch.mean, a, axes, keepdims)", ("reduce",)),
        "mse_loss": _E("p, q", "F.mse_loss(p, q)"),
        "reshape": _E("a, shape", "a.reshape(tuple(shape))"),
        "permute": _E("a, perm", "a.permute(tuple(perm)).contiguous()"),
        "broadcast": _E("a, shape", "a.expand(tuple(shape)).contiguous()"),
        "concat": _E("*arrays, axis", "torch.cat(arrays, dim=axis)"),
        "slice": _E("a, axis, start, stop", "a.narrow(axis, start, stop - start).contiguous()"),
        "gather": _E("a, axis, indices",
                     "torch.index_select(a, axis, device_param(indices, torch.int64))",
                     ("device_param",)),
        "scatter_add": _E("base, src, axis, indices",
                          "base.index_add(axis, device_param(indices, torch.int64), src)",
                          ("device_param",)),
        "layer_norm": _E("x, g, b, eps=1e-5",
                         "F.layer_norm(x, (x.shape[-1],), g, b, eps=f32(eps))", ("f32",)),
        "batch_norm": _E("x, g, b, eps=1e-5",
                         "F.batch_norm(x, None, None, g, b, training=True, eps=f32(eps))",
                         ("f32",)),
        "scaled_dot_product_attention": _E(
            "q, k, v, mask=None, scale=None",
            "F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else "
            "device_param(mask, torch.bool), scale=None if scale is None else f32(scale))",
            ("f32", "device_param")),
        "matmul": _E("a, b, trans_a=False, trans_b=False",
                     "torch.matmul(a.mT if trans_a else a, b.mT if trans_b else b)"),
        "linear": _E("x, w, b=None", "F.linear(x, w, b)"),
    })

# --- JAX (conformance/peers/jax_xla.py) ----------------------------------------------------------

_JAX_HELPERS = {"f32": _TORCH_HELPERS["f32"]}
_SWAP = "jnp.swapaxes({0}, -1, -2) if trans_{1} else {0}"

JAX = PeerTable(
    peer="JAX", module="jax", plugin="conformance.peers.jax_xla",
    imports="import jax\nimport jax.numpy\n", prelude="jnp = jax.numpy\n", setup="",
    helpers=_JAX_HELPERS, autodiff="jax",
    install="jax (pip install jax; on a GPU, 'jax[cuda13]')",
    ops={
        "add": _E("a, b", "jnp.add(a, b)"),
        "sub": _E("a, b", "jnp.subtract(a, b)"),
        "mul": _E("a, b", "jnp.multiply(a, b)"),
        "max": _E("a, b", "jnp.maximum(a, b)"),
        "min": _E("a, b", "jnp.minimum(a, b)"),
        "scale": _E("a, alpha", "a * jnp.float32(f32(alpha))", ("f32",)),
        "abs": _E("a", "jnp.abs(a)"),
        "sqrt": _E("a", "jnp.sqrt(a)"),
        "relu": _E("a", "jax.nn.relu(a)"),
        "clamp": _E("a, lo, hi", "jnp.clip(a, jnp.float32(f32(lo)), jnp.float32(f32(hi)))",
                    ("f32",)),
        "gelu": _E("a", "jax.nn.gelu(a, approximate=True)"),
        "sigmoid": _E("a", "jax.nn.sigmoid(a)"),
        "tanh": _E("a", "jnp.tanh(a)"),
        "softplus": _E("a", "jax.nn.softplus(a)"),
        "exp": _E("a", "jnp.exp(a)"),
        "log": _E("a", "jnp.log(a)"),
        "sin": _E("a", "jnp.sin(a)"),
        "cos": _E("a", "jnp.cos(a)"),
        "inv": _E("a", "jnp.reciprocal(a)"),
        "safe_log": _E("a, eps=1e-12", "jnp.log(jnp.maximum(a, jnp.float32(f32(eps))))",
                       ("f32",)),
        "softmax": _E("a, axis=-1", "jax.nn.softmax(a, axis=axis)"),
        "log_softmax": _E("a, axis=-1", "jax.nn.log_softmax(a, axis=axis)"),
        "reduce_sum": _E("a, axes=None, keepdims=False",
                         "jnp.sum(a, axis=None if axes is None else tuple(axes), "
                         "keepdims=bool(keepdims))"),
        "reduce_mean": _E("a, axes=None, keepdims=False",
                          "jnp.mean(a, axis=None if axes is None else tuple(axes), "
                          "keepdims=bool(keepdims))"),
        "mse_loss": _E("p, q", "jnp.mean((p - q) ** 2)"),
        "matmul": _E("a, b, trans_a=False, trans_b=False",
                     f"jnp.matmul({_SWAP.format('a', 'a')}, {_SWAP.format('b', 'b')}, "
                     "precision='highest')"),   # JAX's default is TF32 on Ampere and later
    })

# --- CuPy (conformance/peers/cupy_peer.py) -------------------------------------------------------

# The names a CuPy body uses: `cupy`, `cupyx` (CuPy's own extension package, shipped in the same
# wheel: cupyx.scipy.special's expit, softmax, log_softmax and cupyx.scatter_add) and `np`.
# NumPy's float32 scalar for a float parameter, as cupy_peer always passed it (a float32 kernel).
_CUPY_HELPERS = {
    "f32": _TORCH_HELPERS["f32"],
    "s32": '''def s32(x):
    """A float parameter as the float32 scalar a float32 kernel takes, rounded first."""
    return np.float32(f32(x))
''',
    "axis_index": '''def axis_index(a, axis, index):
    """The index tuple of `index` (an int array or a slice) along `axis` of `a`."""
    return (slice(None),) * (int(axis) % a.ndim) + (index,)
''',
    "reduce": '''def reduce(fn, a, axes, keepdims):
    """fn (cupy.sum, cupy.mean) over `axes` (all of them for None)."""
    axis = None if axes is None else tuple(int(i) for i in axes)
    return fn(a, axis=axis, keepdims=bool(keepdims))
''',
    "mt": '''def mt(a, flag):
    """`a` with its last two axes swapped where `flag` (matmul's trans_a, trans_b)."""
    return cupy.swapaxes(a, -1, -2) if flag else a
''',
    "index_add": '''def index_add(base, src, axis, indices):
    """base + src added at `indices` along `axis` (repeated indices accumulate), on a copy."""
    out = base.copy()
    at = axis_index(base, axis, cupy.asarray(indices, dtype=np.int64))
    cupyx.scatter_add(out, at, src)
    return out
''',
}
_SPECIAL = "cupyx.scipy.special"
_INTS = "tuple(int(n) for n in {})"

CUPY = PeerTable(
    peer="CuPy", module="cupy", plugin="conformance.peers.cupy_peer",
    imports="import cupy\nimport cupyx\nimport cupyx.scipy.special\n", prelude="", setup="",
    helpers=_CUPY_HELPERS, autodiff=None,
    install="CuPy for your CUDA version (pip install cupy-cuda13x) on a machine with a GPU",
    ops={
        "add": _E("a, b", "cupy.add(a, b)"),
        "sub": _E("a, b", "cupy.subtract(a, b)"),
        "mul": _E("a, b", "cupy.multiply(a, b)"),
        # NaN propagates (CuPy's page: "If NaN appears, it returns the NaN")
        "max": _E("a, b", "cupy.maximum(a, b)"),
        "min": _E("a, b", "cupy.minimum(a, b)"),
        "scale": _E("a, alpha", "cupy.multiply(a, s32(alpha))", ("f32", "s32")),
        "abs": _E("a", "cupy.abs(a)"),
        "sqrt": _E("a", "cupy.sqrt(a)"),
        # NumPy and CuPy have no relu; maximum(a, 0) is what their users write and the form whose
        # documented semantics are relu's contract: NaN propagates, 0 for a < 0 (a * (a > 0)
        # gives NaN at -inf and -0 for negatives; where(a > 0, a, 0) drops NaN)
        "relu": _E("a", "cupy.maximum(a, s32(0))", ("f32", "s32")),
        "clamp": _E("a, lo, hi", "cupy.clip(a, s32(lo), s32(hi))", ("f32", "s32")),
        "sigmoid": _E("a", f"{_SPECIAL}.expit(a)"),
        "tanh": _E("a", "cupy.tanh(a)"),
        # softplus as NumPy's documented logaddexp(a, 0) = log(exp(a) + exp(0))
        "softplus": _E("a", "cupy.logaddexp(a, s32(0))", ("f32", "s32")),
        "exp": _E("a", "cupy.exp(a)"),
        "log": _E("a", "cupy.log(a)"),
        "sin": _E("a", "cupy.sin(a)"),
        "cos": _E("a", "cupy.cos(a)"),
        "inv": _E("a", "cupy.reciprocal(a)"),
        "safe_log": _E("a, eps=1e-12", "cupy.log(cupy.maximum(a, s32(eps)))", ("f32", "s32")),
        "softmax": _E("a, axis=-1", f"{_SPECIAL}.softmax(a, axis=int(axis))"),
        "log_softmax": _E("a, axis=-1", f"{_SPECIAL}.log_softmax(a, axis=int(axis))"),
        "reduce_sum": _E("a, axes=None, keepdims=False", "reduce(cupy.sum, a, axes, keepdims)",
                         ("reduce",)),
        "reduce_mean": _E("a, axes=None, keepdims=False",
                          "reduce(cupy.mean, a, axes, keepdims)", ("reduce",)),
        # square, not ** 2: CuPy's power is powf(x, 2.0f), a library call of its own
        "mse_loss": _E("p, q", "cupy.mean(cupy.square(cupy.subtract(p, q)))"),
        # cuBLAS; CUPY_TF32 unset or 0 (cupy_peer.check_tf32): float32 products in float32
        "matmul": _E("a, b, trans_a=False, trans_b=False",
                     "cupy.matmul(mt(a, trans_a), mt(b, trans_b))", ("mt",)),
        "reshape": _E("a, shape", f"cupy.reshape(a, {_INTS.format('shape')})"),
        "permute": _E("a, perm", f"cupy.transpose(a, {_INTS.format('perm')})"),
        "broadcast": _E("a, shape", f"cupy.broadcast_to(a, {_INTS.format('shape')})"),
        "concat": _E("*arrays, axis", "cupy.concatenate(arrays, axis=int(axis))"),
        "slice": _E("a, axis, start, stop",
                    "a[axis_index(a, axis, slice(int(start), int(stop)))]", ("axis_index",)),
        "gather": _E("a, axis, indices",
                     "cupy.take(a, cupy.asarray(indices, dtype=np.int64), axis=int(axis))"),
        "scatter_add": _E("base, src, axis, indices", "index_add(base, src, axis, indices)",
                          ("axis_index", "index_add")),
    })

# capsule prefix -> the peer's table (the prefix its plugin names its entries with; `cupy.` is
# another plugin's, fixtures/plugins/cupy_ufuncs.py's exhaustive sweeps: not CuPy's table's)
PEERS = {"aten": TORCH, "xla": JAX, "cupy_peer": CUPY}


class ExpressionError(Exception):
    """An op a peer's table has no expression of (what was asked, what the table holds)."""


def expression(table: PeerTable, op: str) -> Expression:
    try:
        return table.ops[op]
    except KeyError:
        raise ExpressionError(
            f"{table.peer}'s expression table (conformance/peers/expressions.py) has no op "
            f"`{op}`; it has {', '.join(sorted(table.ops))}: add the op's expression there (the "
            f"plugin {table.plugin} and its reproducers both read it)") from None


def helper_names(table: PeerTable, ops) -> list[str]:
    """The helpers the ops' bodies call, in the table's (dependency) order."""
    wanted = {h for op in ops for h in expression(table, op).helpers}
    return [h for h in table.helpers if h in wanted]


def definition(table: PeerTable, op: str, name: str = "peer") -> str:
    """`def <name>(<signature>): return <body>` of `op`."""
    e = expression(table, op)
    return f"def {name}({e.signature}):\n    return {e.body}\n"


def source(table: PeerTable, op: str, name: str = "peer") -> str:
    """The helpers `op` needs and its definition, as a script holds them: the text `functions`
    compiles for the plugin."""
    return "\n\n".join([table.helpers[h] for h in helper_names(table, [op])]
                       + [definition(table, op, name)])


def _compiled(text: str, name: str):
    """`text` compiled under a file name inside this module's path (so the harness's traceback
    filter, conformance/isolation/kernel_side.py, keeps counting these frames as the harness's,
    as it did the plugins' own lambdas) and registered with linecache (so a traceback shows the
    expression's line)."""
    filename = f"{__file__}::{name}"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    return compile(text, filename, "exec")


def run_setup(table: PeerTable, modules: dict) -> None:
    """The statements a peer runs before any op (PyTorch: TF32 off), on the imported `modules`
    (name -> module: {"torch": torch})."""
    if table.setup:
        exec(_compiled(table.setup, f"{table.module}.setup"), dict(modules))  # noqa: S102


def functions(table: PeerTable, modules: dict, ops=None) -> dict[str, Callable]:
    """op -> the compiled function of every op of `ops` (default: the whole table). `modules`
    binds the peer's module and NumPy ({"torch": torch, "np": numpy}); the prelude, the helpers
    and the definitions run in a namespace of their own, as a script's top level does. The text
    is this module's constants, never data from a file."""
    ops = list(table.ops if ops is None else ops)
    ns = dict(modules)
    exec(_compiled(table.prelude, f"{table.module}.prelude"), ns)   # noqa: S102
    for h in helper_names(table, ops):
        exec(_compiled(table.helpers[h], f"{table.module}.{h}"), ns)   # noqa: S102
    out = {}
    for op in ops:
        local: dict = {}
        exec(_compiled(definition(table, op), f"{table.module}.{op}"), ns, local)  # noqa: S102
        out[op] = local["peer"]
    return out
