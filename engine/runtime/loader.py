"""The kernel loader: engine/csrc/cuda/*.cu compiled with NVRTC (through CuPy) for the device's
architecture, lazily and once per file, and the build fingerprint the harness records.

OPTIONS is the numerical policy of every native-cuda capsule, not a tuning knob:
  --fmad=false     a*b+c in our source stays two roundings (contract=separate);
  --ftz=false      subnormal inputs and results are kept (subnormal=gradual-underflow);
  --prec-div=true  x/y and 1/x are IEEE correctly rounded (round=nearest-even);
  --prec-sqrt=true sqrtf is IEEE correctly rounded.
Changing one changes what the capsules in engine/providers/native_cuda/ may claim.

cupy.RawModule cannot be used as is: CuPy's compile cache appends `-ftz=true` after the caller's
options (cupy/cuda/compiler.py, _compile_with_cache_cuda), which would silently flush subnormals
and contradict the policy. So the loader calls NVRTC itself with OPTIONS alone (for PTX; the
driver's linker assembles it, compile_source says why), loads the cubin into a
cupy.cuda.function.Module, and keeps its own cache of binaries on disk,
keyed by the build fingerprint (TORCHLEAN_KERNEL_CACHE_DIR, default ~/.cache/torchlean/kernels).
A GPU test checks that subnormal results survive.

OPTIONS is the `default` set of engine/runtime/flag_sets.py unless TORCHLEAN_NVRTC_FLAG_SET names
another (read once, here, at import): the compile-flag matrix builds the kernels under each set,
and the capsules' policies follow (engine/providers/native_cuda/capsules.py). Each set has its own
fingerprint, so its own cubin cache entry and its own evidence.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path

from engine.errors import KernelCompileError
from engine.runtime import flag_sets

CSRC_DIR = Path(__file__).resolve().parent.parent / "csrc" / "cuda"
FLAG_SET: str = flag_sets.selected()
OPTIONS: tuple[str, ...] = flag_sets.options_for(FLAG_SET)
# The options the capsules declare their policy from when the flag matrix asks for another set's
# record than the compiled one (flag_sets.DECLARED_FLAG_SET_ENV); None: OPTIONS, the honest case.
DECLARED_OPTIONS: tuple[str, ...] | None = (
    flag_sets.options_for(flag_sets.selected_declared(), flag_sets.DECLARED_FLAG_SET_ENV)
    if (os.environ.get(flag_sets.DECLARED_FLAG_SET_ENV) or "").strip() else None)

# How the binary is made (compile_source): part of the fingerprint, so a cubin cached by another
# route is never loaded as this one's.
ROUTE = "nvrtc ptx (compute_XX) + driver link"

_lock = threading.Lock()
_modules: dict[str, object] = {}
_kernels: dict[tuple[str, str], object] = {}


def source_path(file: str) -> Path:
    path = CSRC_DIR / file
    if not path.is_file():
        known = ", ".join(sorted(p.name for p in CSRC_DIR.glob("*.cu")))
        raise FileNotFoundError(f"no kernel source `{file}` under {CSRC_DIR}; known: {known}")
    return path


_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"\s*$', re.M)


def source_text(file: str) -> str:
    """The source NVRTC compiles: the .cu file with each `#include "x.cuh"` of this directory
    inlined (NVRTC is handed one translation unit, and the fingerprint sees the header too)."""
    return inline_headers(source_path(file))


def inline_headers(path: Path) -> str:
    """The text of a .cu file anywhere (the harness keeps its own kernels beside its code) with
    each `#include "x.cuh"` of the file's own directory inlined."""
    def inline(match: re.Match) -> str:
        header = path.parent / match.group(1)
        if not header.is_file():
            raise FileNotFoundError(f"{path.name} includes `{match.group(1)}`, which is not "
                                    f"under {path.parent}")
        return header.read_text()
    return _INCLUDE.sub(inline, path.read_text())


def source_files() -> list[str]:
    return sorted(p.name for p in CSRC_DIR.glob("*.cu"))


def _cache_dir() -> Path:
    default = Path.home() / ".cache" / "torchlean" / "kernels"
    return Path(os.environ.get("TORCHLEAN_KERNEL_CACHE_DIR", default))


def compile_binary(file: str) -> bytes:
    """The cubin of one source file for this device, compiled with OPTIONS and nothing else
    that changes numerics (compile_source adds the architecture and
    --device-as-default-execution-space)."""
    return compile_source(source_text(file), file)


