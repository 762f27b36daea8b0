"""What the exhaustive sweep runs and where its record goes: the float32 bit patterns in chunks
(every non-NaN pattern, or every K-th, then the four NaN classes once each), one shard of the
chunks per visible GPU, and the record's file name, exhaustive-<capsule>.json."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

RECORD_VERSION = 1
CHUNK = 1 << 27                      # patterns per chunk on the GPU (about 1 GiB per float64)
CPU_CHUNK = 1 << 16
HALF = 0x7F800001                    # non-NaN patterns of one sign: +0 ... +inf
NAN_CLASSES = {"quiet+": 0x7FC00000, "quiet-": 0xFFC00000, "signalling+": 0x7F800001,
               "signalling-": 0xFF800001}


def record_name(capsule_name: str) -> str:
    return f"exhaustive-{capsule_name}.json"


def record_file(evidence_dir, capsule_name: str) -> Path:
    from engine.capsule import check_capsule_name
    return Path(evidence_dir) / record_name(check_capsule_name(capsule_name))


@dataclass(frozen=True)
class Chunk:
    start: int            # first bit pattern
    count: int
    step: int = 1
    explicit: tuple = ()  # patterns given one by one (the NaN classes)

    def bits(self, xp):
        if self.explicit:
            return xp.asarray(np.array(self.explicit, np.uint32))
        # uint32 arithmetic is exact here: every pattern start + j * step is below 2^32
        j = xp.arange(self.count, dtype=np.uint32)
        if self.step != 1:
            j *= np.uint32(self.step)
        return j + np.uint32(self.start)


def plan(stride: int, chunk: int) -> list[Chunk]:
    """Every stride-th non-NaN pattern of each sign, in chunks, then the four NaN classes."""
    out = []
    for base in (0, 0x80000000):
        total = (HALF + stride - 1) // stride
        per = max(chunk, 1)
        for first in range(0, total, per):
            n = min(per, total - first)
            out.append(Chunk(base + first * stride, n, stride))
    out.append(Chunk(0, len(NAN_CLASSES), 1, tuple(NAN_CLASSES.values())))
    return out


def patterns_checked(chunks: list[Chunk]) -> int:
    return sum(c.count for c in chunks)


def shards(chunks: list[Chunk], devices: int) -> list[list[Chunk]]:
    """One shard per device: chunk i goes to device i mod n (every chunk exactly once)."""
    n = max(int(devices), 1)
    return [chunks[i::n] for i in range(n)]


def gpu_count() -> int:
    import cupy
    return int(cupy.cuda.runtime.getDeviceCount())


# --- selection -------------------------------------------------------------------------------
