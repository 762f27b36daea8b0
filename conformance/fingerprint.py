"""Build fingerprints: a pure function of what a capsule runs, identical in every process.

A capsule's fingerprint hashes
- the source text of every Python module its handler's forward and VJP live in, and of the op's
  family module in engine/ops/ (the local VJP rule a tape-VJP capsule runs);
- a stable identity of the forward and VJP functions themselves: qualified names, bytecode, the
  constants (code objects recursively, sets sorted) and what their closures and defaults hold
  (functions by the same identity, NumPy ufuncs by name, plain values by repr, anything else by its
  type's name). Never `repr` of an arbitrary object: that holds memory addresses
  (`<code object <genexpr> at 0x7f...>`), which differ between processes;
- for capsules that run our CUDA kernels, `engine.runtime.loader.source_fingerprint` of every .cu
  file their forward and VJP launch (headers inlined, compile options, and on a GPU the
  architecture, NVRTC and CuPy versions), from the source map in engine/native_sources.py;
- and the Python that launches those kernels (grids, argument order, shared memory and the
  deterministic-mode switch decide a result as much as the kernel source does): every module of
  engine/ that names one of the files (`kernel("reduce.cu", ...)`), and the launch plumbing
  engine/providers/native_cuda/launch.py with engine/runtime/driver_launch.py (the prepared
  parameters' slot types). So native_cuda.broadcast, whose VJP sums with
  reduce.cu's kernels, goes stale when reduce.cu or the module launching it changes.

`harness_digest()` hashes the harness's own sources: a record made by another harness version is
not resumed. `checkout_digest()` hashes this checkout's source tree, binding a test run's report
to the code it ran.
"""
from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import types
from pathlib import Path
from typing import Callable

import numpy as np

import engine
from engine.capsule import KernelCapsule, KernelHandler
from engine.earned_trust import DEFAULT_EVIDENCE_ROOT
from engine.types import BackendOp as Op, Device, Provider, VJPMode

REPO_ROOT = Path(__file__).resolve().parent.parent
ENGINE_DIR = Path(inspect.getfile(engine)).resolve().parent   # where the launchers are read
_DEPTH = 4   # how deep closures and defaults are followed


def _sha(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


# --- a stable identity for Python callables -------------------------------------------------------

def stable_identity(obj, depth: int = _DEPTH) -> str:
    """Text that is equal for equal code in every process: no object addresses, no hash order."""
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return repr(obj)
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__qualname__}.{obj.name}"
    if isinstance(obj, np.ufunc):
        return f"ufunc:{obj.__name__}"
    if isinstance(obj, np.generic):
        return f"{obj.dtype}:{obj!r}"
    if isinstance(obj, np.ndarray):
        return f"ndarray:{obj.dtype}:{obj.shape}:{hashlib.sha256(obj.tobytes()).hexdigest()}"
    if isinstance(obj, types.CodeType):
        consts = ",".join(stable_identity(c, depth) for c in obj.co_consts)
        return (f"code:{obj.co_qualname if hasattr(obj, 'co_qualname') else obj.co_name}:"
                f"{obj.co_code.hex()}:{','.join(obj.co_names)}:[{consts}]")
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}({','.join(stable_identity(x, depth) for x in obj)})"
    if isinstance(obj, (set, frozenset)):
        return f"{type(obj).__name__}({','.join(sorted(stable_identity(x, depth) for x in obj))})"
    if isinstance(obj, dict):
        items = sorted(f"{stable_identity(k, depth)}:{stable_identity(v, depth)}"
                       for k, v in obj.items())
        return "dict(" + ",".join(items) + ")"
    if isinstance(obj, functools.partial):
        return (f"partial({stable_identity(obj.func, depth)},{stable_identity(obj.args, depth)},"
                f"{stable_identity(obj.keywords, depth)})")
    if isinstance(obj, types.MethodType):
        return f"method:{stable_identity(obj.__func__, depth)}"
    if isinstance(obj, types.FunctionType):
        name = f"{obj.__module__}.{obj.__qualname__}"
        if depth <= 0:
            return f"function:{name}"
        cells = tuple(_cell(c) for c in (obj.__closure__ or ()))
        return (f"function:{name}:{stable_identity(obj.__code__, depth)}:"
                f"defaults={stable_identity(obj.__defaults__, depth - 1)}:"
                f"kwdefaults={stable_identity(obj.__kwdefaults__, depth - 1)}:"
                f"closure={stable_identity(cells, depth - 1)}")
    if callable(obj) and getattr(obj, "__qualname__", None):   # builtins, C functions
        return f"callable:{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return f"object:{type(obj).__module__}.{type(obj).__qualname__}"


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:   # an empty cell
        return None


