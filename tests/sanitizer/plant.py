"""Launch the planted bug of one compute-sanitizer tool (tests/sanitizer/planted.cu):

    python3 tests/sanitizer/plant.py memcheck|racecheck|initcheck|synccheck

scripts/sanitize.py runs this under each tool first: a tool that does not report its plant is not
checking kernels, and its clean runs of the tests would prove nothing. The kernel's own device
error (memcheck stops the context at the bad write) is printed, not raised: the sanitizer's report
is the verdict, and this driver's exit status only says whether the plant was launched (0), the
tool name was wrong (2) or something failed before the launch (a traceback, 1).
"""
from __future__ import annotations

import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("planted.cu")
LAUNCHED = "plant launched:"     # scripts/sanitize.py looks for this line

# tool -> (kernel, what the plant is); the kernels are in planted.cu
PLANTS = {
    "memcheck": ("plant_oob_write", "an out-of-bounds global write"),
    "racecheck": ("plant_shared_race", "a shared-memory race"),
    "initcheck": ("plant_uninit_read", "a read of never-written global memory"),
    "synccheck": ("plant_divergent_barrier", "one __syncthreads() reached at two places"),
}


def _raw_floats(n: int):
    """n float32 in a cudaMalloc of exactly 4n bytes, never written: CuPy's pool would round the
    size up and carve it out of a larger block, hiding the overrun from memcheck."""
    import cupy
    ptr = cupy.cuda.runtime.malloc(4 * n)
    mem = cupy.cuda.UnownedMemory(ptr, 4 * n, owner=None)
    return cupy.ndarray((n,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0)), ptr


def launch(tool: str) -> None:
    import cupy
    import numpy as np
    kernel_name, what = PLANTS[tool]
    kernel = cupy.RawModule(code=SOURCE.read_text()).get_function(kernel_name)
    raw_ptrs = []
    if tool == "memcheck":
        out, ptr = _raw_floats(100)
        raw_ptrs.append(ptr)
        args, grid, block = (out, np.int32(100)), (1,), (128,)
    elif tool == "racecheck":
        args = (cupy.arange(128, dtype=cupy.float32), cupy.zeros(1, dtype=cupy.float32))
        grid, block = (1,), (128,)
    elif tool == "initcheck":
        never_written, ptr = _raw_floats(64)
        raw_ptrs.append(ptr)
        args = (never_written, cupy.zeros(64, dtype=cupy.float32), np.int32(64))
        grid, block = (1,), (64,)
    else:
        args = (cupy.ones(66, dtype=cupy.float32), cupy.zeros(64, dtype=cupy.float32),
                np.int32(66))
        grid, block = (1,), (64,)
    print(f"{LAUNCHED} {tool}: {kernel_name} ({what})", flush=True)
    kernel(grid, block, args)
    try:
        cupy.cuda.runtime.deviceSynchronize()
        for ptr in raw_ptrs:
            cupy.cuda.runtime.free(ptr)
        print(f"plant finished: {tool}", flush=True)
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        print(f"plant finished: {tool}: the device reported {exc}", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PLANTS:
        print(f"plant.py: got {argv!r}; expected one tool name of {', '.join(PLANTS)}",
              file=sys.stderr)
        return 2
    launch(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
