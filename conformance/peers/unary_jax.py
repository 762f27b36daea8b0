"""JAX's unary float32 functions on the GPU for the ulp table (conformance/ulp_table/):
`XLA_PYTHON_CLIENT_PREALLOCATE=false torchlean-conformance exhaustive --device cuda --plugin
conformance.peers.unary_jax:ENTRIES`.

jnp.exp, log, sin, cos, tanh, jax.nn.sigmoid, jax.nn.softplus, jax.nn.gelu(approximate=True) and
(approximate=False), jnp.sqrt, jax.lax.rsqrt and jax.scipy.special.erf, each under jax.jit (what
a model's compiled step runs; XLA may fuse and rewrite a composite) on the harness's CuPy arrays
through DLPack (forward_of; its result copied into a buffer the harness owns). float64
stays off (JAX's default; JAX_ENABLE_X64 set is refused). XLA documents no accuracy and no
subnormal handling for its GPU kernels (it emits its own approximations for some functions):
every capsule declares no bound and `unspecified` subnormals, so the sweep measures both. JAX
must not preallocate the GPU (XLA_PYTHON_CLIENT_PREALLOCATE=false, set here when JAX is not yet
imported): the sweep's chunks live in CuPy's pool."""
from __future__ import annotations

import os
import sys

from conformance.peers.unary import entry
from engine.types import Provider, Subnormals

SOURCE = "conformance/peers/unary_jax.py"
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


def functions(jax) -> dict:
    jnp, nn = jax.numpy, jax.nn
    return {"exp": jnp.exp, "log": jnp.log, "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh,
            "sigmoid": nn.sigmoid, "softplus": nn.softplus,
            "gelu_tanh": lambda a: nn.gelu(a, approximate=True),
            "gelu_erf": lambda a: nn.gelu(a, approximate=False),
            "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt, "erf": jax.scipy.special.erf}


def require_jax_gpu():
    """jax with a GPU backend, no preallocation and float64 off, or PluginError saying what."""
    from conformance.plugins import PluginError
    if "jax" not in sys.modules:
        os.environ.setdefault(PREALLOCATE, "false")
    if os.environ.get(PREALLOCATE, "").lower() != "false":
        raise PluginError(f"conformance.peers.unary_jax: {PREALLOCATE} is "
                          f"{os.environ.get(PREALLOCATE)!r}: JAX would take most of the GPU's "
                          "memory from the sweep's CuPy pool; run with "
                          f"{PREALLOCATE}=false")
    from conformance.peers.jax_xla import require_jax
    jax = require_jax()
    import jax.scipy.special  # noqa: F401
    # what float64 being on changes: a Python float becomes a float64 array
    if jax.numpy.asarray(1.0).dtype != jax.numpy.float32:
        raise PluginError("conformance.peers.unary_jax sweeps JAX's float32 functions, but "
                          "float64 is on (JAX_ENABLE_X64): unset it")
    try:
        jax.devices("gpu")
    except RuntimeError as exc:
        raise PluginError(f"conformance.peers.unary_jax sweeps JAX's GPU kernels, but jax "
                          f"{jax.__version__} has no GPU backend here ({exc}); "
                          "pip install 'jax[cuda13]'") from None
    return jax


def forward_of(jax, fn):
    """fn (jitted) on a CuPy float32 array, through DLPack both ways. JAX runs on its own stream:
    CuPy's stream is synchronized before JAX reads the input, and JAX's result is ready before
    CuPy copies it into a buffer the harness owns (nothing relies on DLPack's stream handshake)."""
    def forward(a):
        import cupy as cp
        cp.cuda.get_current_stream().synchronize()
        out = fn(jax.dlpack.from_dlpack(a))
        out.block_until_ready()
        return cp.from_dlpack(out).copy()
    return forward


def ENTRIES():  # noqa: N802 (the attribute --plugin specs use)
    jax = require_jax_gpu()
    return [entry("jax", name, forward_of(jax, jax.jit(fn)), Provider.xla,
                  Subnormals.unspecified, None, SOURCE, f"jax {jax.__version__}",
                  f"JAX {jax.__version__}'s XLA GPU kernel of {name} (jax.jit), forward")
            for name, fn in functions(jax).items()]
