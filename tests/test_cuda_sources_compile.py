"""Every kernel source compiles with the local nvcc for sm_90 under the loader's OPTIONS, and
exports every symbol the source map names (runs on the CPU; skipped without nvcc)."""
import re
import shutil
import subprocess

import pytest

from engine.native_sources import (ADAM_STEP, CAPSULE_SOURCES, COMPOSED_ATTENTION, CUFFT_SOURCES,
                                   POISON_FILL, SOURCES, TAPE_SOURCES)
from engine.runtime import loader

NVCC = shutil.which("nvcc")
EVERY_SOURCE = (list(SOURCES.values()) + list(CAPSULE_SOURCES.values()) +
                list(TAPE_SOURCES.values()) +
                list(CUFFT_SOURCES.values()) + [ADAM_STEP, COMPOSED_ATTENTION, POISON_FILL])
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the compile check "
                                                     "needs the CUDA toolkit")


@needs_nvcc
@pytest.mark.parametrize("file", loader.source_files())
def test_source_compiles_for_sm90(file, tmp_path):
    # Compile what NVRTC is given: the source with its headers inlined by the loader.
    src = tmp_path / file
    src.write_text(loader.source_text(file))
    out = tmp_path / (file + ".ptx")
    cmd = [NVCC, *loader.OPTIONS, "-arch=sm_90", "--ptx", "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    ptx = out.read_text()
    wanted = {s for src in EVERY_SOURCE for f, s in src.kernels() if f == file}
    exported = set(re.findall(r"\.visible \.entry (\w+)\(", ptx))
    assert wanted <= exported, f"{file} lacks kernels {sorted(wanted - exported)}"
    _check_launch_signatures(file, ptx)


# PTX parameter types by the prepared launch's letters (driver_launch.SLOT_FORMATS): an `int`
# parameter is .u32 in PTX, as an `unsigned` one is
_PTX_LETTERS = {"u64": "p", "u32": "ui", "f32": "f", "f64": "d"}


def _check_launch_signatures(file: str, ptx: str) -> None:
    """Every prepared launch signature declared for a kernel of `file` (launch.kernel(file,
    symbol, signature)) matches the kernel's compiled parameter list, type by type: a wrong
    letter would hand the kernel another value than the handler meant, and no CPU test would
    see it (the driver takes any bytes)."""
    import engine.providers.native_cuda.capsules  # noqa: F401  (declares every family's kernels)
    from engine.providers.native_cuda.launch import KERNELS
    entries = dict(re.findall(r"\.visible \.entry (\w+)\(([^)]*)\)", ptx))
    for kern in KERNELS.values():
        if kern.file != file or kern.signature is None:
            continue
        params = re.findall(r"\.param \.(\w+) ", entries[kern.symbol])
        assert len(params) == len(kern.signature), \
            f"{file}:{kern.symbol}: signature {kern.signature!r}, PTX parameters {params}"
        for i, (letter, ptx_type) in enumerate(zip(kern.signature, params)):
            assert letter in _PTX_LETTERS.get(ptx_type, ""), \
                f"{file}:{kern.symbol}: parameter {i} is .{ptx_type}, declared {letter!r}"


def test_source_map_names_real_files_and_header_lists_every_kernel():
    for src in EVERY_SOURCE:
        for file, symbol in src.kernels():
            text = loader.source_path(file).read_text()
            header = "\n".join(line for line in text.splitlines() if line.startswith("//"))
            assert re.search(rf'extern "C" __global__ void {symbol}\(|\({symbol},', text), \
                f"{symbol} is not defined in {file}"
            assert symbol in header, f"{file}'s header comment does not list {symbol}"


def test_options_fix_the_numerical_policy():
    # The capsules claim contract=separate, gradual underflow, IEEE division and square root.
    assert {"--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"} <= \
        set(loader.OPTIONS)
    assert not any("fast" in o for o in loader.OPTIONS)


def test_source_fingerprint_hashes_source_and_options(monkeypatch):
    a = loader.source_fingerprint("elementwise.cu")
    assert a == loader.source_fingerprint("elementwise.cu") and len(a) == 64
    assert a != loader.source_fingerprint("reduce.cu")
    monkeypatch.setattr(loader, "OPTIONS", loader.OPTIONS[:-1])
    assert loader.source_fingerprint("elementwise.cu") != a


def test_loader_inlines_the_shared_header_and_names_a_missing_one(monkeypatch, tmp_path):
    text = loader.source_text("reduce.cu")
    assert '#include "tl_common.cuh"' not in text
    assert "tl_block_sum(float v)" in text and "TL_COMMON_CUH" in text
    (tmp_path / "bad.cu").write_text('#include "nowhere.cuh"\n')
    monkeypatch.setattr(loader, "CSRC_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="bad.cu includes `nowhere.cuh`, which is not "
                                                "under"):
        loader.source_text("bad.cu")
