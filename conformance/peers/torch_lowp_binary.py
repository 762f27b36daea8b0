"""PyTorch's binary elementwise kernels in bfloat16 and float16 (torch.add, sub, mul, maximum,
minimum), for the sweeps over all 2^32 pairs of conformance/lowp/binary.py:
`torchlean-conformance lowp --plugin conformance.peers.torch_lowp_binary:ENTRIES --device cuda`.

On `cuda` when PyTorch sees a GPU, else on the CPU (the kernel names say which). The arrays go to
PyTorch and back through their bit patterns (int16 views), never a float conversion. Declared
bound 0.5 ulp for all: PyTorch computes a 16-bit add, sub or mul in float32 and rounds once (an
innocuous double rounding: float32's 24 bits are at least 2p + 2 for both formats, so it is the
correct rounding; a product of two 16-bit values is exact in float32 save far below float32's
normal range, where no product of two such significands lands near a midpoint of the format),
and maximum/minimum return one of their operands, NaN propagating as torch.maximum's
documentation says ("If one of the elements being compared is a NaN, then that element is
returned"); which operand a -0/+0 tie returns it does not document, and TorchLean's rule (the
first) is what the sweep holds it to.
"""
from __future__ import annotations

import numpy as np

from conformance.lowp.formats import BFLOAT16, FLOAT16
from conformance.lowp.kernel import LowpKernel
from conformance.plugins import PluginError

OPS = {"add": "add", "sub": "sub", "mul": "mul", "max": "maximum", "min": "minimum"}


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise PluginError(f"conformance.peers.torch_lowp_binary needs PyTorch ({exc}); install "
                          "it (pip install torch; see https://pytorch.org for your CUDA "
                          "version's wheel)") from None
    return torch


def _kernel(torch, fn, dtype, device: str):
    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ta, tb = (torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).to(device)
                  .view(dtype) for x in (a, b))
        out = fn(ta, tb).contiguous().view(torch.int16).cpu().numpy()
        return out.view(np.uint16).view(a.dtype)
    return kernel


def ENTRIES(ops=tuple(OPS)) -> list[LowpKernel]:
    torch = _torch()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = []
    for fmt, dtype in ((BFLOAT16, torch.bfloat16), (FLOAT16, torch.float16)):
        for op in ops:
            fn = getattr(torch, OPS[op])
            out.append(LowpKernel(f"torch.{device}.{OPS[op]}.{fmt.name}", op, fmt,
                                  _kernel(torch, fn, dtype, device)))
    return out


def ADD_MUL() -> list[LowpKernel]:
    """add and mul in both formats: the sweeps whose time the 16-bit issue quotes."""
    return ENTRIES(("add", "mul"))
