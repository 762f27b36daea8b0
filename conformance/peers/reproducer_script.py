"""The text of a reproducer script (reproducer.py decides what it reproduces and why): the peer's
expression copied from conformance/peers/expressions.py, the recorded case as literals, the run
(forward, or the VJP through the peer's own autodiff with the recorded cotangent) and the test.

Everything taken from the replay file enters the script through repr() of a value reproducer.py
has checked (hex strings, whole numbers, floats, booleans, names from fixed sets), never as text
spliced in: a replay file is data, and a script written from it must not run what it holds.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from conformance.peers.expressions import PeerTable, source

# per peer module: the standard-library modules its script imports besides sys, how a script
# places an array on the device, brings one back to NumPy, picks the device, and runs the forward
# and the VJP. @X@ marks are filled by _fill.
_TORCH = {
    "stdlib": "",
    "device": '# the device of the finding; `python this.py cpu` runs another kernel\n'
              'DEVICE = sys.argv[1] if len(sys.argv) > 1 else @DEVICE@\n',
    "tensor": "    return torch.from_numpy(bits.reshape(shape).copy()).to(DEVICE)\n",
    "host": "    return np.asarray(t.detach().cpu().numpy())\n",
    "forward": "    with torch.no_grad():\n"
               "        return [host(peer(*INPUTS, **P))]\n",
    "vjp": "    leaves = [x.detach().requires_grad_(True) for x in INPUTS]\n"
           "    with torch.enable_grad():\n"
           "        out = peer(*leaves, **P)\n"
           "        grads = torch.autograd.grad(out, leaves, COTANGENT, allow_unused=True)\n"
           "    # an input the output does not depend on: a zero gradient, as the audit took it\n"
           "    return [np.zeros(tuple(x.shape), np.float32) if d is None else host(d)\n"
           "            for x, d in zip(INPUTS, grads)]\n",
    "vjp_words": "torch.autograd.grad of the same function, with the recorded cotangent",
}
_JAX = {
    "stdlib": "",
    "device": '# the platform of the finding; `python this.py gpu` runs another kernel\n'
              'DEVICE = jax.devices(sys.argv[1] if len(sys.argv) > 1 else @DEVICE@)[0]\n',
    "tensor": "    return jax.device_put(bits.reshape(shape), DEVICE)\n",
    "host": "    return np.array(t)\n",
    "forward": "    return [host(peer(*INPUTS, **P))]\n",
    "vjp": "    _, pullback = jax.vjp(lambda *xs: peer(*xs, **P), *INPUTS)\n"
           "    return [host(d) for d in pullback(COTANGENT)]\n",
    "vjp_words": "jax.vjp of the same function, with the recorded cotangent",
}
_CUPY = {
    "stdlib": "import os\n",
    # CuPy runs on its current device; CUPY_TF32 is read at its first float32 matmul (cupy/_core/
    # _routines_linalg.pyx, get_compute_type), so pinned here, before any op, to what the audit
    # ran under (conformance/peers/cupy_peer.py refuses a positive one): float32 products in
    # float32, not TF32
    "device": '# CuPy\'s current device (CUDA_VISIBLE_DEVICES picks another GPU)\n'
              'DEVICE = f"cuda:{cupy.cuda.runtime.getDevice()}"\n'
              "# float32 matmul in float32, as audited (CUPY_TF32 > 0 would let cuBLAS use TF32)\n"
              'os.environ["CUPY_TF32"] = "0"\n',
    "tensor": "    return cupy.asarray(bits.reshape(shape))\n",
    "host": "    return np.asarray(cupy.asnumpy(t))\n",
    "forward": "    return [host(peer(*INPUTS, **P))]\n",
    "vjp": None,
    "vjp_words": "",
}
RUNS = {"torch": _TORCH, "jax": _JAX, "cupy": _CUPY}


@dataclass(frozen=True)
class Spec:
    """What reproducer.py decided: the script's every value, checked."""
    table: PeerTable
    op: str
    capsule: str
    replay_name: str
    device: str                     # the peer's device name: "cuda", or JAX's "cpu"/"gpu"
    inputs: list                    # (hex strings, shape) per input
    params: dict                    # name -> value, or ("array", values, dtype, shape)
    cotangent: tuple | None         # (hex strings, shape) for a VJP finding
    vjp: bool                       # the VJP's finding (else the forward's)
    output: int                     # which output: 0 the forward's; i the gradient of input i
    element: tuple | None           # None: a whole-case finding
    reason: str
    expected: str = ""              # the correctly rounded value's bits, "0x..."
    exact: float = float("nan")
    bound: float | None = None
    mode: str = "bound"             # "bits", "value" (correctly rounded), "bound" or "whole"
    shapes: list | None = None      # a whole-case finding: the output shapes expected, if known
    cls: str = ""                   # the finding's class against the peer's contract
    why: str = ""
    against: str = "peer"           # "peer": exit 1 only for a defect; "torchlean": any failure
    bound_source: str = ""