# --- the parts a capsule runs ----------------------------------------------------------------------

def _module_source(mod: types.ModuleType) -> bytes:
    try:
        return inspect.getsource(mod).encode()
    except (OSError, TypeError):
        return mod.__name__.encode()


def _python_modules(capsule: KernelCapsule, handler: KernelHandler) -> list[types.ModuleType]:
    """Modules holding the handler's functions and the op's local VJP rule (the handler's are
    data: a plugin's module is whatever module its functions live in)."""
    from engine.ops import LOCAL_VJP
    mods: list[types.ModuleType] = []
    fns = [handler.forward, handler.vjp]
    if capsule.vjp_mode is VJPMode.torchlean_tape:
        fns.append(LOCAL_VJP.get(capsule.op))
    for fn in fns:
        mod = inspect.getmodule(fn) if fn is not None else None
        if mod is not None and mod not in mods:
            mods.append(mod)
    if capsule.device is Device.cuda and capsule.vjp_mode is VJPMode.torchlean_tape:
        from engine.ops import _tape_cuda   # launches the tape rule's kernels on CUDA
        if _tape_cuda not in mods:
            mods.append(_tape_cuda)
    if capsule.provider is Provider.cublas:
        from engine.providers import cublas_lib   # the ctypes calls, handle and workspace
        if cublas_lib not in mods:
            mods.append(cublas_lib)
    return mods


def cuda_files(capsule: KernelCapsule) -> list[str]:
    """Every .cu file of ours a capsule's forward and VJP launch (engine/native_sources.py)."""
    from engine import native_sources as ns
    if capsule.device is not Device.cuda:
        return []
    files: list[str] = []
    if capsule.provider is Provider.native_cuda and capsule.op in ns.SOURCES:
        files += list(ns.files_for(capsule.op, capsule.name))
    if capsule.provider is Provider.torchlean and capsule.op.label == "scaled_dot_product_attention":
        files += [f for f, _ in ns.COMPOSED_ATTENTION.kernels() if f]
    if capsule.provider is Provider.cublas and capsule.op.label == "linear":
        # cublas.linear broadcasts the bias into its output with native_cuda.broadcast's forward
        # kernels before cuBLAS adds the product (engine/providers/cublas.py, _linear).
        bias = ns.SOURCES[Op.broadcast]
        files += [f for f, _ in ns.NativeSource(bias.file, bias.forward).kernels() if f]
    if capsule.provider is Provider.cufft and capsule.op in ns.CUFFT_SOURCES:
        # the cufft capsules run our spectral.cu kernels around cuFFT (engine/providers/cufft.py)
        files += [f for f, _ in ns.CUFFT_SOURCES[capsule.op].kernels() if f]
    if capsule.vjp_mode is VJPMode.torchlean_tape:
        tape = getattr(ns, "TAPE_SOURCES", {}).get(capsule.op)
        if tape is not None:
            files += [f for f, _ in tape.kernels() if f]
    return [f for f in dict.fromkeys(files) if f]


def _kernel_fingerprint(file: str) -> str:
    from engine.runtime import loader
    return loader.source_fingerprint(file)


_NOT_LAUNCHERS = ("engine/native_sources.py",)   # the source map itself names every file


@functools.lru_cache(maxsize=1)
def _named_kernel_files() -> dict[str, frozenset[str]]:
    """engine/ module file (relative to the repository) -> the .cu file names it holds as string
    constants: the modules that launch those kernels."""
    out = {}
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        rel = path.relative_to(ENGINE_DIR.parent).as_posix()
        if "__pycache__" in path.parts or rel in _NOT_LAUNCHERS:
            continue
        names = frozenset(n.value for n in ast.walk(ast.parse(path.read_bytes(), rel))
                          if isinstance(n, ast.Constant) and isinstance(n.value, str)
                          and n.value.endswith(".cu") and "/" not in n.value)
        if names:
            out[rel] = names
    return out


def kernel_launchers(files: list[str]) -> list[str]:
    """The engine/ modules (as repository paths) that launch any of the kernel files, with the
    shared launch plumbing: what the Python side of running those kernels is."""
    if not files:
        return []
    from engine.providers.native_cuda import launch
    from engine.runtime import driver_launch
    plumbing = [_engine_path(launch), _engine_path(driver_launch)]
    wanted = set(files)
    return plumbing + [rel for rel, names in _named_kernel_files().items()
                       if names & wanted and rel not in plumbing]


