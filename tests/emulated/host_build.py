"""What the host emulations of .cu files share (conv_emulator.py, flash_emulator.py and the
*_emulated tests): building a kernel source with its emulation harness (a *_host.cpp beside this
file) into a shared library with g++, and NumPy arrays that answer CuPy's .get()."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def compile_shared(lib: Path, host_cpp: Path, defines: tuple[str, ...], std: str = "c++20",
                   extra: tuple[str, ...] = ()) -> ctypes.CDLL | str:
    """g++ builds `host_cpp` into the shared library `lib` (-O1, no FP contraction, as the
    emulations need: CUDA's float ops are separate roundings under --fmad=false), with the
    preprocessor definitions `defines` (e.g. TL_KERNEL_SOURCE="path"); the library, or why it
    cannot be built here."""
    gxx = shutil.which("g++")
    if gxx is None:
        return NO_GXX
    cmd = [gxx, f"-std={std}", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", *extra,
           *(f"-D{d}" for d in defines), "-o", str(lib), str(host_cpp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        return f"g++ could not build the emulation: {proc.stderr[-600:]}"
    return ctypes.CDLL(str(lib))


NO_GXX = "g++ is not on PATH"


def require(built):
    """A test fixture's library: skip the tests where this machine has no g++, fail them where a
    source no longer builds (an emulation that quietly skipped would test nothing)."""
    import pytest
    if isinstance(built, str):
        pytest.skip(built) if built == NO_GXX else pytest.fail(built)
    return built


# tl_act_f32.cuh's PTX rcp.approx statement, and what a host harness defines in its place
# (emu_rcp_approx: every admissible result, loss_optim_host.cpp)
RCP_APPROX_F32 = ('asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(w) : "f"(d));',
                  "w = emu_rcp_approx(d);")
# tl_act_f32.cuh's gelu table offset (one PTX mul.wide, so the address is one instruction)
GELU_TABLE_WIDE = ('asm("mul.wide.u32 %0, %1, 16;" : "=l"(off) : "r"(j));',
                   "off = (unsigned long long)j * 16u;")


def build(out_dir: Path, cu_file: str, host_cpp: str, extra: tuple[str, ...] = (),
          replace: tuple[tuple[str, str], ...] = ()) -> ctypes.CDLL | str:
    """The emulation library of `cu_file` (headers inlined as NVRTC gets it) driven by
    `host_cpp`, or why it cannot be built here. `replace`: (text, stand-in) pairs, each text
    (an asm statement the host cannot run) found in the source exactly once."""
    from engine.runtime import loader
    stem = Path(cu_file).stem
    src = out_dir / f"{stem}_source.cu"
    text = loader.source_text(cu_file)
    for old, new in replace:
        if text.count(old) != 1:
            return f"{cu_file}: expected {old!r} once, found it {text.count(old)} times"
        text = text.replace(old, new)
    src.write_text(text)
    return compile_shared(out_dir / f"lib{stem}_host.so", HERE / host_cpp,
                          (f'TL_KERNEL_SOURCE="{src}"',), extra=extra)


class HostArray(np.ndarray):
    """A NumPy array with CuPy's .get(), so the GPU tests' helpers read it unchanged."""

    def get(self):
        return np.asarray(self).copy()