def _hexes(values: list[str], indent: int) -> str:
    """A list of hex strings, six to a line."""
    rows = [", ".join(repr(h) for h in values[i:i + 6]) for i in range(0, len(values), 6)]
    pad = " " * indent
    return "[" + (",\n" + pad).join(rows) + "]"


def _literal(value) -> str:
    if isinstance(value, tuple) and value and value[0] == "array":
        _, values, dtype, shape = value
        rows = [", ".join(repr(v) for v in values[i:i + 12]) for i in range(0, len(values), 12)]
        return f"array([{(',' + chr(10) + ' ' * 15).join(rows)}], {dtype!r}, {tuple(shape)!r})"
    if isinstance(value, float):
        return f"float({repr(value)!r})"    # inf and nan too, bit for bit
    return repr(value)


def _params(params: dict) -> str:
    if not params:
        return "{}"
    return "{\n" + "".join(f"    {k!r}: {_literal(v)},\n" for k, v in params.items()) + "}"


def _fill(text: str, **values: str) -> str:
    for k, v in values.items():
        text = text.replace(f"@{k}@", v)
    return text


_CHECK = '''
try:
    outputs = run()
except Exception as exc:   # noqa: BLE001 - a raise is the finding's verdict, shown whole
    print(f"{VERSION} on {DEVICE}: {WHAT}: raises {type(exc).__name__}: {exc}: still fails "
          "(raised)")
    sys.exit(1)
'''

_ELEMENT = '''if outputs[OUTPUT].dtype != np.float32:
    print(f"{VERSION} on {DEVICE}: {WHAT}: the output is now {outputs[OUTPUT].dtype}, not "
          "float32: still fails (wrong-type)")
    sys.exit(1)
try:
    got = np.float32(outputs[OUTPUT][ELEMENT])
except IndexError:
    print(f"{VERSION} on {DEVICE}: {WHAT}: the output's shape is now "
          f"{outputs[OUTPUT].shape}, without the element: still fails (shape-mismatch)")
    sys.exit(1)
got_bits = int(np.array(got).view(np.uint32))
expected = np.array(int(EXPECTED, 16), np.uint32).view(np.float32)
both_nan = bool(np.isnan(got) and np.isnan(expected))
if MODE == "bits":          # the correctly rounded value's own bits (a zero's sign too)
    holds = got_bits == int(EXPECTED, 16) or both_nan
elif MODE == "value":       # the correctly rounded value (either zero for a zero)
    holds = bool(got == expected) or both_nan
elif not (np.isfinite(got) and np.isfinite(expected)):   # a special value must be met
    holds = bool(got == expected) or both_nan
else:
    holds = abs(float(got) - EXACT) <= BOUND
measured = (f"got {float(got)!r} (0x{got_bits:08x}), correctly rounded {float(expected)!r} "
            f"({EXPECTED}), exact {EXACT!r}, " + TEST)
'''

_WHOLE = '''shapes = [tuple(o.shape) for o in outputs]
dtypes = sorted({str(o.dtype) for o in outputs})
holds = dtypes == ["float32"] and (SHAPES is None or shapes == SHAPES)
measured = f"returns {'/'.join(dtypes)} outputs of shapes {shapes}" + (
    "" if SHAPES is None else f" (the contract's: float32, {SHAPES})")
'''

_VERDICT = '''if holds:
    print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: " + (
        "fixed" if DECIDES else "within TorchLean's bound now"))
    sys.exit(0)
if DECIDES:
    print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: still fails ({REASON})")
    sys.exit(1)
print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: outside TorchLean's bound ({REASON})")
print(f"not a defect of {PEER}'s own contract: {CLASS}: {WHY}")
sys.exit(0)
'''