def _engine_path(mod: types.ModuleType) -> str | None:
    """engine/...py of a module of engine/ (None for any other module)."""
    try:
        return Path(inspect.getfile(mod)).resolve().relative_to(ENGINE_DIR.parent).as_posix()
    except (TypeError, ValueError):
        return None


def capsule_fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    """{value, method, inputs}: the hash of everything the capsule runs (module docstring)."""
    mods = _python_modules(capsule, handler)
    # The name first: two variants of one op (native_cuda.<op>.<variant>) may share every module
    # and file, and their evidence must still never stand in for each other.
    parts = [capsule.name.encode()] + [_module_source(m) for m in mods]
    from engine.ops import LOCAL_VJP
    fns = (handler.forward, handler.vjp, handler.declines,
           LOCAL_VJP.get(capsule.op) if capsule.vjp_mode is VJPMode.torchlean_tape else None)
    parts += [stable_identity(fn).encode() for fn in fns]
    files = cuda_files(capsule)
    parts += [f"{f}:{_kernel_fingerprint(f)}".encode() for f in files]
    hashed = {_engine_path(m) for m in mods}
    launchers = [rel for rel in kernel_launchers(files) if rel not in hashed]
    parts += [f"{rel}:".encode() + (ENGINE_DIR.parent / rel).read_bytes() for rel in launchers]
    method = "sha256 of module sources and function identities"
    if files:
        method += (" + engine.runtime.loader.source_fingerprint of each kernel file + the "
                   "sources of the modules that launch them")
    return {"value": _sha(parts), "method": method,
            "inputs": [m.__name__ for m in mods] + [f"engine/csrc/cuda/{f}" for f in files]
            + launchers + [f"{capsule.name}:code"]}


FINGERPRINTERS: dict[Provider, Callable[[KernelCapsule, KernelHandler], dict]] = {}


def register_fingerprinter(provider: Provider, fn: Callable) -> None:
    """Let a provider say what its build is: fn(capsule, handler) -> {value, method, inputs}."""
    FINGERPRINTERS[provider] = fn


def fingerprint(capsule: KernelCapsule, handler: KernelHandler) -> dict:
    """The provider's own fingerprinter when one is registered, else capsule_fingerprint; for a
    plugin entry described by its kernel process, the fingerprint the judge's side made of it
    (conformance/isolation/describe.py)."""
    described = getattr(handler, "fingerprint", None)
    if isinstance(described, dict):
        return described
    return FINGERPRINTERS.get(capsule.provider, capsule_fingerprint)(capsule, handler)


# --- the harness and the checkout -------------------------------------------------------------------

def _tree_digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        rel = p.relative_to(REPO_ROOT).as_posix()
        h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.suffix in suffixes
            and "__pycache__" not in p.parts]


@functools.lru_cache(maxsize=1)
def _conformance_digest() -> str:
    # .cu and .cuh: the exhaustive sweep's own kernels (conformance/exhaustive/sweep_kernels.cu)
    return _tree_digest(_files(REPO_ROOT / "conformance", (".py", ".json", ".cu", ".cuh")))


def harness_digest() -> str:
    """sha256 of conformance/'s sources, the code that judged a record, and of the user's op
    contracts this process loaded (their records judge those ops: families.contract_files)."""
    from conformance.families import contract_files
    files = contract_files()
    if not files:
        return _conformance_digest()
    h = hashlib.sha256(_conformance_digest().encode())
    for path in files:
        h.update(str(path).encode() + b"\0" + hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()


_CHECKOUT_DIRS = ("engine", "conformance", "reports", "tests", "fixtures", "scripts", "benchmarks")
_CHECKOUT_SUFFIXES = (".py", ".cu", ".cuh", ".json", ".html", ".css", ".sh", ".toml", ".txt")
_GENERATED = {DEFAULT_EVIDENCE_ROOT.parts, ("reports", "out")}   # what runs write, not source


def checkout_digest() -> str:
    """sha256 of this checkout's sources (evidence and report output excluded): what a test run
    tested. Computed from the files, so it works without git (the GPU machine's copy has none)."""
    paths = []
    for d in _CHECKOUT_DIRS:
        root = REPO_ROOT / d
        if root.is_dir():
            paths += [p for p in _files(root, _CHECKOUT_SUFFIXES)
                      if p.relative_to(REPO_ROOT).parts[:2] not in _GENERATED]
    if (REPO_ROOT / "pyproject.toml").is_file():
        paths.append(REPO_ROOT / "pyproject.toml")
    return _tree_digest(paths)
