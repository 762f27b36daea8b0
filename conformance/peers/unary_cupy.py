"""CuPy's unary float32 functions for the ulp table (conformance/ulp_table/):
`torchlean-conformance exhaustive --device cuda --plugin conformance.peers.unary_cupy:ENTRIES`.

cupy.exp, log, sin, cos, tanh and sqrt, cupyx.scipy.special.expit (sigmoid) and erf. CuPy has no
softplus, GELU or rsqrt function (the table says so; no composite stands in). Each ufunc's
float32 loop calls CUDA's float32 function of its name (erf: erff), whose documented bound the
capsule declares; expit is 1 / (1 + exp(-x)) in CuPy's own code, documented by no bound.
Subnormals: CuPy compiles its kernels with -ftz=true appended to every option list
(cupy/cuda/compiler.py), so they flush subnormal inputs and results: `flush-to-zero`, as
fixtures/plugins/cupy_ufuncs.py declares; the sweep counts both apart."""
from __future__ import annotations

from conformance.peers.unary import cuda_bound, entry
from engine.types import Provider, Subnormals

SOURCE = "conformance/peers/unary_cupy.py"
# function -> what it calls
FUNCTIONS = {"exp": "cupy.exp", "log": "cupy.log", "sin": "cupy.sin", "cos": "cupy.cos",
             "tanh": "cupy.tanh", "sqrt": "cupy.sqrt", "sigmoid": "cupyx.scipy.special.expit",
             "erf": "cupyx.scipy.special.erf"}


def _forward(fn):
    def forward(a):
        return fn(a)
    return forward


def ENTRIES():  # noqa: N802 (the attribute --plugin specs use)
    from conformance.plugins import PluginError
    try:
        import cupy
        import cupyx.scipy.special as special
    except ImportError as exc:
        raise PluginError(f"conformance.peers.unary_cupy audits CuPy's functions, but cupy is "
                          f"not importable ({exc}); pip install cupy-cuda13x") from None
    fns = {"exp": cupy.exp, "log": cupy.log, "sin": cupy.sin, "cos": cupy.cos,
           "tanh": cupy.tanh, "sqrt": cupy.sqrt, "sigmoid": special.expit, "erf": special.erf}
    out = []
    for name, fn in fns.items():
        calls = f"{FUNCTIONS[name]}'s float32 loop"
        bound = cuda_bound(name, calls) if name != "sigmoid" else None
        out.append(entry("cupy", name, _forward(fn), Provider.external,
                         Subnormals.flush_to_zero, bound, SOURCE, f"cupy {cupy.__version__}",
                         f"CuPy {cupy.__version__}'s {FUNCTIONS[name]} on float32, forward"))
    return out