def _docstring(spec: Spec, decides: bool) -> str:
    t = spec.table
    what = ("the VJP" if spec.element is None else f"the gradient of input {spec.output}") \
        if spec.vjp else "the value"
    exits = ("Exit 1 while the finding stands (the test below fails), 0 once it is fixed."
             if decides else f"Exit 0 either way: not a defect of {t.peer}'s, so the script "
             "measures it and says so (`reproduce --against torchlean` writes one that exits 1 "
             "while it misses TorchLean's bound).")
    paragraphs = [f"Reproducer: {t.peer}'s {spec.op} on {spec.device}, {what}: {spec.reason}.",
                  f"Against {t.peer}'s own contract this finding is {spec.cls}: {spec.why}.",
                  f"From the replay file {spec.replay_name} (capsule {spec.capsule}), written by "
                  f"`torchlean-conformance reproduce`. Needs only {t.module} and numpy. {exits}"]
    text = "\n\n".join(textwrap.fill(p, 99) for p in paragraphs) + "\n"
    # a docstring of checked text: no quote or backslash a replay file could have put there
    return '"""' + text.replace("\\", "/").replace('"""', "'''") + '"""\n'


def script(spec: Spec) -> str:
    """The reproducer's text."""
    t, run = spec.table, RUNS[spec.table.module]
    decides = spec.cls == "defect" or spec.against == "torchlean"
    vjp = spec.vjp
    parts = [_docstring(spec, decides),
             run["stdlib"] + "import sys\n\nimport numpy as np\n" + t.imports + "\n",
             t.prelude, _fill(run["device"], DEVICE=repr(spec.device)), t.setup,
             "\n\n" + source(t, spec.op) + "\n\n",
             "def tensor(hexes, shape):\n"
             '    """float32 bits (hex strings) as an array of the peer, bit for bit."""\n'
             "    bits = np.array([int(h, 16) for h in hexes], dtype=np.uint32)"
             ".view(np.float32)\n" + run["tensor"] + "\n\n",
             "def array(values, dtype, shape):\n"
             '    """A mask or index parameter, as NumPy (the peer function places it)."""\n'
             "    return np.array(values, dtype=dtype).reshape(shape)\n\n\n",
             "def host(t):\n" + run["host"] + "\n\n"]
    inputs = ",\n".join(f"    tensor({_hexes(h, 12)}, {tuple(s)!r})" for h, s in spec.inputs)
    parts.append(f"# the shrunk counterexample, bit for bit\nINPUTS = [\n{inputs},\n]\n")
    parts.append(f"P = {_params(spec.params)}\n")
    if vjp:
        h, s = spec.cotangent
        parts.append(f"COTANGENT = tensor({_hexes(h, 21)}, {tuple(s)!r})\n")
    doc = (f"{t.peer}'s {spec.op} " + (f"VJP ({run['vjp_words']})" if vjp else "forward") +
           " on the recorded case.")
    parts.append(f'\n\ndef run():\n    """{doc}"""\n' + run["vjp" if vjp else "forward"])
    what = ("" if not vjp else "VJP of " if spec.element is None else
            f"gradient of input {spec.output} of ") + spec.op + \
        ("" if spec.element is None else f" at element {list(spec.element)}")
    parts.append("\n\n" + "".join(f"{k} = {v}\n" for k, v in (
        ("VERSION", f"{t.peer!r} + ' ' + {t.module}.__version__"),
        ("PEER", repr(t.peer)), ("WHAT", repr(what)), ("REASON", repr(spec.reason)),
        ("CLASS", repr(spec.cls)), ("WHY", repr(spec.why)))))
    parts.append("# exit 1 while it fails: for a defect of the peer's, or as written by "
                 f"`reproduce --against torchlean`\nDECIDES = {decides!r}\n")
    if spec.mode == "whole":
        shapes = None if spec.shapes is None else [tuple(s) for s in spec.shapes]
        parts.append(f"SHAPES = {shapes!r}   # the contract's output shapes (None: unknown)\n")
        parts += [_CHECK, _WHOLE, _VERDICT]
    else:
        test = {"bits": "test: the same bits",
                "value": "test: the correctly rounded value"}.get(
            spec.mode, f"test: |got - exact| <= {spec.bound!r}, {spec.bound_source}")
        parts.append("".join(f"{k} = {v}\n" for k, v in (
            ("OUTPUT", repr(spec.output)),
            ("ELEMENT", repr(tuple(spec.element))),
            ("EXPECTED", repr(spec.expected) + "   # the correctly rounded value's bits"),
            ("EXACT", _literal(float(spec.exact)) + "   # the exact value (float64 nearest)"),
            ("BOUND", _literal(spec.bound) if spec.bound is not None else "None"),
            ("MODE", repr(spec.mode)), ("TEST", repr(test)))))
        parts += [_CHECK, _ELEMENT, _VERDICT]
    return "".join(parts)


def f32_bits(values) -> list[str]:
    """float32 values as the hex strings a script holds (for the tests and the whole-case
    shapes)."""
    return [f"0x{int(v):08x}" for v in np.asarray(values, np.float32).view(np.uint32).ravel()]
