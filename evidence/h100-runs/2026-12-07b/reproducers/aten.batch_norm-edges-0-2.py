"""Reproducer: PyTorch's batch_norm on cuda, the value: raised.

Against PyTorch's own contract this finding is defect: raised on a case the op is defined on:
IndexError: select(): index 0 out of range for tensor of size [0] at dimension 0 (a whole-case
failure is a defect wherever it occurs).

From the replay file aten.batch_norm-edges-0-2.json (capsule aten.batch_norm), written by
`torchlean-conformance reproduce`. Needs only torch and numpy. Exit 1 while the finding stands (the
test below fails), 0 once it is fixed.
"""
import sys

import numpy as np
import torch

F = torch.nn.functional
DEVICE = "cuda"
# the device of the finding; `python this.py cpu` runs another kernel
DEVICE = sys.argv[1] if len(sys.argv) > 1 else 'cuda'
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")


def f32(x):
    """A float parameter rounded to float32 first (docs/OPS.md, calling convention)."""
    return float(np.float32(x))


def peer(x, g, b, eps=1e-5):
    return F.batch_norm(x, None, None, g, b, training=True, eps=f32(eps))


def tensor(hexes, shape):
    """float32 bits (hex strings) as an array of the peer, bit for bit."""
    bits = np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)
    return torch.from_numpy(bits.reshape(shape).copy()).to(DEVICE)


def array(values, dtype, shape):
    """A mask or index parameter, as NumPy (the peer function places it)."""
    return np.array(values, dtype=dtype).reshape(shape)


def host(t):
    return np.asarray(t.detach().cpu().numpy())


# the shrunk counterexample, bit for bit
INPUTS = [
    tensor([], (5, 0, 2)),
    tensor([], (0,)),
    tensor([], (0,)),
]
P = {
    'eps': float('1e-05'),
}


def run():
    """PyTorch's batch_norm forward on the recorded case."""
    with torch.no_grad():
        return [host(peer(*INPUTS, **P))]


VERSION = 'PyTorch' + ' ' + torch.__version__
PEER = 'PyTorch'
WHAT = 'batch_norm'
REASON = 'raised'
CLASS = 'defect'
WHY = 'raised on a case the op is defined on: IndexError: select(): index 0 out of range for tensor of size [0] at dimension 0 (a whole-case failure is a defect wherever it occurs)'
# exit 1 while it fails: for a defect of the peer's, or as written by `reproduce --against torchlean`
DECIDES = True
SHAPES = [(5, 0, 2)]   # the contract's output shapes (None: unknown)

try:
    outputs = run()
except Exception as exc:   # noqa: BLE001 - a raise is the finding's verdict, shown whole
    print(f"{VERSION} on {DEVICE}: {WHAT}: raises {type(exc).__name__}: {exc}: still fails "
          "(raised)")
    sys.exit(1)
shapes = [tuple(o.shape) for o in outputs]
dtypes = sorted({str(o.dtype) for o in outputs})
holds = dtypes == ["float32"] and (SHAPES is None or shapes == SHAPES)
measured = f"returns {'/'.join(dtypes)} outputs of shapes {shapes}" + (
    "" if SHAPES is None else f" (the contract's: float32, {SHAPES})")
if holds:
    print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: " + (
        "fixed" if DECIDES else "within TorchLean's bound now"))
    sys.exit(0)
if DECIDES:
    print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: still fails ({REASON})")
    sys.exit(1)
print(f"{VERSION} on {DEVICE}: {WHAT}: {measured}: outside TorchLean's bound ({REASON})")
print(f"not a defect of {PEER}'s own contract: {CLASS}: {WHY}")
sys.exit(0)
