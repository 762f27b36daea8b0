"""PyTorch's bfloat16 and float16 kernels under the 16-bit audit:
`torchlean-conformance lowp --plugin conformance.peers.torch_lowp:ENTRIES`.

ENTRIES() wraps PyTorch's kernels on `cuda` where torch.cuda.is_available(), else on the CPU (the
device is in each name: `torch.cuda.exp.bfloat16`, `torch.cpu.layer_norm.float16`): every unary
function of conformance/lowp/refs.py (exp, log, sin, cos, tanh, sigmoid, softplus, gelu in its
tanh form, sqrt, rsqrt, erf, abs, relu) with its VJP through torch.autograd (swept at the unit
cotangent), and sum, softmax, log_softmax, layer_norm (eps 1e-5, no affine parameters), matmul,
linear and scaled_dot_product_attention, the last as PyTorch dispatches it (`sdpa`) and with
each backend forced through torch.nn.attention.sdpa_kernel (`sdpa_flash`, `sdpa_efficient`,
`sdpa_math`), each with its VJP through torch.autograd too (conformance/lowp/audit_vjp.py: the
gradients of every input, audited on cotangents the judge draws); a backend that has no kernel for
these inputs here is left out at load time, with a line on stderr and in SKIPPED.

Precision: TF32 is off (torch.backends.cuda.matmul.allow_tf32 = False, cudnn.allow_tf32 =
False; it does not touch 16-bit kernels, but nothing here may run a float32 GEMM in TF32), and
so are the reduced-precision reductions of 16-bit GEMMs
(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction and ..._bf16_...; PyTorch
documents that with them on, CUDA GEMMs may accumulate in the 16-bit format: "Reduced Precision
Reduction in FP16 GEMMs", docs/notes/cuda).

Declared bounds: PyTorch documents no accuracy for its 16-bit kernels, so each declares what
"float32 inside, one rounding to the format" gives (the contract the accumulating ops are
audited under): abs and relu exact (0.5 ulp); sqrt correctly rounded (0.5: a correctly rounded
float32 square root rounded again to a format of p <= 11 bits is correctly rounded, as
24 >= 2p + 2); the other unary functions 1 ulp (a float32 function within 4 float32 ulps, as
CUDA and SLEEF document theirs, is within 4 2^-(24 - p) <= 2^-11 of an ulp of the format, so one
rounding to nearest stays within 0.5 + 2^-11 < 1 ulp); their VJPs the same (abs and relu 0.5,
the others 1). The accumulating ops declare float32 accumulation and one rounding at the output
(conformance/lowp/accumulate.py derives the error each may add), their VJPs the same policy
(accumulate_vjp*.py).

Conversion: the kernels receive NumPy arrays of numpy.float16 or ml_dtypes.bfloat16; their bits
go to PyTorch as int16 and are reinterpreted (Tensor.view(dtype)), and back: no float conversion
either way. A result of another dtype comes back as float32, for the audit to name.

Contract: this module's specs (ENTRIES, BINARY_ENTRIES, ADD_MUL) get PyTorch's contract in the
judge (conformance/peers/contracts.LOWP_CONTRACTS): abs's and relu's VJPs at NaN and max's and
min's -0/+0 tie, where PyTorch keeps its own convention, are listed as differences, not failures
(conformance/lowp/conventions.py).
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from conformance.lowp.formats import BFLOAT16, FLOAT16, Format
from conformance.lowp.kernel import LowpKernel
from conformance.plugins import PluginError

INSTALL = ("pip install torch (a CPU build audits the CPU kernels; a CUDA build on a GPU machine "
           "the CUDA ones) and ml_dtypes")
# the unary functions of conformance/lowp/refs.FUNCTIONS (the judge's module: not importable in
# the kernel process, so named here; tests/test_lowp_torch.py checks the two agree), each with
# its forward and VJP bounds in ulps of the format (the module docstring says why)
UNARY = {"exp": 1.0, "log": 1.0, "sin": 1.0, "cos": 1.0, "tanh": 1.0, "sigmoid": 1.0,
         "softplus": 1.0, "gelu": 1.0, "sqrt": 0.5, "rsqrt": 1.0, "erf": 1.0, "abs": 0.5,
         "relu": 0.5}
VJP_BOUND = {"abs": 0.5, "relu": 0.5}       # the others: 1 ulp
SDPA_BACKENDS = ("default", "flash", "efficient", "math")
UNAVAILABLE = ("no available kernel", "no viable backend")   # PyTorch's words, across versions
SKIPPED: list[tuple[str, str]] = []         # (kernel name, why), from the last ENTRIES()


def require_torch():
    """torch, with TF32 and reduced-precision GEMM reductions off, or PluginError naming what is
    missing and what to install."""
    try:
        import torch
    except ImportError as exc:
        raise PluginError(f"conformance.peers.torch_lowp audits PyTorch's bfloat16 and float16 "
                          f"kernels, but torch is not importable ({exc}); {INSTALL}") from None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def _dtype(torch, fmt: Format):
    return torch.bfloat16 if fmt is BFLOAT16 else torch.float16


def _to_torch(torch, a: np.ndarray, fmt: Format, device: str):
    """A 16-bit NumPy array as a tensor of the same bits on `device`."""
    bits = np.ascontiguousarray(a).view(np.int16)
    if not bits.flags.writeable:    # from_numpy wants a writable array (it shares its memory)
        bits = bits.copy()          # (the judge's arrays are the kernel's own copies already)
    return torch.from_numpy(bits).view(_dtype(torch, fmt)).to(device)


def _from_torch(torch, t, fmt: Format) -> np.ndarray:
    """A tensor's bits as a NumPy array of the format's dtype; another dtype as float32."""
    t = t.detach()
    if t.dtype != _dtype(torch, fmt):
        return t.to("cpu", torch.float32).numpy()
    return t.contiguous().to("cpu").view(torch.int16).numpy().view(np.uint16).view(
        fmt.numpy_dtype())


def _wrap(torch, fn: Callable, fmt: Format, device: str) -> Callable:
    def run(*arrays):
        return _from_torch(torch, fn(*(_to_torch(torch, a, fmt, device) for a in arrays)), fmt)
    return run


def _wrap_vjp(torch, fn: Callable, fmt: Format, device: str) -> Callable:
    """vjp(x, g) = g f'(x) through torch.autograd, in the format: a unary function's one
    gradient of _wrap_grads."""
    grads = _wrap_grads(torch, fn, fmt, device)
    return lambda x, g: grads(x, g)[0]


def _wrap_grads(torch, fn: Callable, fmt: Format, device: str) -> Callable:
    """vjp(*inputs, g) -> one gradient per input through torch.autograd, in the format: the
    accumulating ops' VJPs (conformance/lowp/audit_vjp.py) and the binary ones' (ga, gb)."""
    def run(*arrays):
        *xs, g = arrays
        ts = [_to_torch(torch, x, fmt, device).requires_grad_() for x in xs]
        grads = torch.autograd.grad(fn(*ts), ts, grad_outputs=_to_torch(torch, g, fmt, device),
                                    allow_unused=True)
        return tuple(_from_torch(torch, torch.zeros_like(t) if d is None else d, fmt)
                     for t, d in zip(ts, grads))
    return run


def _unary(torch) -> dict[str, Callable]:
    F = torch.nn.functional
    return {"exp": torch.exp, "log": torch.log, "sin": torch.sin, "cos": torch.cos,
            "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softplus": F.softplus,
            "gelu": lambda t: F.gelu(t, approximate="tanh"), "sqrt": torch.sqrt,
            "rsqrt": torch.rsqrt, "erf": torch.erf, "abs": torch.abs, "relu": torch.relu}


def _accumulating(torch) -> dict[str, Callable]:
    F = torch.nn.functional
    return {"sum": lambda x: torch.sum(x, dim=-1), "softmax": lambda x: torch.softmax(x, dim=-1),
            "log_softmax": lambda x: torch.log_softmax(x, dim=-1),
            "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],), eps=1e-5),
            "matmul": lambda a, b: a @ b, "linear": F.linear}


def _sdpa(torch, backend: str) -> Callable:
    """fn(q, k, v) on (L, d), (S, d), (S, dv): one batch, one head, the default scale."""
    F = torch.nn.functional

    def run(q, k, v):
        q, k, v = (t[None, None] for t in (q, k, v))
        if backend == "default":
            return F.scaled_dot_product_attention(q, k, v)[0, 0]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        chosen = {"flash": SDPBackend.FLASH_ATTENTION,
                  "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend]
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v)[0, 0]
    return run


def _unavailable(torch, fn: Callable, fmt: Format, device: str) -> str | None:
    """PyTorch's refusal when the backend has no kernel for inputs like the audit's, else None
    (any other failure is the audit's to record)."""
    shape = (8, 32)
    try:
        fn(*(torch.zeros(shape, dtype=_dtype(torch, fmt), device=device) for _ in range(3)))
    except RuntimeError as exc:
        if any(w in str(exc).lower() for w in UNAVAILABLE):
            return str(exc).strip().splitlines()[0][:300]
    return None


BINARY = {"add": "add", "sub": "sub", "mul": "mul", "max": "maximum", "min": "minimum"}


def BINARY_ENTRIES(ops=tuple(BINARY), vjp: bool = True) -> list[LowpKernel]:
    """PyTorch's binary elementwise kernels (torch.add, sub, mul, maximum, minimum) in both
    formats, swept over all 2^32 pairs (conformance/lowp/binary.py), with their VJPs through
    torch.autograd (binary_vjp.py; `vjp=False`: the forward alone). Declared correctly rounded
    (the VJPs too: g, -g, g b, g a, and g, g/2 or 0 are each one rounding of a float32 value):
    PyTorch computes a 16-bit add, sub or mul in float32 and rounds once, an innocuous double
    rounding (24 >= 2p + 2 bits for both formats; a product of two 16-bit values is exact in
    float32 save far below its normal range, where no product of two such significands lands
    near a midpoint of the format); maximum and minimum return an operand, NaN propagating as
    torch.maximum documents ("If one of the elements being compared is a NaN, then that element
    is returned"); which one a -0/+0 tie returns it does not document: TorchLean's rule is the
    first, PyTorch's source the second (its CUDA kernel, and the CPU's vectorized loop), which
    the sweep counts as a difference under PyTorch's contract, chosen by this module's specs
    (conformance/lowp/conventions.py)."""
    torch = require_torch()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return [LowpKernel(f"torch.{device}.{BINARY[op]}.{fmt.name}", op, fmt,
                       _wrap(torch, getattr(torch, BINARY[op]), fmt, device),
                       vjp=_wrap_grads(torch, getattr(torch, BINARY[op]), fmt, device)
                       if vjp else None)
            for fmt in (BFLOAT16, FLOAT16) for op in ops]


def ADD_MUL() -> list[LowpKernel]:
    """add and mul in both formats, forward only: the sweeps whose time the 16-bit issue
    quotes."""
    return BINARY_ENTRIES(("add", "mul"), vjp=False)


def ENTRIES() -> list[LowpKernel]:
    """PyTorch's 16-bit kernels on its GPU, or on the CPU without one (the binary ones apart:
    BINARY_ENTRIES, 2^32 pairs each)."""
    torch = require_torch()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    SKIPPED.clear()
    out = []
    for fmt in (BFLOAT16, FLOAT16):
        for op, fn in _unary(torch).items():
            out.append(LowpKernel(f"torch.{device}.{op}.{fmt.name}", op, fmt,
                                  _wrap(torch, fn, fmt, device), bound_ulps=UNARY[op],
                                  vjp=_wrap_vjp(torch, fn, fmt, device),
                                  vjp_bound_ulps=VJP_BOUND.get(op, 1.0)))
        for op, fn in _accumulating(torch).items():
            out.append(LowpKernel(f"torch.{device}.{op}.{fmt.name}", op, fmt,
                                  _wrap(torch, fn, fmt, device),
                                  vjp=_wrap_grads(torch, fn, fmt, device)))
        for backend in SDPA_BACKENDS:
            name = f"torch.{device}.sdpa{'' if backend == 'default' else '_' + backend}." \
                   f"{fmt.name}"
            fn = _sdpa(torch, backend)
            why = _unavailable(torch, fn, fmt, device)
            if why:
                SKIPPED.append((name, why))
                print(f"torch_lowp: {name} left out: {why}", file=sys.stderr)
                continue
            out.append(LowpKernel(name, "attention", fmt, _wrap(torch, fn, fmt, device),
                                  vjp=_wrap_grads(torch, fn, fmt, device)))
    return out
