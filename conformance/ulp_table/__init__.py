"""The ulp table (issue 39): twelve unary float32 functions swept over every input, by each
implementation on one GPU (ours, PyTorch's, CuPy's, JAX's), beside the figure NVIDIA documents
(`torchlean-conformance ulp-table`, docs/EXHAUSTIVE.md).

This module holds the table's facts, light to import (the peers' plugin modules read them in their
kernel processes): the functions (FUNCTIONS: what a capsule of each names as its op, NVIDIA's
documented float32 figure or why there is none) and the implementations (columns). The sweep of
one column in its own process is sweep.py, the table built from the sweeps' records table.py,
the command cli.py."""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance.plugins import UserOp
from engine.types import BackendOp

# NVIDIA's single-precision table (CUDA C++ Programming Guide, "Mathematical Functions",
# default flags): maximum ulp error from the exact value, found by tests, not guaranteed
CUDA_GUIDE = ("CUDA C++ Programming Guide, Mathematical Functions, single precision "
              "(default flags; from tests, not guaranteed)")
NO_CUDA_FUNCTION = "no CUDA function (CUDA's math library has no float32 {name})"


@dataclass(frozen=True)
class UnaryFunction:
    """One row of the table."""
    # the row's name: the engine's op label, but gelu_tanh for the engine's gelu (its tanh form)
    name: str
    # what a capsule of it names as its op: the engine's BackendOp, or a UserOp (no op of ours)
    op: object
    # the formula, in words
    formula: str
    # CUDA's float32 function and its documented maximum ulp error, or None and None
    cuda_function: str | None = None
    cuda_ulps: float | None = None

    @property
    def label(self) -> str:
        """The capsule op's label: the key of its references (conformance/references/)."""
        return self.op.label

    @property
    def ours(self) -> bool:
        return isinstance(self.op, BackendOp)

    def nvidia(self) -> dict:
        """The NVIDIA column's cell."""
        if self.cuda_function is None:
            return {"na": NO_CUDA_FUNCTION.format(name=self.name)}
        return {"function": self.cuda_function, "documented_ulps": self.cuda_ulps,
                "source": CUDA_GUIDE}


def _user(label: str) -> UserOp:
    return UserOp(label, needs_vjp=False)


FUNCTIONS: tuple[UnaryFunction, ...] = (
    UnaryFunction("exp", BackendOp.exp, "e^x", "expf", 2),
    UnaryFunction("log", BackendOp.log, "ln x", "logf", 1),
    UnaryFunction("sin", BackendOp.sin, "sin x", "sinf", 2),
    UnaryFunction("cos", BackendOp.cos, "cos x", "cosf", 2),
    UnaryFunction("tanh", BackendOp.tanh, "tanh x", "tanhf", 2),
    UnaryFunction("sigmoid", BackendOp.sigmoid, "1 / (1 + e^-x)"),
    UnaryFunction("softplus", BackendOp.softplus, "ln(1 + e^x)"),
    UnaryFunction("gelu_tanh", BackendOp.gelu,
                  "x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the engine's gelu)"),
    UnaryFunction("gelu_erf", _user("gelu_erf"), "x/2 (1 + erf(x / sqrt 2)) (exact GELU)"),
    UnaryFunction("sqrt", BackendOp.sqrt, "sqrt x", "sqrtf", 0),    # IEEE: correctly rounded
    UnaryFunction("rsqrt", _user("rsqrt"), "1 / sqrt x", "rsqrtf", 2),
    UnaryFunction("erf", _user("erf"), "erf x", "erff", 2),
)
BY_NAME = {f.name: f for f in FUNCTIONS}
BY_LABEL = {f.label: f for f in FUNCTIONS}


def function_of(op_label: str) -> UnaryFunction | None:
    """The row of a capsule whose op has this label (gelu -> gelu_tanh), or None."""
    return BY_LABEL.get(op_label)


@dataclass(frozen=True)
class Column:
    """One implementation: where its capsules come from and what it lacks."""
    # the column's name (ours, torch, cupy, jax, or a --plugin column's) and its heading
    name: str
    title: str
    # its capsules are named <prefix>.<function> (ours: <prefix>.<op label>[.<variant>])
    prefix: str
    # its capsules: a plugin's MODULE:ATTR, or None for the registry's (ours)
    plugin: str | None = None
    # modules its sweep process must find (without importing them here)
    needs: tuple[str, ...] = ()
    # environment variables its sweep process gets
    env: dict = field(default_factory=dict)
    # function name -> why this implementation has none (an n/a cell)
    lacks: dict = field(default_factory=dict)
    # why the whole column is n/a on this device, or ""
    unavailable: str = ""


NO_OP_OF_OURS = "no op of ours (the engine has no {name} op)"
NO_CUPY_FUNCTION = "no CuPy function (CuPy and cupyx.scipy.special have no {name})"
PEERS_ON_CUDA = "{title}'s kernels are swept on cuda only (--device cuda)"
# JAX must leave the GPU's memory to CuPy's pool (the sweep's chunks): no preallocation
JAX_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def default_columns(device: str) -> list[Column]:
    """ours, torch, cupy and jax on `device` (the peers' are n/a on cpu)."""
    ours_lack = {f.name: NO_OP_OF_OURS.format(name=f.name) for f in FUNCTIONS if not f.ours}
    cupy_lack = {n: NO_CUPY_FUNCTION.format(name=n)
                 for n in ("softplus", "gelu_tanh", "gelu_erf", "rsqrt")}
    peers = [Column("torch", "PyTorch", "torch", "conformance.peers.unary_torch:ENTRIES",
                    ("torch", "cupy")),
             Column("cupy", "CuPy", "cupy", "conformance.peers.unary_cupy:ENTRIES", ("cupy",),
                    lacks=cupy_lack),
             Column("jax", "JAX", "jax", "conformance.peers.unary_jax:ENTRIES", ("jax", "cupy"),
                    env=dict(JAX_ENV))]
    if device != "cuda":
        peers = [Column(c.name, c.title, c.prefix, c.plugin, c.needs, c.env, c.lacks,
                        PEERS_ON_CUDA.format(title=c.title)) for c in peers]
    ours = Column("ours", "ours", "native_cuda" if device == "cuda" else "reference",
                  lacks=ours_lack)
    return [ours] + peers
