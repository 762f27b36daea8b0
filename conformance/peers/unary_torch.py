"""PyTorch's CUDA unary functions for the ulp table (conformance/ulp_table/):
`torchlean-conformance exhaustive --device cuda --plugin conformance.peers.unary_torch:ENTRIES`.

torch.exp, log, sin, cos, tanh, sigmoid, torch.nn.functional.softplus, F.gelu(approximate='tanh'),
F.gelu (approximate='none', the exact form), torch.sqrt, torch.rsqrt and torch.erf, each on the
harness's CuPy arrays through DLPack (torch_cuda.forward_of: no copies in, a fresh buffer out).
PyTorch documents no accuracy; where its kernel calls a CUDA float32 function (torch_contract.py
names the files), the capsule declares NVIDIA's figure for it. Subnormals: PyTorch documents
nothing for CUDA (nvcc's default keeps them, but that is a build fact, not a promise):
`unspecified`, so a flushed result is counted apart, not assumed either way."""
from __future__ import annotations

from conformance.peers.unary import cuda_bound, entry
from engine.types import Provider, Subnormals

SOURCE = "conformance/peers/unary_torch.py"
KERNELS = "aten/src/ATen/native/cuda/"
# function -> the PyTorch source whose kernel calls CUDA's float32 function of that name
CALLS = {"exp": "UnaryOpsKernel.cu (exp_kernel_cuda: std::exp)",
         "log": "UnaryLogKernels.cu", "sin": "UnaryGeometricSinKernel.cu",
         "cos": "UnaryGeometricCosKernel.cu", "tanh": "UnaryGeometricTanhKernel.cu",
         "sqrt": "UnarySqrtKernel.cu (sqrt_kernel_cuda: std::sqrt)",
         "rsqrt": "UnaryOpsKernel.cu (rsqrt_kernel_cuda: rsqrt_wrapper, ::rsqrt)",
         "erf": "UnarySpecialOpsKernel.cu (erf_kernel_cuda: ::erf)"}


def functions(torch) -> dict:
    F = torch.nn.functional
    return {"exp": torch.exp, "log": torch.log, "sin": torch.sin, "cos": torch.cos,
            "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softplus": F.softplus,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
            "gelu_erf": lambda t: F.gelu(t, approximate="none"),
            "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "erf": torch.erf}


def ENTRIES():  # noqa: N802 (the attribute --plugin specs use)
    from conformance.peers.torch_cuda import forward_of, require_torch_cuda
    torch = require_torch_cuda()
    out = []
    for name, fn in functions(torch).items():
        bound = cuda_bound(name, KERNELS + CALLS[name]) if name in CALLS else None
        out.append(entry("torch", name, forward_of(torch, fn), Provider.aten,
                         Subnormals.unspecified, bound, SOURCE, f"torch {torch.__version__}",
                         f"PyTorch {torch.__version__}'s CUDA kernel of {name}, forward"))
    return out
