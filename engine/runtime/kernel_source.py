"""Which kernels of engine/csrc/cuda/ a piece of the engine launches: the entry type of the source
map (engine/native_sources.py). The build fingerprint hashes the files, the compile check looks
for the symbols, and capsule provenance quotes both. Plain data, importable from anywhere."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NativeSource:
    """Kernels of `file`, or of another file when written `other.cu:symbol`."""
    file: str                       # under engine/csrc/cuda/; "" when no kernel runs (a view)
    forward: tuple[str, ...]        # kernel symbols of the forward
    vjp: tuple[str, ...] = ()       # kernel symbols of the VJP
    python: str = ""                # the Python file that runs when no kernel does

    @property
    def path(self) -> str:
        return f"engine/csrc/cuda/{self.file}" if self.file else self.python

    @property
    def symbols(self) -> str:
        return ", ".join(dict.fromkeys(self.forward + self.vjp))

    def kernels(self) -> list[tuple[str, str]]:
        """(file, symbol) of every kernel the forward and the VJP launch."""
        out = []
        for entry in dict.fromkeys(self.forward + self.vjp):
            file, _, symbol = entry.rpartition(":")
            out.append((file or self.file, symbol))
        return out
