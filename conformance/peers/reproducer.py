"""A standalone reproducer of a peer's failure, for its maintainers: a short Python script that
imports only the peer (torch or jax) and NumPy, feeds the recorded shrunk counterexample (a replay
file of an `aten.*` or `xla.*` capsule, bit for bit), prints the peer's value beside the correctly
rounded one, the exact value and the bound, and exits 1 while the failure stands, 0 once it is
fixed. `torchlean-conformance reproduce FILE` writes it.

The script states the element's own test: the same bits as the correctly rounded value where the
contract is bitwise (bound none), else |got - exact| <= bound with NaN and infinities matching;
the bound is the one the harness derived for that element (its error model, conformance/
error_models.py), written into the script as a number with where it came from.
"""
from __future__ import annotations

from conformance.replay import read_replay

# op -> (PyTorch expression, JAX expression) of the op's inputs a0, a1 and its parameters P
# (docs/OPS.md; the same functions conformance/peers/torch_cuda.py and jax_xla.py audit)
EXPRESSIONS = {
    "abs": ("torch.abs(a0)", "jnp.abs(a0)"),
    "sqrt": ("torch.sqrt(a0)", "jnp.sqrt(a0)"),
    "relu": ("torch.relu(a0)", "jax.nn.relu(a0)"),
    "exp": ("torch.exp(a0)", "jnp.exp(a0)"),
    "log": ("torch.log(a0)", "jnp.log(a0)"),
    "sin": ("torch.sin(a0)", "jnp.sin(a0)"),
    "cos": ("torch.cos(a0)", "jnp.cos(a0)"),
    "tanh": ("torch.tanh(a0)", "jnp.tanh(a0)"),
    "sigmoid": ("torch.sigmoid(a0)", "jax.nn.sigmoid(a0)"),
    "softplus": ("torch.nn.functional.softplus(a0)", "jax.nn.softplus(a0)"),
    "gelu": ("torch.nn.functional.gelu(a0, approximate='tanh')",
             "jax.nn.gelu(a0, approximate=True)"),
    "inv": ("torch.reciprocal(a0)", "jnp.reciprocal(a0)"),
    "add": ("torch.add(a0, a1)", "jnp.add(a0, a1)"),
    "sub": ("torch.sub(a0, a1)", "jnp.subtract(a0, a1)"),
    "mul": ("torch.mul(a0, a1)", "jnp.multiply(a0, a1)"),
    "max": ("torch.maximum(a0, a1)", "jnp.maximum(a0, a1)"),
    "min": ("torch.minimum(a0, a1)", "jnp.minimum(a0, a1)"),
    "softmax": ("torch.softmax(a0, dim=P['axis'])", "jax.nn.softmax(a0, axis=P['axis'])"),
    "log_softmax": ("torch.log_softmax(a0, dim=P['axis'])",
                    "jax.nn.log_softmax(a0, axis=P['axis'])"),
    "mse_loss": ("torch.nn.functional.mse_loss(a0, a1)", "jnp.mean((a0 - a1) ** 2)"),
    "clamp": ("torch.clamp(a0, P['lo'], P['hi'])", "jnp.clip(a0, P['lo'], P['hi'])"),
    "scale": ("torch.mul(a0, float(np.float32(P['alpha'])))",
              "a0 * jnp.float32(P['alpha'])"),
    "reduce_sum": ("torch.sum(a0, dim=tuple(P['axes'] if P['axes'] is not None else "
                   "range(a0.dim())), keepdim=bool(P['keepdims']))",
                   "jnp.sum(a0, axis=None if P['axes'] is None else tuple(P['axes']), "
                   "keepdims=bool(P['keepdims']))"),
    "reduce_mean": ("torch.mean(a0, dim=tuple(P['axes'] if P['axes'] is not None else "
                    "range(a0.dim())), keepdim=bool(P['keepdims']))",
                    "jnp.mean(a0, axis=None if P['axes'] is None else tuple(P['axes']), "
                    "keepdims=bool(P['keepdims']))"),
}
PEERS = {"aten": "PyTorch", "xla": "JAX"}


class ReproducerError(Exception):
    """The replay file is not one a reproducer can be written for (a usage error)."""


_TORCH = '''import sys
import numpy as np
import torch

DEVICE = {device!r}
torch.backends.cuda.matmul.allow_tf32 = False


def tensor(hexes, shape):
    bits = np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)
    return torch.from_numpy(bits.reshape(shape).copy()).to(DEVICE)


P = {params!r}
{inputs}
version = "PyTorch " + torch.__version__
'''
_TORCH_FORWARD = '''with torch.no_grad():
    got = ({expr})[{element}].item()
'''
_TORCH_VJP = '''for a in (a0, a1)[:{arity}]:
    a.requires_grad_(True)
({expr}).backward(tensor({g_hex!r}, {g_shape!r}))
got = (a0, a1)[{grad}].grad[{element}].item()
'''

