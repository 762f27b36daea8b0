"""Reproducer: PyTorch's sigmoid on cuda, the value: flushed-subnormal.

Against PyTorch's own contract this finding is defect: no correct digit: |got - exact| >= |exact|
(relative error 1, a subnormal result flushed to zero); PyTorch's page
(https://pytorch.org/docs/stable/generated/torch.sigmoid.html) states no flush and no such loss.

From the replay file aten.sigmoid-edges-3.json (capsule aten.sigmoid), written by `torchlean-
conformance reproduce`. Needs only torch and numpy. Exit 1 while the finding stands (the test below
fails), 0 once it is fixed.
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


def peer(a):
    return torch.sigmoid(a)


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
    tensor(['0xc2b17cda'], ()),
]
P = {}


def run():
    """PyTorch's sigmoid forward on the recorded case."""
    with torch.no_grad():
        return [host(peer(*INPUTS, **P))]


VERSION = 'PyTorch' + ' ' + torch.__version__
PEER = 'PyTorch'
WHAT = 'sigmoid at element []'
REASON = 'flushed-subnormal'
CLASS = 'defect'
WHY = "no correct digit: |got - exact| >= |exact| (relative error 1, a subnormal result flushed to zero); PyTorch's page (https://pytorch.org/docs/stable/generated/torch.sigmoid.html) states no flush and no such loss"
# exit 1 while it fails: for a defect of the peer's, or as written by `reproduce --against torchlean`
DECIDES = True
OUTPUT = 0
ELEMENT = ()
EXPECTED = '0x001f55ab'   # the correctly rounded value's bits
EXACT = float('2.8776325324898228e-39')   # the exact value (float64 nearest)
BOUND = float('2.802596928649634e-45')
MODE = 'bound'
TEST = "test: |got - exact| <= 2.802596928649634e-45, the harness's bound for this element, from the error model of the policy and declared bound the peer capsule was audited under (conformance/error_models.py)"

try:
    outputs = run()
except Exception as exc:   # noqa: BLE001 - a raise is the finding's verdict, shown whole
    print(f"{VERSION} on {DEVICE}: {WHAT}: raises {type(exc).__name__}: {exc}: still fails "
          "(raised)")
    sys.exit(1)
if outputs[OUTPUT].dtype != np.float32:
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