def compile_source(text: str, filename: str, options: tuple[str, ...] | None = None) -> bytes:
    """compile_binary's compilation of any source text: the one path every native kernel takes
    (tests/test_cuda_build_flags.py runs a probe through it to see each flag take effect).

    NVRTC makes PTX for the device's virtual architecture and the driver's linker assembles it
    (ROUTE). Asked for SASS directly (-arch=sm_90, CuPy's default), the H200 machine's NVRTC 13.0
    returned the same cubin for --ftz=true and --ftz=false (evidence/h200-runs/2026-12-01/
    ftz-probe.txt and tests/test_cuda_build_flags.py): the flag set did not reach the binary.
    In PTX every float instruction names its own rounding and flushing (mul.rn.ftz.f32 or
    mul.rn.f32), so what the options asked for is fixed in the text the driver assembles."""
    import cupy
    from cupy.cuda import function, nvrtc
    arch = cupy.cuda.Device().compute_capability
    # --device-as-default-execution-space: what CuPy's own NVRTC call adds from CUDA 12 on, kept
    # so that the sources compile as they always have.
    options = (OPTIONS if options is None else tuple(options)) + (
        f"-arch=compute_{arch}", "--device-as-default-execution-space")
    prog = nvrtc.createProgram(text, filename, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except nvrtc.NVRTCError as exc:
            raise KernelCompileError(
                f"NVRTC could not compile {filename} with {' '.join(options)}: {exc}\n"
                f"{nvrtc.getProgramLog(prog)}") from None
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    link = function.LinkState()
    link.add_ptr_data(ptx if isinstance(ptx, bytes) else ptx.encode(), filename + ".ptx")
    return link.complete()


def module(file: str):
    """The loaded cupy.cuda.function.Module of one source file (compiled on first use)."""
    mod = _modules.get(file)
    if mod is None:
        with _lock:
            mod = _modules.get(file)
            if mod is None:
                mod = _modules[file] = _load(file, source_text(file), OPTIONS)
    return mod


def module_of(path: Path, options: tuple[str, ...]):
    """The loaded module of a .cu file outside engine/csrc/cuda (headers of its directory
    inlined), compiled with `options` by compile_source's route and cached on disk by the same
    fingerprint (text_fingerprint): the harness's own kernels (conformance/exhaustive/)."""
    text = inline_headers(path)
    key = f"{path}\0{text_fingerprint(text, options)}"
    mod = _modules.get(key)
    if mod is None:
        with _lock:
            mod = _modules.get(key)
            if mod is None:
                mod = _modules[key] = _load(path.name, text, options)
    return mod


def _load(name: str, text: str, options: tuple[str, ...]):
    from cupy.cuda import function
    path = _cache_dir() / f"{name}.{text_fingerprint(text, options)}.cubin"
    try:
        binary = path.read_bytes()
    except OSError:
        binary = compile_source(text, name, options)
        _store(path, binary)
    mod = function.Module()
    mod.load(binary)
    return mod


def _store(path: Path, binary: bytes) -> None:
    try:   # best effort: a read-only home only costs a compile per process
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(binary)
        os.replace(tmp, path)
    except OSError:
        pass


def kernel(file: str, symbol: str):
    """One `extern "C"` kernel of a source file, as a cupy.cuda.function.Function (cached);
    call it as kernel(grid, block, args)."""
    key = (file, symbol)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = module(file).get_function(symbol)
    return fn


def device_target() -> dict[str, str]:
    """What the binary is built for here: architecture and NVRTC version, or why none is known."""
    try:
        import cupy
        from engine.runtime.native import native_available
        if not native_available():
            return {"arch": "none", "nvrtc": "none"}
        major, minor = cupy.cuda.nvrtc.getVersion()
        return {"arch": f"sm_{cupy.cuda.Device().compute_capability}",
                "nvrtc": f"{major}.{minor}", "cupy": cupy.__version__}
    except Exception as exc:  # CPU parity stub: no CuPy, or no driver
        return {"arch": "none", "nvrtc": f"unavailable ({type(exc).__name__})"}


def source_fingerprint(file: str, options: tuple[str, ...] | None = None) -> str:
    """sha256 over the source (headers inlined), the compile options (default: OPTIONS) and (on a
    GPU) the architecture, NVRTC version and CuPy version (its NVRTC wrapper adds options):
    everything that changes the binary a capsule runs."""
    return text_fingerprint(source_text(file), OPTIONS if options is None else options)


def text_fingerprint(text: str, options: tuple[str, ...]) -> str:
    """source_fingerprint of a source text (headers already inlined) under `options`."""
    h = hashlib.sha256()
    h.update(text.encode())
    h.update(b"\0options\0" + "\0".join(options).encode())
    h.update(b"\0route\0" + ROUTE.encode())
    for key, value in sorted(device_target().items()):
        h.update(f"\0{key}\0{value}".encode())
    return h.hexdigest()
