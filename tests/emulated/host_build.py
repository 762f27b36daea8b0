"""What the host emulations of .cu files share (conv_emulator.py, flash_emulator.py): building a
kernel source with its emulation harness (a *_host.cpp beside this file) into a shared library with
g++, and NumPy arrays that answer CuPy's .get()."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def build(out_dir: Path, cu_file: str, host_cpp: str, extra: tuple[str, ...] = ()) \
        -> ctypes.CDLL | str:
    """The emulation library of `cu_file` (headers inlined as NVRTC gets it) driven by
    `host_cpp`, or why it cannot be built here."""
    gxx = shutil.which("g++")
    if gxx is None:
        return "g++ is not on PATH"
    from engine.runtime import loader
    stem = Path(cu_file).stem
    src = out_dir / f"{stem}_source.cu"
    src.write_text(loader.source_text(cu_file))
    lib = out_dir / f"lib{stem}_host.so"
    cmd = [gxx, "-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", *extra,
           f'-DTL_KERNEL_SOURCE="{src}"', "-o", str(lib), str(HERE / host_cpp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        return f"g++ could not build the emulation: {proc.stderr[-400:]}"
    return ctypes.CDLL(str(lib))


class HostArray(np.ndarray):
    """A NumPy array with CuPy's .get(), so the GPU tests' helpers read it unchanged."""

    def get(self):
        return np.asarray(self).copy()