_JAX = '''import sys
import numpy as np
import jax
import jax.numpy as jnp

DEVICE = jax.devices({platform!r})[0]


def tensor(hexes, shape):
    bits = np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)
    return jax.device_put(bits.reshape(shape), DEVICE)


P = {params!r}
{inputs}
version = "JAX " + jax.__version__
'''
_JAX_FORWARD = '''got = float(np.asarray({expr})[{element}])
'''
_JAX_VJP = '''_, pullback = jax.vjp(lambda a0, a1=None: {expr}, *(a0, a1)[:{arity}])
got = float(np.asarray(pullback(tensor({g_hex!r}, {g_shape!r}))[{grad}])[{element}])
'''

_CHECK = '''
EXPECTED = {expected!r}   # the correctly rounded value's bits
EXACT = {exact!r}   # the exact value (float64 nearest)
BOUND = {bound!r}   # None: bitwise; else |got - exact| <= BOUND ({bound_source})
got_bits = int(np.array([got], np.float32).view(np.uint32)[0])
expected = float(np.array([int(EXPECTED, 16)], np.uint32).view(np.float32)[0])
if BOUND is None:
    holds = got_bits == int(EXPECTED, 16) or (np.isnan(got) and np.isnan(expected))
elif np.isnan(expected) or np.isinf(expected) or np.isnan(got) or np.isinf(got):
    holds = (np.isnan(got) and np.isnan(expected)) or got == expected
else:
    holds = abs(got - float(EXACT)) <= BOUND
print(f"{{version}}: {what}: got {{got!r}} (0x{{got_bits:08x}}), correctly rounded {{expected!r}} "
      f"({{EXPECTED}}), exact {{EXACT}}, bound {{BOUND}}: " + ("fixed" if holds else
      "still fails ({reason})"))
sys.exit(0 if holds else 1)
'''


def _array_line(name: str, d: dict | None) -> str:
    if d is None:
        return f"{name} = None"
    return f"{name} = tensor({d['data']!r}, {tuple(d['shape'])!r})"


def reproducer(path) -> str:
    """The script for the first recorded failure of a peer's replay file."""
    data = read_replay(path)
    prefix = str(data.get("capsule", "")).split(".", 1)[0]
    if prefix not in PEERS:
        raise ReproducerError(f"replay file {path} is of capsule `{data.get('capsule')}`; a "
                              "reproducer is written for a peer's (aten.* PyTorch, xla.* JAX)")
    case, failure = data["case"], (data.get("failures") or [None])[0]
    op = case["op"]
    if op not in EXPRESSIONS:
        raise ReproducerError(f"replay file {path}: no reproducer template for op `{op}` yet "
                              f"(ops: {', '.join(sorted(EXPRESSIONS))})")
    if not failure or not failure.get("element") and failure.get("expected") in ("", None):
        raise ReproducerError(f"replay file {path} records no element failure to reproduce")
    vjp = failure["output"].startswith("grad")
    inputs = case["inputs"]
    torch_expr, jax_expr = EXPRESSIONS[op]
    if prefix == "aten":
        template, expr = _TORCH + (_TORCH_VJP if vjp else _TORCH_FORWARD), torch_expr
    else:
        template, expr = _JAX + (_JAX_VJP if vjp else _JAX_FORWARD), jax_expr
    lines = "\n".join([_array_line("a0", inputs[0]),
                       _array_line("a1", inputs[1] if len(inputs) > 1 else None)])
    g = case.get("cotangent") or {"data": [], "shape": []}
    element = tuple(failure["element"])
    what = (f"{'the gradient ' + failure['output'] + ' of ' if vjp else ''}{op}"
            f"{'' if not case.get('params') else ' ' + str(case['params'])} at element "
            f"{list(element)} of inputs {[d['data'][:4] for d in inputs]}")
    device = data.get("device", "cpu")
    body = template.format(device=device, platform="gpu" if device == "cuda" else "cpu",
                           params=case.get("params") or {},
                           inputs=lines, vjp=vjp, arity=len(inputs), expr=expr,
                           g_hex=g["data"], g_shape=tuple(g["shape"]),
                           grad=int(failure["output"][5:-1]) if vjp else 0,
                           element=element if element else ())
    check = _CHECK.format(expected=failure["expected"], exact=failure.get("exact"),
                          bound=failure.get("bound"), reason=failure["reason"],
                          what=what.replace("{", "{{").replace("}", "}}"),   # in an f-string
                          bound_source="the harness's derived bound for this element")
    header = (f'"""Reproducer: {PEERS[prefix]}\'s {op} on {data.get("device")} fails TorchLean\'s '
              f'contract\n({failure["reason"]}; from {path.name if hasattr(path, "name") else path}'
              f', written by torchlean-conformance reproduce).\nNeeds only '
              f'{"torch" if prefix == "aten" else "jax"} and numpy. Exit 1: still fails; 0: '
              f'fixed."""\n')
    return header + body + check


def configure(p) -> None:
    p.add_argument("file", help="a replay file of a peer's capsule (aten.*, xla.*)")
    p.add_argument("--out", default=None,
                   help="write the script here (default: standard output)")


def main(args) -> int:
    import sys
    from pathlib import Path
    from conformance.jsonfile import write_atomic
    try:
        script = reproducer(Path(args.file))
    except ReproducerError as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return 2
    if args.out:
        write_atomic(args.out, script)
        print(f"wrote {args.out}: run it where the peer is installed (exit 1: still fails)")
    else:
        sys.stdout.write(script)
    return 0
