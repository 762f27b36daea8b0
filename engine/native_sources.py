"""The native source map: which .cu file and which kernel symbols implement each op, forward and
VJP, for the native-cuda provider; and the vendor-library entry points of the cublas provider.

SOURCES is a view, not a declaration: each native op is declared once, next to its handlers, in
engine/providers/native_cuda/<family>.py (`KernelDecl`); the Adam step, the poison fill and the
cuBLAS entry points are declared by the modules that launch them; the tape's kernels by the
local VJP rules that launch them (engine/ops/). Declared here: composed attention's (a ".cu" name
in engine/providers/composed.py would make the fingerprint count it a launcher of softmax.cu).
The capsules' provenance quotes these names, and the harness hashes the files into each
capsule's build fingerprint.
"""
from __future__ import annotations

from engine.ops._dispatch import TAPE_KERNELS
from engine.providers.cublas import CUBLAS_SYMBOLS
from engine.providers.cufft import CUFFT_SOURCES, CUFFT_SYMBOLS
from engine.providers.native_cuda.capsules import ALL_DECLARATIONS, DECLARATIONS
from engine.providers.native_cuda.optim import ADAM_STEP
from engine.runtime.kernel_source import NativeSource
from engine.runtime.poison import POISON_FILL
from engine.types import BackendOp as Op

__all__ = ["ADAM_STEP", "COMPOSED_ATTENTION", "COMPOSED_CUBLAS_SYMBOLS", "CUBLAS_SYMBOLS",
           "CUFFT_SOURCES", "CUFFT_SYMBOLS", "NativeSource", "POISON_FILL", "SOURCES",
           "CAPSULE_SOURCES", "TAPE_SOURCES", "files_for", "tape_files_for"]

SOURCES: dict[Op, NativeSource] = {op: decl.source for op, decl in DECLARATIONS.items()}
# Every native capsule's, by name: an op's variants (native_cuda.<op>.<variant>) run their own.
CAPSULE_SOURCES: dict[str, NativeSource] = {d.capsule_name: d.source for d in ALL_DECLARATIONS}


def _tape_source(kernels: tuple[str, ...]) -> NativeSource:
    """tape.cu's kernels, or another file's when every entry names it (`index.cu:symbol`)."""
    files = {k.rpartition(":")[0] for k in kernels}
    if len(files) == 1 and "" not in files:
        (file,) = files
        return NativeSource(file, (), tuple(k.rpartition(":")[2] for k in kernels))
    return NativeSource("tape.cu", (), tuple(kernels))


# The tape's local VJP rules on CUDA (engine/ops/*.py through engine/ops/_tape_cuda.py): the
# kernels a torchlean-tape capsule's VJP runs on CuPy arrays, so its build fingerprint can hash
# them; each rule declares them where it is registered (`@local_vjp(op, tape=...)`). No forward
# kernels: the capsule's own forward is elsewhere. add's VJP (g, g) runs none; the rules of
# engine.ops.TAPE_FLUSHES_ON_CUDA run CuPy and cuBLAS, not our kernels; the pure data-movement
# rules run CuPy copies.
TAPE_SOURCES: dict[Op, NativeSource] = {op: _tape_source(k) for op, k in TAPE_KERNELS.items()}


# torchlean.composed_attention (engine/providers/composed.py): cuBLAS for both products, our
# hard-masked softmax row kernel between them, and the fix-up for NaNs a blocked key's v leaks.
COMPOSED_ATTENTION = NativeSource("softmax.cu",
                                  ("tl_masked_softmax_fwd", "attention.cu:tl_attn_fixup"))
COMPOSED_CUBLAS_SYMBOLS = ("cublasSgemm_v2", "cublasSgemmStridedBatched")


def files_for(op: Op, capsule: str | None = None) -> tuple[str, ...]:
    """Every .cu file a native-cuda capsule of `op` runs (forward and VJP; `capsule` names a
    variant): what its build fingerprint must hash."""
    src = CAPSULE_SOURCES[capsule] if capsule in CAPSULE_SOURCES else SOURCES[op]
    return tuple(dict.fromkeys(f for f, _ in src.kernels()))


def tape_files_for(op: Op) -> tuple[str, ...]:
    """Every .cu file the tape's local VJP rule of `op` runs on CUDA (empty when it runs none of
    ours): what the build fingerprint of a torchlean-tape capsule on CUDA must hash."""
    src = TAPE_SOURCES.get(op)
    return () if src is None else tuple(dict.fromkeys(f for f, _ in src.kernels()))
